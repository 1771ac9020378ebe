"""Keyed fingerprints of word n-grams: what the leak index stores instead of prompt text.

Text is split into lowercase word tokens (Unicode ``\\w+``) in their canonical form (:func:`canonical`:
leetspeak digits inside a word read as letters, letters spaced out one by one joined); each run of
``n`` consecutive words is
hashed with keyed BLAKE2b (RFC 7693's MAC mode, 64-bit digest) under a key derived from the gateway's
secret. (It was HMAC-SHA256: BLAKE2b is as much a keyed PRF and 2.7 times faster, which pays for the
disguised readings of answers, ``scan.py``.) Without the key a
fingerprint cannot be tested against a guessed phrase, so the index (in memory or in Redis) holds
nothing a reader could turn back into prompt text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from kvfence.gateway.protection.detect.normalise import LOOKALIKES, fold

__all__ = ["CANON", "Fingerprinter", "canonical", "despace", "leak_fold", "words"]

# Letters and digits; "_" separates words too ("halvorsen_maritime_will" is three, in a tool name as in prose).
_WORD = re.compile(r"[^\W_]+")
_LOOKALIKE_TABLE = str.maketrans(LOOKALIKES)
# Leetspeak: a digit reads as the letter it stands for ("h4lv0rs3n", "15" for "is"); 2 and 6 stand
# for too many things to guess. "1" is "i" or "l", so every "l" is read as "i" too. Prompts and
# answers alike, numbers too: a fingerprint only has to be equal on both sides, and "412" and "4i2"
# being one word costs nothing.
CANON = str.maketrans("01345789l", "oieastbgi")
# Letters spaced out one by one, "h a l v o r s e n" (three or more, one space between each): one
# word. Two spaces or punctuation between two of them keep them apart.
_SPACED_LETTERS = re.compile(r"(?<![^\W_])[^\W_](?: [^\W_](?![^\W_])){2,}")


def despace(text: str) -> str:
    """``text`` with each run of letters spaced out one by one joined into one word."""
    if " " not in text:
        return text
    return _SPACED_LETTERS.sub(lambda m: m.group(0).replace(" ", ""), text)


def canonical(word: str) -> str:
    """One lowercase word token as the index compares it: leetspeak digits made letters, "l" made "i"."""
    return word.translate(CANON)


def leak_fold(text: str) -> str:
    """``text`` as the leak index sees it, prompt or answer alike: folded (``normalise.py``: no
    zero-width characters, full-width letters made plain) and every Cyrillic or Greek letter that
    looks Latin made Latin, whatever its neighbours. Per character, so an answer folds the same
    whatever its chunking; real Cyrillic or Greek prose folds the same on both sides too."""
    if text.isascii():
        return text
    return fold(text).text.translate(_LOOKALIKE_TABLE)


def words(text: str) -> list[str]:
    """Lowercase word tokens of ``text`` after :func:`leak_fold` and :func:`despace`, each in its
    :func:`canonical` form; punctuation, whitespace and markup are separators, so a zero-width
    character, a full-width or a look-alike letter inside a word does not make another word of it,
    in a prompt or in an answer."""
    return _WORD.findall(despace(leak_fold(text)).lower().translate(CANON))


class Fingerprinter:
    """Keyed BLAKE2b fingerprints (64-bit ints) of the word n-grams of a text."""

    def __init__(self, key: bytes, n: int) -> None:
        if len(key) < 16:
            raise ValueError("fingerprint key must be at least 16 bytes")
        if n < 1:
            raise ValueError("n-gram size must be positive")
        # a BLAKE2b key is at most 64 bytes: derive one of 32 from a secret of any length
        self._key = hashlib.sha256(b"kvfence leak fingerprint\x00" + key).digest()
        self.n = n

    def of_words(self, tokens: tuple[str, ...] | list[str]) -> int:
        digest = hashlib.blake2b(" ".join(tokens).encode("utf-8"), key=self._key, digest_size=8).digest()
        return int.from_bytes(digest, "big")

    def ngrams(self, tokens: list[str]) -> list[int]:
        """Fingerprints of every n-gram of ``tokens``, in order (empty when fewer than n words)."""
        n = self.n
        return [self.of_words(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]

    def of_text(self, text: str) -> list[int]:
        return self.ngrams(words(text))

    def of_texts(self, texts: Iterable[str]) -> set[int]:
        """Distinct fingerprints of several texts, each fingerprinted on its own."""
        found: set[int] = set()
        for text in texts:
            found.update(self.of_text(text))
        return found
