"""Cross-tenant leak detection in answers: foreign n-gram runs and canary strings.

An answer to tenant B is scanned word by word as it is produced. Each n-gram's fingerprint is
looked up in the index of recent traffic; it is *evidence* when

- some tenant other than B *sent* it (any role: a system prompt, a user turn, an earlier assistant
  turn the client resends as history -- what tenant A sends is A's, whoever wrote it first), at most
  ``max_owners`` of them, and B did not send it; and
- it is not *common language*: fewer than ``common_orgs`` (default 3) organizations other than B
  sent it or were *delivered* it without it being evidence, within the window.

A run of ``min_run`` consecutive evidence n-grams (``n + min_run - 1`` words in a row) is a suspected
leak. A canary string of another tenant anywhere in the answer is one outright (matched on the
answer's skeleton: case, separators, look-alike letters do not hide it).

Why this rule. Provenance is per tenant: a phrase stops being anyone's only by evidence across several
unrelated organizations, never by one answer (a model restates its asker's data). What counts as that
evidence is what the gateway *delivered*: an answer that ends clean records its n-grams as *received*
by its tenant, except those that were evidence of a leak at the time. A withheld answer (an incident)
records nothing as received, whole or streamed, however far it was read. So:

- a phrase the model writes for everyone becomes common once answers to ``common_orgs`` organizations
  carried it before anyone claimed it, or once two organizations sent it;
- a span whose only origin is one tenant's prompt never becomes common through answers: each answer
  carrying it is evidence, and evidence is never recorded as received.

Withheld answers (``withheld_orgs``, default 3; 0 turns this off). One tenant can send a common
phrase before the model has written it for ``common_orgs`` organizations (poisoning a cold index, or
an honest system prompt): every other tenant's answer carrying it would be withheld for as long as it
keeps sending it. So the caught run's n-grams are recorded as *withheld from* the receiving
organization, but **only the n-grams made of ordinary words** (``ordinary.py``: every word an
ordinary dictionary word of en/de/fr/es/it/nl, judged in the canonical form the n-gram was built
from; no number, name that is no everyday word, code, identifier, e-mail or URL part). Such an
n-gram withheld from ``withheld_orgs`` organizations other than the asker is common, and so are the
same sender's ordinary n-grams that follow it in the answer without a break (the rest of the planted
phrase: it is common whole, not one run at a time). Hence:

- a planted refusal or boilerplate paragraph is withheld from at most ``withheld_orgs`` other
  organizations, then delivered, streamed and whole alike (the catch is the same run either way);
- a span holding a distinctive word (a name, figure, code word, identifier: what confidential data
  consists of) with three copied words on either side is withheld every time, to 3, 5, 10 or 50
  organizations: the ``n`` n-grams holding that word are never recorded, and they make a run;
- the price: a leak made **only** of ordinary words is withheld from ``withheld_orgs`` organizations,
  then passes (a canary in it is still caught outright). A number whose digits all read as letters
  ("50" reads "so") is never ordinary here, but shares its fingerprint with that word, so a withheld
  run with the word exempts the run with the number: the index cannot tell them apart.
"""

from __future__ import annotations

import hmac
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from kvfence.gateway.protection.detect.encoded import MAX_RUN_CHARS, MIN_RUN_CHARS, decoded_runs
from kvfence.gateway.protection.leak.fingerprint import CANON, Fingerprinter, despace, leak_fold
from kvfence.gateway.protection.leak.index import FingerprintIndex
from kvfence.gateway.protection.leak.ordinary import is_ordinary_word, ordinary_words

__all__ = ["ENCODED_ALPHABET", "RECEIVED", "WITHHELD", "AnswerScanner", "CanaryBook", "LeakEvidence", "LeakMonitor",
           "compact", "received_by", "withheld_from"]

CANARY_PREFIX = "kvfc-"
# Index entries of answers (``RECEIVED + tenant``), beside the tenants' own sent text. The separator
# is a control character no tenant name in a policy holds.
RECEIVED = "\x1freceived\x1f"


WITHHELD = "\x1fwithheld\x1f"


