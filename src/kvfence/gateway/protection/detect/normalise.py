"""Fold the disguises of a text before detection, keeping a map back to the caller's text.

A value a detector knows can be hidden from a pattern without changing what a reader (or a model)
sees: full-width digits (``４１１１ １１１１ …``), a zero-width space, word joiner or soft hyphen
inside an e-mail, IBAN or API key, a no-break space between phone digit groups, a non-breaking or
figure dash, ``＠`` / ``﹫`` for ``@``, a Cyrillic or Greek letter that looks like a Latin one
(``ѕk-…`` with a Cyrillic ``ѕ``, ``АKIA…`` with a Cyrillic ``А``), digits of another script
(``٤٥٣٩ ١٤٨٨ …``, Arabic-Indic: a model reads them as the number), or an escape the model reads
through (``alice\\u0040example.com`` in a JSON string, ``%40`` in a URL, ``&#64;`` in HTML).
:func:`fold` removes the invisible characters, maps the others to their plain form; detectors run
on the folded text, and :meth:`Folded.span` maps each finding back to the caller's characters, so a
placeholder replaces exactly what the caller wrote and its restoration puts that original text back.
ASCII text without escapes, and text whose non-ASCII characters need no folding (accents, CJK,
Cyrillic or Greek prose), is returned as it is, at the cost of one ``isascii`` / a few C-level scans.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["INVISIBLE", "LOOKALIKES", "Folded", "fold", "skeleton"]

# Characters that render as nothing (or only at a line break) but split a token for a regex.
INVISIBLE = frozenset("\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u200b\u200c\u200d"
                      "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064\u2066\u2067"
                      "\u2068\u2069\u206a\u206b\u206c\u206d\u206e\u206f\u3164\ufeff\uffa0")
# Dashes NFKC leaves alone that a reader takes for "-" (phone groups, IBAN groups, dates).
_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2043\u2212\ufe58\ufe63\uff0d"), "-")

# Letters of other scripts that look like one ASCII letter. The source of truth is Unicode TR39's
# confusables.txt (https://www.unicode.org/Public/security/latest/confusables.txt); this is the small
# subset of its Cyrillic, Greek and Latin-extension entries whose prototype is a single ASCII letter,
# mapped to the letter a reader sees (TR39's skeleton maps some prototypes further, e.g. I -> l; a
# detector needs the letter the format is written with, not the prototype).
LOOKALIKES: dict[str, str] = {
    # Cyrillic lowercase
    "\u0430": "a", "\u0435": "e", "\u043e": "o", "\u0440": "p", "\u0441": "c", "\u0443": "y", "\u0445": "x",
    "\u0455": "s", "\u0456": "i", "\u0458": "j", "\u0501": "d", "\u04cf": "l", "\u04bb": "h", "\u051b": "q",
    "\u051d": "w", "\u0475": "v",
    # Cyrillic uppercase
    "\u0410": "A", "\u0412": "B", "\u0415": "E", "\u041a": "K", "\u041c": "M", "\u041d": "H", "\u041e": "O",
    "\u0420": "P", "\u0421": "C", "\u0422": "T", "\u0425": "X", "\u04ae": "Y", "\u0405": "S", "\u0406": "I",
    "\u0408": "J", "\u051a": "Q", "\u051c": "W", "\u04c0": "I", "\u0474": "V",
    # Greek
    "\u0391": "A", "\u0392": "B", "\u0395": "E", "\u0396": "Z", "\u0397": "H", "\u0399": "I", "\u039a": "K",
    "\u039c": "M", "\u039d": "N", "\u039f": "O", "\u03a1": "P", "\u03a4": "T", "\u03a5": "Y", "\u03a7": "X",
    "\u03bf": "o", "\u03bd": "v", "\u03b1": "a", "\u03b9": "i", "\u03c1": "p", "\u03f2": "c", "\u03f3": "j",
    # Latin letters outside ASCII that read as ASCII ones (dotless i, script g)
    "\u0131": "i", "\u0261": "g",
}
_LOOKALIKE_TABLE = str.maketrans(LOOKALIKES)
_LOOKALIKE = re.compile("[" + "".join(sorted(LOOKALIKES)) + "]")
# A run of look-alikes is folded only next to an ASCII letter, digit, "@", "_" or "-" (one token
# mixes scripts, what TR39 calls a mixed-script confusable): Cyrillic or Greek prose stays as it is.
_ASCII_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@_-")

_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
_TOKEN_PUNCTUATION = frozenset("@._-+")
_ASCII_ALNUM = re.compile(r"[A-Za-z0-9]")
_DIGIT = re.compile(r"\d")  # searched in non-ASCII runs only: another script's decimal digits
_FOREIGN_DIGIT = re.compile(r"(?![0-9])\d")
_SPECIAL = re.compile("[" + re.escape("".join(sorted(INVISIBLE)) + "".join(map(chr, _DASHES))) + "]")
# Escapes a model reads as the character they stand for: JSON / JavaScript / Python (\u0040, \x40),
# URL percent-encoding of printable ASCII (%40), HTML numeric references (&#64;, &#x40;).
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\x([2-7][0-9a-fA-F])|%([2-7][0-9a-fA-F])|&#(\d{2,6});"
                     r"|&#[xX]([0-9a-fA-F]{2,5});")


def _fold_char(ch: str, lookalike: bool = False, digits: bool = False) -> str:
    if ch in INVISIBLE:
        return ""
    folded = unicodedata.normalize("NFKC", ch).translate(_DASHES)
    # NFKC turns a few characters into several ("ﬁ" -> "fi", "½" -> "1⁄2"); a combining mark alone
    # would fold to itself. Either way each output character maps back to this one.
    if digits and len(folded) == 1 and not folded.isascii():
        value = unicodedata.decimal(folded, None)
        if value is not None:  # Arabic-Indic, Devanagari ... digits: NFKC leaves them as they are
            return str(value)
    return folded.translate(_LOOKALIKE_TABLE) if lookalike else folded


def _unescape(match: re.Match[str]) -> str | None:
    hex_code = match.group(1) or match.group(2) or match.group(3) or match.group(5)
    try:
        code = int(hex_code, 16) if hex_code else int(match.group(4))
        ch = chr(code)
    except (ValueError, OverflowError):
        return None
    # Only characters that continue a token are decoded: letters, digits and the punctuation inside
    # addresses and keys. A space, quote, ":" or "/" would change how the text around it splits
    # ("https://jo%40mail.com:a%20secret@host" must keep its password field one token).
    return ch if (ch.isalnum() or ch in _TOKEN_PUNCTUATION) and not 0xD800 <= code <= 0xDFFF else None


@dataclass(frozen=True, slots=True)
class Folded:
    """A folded text and, when folding changed it, where each of its characters came from in the
    original (``origin[i]`` to ``origin_end[i]``: one character, or a whole escape such as ``%40``)."""

    text: str
    original: str
    origin: tuple[int, ...] | None = None
    origin_end: tuple[int, ...] | None = None

    @property
    def changed(self) -> bool:
        return self.origin is not None

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The caller's characters ``[start, end)`` of the folded text came from (invisible characters
        inside the span are included, those just outside it are not)."""
        if self.origin is None or start >= end:
            return start, end
        last = self.origin_end[end - 1] if self.origin_end is not None else self.origin[end - 1] + 1
        return self.origin[start], last


