"""Values reformatted so that no pattern sees them, but a reader (or a model) still does.

:func:`reformatted_runs` finds cheaply decidable rewritings and returns each as a
:class:`~kvfence.gateway.protection.detect.encoded.DecodedRun`: the detector scans the plain form and
a finding there covers the whole run (its value is the plain form), as for base64 runs:

- ``spaced``: a character between every space, ``4 1 1 1 1 1 1 1 …``, ``j a n e @ a c m e . i o``;
- ``spaced_email``: spaces around the ``@`` and the dots, ``jane.doe @ example . com``;
- ``dotted``: digit groups joined by dots, ``536.22.8741``, ``4111.1111.1111.1111`` (read with dashes;
  IPv4 addresses left to their own rule);
- ``number_words``: digits written as words, ``four one one one …`` (eight or more) in English,
  German, French, Spanish, Italian or Dutch (``vier eins eins …``, ``quatre un un …``), mixed with
  digits too (``4 one 1 one …``);
- ``letter_digits``: digits with letters that look like them, ``4lll 1lI1 OO12 …`` (O for 0, l or I
  for 1, S for 5, B for 8): nine or more characters with at least six real digits, after an IBAN's
  country code too (``DE89 37O4 OO44 …``);
- ``lowercase``: an IBAN (or another upper-case code) written in lower case, ``de89 3704 0044 …``.

Each pattern is one linear regex over the folded text; a run is at most :data:`MAX_RUN_CHARS` long.
The detector scans a run's plain form after the words just before it, so a rule that needs a context
word ("ssn 5 3 6 2 2 8 7 4 1") still sees it.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.encoded import DecodedRun

__all__ = ["KINDS", "MAX_RUN_CHARS", "reformatted_runs"]

KINDS = frozenset({"spaced", "spaced_email", "dotted", "number_words", "letter_digits", "lowercase"})

MAX_RUN_CHARS = 512

_SPACED = re.compile(r"(?<![^\s(\[\"'])(?:[A-Za-z0-9@.+_-][ \t]{1,3}){7,200}[A-Za-z0-9@.+_-](?![^\s)\]\"'.,;:!?])")
_SPACED_EMAIL = re.compile(r"(?<![\w.@+-])[\w+-]+(?:[ \t]{0,2}\.[ \t]{0,2}[\w+-]+){0,4}[ \t]{0,2}@[ \t]{0,2}"
                           r"[A-Za-z0-9-]+(?:[ \t]{0,2}\.[ \t]{0,2}[A-Za-z0-9-]+){0,4}[ \t]{0,2}\.[ \t]{0,2}"
                           r"[A-Za-z]{2,24}(?![\w@])")
_DOTTED = re.compile(r"(?<![\d.])\d{2,6}(?:[ \t]?\.[ \t]?\d{2,6}){2,5}(?![\d]|\.\d)")
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
# Digit names, 0 to 9, per language (a run may mix them: a reader reads each); accents optional.
_DIGIT_NAMES = {
    "en": "zero oh one two three four five six seven eight nine",
    "de": "null eins zwei drei vier fünf sechs sieben acht neun",
    "fr": "zéro un deux trois quatre cinq six sept huit neuf",
    "es": "cero uno dos tres cuatro cinco seis siete ocho nueve",
    "it": "zero uno due tre quattro cinque sei sette otto nove",
    "nl": "nul één twee drie vier vijf zes zeven acht negen",
}
_DIGIT_WORDS: dict[str, str] = {}
for _names in _DIGIT_NAMES.values():
    _list = _names.split()
    _values = [0, 0, *range(1, 10)] if len(_list) == 11 else list(range(10))
    for _name, _value in zip(_list, _values, strict=True):
        _DIGIT_WORDS[_name] = str(_value)
        _DIGIT_WORDS.setdefault(_name.replace("é", "e").replace("ü", "ue"), str(_value))
        _DIGIT_WORDS.setdefault(_name.replace("é", "e").replace("ü", "u"), str(_value))
_DIGIT_WORDS.update({"zwo": "2", "een": "1", "ein": "1"})
_WORD_ALT = "|".join(sorted(_DIGIT_WORDS, key=len, reverse=True))
_TOKEN_ALT = rf"(?:{_WORD_ALT}|\d)"
_NUMBER_WORDS = re.compile(rf"\b{_TOKEN_ALT}(?:[\s,-]{{1,3}}{_TOKEN_ALT}){{7,40}}\b", re.IGNORECASE)
_NUMBER_TOKEN = re.compile(_TOKEN_ALT, re.IGNORECASE)
# Letters a reader takes for digits inside a number: O 0, l I 1, S 5, B 8 (and groups of them).
_LETTER_DIGIT = str.maketrans("OolIiSsB", "00111558")
_LETTER_DIGITS = re.compile(r"(?<![A-Za-z0-9])(?P<country>[A-Z]{2}(?=[0-9OolISB]{2}))?[0-9OolISB](?:[ -]?[0-9OolISB]){8,40}"
                            r"(?![A-Za-z0-9])")  # with an IBAN's country code in front
_LOWER_CODE = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}\d{2}(?:[ ]?[A-Za-z0-9]{4}){2,7}(?:[ ]?[A-Za-z0-9]{1,3})?"
                         r"(?![A-Za-z0-9])")
_WHITESPACE = re.compile(r"[ \t]+")


def reformatted_runs(text: str) -> list[DecodedRun]:
    """Each reformatted run in ``text`` (already folded) with its plain form."""
    runs: list[DecodedRun] = []
    for match in _SPACED.finditer(text):
        runs.append(DecodedRun(match.start(), match.end(), _WHITESPACE.sub("", match.group(0)), "spaced"))
    if "@" in text:
        for match in _SPACED_EMAIL.finditer(text):
            if _WHITESPACE.search(match.group(0)):
                runs.append(DecodedRun(match.start(), match.end(), _WHITESPACE.sub("", match.group(0)),
                                       "spaced_email"))
    if "." in text:
        for match in _DOTTED.finditer(text):
            tight = _WHITESPACE.sub("", match.group(0))
            if not _IPV4.fullmatch(tight):
                runs.append(DecodedRun(match.start(), match.end(), tight.replace(".", "-"), "dotted"))
    for match in _NUMBER_WORDS.finditer(text):
        tokens = _NUMBER_TOKEN.findall(match.group(0))
        if all(t.isdigit() for t in tokens):
            continue  # digits alone are the other rules' (``spaced``)
        digits = "".join(t if t.isdigit() else _DIGIT_WORDS[t.lower()] for t in tokens)
        runs.append(DecodedRun(match.start(), match.end(), digits, "number_words"))
    for match in _LETTER_DIGITS.finditer(text):
        country = match.group("country") or ""
        run = match.group(0)[len(country):]
        if sum(c.isdigit() for c in run) >= 6 and not run.replace(" ", "").replace("-", "").isdigit():
            runs.append(DecodedRun(match.start(), match.end(), country + run.translate(_LETTER_DIGIT), "letter_digits"))
    for match in _LOWER_CODE.finditer(text):
        code = match.group(0)
        if any(c.islower() for c in code):
            runs.append(DecodedRun(match.start(), match.end(), code.upper(), "lowercase"))
    return [run for run in runs if run.end - run.start <= MAX_RUN_CHARS]