def received_by(tenant: str) -> str:
    """The index owner name under which the n-grams of answers to ``tenant`` are recorded."""
    return RECEIVED + tenant


def withheld_from(tenant: str) -> str:
    """The index owner name of the runs withheld from ``tenant`` (only with ``withheld_orgs`` set)."""
    return WITHHELD + tenant
_WORD_CHAR = re.compile(r"[^\W_]")
_WORD = re.compile(r"[^\W_]+")  # as fingerprint.words
# letters spaced out one by one at the end of a delta ("h a l "): they may go on in the next one
_SPACED_TAIL = re.compile(r"(?<![^\W_])(?:[^\W_] )+$")
_MAX_HELD_CHARS = 4096
# the characters of a base64 (standard or URL-safe) or hex run, as detect/encoded.py reads them
ENCODED_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-"
_ROT13 = str.maketrans("abcdefghijklmnopqrstuvwxyz", "nopqrstuvwxyzabcdefghijklm")
# How an answer may carry a copied text so that a reader still reads it (each compared word by word,
# as it streams): as written, in ROT13, each word spelt backwards, the whole text spelt backwards.
VIEWS = ("ngram", "ngram_rot13", "ngram_words_reversed", "ngram_reversed")


@dataclass(frozen=True)
class LeakEvidence:
    """Why an answer was stopped: fingerprints (hex, never text) and the tenants that own them."""

    detector: str                   # "canary", or how the run was read: one of VIEWS
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
        self._derived_compact = re.compile(compact(CANARY_PREFIX) + r"[0-9a-f]{20}")
        self._compile()

    def _compile(self) -> None:
        # Matched on the compact form (case folded, look-alikes made Latin, every separator gone), so
        # "KVFC-…", "kvfc - …" or "k v f c …" is the canary still.
        self._compact_owner = {compact(leak_fold(c)): owner for c, owner in self._owner.items()
                              if compact(leak_fold(c))}
        literals = sorted(self._compact_owner, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(c) for c in literals)) if literals else None
        self.longest = max([len(c) for c in self._compact_owner] + [len(compact(CANARY_PREFIX)) + 20])

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
        return self.foreign_in_compact(compact(leak_fold(text)), tenant)

    def foreign_in_compact(self, text: str, tenant: str) -> list[str]:
        """:meth:`foreign_in` on text already in the compact form (:func:`compact`)."""
        owners: list[str] = []
        if self._pattern is not None:
            owners += [self._compact_owner[m.group(0)] for m in self._pattern.finditer(text)]
        for match in self._derived_compact.finditer(text):
            owners.append(self._compact_owner.get(match.group(0), "unknown"))
        return [owner for owner in owners if owner != tenant]


_SEPARATORS = re.compile(r"[\W_]+")


def compact(text: str) -> str:
    """Lower case, no separators: the form canaries are matched in (text already leak-folded)."""
    return _SEPARATORS.sub("", text.lower())