def fold(text: str, *, lookalikes: bool = False, escapes: bool = False) -> Folded:
    """``text`` with invisible characters removed and compatibility forms (full-width, no-break
    spaces, odd dashes, ``＠``) made plain; with ``lookalikes``, Cyrillic / Greek letters that look
    Latin are made Latin where they touch an ASCII word character, and other scripts' decimal digits
    ASCII digits; with ``escapes``, ``\\u0040``,
    ``\\x40``, ``%40``, ``&#64;`` become the character. ``origin`` maps back (None when unchanged).

    Leak fingerprints fold without the last two (a prompt and an answer chunk must fold alike
    whatever the chunking); detectors fold with both."""
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), disjoint
    if escapes and ("\\" in text or "%" in text or "&#" in text):
        for match in _ESCAPE.finditer(text):
            ch = _unescape(match)
            if ch is not None:
                edits.append((match.start(), match.end(), _fold_char(ch, lookalikes)))
    if not text.isascii():
        # one C-level pass each, so that Cyrillic, Greek or Arabic prose costs little per word
        foreign_digits = lookalikes and _FOREIGN_DIGIT.search(text) is not None
        for match in _NON_ASCII_RUN.finditer(text):
            start, end = match.span()
            run = match.group(0)
            needs = _needs_folding(run)
            mixed = False
            if lookalikes and ((start > 0 and text[start - 1] in _ASCII_WORD)
                               or (end < len(text) and text[end] in _ASCII_WORD)
                               # or mixed with full-width Latin ("АＫＩＡ…" is one non-ASCII run)
                               or (needs and _ASCII_ALNUM.search(unicodedata.normalize("NFKC", run)) is not None)):
                mixed = _LOOKALIKE.search(run) is not None
            if mixed or needs or (foreign_digits and _DIGIT.search(run) is not None):
                edits.extend((i, i + 1, _fold_char(text[i], mixed, lookalikes)) for i in range(start, end))
        if escapes:
            edits.sort()
    if not edits:
        return Folded(text, text)
    pieces: list[str] = []
    origin: list[int] = []
    origin_end: list[int] = []
    cursor = 0
    changed = False
    for start, end, replacement in edits:
        if end - start == 1 and replacement == text[start]:
            continue
        changed = True
        pieces.append(text[cursor:start])
        origin.extend(range(cursor, start))
        origin_end.extend(range(cursor + 1, start + 1))
        pieces.append(replacement)
        origin.extend([start] * len(replacement))
        origin_end.extend([end] * len(replacement))
        cursor = end
    if not changed:
        return Folded(text, text)
    pieces.append(text[cursor:])
    origin.extend(range(cursor, len(text)))
    origin_end.extend(range(cursor + 1, len(text) + 1))
    return Folded("".join(pieces), text, tuple(origin), tuple(origin_end))


def skeleton(text: str) -> str:
    """``text`` folded for matching words, not spans: escapes decoded, every look-alike letter made
    Latin whatever its neighbours (``bоard`` with a Cyrillic ``о``, or a word all in look-alikes)."""
    if text.isascii() and "\\" not in text and "%" not in text and "&#" not in text:
        return text
    return fold(text, lookalikes=True, escapes=True).text.translate(_LOOKALIKE_TABLE)


def _needs_folding(run: str) -> bool:
    # both checks run in C: accented or CJK prose costs no per-character Python
    return _SPECIAL.search(run) is not None or not unicodedata.is_normalized("NFKC", run)
