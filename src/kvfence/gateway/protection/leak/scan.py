"""Cross-tenant leak detection in answers: foreign n-gram runs and canary strings.

An answer to tenant B is scanned word by word as it is produced. Each n-gram's fingerprint is
looked up in the index of recent prompts; it is *evidence* when the tenants that sent it are
others than B (at most ``max_owners`` of them: a phrase many tenants send is common language, not
a leak) and it is not part of B's own request. A run of ``min_run`` consecutive evidence n-grams
(``n + min_run - 1`` words in a row, all copied from someone else's recent prompt) is a suspected
leak. A canary string of another tenant anywhere in the answer is one outright. N-grams the model
wrote in earlier finished answers (to anyone, and not copied from that asker's own prompt) are
model language, not evidence: that keeps boilerplate out of the alarms.
"""

from __future__ import annotations

import hmac
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kvfence.gateway.protection.detect.normalise import fold
from kvfence.gateway.protection.leak.fingerprint import Fingerprinter
from kvfence.gateway.protection.leak.index import FingerprintIndex

__all__ = ["MODEL_OWNER", "AnswerScanner", "CanaryBook", "LeakEvidence", "LeakMonitor"]

CANARY_PREFIX = "kvfc-"
# Index owner of n-grams the model itself wrote in finished answers (not copied from the asker's own
# prompt): boilerplate a model produces is common language, not evidence of a leak.
MODEL_OWNER = "*model*"
_WORD_CHAR = re.compile(r"\w")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class LeakEvidence:
    """Why an answer was stopped: fingerprints (hex, never text) and the tenants that own them."""

    detector: str                   # "ngram" or "canary"
    owners: tuple[str, ...]
    fingerprints: tuple[str, ...]
    run_words: int                  # words in the run of foreign n-grams (0 for a canary)
    at_word: int                    # position in the answer, in words, where it was caught


class CanaryBook:
    """Per-tenant canary strings: configured ones, and derived ones (HMAC of the tenant) on demand.

    ``derive_for`` names the tenants (units) whose derived canaries are known from the start. Every
    worker or replica that holds the same key then names the owner of any of them, including one
    that another process injected (else only the process that injected it would know it).
    """

    def __init__(self, key: bytes, configured: Mapping[str, Iterable[str]] | None = None,
                 derive_for: Iterable[str] = ()) -> None:
        self._key = key
        self._owner: dict[str, str] = {}
        for tenant, canaries in (configured or {}).items():
            for canary in canaries:
                if canary:
                    self._owner[canary] = tenant
        for tenant in derive_for:
            self._owner.setdefault(self._derive(tenant), tenant)
        self._derived_pattern = re.compile(re.escape(CANARY_PREFIX) + r"[0-9a-f]{20}")
        self._compile()

    def _compile(self) -> None:
        literals = sorted(self._owner, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(c) for c in literals)) if literals else None
        self.longest = max([len(c) for c in self._owner] + [len(CANARY_PREFIX) + 20])

    def derived(self, tenant: str) -> str:
        """The tenant's own canary: unguessable without the gateway secret, stable across replicas."""
        canary = self._derive(tenant)
        if canary not in self._owner:
            self._owner[canary] = tenant
            self._compile()
        return canary

    def _derive(self, tenant: str) -> str:
        return CANARY_PREFIX + hmac.digest(self._key, b"canary\x00" + tenant.encode(), "sha256").hex()[:20]

    def configured_for(self, tenant: str) -> list[str]:
        return [c for c, owner in self._owner.items() if owner == tenant and not c.startswith(CANARY_PREFIX)]

    def foreign_in(self, text: str, tenant: str) -> list[str]:
        """Owners (or ``"unknown"``) of canaries in ``text`` that are not ``tenant``'s own."""
        owners: list[str] = []
        if self._pattern is not None:
            owners += [self._owner[m.group(0)] for m in self._pattern.finditer(text)]
        for match in self._derived_pattern.finditer(text):
            owners.append(self._owner.get(match.group(0), "unknown"))
        return [owner for owner in owners if owner != tenant]


