"""Which words of an n-gram are ordinary language: the lexicon behind ``withheld_orgs`` (scan.py).

A withheld answer may make an n-gram common only if every word of it is an ordinary dictionary word
of a supported language (en/de/fr/es/it/nl: the PERSON rules' lexicon, ``detect/recognizers/data/
ordinary.txt.gz`` minus the words that are names first, and ``data/ordinary_supplement.txt``, the
service-language words of de/es/it/fr/nl that lexicon lacks: "bitte", "gracias", "posso"). Not
ordinary: a number, a personal name that is no everyday word, a code, an identifier, the parts of an
e-mail or URL, and any other token the lexicon does not hold. Those are what confidential data consists of, so a span holding one is
withheld however many organizations it reaches.

Words are judged in the form the n-gram was built from (``fingerprint.words``: folded, lower case,
leetspeak digits read as letters, ``canonical``): the lexicon is put in that form too, so "h3lp" is
the ordinary "help" and "h4lv0rs3n" the name "halvorsen". A token made of digits only is a number
even where its digits read as a word ("50" reads "so"): the scanner passes that flag beside the word.
"""

from __future__ import annotations

import functools
from importlib import resources

from kvfence.gateway.protection.leak.fingerprint import canonical, leak_fold

__all__ = ["FRAGMENTS", "is_ordinary_word", "ordinary_words"]

# What the word tokenizer leaves of contractions and elisions ("I'll", "isn't", "dell'anno",
# "qu'il"): parts of ordinary words that a dictionary does not list alone.
FRAGMENTS = frozenset(
    ["ll", "ve", "re", "isn", "aren", "wasn", "weren", "doesn", "didn", "hasn", "haven", "hadn", "couldn", "shouldn", "wouldn", "mustn", "needn", "shan", "ain", "won", "don", "qu", "jusqu", "lorsqu", "puisqu", "aujourd", "hui", "dell", "nell", "sull", "dall", "all", "un", "quell", "anch"])


@functools.cache
def ordinary_words() -> frozenset[str]:
    """The lexicon in canonical form (read once per process, ~0.5 s)."""
    from kvfence.gateway.protection.detect.recognizers.gazetteer import gazetteer

    lexicon = gazetteer().ordinary | FRAGMENTS | _supplement()
    # the ASCII words in one pass (one word at a time takes ~0.7 s for the whole list)
    ascii_words = canonical("\n".join(w for w in lexicon if w.isascii()).lower()).split("\n")
    return frozenset(ascii_words).union(canonical(leak_fold(w).lower()) for w in lexicon if not w.isascii())


def _supplement() -> frozenset[str]:
    """``data/ordinary_supplement.txt``: service-language words of de/es/it/fr/nl the lexicon lacks."""
    text = resources.files("kvfence.gateway.protection.leak").joinpath("data", "ordinary_supplement.txt").read_text("utf-8")
    return frozenset(w for line in text.splitlines() if not line.startswith("#") for w in line.split())


def is_ordinary_word(word: str, is_number: bool = False) -> bool:
    """``word`` in canonical form (``fingerprint.words``) is an everyday word; a number never is."""
    return not is_number and word in ordinary_words()