class AnswerScanner:
    """Scans one choice of one answer; ``feed``/``finish`` return evidence once, else ``None``."""

    def __init__(self, monitor: LeakMonitor, tenant: str, own: frozenset[int], *, decoded: bool = False) -> None:
        self._monitor = monitor
        # ``decoded``: this scanner reads the text decoded from an answer's base64 / hex runs; it
        # records nothing and decodes no further (one level, as the detectors do)
        self._is_decoded = decoded
        self._encoded = ""  # a run of base64 / hex characters at the end of what was read: it may go on
        self._decoder: AnswerScanner | None = None
        self._tenant = tenant
        self._own = own
        n = monitor.fingerprinter.n
        # the last words read, each in its readings (as written, ROT13, spelt backwards; canonical), as
        # many as the n-grams of one run need
        # and as read (whether it was a number: only withheld_orgs asks, leak/ordinary.py)
        self._recent: deque[tuple[str, str, str, str]] = deque(maxlen=n + monitor.min_run - 1)
        self._plain: deque[str] = deque(maxlen=n)  # the last n words as written (canonical)
        self._partial = ""
        self._tail = ""
        self._runs: list[list[tuple[int, frozenset[str]]]] = [[] for _ in VIEWS]
        # per reading: the sender of the phrase made common by withheld evidence that the n-grams just
        # read belong to (its ordinary words going on are that phrase, not a leak: withheld_orgs)
        self._chains: list[frozenset[str] | None] = [None for _ in VIEWS]
        self._words = 0
        self._answer_grams: set[int] = set()
        self._recorded = False
        self.evidence: LeakEvidence | None = None
        self.ordinary_caught: tuple[int, ...] = ()  # the caught run's n-grams made of ordinary words only

    def feed(self, delta: str) -> LeakEvidence | None:
        if self.evidence is not None or not delta:
            return self.evidence
        # as the prompts were fingerprinted (fingerprint.words): a zero-width character, soft hyphen,
        # full-width or look-alike letter inside a copied word must not make it another word
        delta = leak_fold(delta)
        canaries = self._monitor.canaries
        if canaries is not None:
            window = self._tail + compact(delta)
            owners = canaries.foreign_in_compact(window, self._tenant)
            if owners:
                return self._caught(LeakEvidence("canary", tuple(sorted(set(owners))), (), 0, self._words))
            self._tail = window[-(canaries.longest - 1):]
        if not self._is_decoded:
            evidence = self._scan_encoded(delta, final=False)
            if evidence is not None:
                return evidence
        text = self._partial + delta
        # A word at the very end may continue in the next delta: keep it for then, and so letters
        # spaced out one by one before it (fingerprint.despace must see the whole run).
        cut = len(text)
        while cut > 0 and _WORD_CHAR.match(text[cut - 1]):
            cut -= 1
        spaced = _SPACED_TAIL.search(text, max(0, cut - _MAX_HELD_CHARS), cut) if text[cut - 1:cut] == " " else None
        if spaced is not None:
            cut = spaced.start()
        self._partial = text[cut:]
        return self._consume(_WORD.findall(despace(text[:cut]).lower()))

    def _scan_encoded(self, delta: str, final: bool) -> LeakEvidence | None:
        """Decode the base64 / hex runs read so far (``detect/encoded.py``, one place for both sides) and
        scan what they say as one more text: a model writes another tenant's prompt in base64 as easily
        as in words. A run at the end waits for its end (at most ``MAX_RUN_CHARS``)."""
        kept = delta.rstrip(ENCODED_ALPHABET)
        if not kept and not final and len(self._encoded) + len(delta) <= MAX_RUN_CHARS:
            self._encoded += delta  # the run goes on
            return None
        text = self._encoded + (delta if final else kept)
        self._encoded = "" if final else delta[len(kept):]
        if len(text) < MIN_RUN_CHARS:
            return None
        for run in decoded_runs(text):
            if self._decoder is None:
                self._decoder = AnswerScanner(self._monitor, self._tenant, self._own, decoded=True)
            evidence = self._decoder.feed(run.decoded)
            if evidence is None and final:
                evidence = self._decoder.finish()
            if evidence is not None:
                how = evidence.detector if evidence.detector == "canary" else f"ngram_{run.encoding}"
                return self._caught(replace(evidence, detector=how, at_word=self._words),
                                    self._decoder.ordinary_caught)
        if final and self._decoder is not None:
            evidence = self._decoder.finish()
            if evidence is not None:
                return self._caught(replace(evidence, at_word=self._words), self._decoder.ordinary_caught)
        return None

    def finish(self) -> LeakEvidence | None:
        if self.evidence is not None:
            return self.evidence
        if not self._is_decoded:
            evidence = self._scan_encoded("", final=True)
            if evidence is not None:
                return evidence
        rest, self._partial = self._partial, ""
        evidence = self._consume(_WORD.findall(despace(rest).lower()))
        if evidence is None:
            self._record_received()
        return evidence

    def _reading(self, words: list[tuple[str, str, str, str]], end: int, view: int) -> int:
        """The n-gram of ``words`` that ends before ``end``, in reading ``view`` (VIEWS)."""
        window = words[end - self._monitor.fingerprinter.n:end]
        if view == 3:  # the whole text spelt backwards: the words spelt backwards, in reverse order
            return self._monitor.fingerprinter.of_words(tuple(w[2] for w in reversed(window)))
        return self._monitor.fingerprinter.of_words(tuple(w[view] for w in window))

    def _consume(self, new_words: list[str]) -> LeakEvidence | None:
        """Read ``new_words``. The n-gram as written is looked up at every position; the other readings
        every ``min_run`` positions, and at each position after one that was evidence. A run of
        ``min_run`` evidence n-grams holds one such position whatever its start, and from there its
        earlier n-grams (at most ``min_run - 1``) are looked up backwards. So the disguised readings
        catch what looking up every position would, for about a quarter of the lookups."""
        if not new_words:
            return None
        n = self._monitor.fingerprinter.n
        of_words = self._monitor.fingerprinter.of_words
        min_run = self._monitor.min_run
        index, own, runs, plain = self._monitor.index, self._own, self._runs, self._plain
        words = list(self._recent)  # the words before these, then these: each in its readings
        first = len(words)
        before = self._words
        positions: list[tuple[int, int, int]] = []  # (n-gram number in the answer, end in words, plain n-gram)
        for i, word in enumerate(new_words):
            canonical_word = word.translate(CANON)
            words.append((canonical_word, word.translate(_ROT13).translate(CANON), word[::-1].translate(CANON),
                          word))
            plain.append(canonical_word)
            if before + i + 1 >= n:
                positions.append((before + i + 1 - n, first + i + 1, of_words(tuple(plain))))
        self._recent.extend(words[first:])
        self._words += len(new_words)
        if not positions:
            return None
        planned = {(p, v): self._reading(words, end, v) for p, end, _ in positions if p % min_run == 0
                   for v in (1, 2, 3)}
        lookup = {g for _, _, g in positions if g not in own}
        lookup.update(g for g in planned.values() if g not in own)
        foreign = list(lookup)
        owners_of = dict(zip(foreign, index.owners(foreign), strict=True)) if foreign else {}

        def evidence_at(p: int, end: int, view: int) -> tuple[int, frozenset[str] | None, frozenset[str] | None]:
            gram = planned.get((p, view))
            if gram is None:  # not planned: after a hit, or before one (rare), looked up alone
                gram = self._reading(words, end, view)
                if gram not in own and gram not in owners_of:
                    owners_of[gram] = index.owners([gram])[0]
            owners = owners_of.get(gram)
            return (gram, *self._verdict(owners)) if owners else (gram, None, None)

        found = owners_of.get
        chains = self._chains
        for p, end, gram in positions:
            owners = found(gram)
            senders, common = self._verdict(owners) if owners else (None, None)
            for view in (0, 1, 2, 3):
                run = runs[view]
                if view:
                    if p % min_run and not run and chains[view] is None:
                        continue  # not a stride position, no run or chain open: this reading is not looked at
                    gram, senders, common = evidence_at(p, end, view)
                if common is not None:  # made common by withheld evidence: a phrase of ordinary words
                    chains[view] = common
                elif senders is not None and senders == chains[view] and self._is_ordinary_gram(words, end, view):
                    senders = None  # the same sender's ordinary words going on from there: that phrase still
                else:
                    chains[view] = None
                if senders is None:
                    if not view:
                        self._answer_grams.add(gram)  # evidence is never recorded: it would make a leak common
                    run.clear()
                    continue
                if view and not run:  # a hit at a stride position: its run may have begun before it
                    earlier: list[tuple[int, frozenset[str]]] = []
                    for back in range(1, min(min_run, p + 1)):
                        earlier_gram, earlier_senders, _ = evidence_at(p - back, end - back, view)
                        if earlier_senders is None:
                            break
                        earlier.append((earlier_gram, earlier_senders))
                    run.extend(reversed(earlier))
                run.append((gram, senders))
                if len(run) >= min_run:
                    run_owners = sorted(set().union(*(o for _, o in run)))
                    return self._caught(LeakEvidence(
                        VIEWS[view], tuple(run_owners), tuple(f"{g:016x}" for g, _ in run), len(run) + n - 1,
                        before + end - first), self._ordinary_grams(words, end, view, run))
        return None

    def _verdict(self, owners: frozenset[str]) -> tuple[frozenset[str] | None, frozenset[str] | None]:
        """(the other tenants an n-gram is evidence of a leak from, or None (see the module docstring);
        its senders if it is common only because it was caught in answers withheld from
        ``withheld_orgs`` organizations, else None)."""
        senders = frozenset(o for o in owners if o[:1] != "\x1f")
        if not senders or self._tenant in senders or len(senders) > self._monitor.max_owners:
            return None, None
        seen_by = set(senders)
        seen_by.update(o[len(RECEIVED):] for o in owners if o.startswith(RECEIVED))
        seen_by.discard(self._tenant)
        if len(seen_by) >= self._monitor.common_orgs:
            return None, None  # common language: several unrelated organizations have it
        withheld_orgs = self._monitor.withheld_orgs
        if withheld_orgs and len({o[len(WITHHELD):] for o in owners if o.startswith(WITHHELD)} - {self._tenant}) \
                >= withheld_orgs:
            return None, senders  # withheld from that many organizations, and made of ordinary words only
        return senders, None

    def _is_ordinary_gram(self, words: list[tuple[str, str, str, str]], end: int, view: int) -> bool:
        reading = min(view, 2)  # the whole text spelt backwards is made of the words spelt backwards
        ordinary = self._monitor.is_ordinary
        return all(ordinary(w[reading], w[3].isdigit()) for w in words[end - self._monitor.fingerprinter.n:end])

    def _ordinary_grams(self, words: list[tuple[str, str, str, str]], end: int, view: int,
                        run: list[tuple[int, frozenset[str]]]) -> tuple[int, ...]:
        """The n-grams of a caught ``run`` (its last one ending before ``end``) whose every word, in the
        reading the run was found in, is ordinary language (leak/ordinary.py)."""
        if not self._monitor.withheld_orgs:
            return ()
        first_end = end - len(run) + 1
        return tuple(gram for k, (gram, _) in enumerate(run) if self._is_ordinary_gram(words, first_end + k, view))

    def _caught(self, evidence: LeakEvidence, ordinary: tuple[int, ...] = ()) -> LeakEvidence:
        # A withheld answer records nothing as received: an incident is no evidence that a phrase is
        # common, and a stream cut at the catch counts the same as a whole answer. With withheld_orgs,
        # the caught run's n-grams of ordinary words only are recorded as withheld from this tenant.
        self.evidence = evidence
        self.ordinary_caught = ordinary
        self._answer_grams.clear()
        if ordinary and evidence.detector != "canary" and not self._is_decoded:
            self._monitor.index.add(withheld_from(self._tenant), ordinary)
        return evidence

    def _record_received(self) -> None:
        if self._answer_grams and not self._recorded and self.evidence is None and not self._is_decoded:
            self._recorded = True
            self._monitor.index.add(received_by(self._tenant), self._answer_grams)


class LeakMonitor:
    """Process-wide leak detection state: the index, the fingerprinter, canaries, thresholds."""

    def __init__(self, index: FingerprintIndex, fingerprinter: Fingerprinter, *, min_run: int = 4,
                 max_owners: int = 1, common_orgs: int = 3, canaries: CanaryBook | None = None,
                 withheld_orgs: int = 3) -> None:
        if common_orgs < 2:
            raise ValueError("common_orgs must be at least 2: one organization's word is no evidence of common language")
        if withheld_orgs == 1 or withheld_orgs < 0:
            raise ValueError("withheld_orgs must be 0 (off) or at least 2")
        self.withheld_orgs = withheld_orgs
        self.index = index
        self.fingerprinter = fingerprinter
        self.min_run = min_run
        self.max_owners = max_owners
        self.common_orgs = common_orgs
        self.canaries = canaries
        if withheld_orgs:
            ordinary_words()  # the lexicon is read now, not in the middle of the first incident

    @staticmethod
    def is_ordinary(word: str, is_number: bool) -> bool:
        """Whether a word (canonical form) may be part of an n-gram that withheld answers make common."""
        return is_ordinary_word(word, is_number)

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
