"""Values reformatted so that no pattern sees them, but a reader (or a model) still does.

:func:`reformatted_runs` finds cheaply decidable rewritings and returns each as a
:class:`~kvfence.gateway.protection.detect.encoded.DecodedRun`: the detector scans the plain form and
a finding there covers the whole run (its value is the plain form), as for base64 runs:

- ``spaced``: a character between every space, ``4 1 1 1 1 1 1 1 …``, ``j a n e @ a c m e . i o``;
- ``spaced_email``: spaces around the ``@`` and the dots, ``jane.doe @ example . com``;
- ``dotted``: digit groups joined by dots, ``536.22.8741``, ``4111.1111.1111.1111`` (read with dashes;
  IPv4 addresses left to their own rule);
- ``number_words``: digits written as English words, ``four one one one …`` (eight or more);
- ``lowercase``: an IBAN (or another upper-case code) written in lower case, ``de89 3704 0044 …``.

Each pattern is one linear regex over the folded text; a run is at most :data:`MAX_RUN_CHARS` long.
The detector scans a run's plain form after the words just before it, so a rule that needs a context
word ("ssn 5 3 6 2 2 8 7 4 1") still sees it.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.encoded import DecodedRun

__all__ = ["KINDS", "MAX_RUN_CHARS", "reformatted_runs"]

KINDS = frozenset({"spaced", "spaced_email", "dotted", "number_words", "lowercase"})

MAX_RUN_CHARS = 512

_SPACED = re.compile(r"(?<![^\s(\[\"'])(?:[A-Za-z0-9@.+_-][ \t]{1,3}){7,200}[A-Za-z0-9@.+_-](?![^\s)\]\"'.,;:!?])")
_SPACED_EMAIL = re.compile(r"(?<![\w.@+-])[\w+-]+(?:[ \t]{0,2}\.[ \t]{0,2}[\w+-]+){0,4}[ \t]{0,2}@[ \t]{0,2}"
                           r"[A-Za-z0-9-]+(?:[ \t]{0,2}\.[ \t]{0,2}[A-Za-z0-9-]+){0,4}[ \t]{0,2}\.[ \t]{0,2}"
                           r"[A-Za-z]{2,24}(?![\w@])")
_DOTTED = re.compile(r"(?<![\d.])\d{2,6}(?:[ \t]?\.[ \t]?\d{2,6}){2,5}(?![\d]|\.\d)")
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_DIGIT_WORDS = {"zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
                "six": "6", "seven": "7", "eight": "8", "nine": "9"}
_WORD_ALT = "|".join(sorted(_DIGIT_WORDS, key=len, reverse=True))
_NUMBER_WORDS = re.compile(rf"\b(?:{_WORD_ALT})(?:[\s,-]{{1,3}}(?:{_WORD_ALT})){{7,40}}\b", re.IGNORECASE)
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
        digits = "".join(_DIGIT_WORDS[w.lower()] for w in re.findall(rf"(?i:{_WORD_ALT})", match.group(0)))
        runs.append(DecodedRun(match.start(), match.end(), digits, "number_words"))
    for match in _LOWER_CODE.finditer(text):
        code = match.group(0)
        if any(c.islower() for c in code):
            runs.append(DecodedRun(match.start(), match.end(), code.upper(), "lowercase"))
    return [run for run in runs if run.end - run.start <= MAX_RUN_CHARS]
