"""One person, one value: the mentions of a name across the texts of one request
("Dr. Priya Raman", "Raman, Priya", "Priya", "RAMAN") share the value of its fullest form.
"""

from __future__ import annotations

import bisect
import itertools
import re

from kvfence.gateway.protection.detect.findings import Category, Finding
from kvfence.gateway.protection.detect.recognizers.gazetteer import gazetteer
from kvfence.gateway.protection.detect.recognizers.not_names import PLACES as _PLACES
from kvfence.gateway.protection.detect.recognizers.person_things import drop_things
from kvfence.gateway.protection.detect.recognizers.person_words import (
    _PARTICLES,
    _WORD,
    _at_sentence_start,
    _not_a_person,
)

__all__ = ["link_mentions"]


# what a name looks like as a value (another rule's PERSON, e.g. an operator's, may hold anything)
_NAMEISH = re.compile(r"^[^\W\d_]+(?:(?:[ '’,-]|\. ?|, )[^\W\d_]+){0,6}\.?$")


def _name_words(value: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(value) if len(w) > 1 and w.lower() not in _PARTICLES)


def link_mentions(texts: list[str], per_text: list[list[Finding]]) -> list[list[Finding]]:
    """One person, one value: across the texts of one request, a name written several ways
    ("Dr. Priya Raman", "Raman, Priya", "Priya", "RAMAN") gets the value of its fullest form, so
    that all of them share a placeholder; a lone capitalised "Priya" or "Raman" elsewhere in the
    request is a mention of that person too. A word shared by two different full names ("Priya
    Raman", "Priya Shah") is undecidable: those mentions keep their own value."""
    names: dict[frozenset[str], str] = {}
    for text, found in zip(texts, per_text, strict=True):
        for f in found:
            if f.entity == "PERSON":
                value = f.value if f.value is not None else text[f.start:f.end]
                words = _name_words(value)
                if len(words) >= 2 and words not in names and _NAMEISH.match(value):
                    names[words] = value
    if not names:
        return per_text
    owners: dict[str, set[frozenset[str]]] = {}
    for words in names:
        for word in words:
            owners.setdefault(word, set()).add(words)
    # the fullest form wins: "Priya Raman" and "Priya K. Raman" are one person if one holds the other
    full = {words: max((other for other in names if words <= other), key=len) for words in names}

    def canonical(words: frozenset[str]) -> str | None:
        holders = {full[w] for word in words for w in owners.get(word, ()) if words <= w}
        return names[holders.pop()] if len(holders) == 1 else None

    g = gazetteer()
    # a name part that is also a word ("Finch", "Grace") is a mention only capitalised inside a sentence
    mention_words = sorted((w for w in owners if len(w) >= 3 and not _not_a_person(w) and w not in _PLACES),
                           key=len, reverse=True)
    pattern = re.compile(r"(?<![\w'’-])(?:" + "|".join(re.escape(w) for w in mention_words) + r")(?![\w-])",
                         re.IGNORECASE) if mention_words else None
    out: list[list[Finding]] = []
    for text, found in zip(texts, per_text, strict=True):
        linked: list[Finding] = []
        for f in found:
            if f.entity == "PERSON" and not f.continued:
                value = f.value if f.value is not None else text[f.start:f.end]
                name = canonical(_name_words(value)) if _NAMEISH.match(value) else None
                if name is not None and name != value:
                    f = Finding(f.start, f.end, f.entity, f.category, f.score, f.rule, value=name)
            linked.append(f)
        if pattern is not None:
            mentions: list[Finding] = []
            spans = sorted((f.start, f.end) for f in found)
            starts = [s for s, _ in spans]
            ends = list(itertools.accumulate((e for _, e in spans), max))  # ends[k]: furthest end of spans[:k+1]
            for m in pattern.finditer(text):
                word = m.group()
                if not (word.isupper() or all(p[:1].isupper() and p[1:].islower() for p in re.split(r"[-'’]", word))):
                    continue
                if g.is_ordinary(word.lower()) and (word.isupper() or _at_sentence_start(text, m.start())):
                    continue  # "Will", "Grace", "Brown" at a sentence start, "WILL" in capitals
                k = bisect.bisect_left(starts, m.end())  # spans[:k] start before the mention ends
                if k and ends[k - 1] > m.start():
                    continue  # inside (or across) a finding already made
                name = canonical(frozenset([word.lower()]))
                mentions.append(Finding(m.start(), m.end(), "PERSON", Category.PII, 0.6, "person_mention",
                                        value=name))
            # a mention passes the last test too: "Victoria" of "the Victoria line" is none
            linked.extend(drop_things(text, mentions, g))
        out.append(sorted(linked, key=lambda f: f.start) if len(linked) != len(found) else linked)
    return out