class AnswerScanner:
    """Scans one choice of one answer; ``feed``/``finish`` return evidence once, else ``None``."""

    def __init__(self, monitor: LeakMonitor, tenant: str, own: frozenset[int]) -> None:
        self._monitor = monitor
        self._tenant = tenant
        self._own = own
        self._recent: deque[str] = deque(maxlen=monitor.fingerprinter.n)
        self._partial = ""
        self._tail = ""
        self._run: list[tuple[int, frozenset[str]]] = []
        self._words = 0
        self._generated: set[int] = set()
        self.evidence: LeakEvidence | None = None

    def feed(self, delta: str) -> LeakEvidence | None:
        if self.evidence is not None or not delta:
            return self.evidence
        if not delta.isascii():
            # as the prompts were fingerprinted (fingerprint.words): a zero-width character, soft
            # hyphen or full-width letter inside a copied word must not make it another word
            delta = fold(delta).text
        canaries = self._monitor.canaries
        if canaries is not None:
            window = self._tail + delta
            owners = canaries.foreign_in(window, self._tenant)
            if owners:
                return self._caught(LeakEvidence("canary", tuple(sorted(set(owners))), (), 0, self._words))
            self._tail = window[-(canaries.longest - 1):]
        text = self._partial + delta
        # A word at the very end may continue in the next delta: keep it for then.
        cut = len(text)
        while cut > 0 and _WORD_CHAR.match(text[cut - 1]):
            cut -= 1
        self._partial = text[cut:]
        return self._consume(_WORD.findall(text[:cut].lower()))

    def finish(self) -> LeakEvidence | None:
        if self.evidence is not None:
            return self.evidence
        rest, self._partial = self._partial, ""
        evidence = self._consume(_WORD.findall(rest.lower()))
        if evidence is None and self._generated:
            self._monitor.index.add(MODEL_OWNER, self._generated)
        return evidence

    def _consume(self, new_words: list[str]) -> LeakEvidence | None:
        if not new_words:
            return None
        n = self._monitor.fingerprinter.n
        grams: list[int] = []
        ends: list[int] = []  # answer position (in words) where each n-gram ends
        for word in new_words:
            self._recent.append(word)
            self._words += 1
            if len(self._recent) == n:
                grams.append(self._monitor.fingerprinter.of_words(tuple(self._recent)))
                ends.append(self._words)
        if not grams:
            return None
        foreign = [g for g in grams if g not in self._own]
        owners_of = dict(zip(foreign, self._monitor.index.owners(foreign), strict=True)) if foreign else {}
        # Only n-grams nobody sent count as the model's own writing. One that some tenant's prompt
        # holds (the asker's earlier request included: an engine can hand a tenant its own old KV)
        # must stay evidence, or one answer would whitelist that tenant's text for everybody.
        self._generated.update(g for g, owners in owners_of.items() if not owners - {MODEL_OWNER})
        monitor = self._monitor
        for gram, end in zip(grams, ends, strict=True):
            owners = owners_of.get(gram, frozenset())
            if (owners and self._tenant not in owners and MODEL_OWNER not in owners
                    and len(owners) <= monitor.max_owners):
                self._run.append((gram, owners))
                if len(self._run) >= monitor.min_run:
                    run_owners = sorted(set().union(*(o for _, o in self._run)))
                    return self._caught(LeakEvidence(
                        "ngram", tuple(run_owners), tuple(f"{g:016x}" for g, _ in self._run),
                        len(self._run) + n - 1, end))
            else:
                self._run.clear()
        return None

    def _caught(self, evidence: LeakEvidence) -> LeakEvidence:
        self.evidence = evidence
        return evidence


class LeakMonitor:
    """Process-wide leak detection state: the index, the fingerprinter, canaries, thresholds."""

    def __init__(self, index: FingerprintIndex, fingerprinter: Fingerprinter, *, min_run: int = 4,
                 max_owners: int = 1, canaries: CanaryBook | None = None) -> None:
        self.index = index
        self.fingerprinter = fingerprinter
        self.min_run = min_run
        self.max_owners = max_owners
        self.canaries = canaries

    def record_prompt(self, tenant: str, texts: Iterable[str]) -> frozenset[int]:
        """Fingerprint what ``tenant`` sends, add it to the index, return it (the tenant's own set)."""
        own = frozenset(self.fingerprinter.of_texts(texts))
        if own:
            self.index.add(tenant, own)
        return own

    def fingerprint(self, texts: Iterable[str]) -> frozenset[int]:
        return frozenset(self.fingerprinter.of_texts(texts))

    def scanner(self, tenant: str, own: frozenset[int]) -> AnswerScanner:
        return AnswerScanner(self, tenant, own)
