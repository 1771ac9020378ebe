"""The name lists behind the PERSON rules: given names, surnames, and which of them are also words.

Built offline by ``scripts/build_name_gazetteer.py`` from public-domain US Census name files and
Faker's MIT-licensed name lists, with Debian's word lists (SCOWL, OpenTaal) and spaCy's stop words
marking names that are ordinary words; the provenance and checksums are in ``data/SOURCES.txt``.
``data/names_not_words.txt`` takes back from the ordinary words a few given names that a word list
holds in lower case ("wouter", "maarten"); ``data/words_not_names.txt`` takes from the names the service
words, greetings, vocatives and departments of the six languages that Faker's lists hold ("danke",
"gracias", "posso", "Legal"): they are ordinary words, never a given name; ``data/ordinary_supplement.txt``
marks as ordinary words a few given names that technical chat writes in lower case ("dev", "siem", "lan"). ``data/given_supplement.txt`` adds romanised given names of cultures those lists miss (South
Asian, West/East/Southern African, Central Asian, Gaelic, Pacific ...), ``data/given_short_forms.txt``
short forms and nicknames of the six languages ("kev", "Becca", "fede"), written for this detector, and
``data/surname_supplement.txt`` surnames of the cultures the lists miss (Sinhala, Arabic with its article, Yoruba ...).
A name written with its own letters ("Wójcik", "Doğan", "Þórsson") is looked up without its diacritics
too, and a surname in its female or patronymic form ("Zielińska", "Dvořáková", "Jónsdóttir") by the form
the lists hold (``_surname_bases``).
Shipped inside the package: nothing is downloaded. Loaded once per process, when the detector is built (~0.3 s).
"""

from __future__ import annotations

import functools
import gzip
import unicodedata
from dataclasses import dataclass
from importlib import resources

__all__ = ["Gazetteer", "data_lines", "gazetteer", "word_list"]

# Given names that are, at least as often, a verb, a month, a virtue or a thing at the start of a
# sentence ("Will Smith" is a name, "Will Johnson attend?" too, but "May Day", "Grant Access" not):
# they make a full name only with a surname that is no ordinary word.
_RISKY_GIVEN = frozenset(["may", "will", "june", "april", "august", "grant", "mark", "art", "bill", "hope", "joy", "faith", "grace", "rose", "guy", "pat", "sue", "don", "ray", "rich", "gene", "dawn", "summer", "chase", "hunter", "cliff", "glen", "dale", "rod", "chance", "page", "sunny", "sky", "autumn", "amber", "ruby", "jade", "crystal", "pearl", "ivy", "holly", "lily", "iris", "olive", "violet", "daisy", "price", "case", "lane", "drew", "miles", "major", "king", "earl", "duke", "prince", "baron", "bishop", "penny", "honey", "candy", "misty", "heather", "ginger", "rocky", "sandy", "rusty", "buck", "bud", "chip", "skip", "woody", "winter", "spring", "star", "storm", "river", "rain", "angel", "precious", "patience", "charity", "destiny", "trinity", "harmony", "melody", "liberty", "justice", "mercy", "unity", "ace", "bear", "wolf", "fox", "jay", "robin", "wren", "lark", "dove", "mercedes", "porsche", "christian", "noel", "carol", "sterling", "august", "august", "frank", "jack", "max", "bob", "paris", "jordan", "florence", "georgia", "victoria", "austin", "dallas", "houston", "chelsea", "sydney", "madison", "phoenix", "lincoln", "washington", "india", "china", "kenya", "asia", "africa", "america", "virginia", "carolina", "dakota", "montana", "nevada", "indiana", "kent", "devon", "york", "brooklyn", "orlando", "denver", "cleveland", "charlotte", "memphis", "troy", "regina", "savannah", "adelaide", "aurora", "camden", "dakota", "sierra", "chad", "eugene", "tyler", "trenton", "marion", "jackson", "jenkins", "julia", "kafka", "ruby", "rust", "boston", "london", "berlin", "vienna", "chicago", "sofia", "milan", "lyon", "odessa", "alexandria", "augusta", "salem", "siena", "valencia", "verona", "lorraine", "normandy", "brittany", "sahara", "nairobi", "lagos", "cairo", "dublin", "aberdeen", "darwin", "hamilton", "wellington", "nelson", "clinton", "kingston"])

