"""Which words of an n-gram are ordinary language: the lexicon behind ``withheld_orgs`` (scan.py).

A withheld answer may make an n-gram common only if every word of it is an ordinary dictionary word
of a supported language (en/de/fr/es/it/nl: the PERSON rules' lexicon, ``detect/recognizers/data/
ordinary.txt.gz`` minus the words that are names first, and ``data/ordinary_supplement.txt``, the
service-language words of de/es/it/fr/nl that lexicon lacks: "bitte", "gracias", "posso"). Not
ordinary: a number, a personal name that is no everyday word, a code, an identifier, the parts of an
e-mail or URL, and any other token the lexicon does not hold. Those are what confidential data consists of, so a span holding one is
withheld however many organizations it reaches.

Words are judged in the form the n-gram was built from (``fingerprint.words``: folded, lower case,
leetspeak digits read as letters, ``canonical``, where "l" reads "i"): a word is ordinary when one of
its spellings is in the lexicon, so "h3lp" is the ordinary "help" and "h4lv0rs3n" the name "halvorsen". A token made of digits only is a number
even where its digits read as a word ("50" reads "so"): the scanner passes that flag beside the word.
"""

from __future__ import annotations

import functools
import itertools

__all__ = ["FRAGMENTS", "is_ordinary_word", "ordinary_words"]

# What the word tokenizer leaves of contractions and elisions ("I'll", "isn't", "dell'anno",
# "qu'il"): parts of ordinary words that a dictionary does not list alone.
FRAGMENTS = frozenset(
    ["ll", "ve", "re", "isn", "aren", "wasn", "weren", "doesn", "didn", "hasn", "haven", "hadn", "couldn", "shouldn", "wouldn", "mustn", "needn", "shan", "ain", "won", "don", "qu", "jusqu", "lorsqu", "puisqu", "aujourd", "hui", "dell", "nell", "sull", "dall", "all", "un", "quell", "anch"])


# A canonical "i" was written "i", "l" or "1": each spelling of a word is looked up in the lexicon as
# it is (no second, canonical copy of 306k words in memory), for words of at most this many "i"s.
_MAX_IS = 8


@functools.cache
def ordinary_words() -> tuple[frozenset[str], frozenset[str]]:
    """The lexicon and the supplement (read once per process, with the PERSON rules' gazetteer)."""
    from kvfence.gateway.protection.detect.recognizers.gazetteer import gazetteer

    return gazetteer().ordinary, FRAGMENTS | _supplement()


def _supplement() -> frozenset[str]:
    """``data/ordinary_supplement.txt``: service-language words of de/es/it/fr/nl the lexicon lacks."""
    from kvfence.gateway.protection.detect.recognizers.gazetteer import word_list

    return word_list("kvfence.gateway.protection.leak", "ordinary_supplement.txt")


@functools.lru_cache(maxsize=1 << 16)
def _is_lexicon_word(word: str) -> bool:
    lexicon, supplement = ordinary_words()
    if word in lexicon or word in supplement:
        return True
    at = [k for k, c in enumerate(word) if c == "i"]
    if not at or len(at) > _MAX_IS:
        return False
    letters = list(word)
    for spelling in itertools.product("il", repeat=len(at)):
        for k, c in zip(at, spelling, strict=True):
            letters[k] = c
        spelt = "".join(letters)
        if spelt in lexicon or spelt in supplement:
            return True
    return False


def is_ordinary_word(word: str, is_number: bool = False) -> bool:
    """``word`` in canonical form (``fingerprint.words``) is an everyday word; a number never is."""
    return not is_number and _is_lexicon_word(word)