_MONTHS_DAYS = frozenset(["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "januar", "februar", "märz", "mai", "juni", "juli", "oktober", "dezember", "montag", "dienstag", "mittwoch", "donnerstag", "freitag", "samstag", "sonntag", "janvier", "février", "mars", "avril", "juin", "juillet", "août", "septembre", "octobre", "novembre", "décembre", "lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche", "enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre", "octubre", "noviembre", "diciembre", "lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo", "gennaio", "febbraio", "aprile", "maggio", "giugno", "luglio", "settembre", "ottobre", "dicembre", "lunedì", "martedì", "mercoledì", "giovedì", "venerdì", "sabato", "domenica", "januari", "februari", "maart", "augustus", "maandag", "dinsdag", "woensdag", "donderdag", "vrijdag", "zaterdag", "zondag"])


@dataclass(frozen=True)
class Gazetteer:
    """Lower-cased name sets; ``ordinary`` holds words of everyday language (dictionary, stop words)."""

    given: frozenset[str]
    surnames: frozenset[str]
    ordinary: frozenset[str]
    not_names: frozenset[str] = frozenset()

    def is_given(self, word: str) -> bool:
        return word in self.given or (not word.isascii() and self._other_form(word) and _fold(word) in self.given)

    def is_surname(self, word: str) -> bool:
        if word in self.surnames:
            return True
        if not self._other_form(word):
            return False
        bases = _surname_bases(word)
        return any(b in self.surnames for b in bases[0]) or any(self.is_given(b) for b in bases[1])

    def is_name(self, word: str) -> bool:
        return self.is_given(word) or self.is_surname(word)

    def _other_form(self, word: str) -> bool:
        """Whether ``word`` may be looked up by another form: no word of its own language ("según" is
        no "Segun"), three letters or more."""
        return len(word) >= 3 and word not in self.ordinary

    def risky_given(self, word: str) -> bool:
        """A given name that is also a month, a verb, a place or a thing (``May``, ``Will``, ``Paris``)."""
        return word in _RISKY_GIVEN or word in _MONTHS_DAYS or (word in self.ordinary and word not in self.surnames)

    def risky_alone(self, word: str) -> bool:
        """A given name that is as often a month, a verb, a virtue or a place in English (``May``,
        ``Will``, ``Grace``, ``Paris``), whatever the word lists say."""
        return word in _RISKY_GIVEN

    def is_ordinary(self, word: str) -> bool:
        return word in self.ordinary or word in _MONTHS_DAYS

    def is_not_name(self, word: str) -> bool:
        """A service word, greeting, vocative or department ("danke", "Signori", "Legal"): no person alone."""
        return word in self.not_names

    def month_or_day(self, word: str) -> bool:
        return word in _MONTHS_DAYS


_FOLD = str.maketrans({"ł": "l", "ø": "o", "æ": "ae", "œ": "oe", "ß": "ss", "đ": "d", "ð": "d", "þ": "th", "ı": "i"})


@functools.lru_cache(maxsize=65536)
def _fold(word: str) -> str:
    """``word`` without its diacritics: "wójcik" -> "wojcik", "doğan" -> "dogan", "þórsson" -> "thorsson"."""
    decomposed = unicodedata.normalize("NFKD", word.translate(_FOLD))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


@functools.lru_cache(maxsize=65536)
def _surname_bases(word: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The forms the lists may hold for a surname written otherwise: without diacritics, the male form of
    a Polish, Czech, Slovak, Russian or Hungarian female form ("zielińska" -> "zielinski", "dvořáková" ->
    "dvorak", "procházková" -> "prochazka", "veselá" -> "vesely", "petrova" -> "petrov", "szabóné" ->
    "szabo"); and the given name inside a Nordic patronymic ("jónsdóttir", "thorsson" -> "jon", "thor")."""
    folded = _fold(word)
    bases = [] if folded == word else [folded]
    if folded.endswith(("ska", "cka", "dzka")):
        bases.append(folded[:-1] + "i")
    elif folded.endswith("ova") and len(folded) > 5:
        bases += [folded[:-3], folded[:-3] + "a", folded[:-1]]
    elif folded.endswith(("eva", "ina")) and len(folded) > 5:
        bases.append(folded[:-1])
    elif word.endswith("á") and len(word) > 4:
        bases.append(folded[:-1] + "y")
    elif word.endswith("né") and len(word) > 4:
        bases.append(folded[:-2])
    given = []
    for suffix in ("sdottir", "sson"):
        if folded.endswith(suffix) and len(folded) > len(suffix) + 2:
            stem = folded[:-len(suffix)]
            given += [stem, stem + "ur"]
    return tuple(bases), tuple(given)


def _data(name: str) -> bytes:
    return resources.files(__name__.rpartition(".")[0]).joinpath("data", name).read_bytes()


def _read(name: str) -> frozenset[str]:
    return frozenset(gzip.decompress(_data(name)).decode("utf-8").split())


def data_lines(package: str, name: str) -> list[str]:
    """The lines of a hand-written file ``data/<name>`` of ``package``, without ``#`` comment lines
    and blank ones."""
    lines = resources.files(package).joinpath("data", name).read_text("utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def word_list(package: str, name: str) -> frozenset[str]:
    """The words of a hand-written list ``data/<name>`` of ``package`` (:func:`data_lines`)."""
    return frozenset(w for line in data_lines(package, name) for w in line.split())


def _supplement(name: str) -> frozenset[str]:
    return word_list(__name__.rpartition(".")[0], name)


@functools.cache
def gazetteer() -> Gazetteer:
    """The shipped gazetteer (read once per process)."""
    not_names = _supplement("words_not_names.txt")
    given = (_read("given_names.txt.gz") | _supplement("given_supplement.txt")
             | _supplement("given_short_forms.txt")) - not_names
    ordinary = (_read("ordinary.txt.gz") - _supplement("names_not_words.txt")) | not_names | _supplement("ordinary_supplement.txt")
    surnames = _read("surnames.txt.gz") | _supplement("surname_supplement.txt")
    return Gazetteer(given, surnames, ordinary, not_names)
