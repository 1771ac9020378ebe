"""Leak-index poisoning and conversation-history leaks: today's rule against the previous one, same run.

Simulates a multi-tenant gateway's leak index (``LeakMonitor`` on an in-process index, or Redis with
``--redis-url``) under three workloads, each run for both rules on the same seeded traffic:

- **poisoning campaign**: ``--poisoners`` tenants send ``--phrases`` common model phrases (refusals,
  sign-offs) in their prompts first, each phrase sent by one of them; then every tenant asks ``--rounds`` times and the model answers
  each with one of those phrases plus ordinary words. Every withheld answer is a false one.
- **real leaks during the campaign**: ``--leaks`` times, a distinctive 16-word span of another
  tenant's recent prompt is put into an answer (the incident's stale-KV leak). Caught or not.
- **history leaks** (issue 16, 1): the model restates a tenant's confidential prompt in new words;
  the tenant resends that as conversation history; the restatement then appears in another
  tenant's answer. Caught or not.

- **repeated leaks** (issue 16, 2): ``--repeated`` times, a distinctive span of one tenant's prompt
  reaches ``--repeat-orgs`` further organizations one after the other (the same stale pages read
  again). Each one caught counts.

Three rules run on the same seeded traffic, alternating: ``previous`` is the one before issue 16 (an
n-gram the model wrote in any finished answer, not sent by anyone yet, became "model language" for
everyone); ``k3`` is the first issue-16 rule (common once ``common_orgs`` organizations sent it or
were answered with it, withheld answers included: the same leak passed at the third further
organization); ``current`` counts only delivered answers, and in them only n-grams that were not
evidence (leak/scan.py). With ``--warm N`` the model has already written each phrase in delivered
answers to N organizations before the poisoners send it (a gateway that has been up a while; the
default 0 is a cold index, the poisoner's best case). Answers are scanned whole (non-streamed) or in
5-character chunks (``--stream``). Prints per rule: false withheld answers, leaks caught, history
leaks caught, repeated leaks caught, and the scan time per answer (min / median over ``--repeat`` runs).

    python bench/leak_poisoning.py                       # defaults: 40 tenants, 5 poisoners, cold
    python bench/leak_poisoning.py --stream --warm 3 --repeat 5
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import deque
from collections.abc import Iterable

from kvfence.gateway.protection.leak.fingerprint import Fingerprinter, canonical
from kvfence.gateway.protection.leak.index import FingerprintIndex, InMemoryIndex, RedisIndex
from kvfence.gateway.protection.leak.scan import (
    RECEIVED,
    AnswerScanner,
    LeakEvidence,
    LeakMonitor,
    received_by,
)

KEY = b"bench-leak-poisoning-key-0123456789"
MODEL_OWNER = "*model*"  # the previous rule's owner of "model language"

COMMON = [
    "I'm sorry, but I can't help with that request. If you have another question, I'd be happy to help.",
    "Please let me know if you have any further questions or concerns about this.",
    "As an AI language model, I do not have access to real-time information or personal data.",
    "Thank you for reaching out. I hope this helps, and feel free to ask if anything is unclear.",
    "Here is a summary of the main points, followed by a few suggestions for next steps.",
    "It is important to consult a qualified professional before making any decisions based on this.",
    "I understand your frustration, and I will do my best to resolve this issue as quickly as possible.",
    "Below you will find a step by step guide that walks you through the whole process.",
    "If you need anything else, just let me know and I will get back to you shortly.",
    "Unfortunately I am unable to provide that information, but I can suggest some alternatives.",
    "Great question! There are several factors to consider when making this kind of choice.",
    "To get started, make sure you have the latest version installed and an active account.",
]
VOCAB = [f"w{i}" for i in range(6000)]


class PreviousScanner(AnswerScanner):
    """The rule before issue 16: text the model wrote once (sent by nobody yet) is everyone's language."""

    def _verdict(self, owners: frozenset[str]) -> tuple[frozenset[str] | None, frozenset[str] | None]:
        senders = frozenset(o for o in owners if not o.startswith(RECEIVED) and o != MODEL_OWNER)
        if not senders or self._tenant in senders or MODEL_OWNER in owners or len(senders) > self._monitor.max_owners:
            return None, None
        return senders, None

    def _record_received(self) -> None:
        if self._recorded or self.evidence is not None:
            return
        self._recorded = True
        grams = sorted(self._answer_grams - self._own)
        owners = self._monitor.index.owners(grams)
        nobody_sent = [g for g, o in zip(grams, owners, strict=True) if not (o - {MODEL_OWNER})]
        if nobody_sent:
            self._monitor.index.add(MODEL_OWNER, nobody_sent)


class K3Scanner(AnswerScanner):
    """The first issue-16 rule: the n-grams of every answer read so far recorded as received, withheld
    or not, evidence included (a stream only up to where it was stopped)."""

    def __init__(self, monitor: LeakMonitor, tenant: str, own: frozenset[int]) -> None:
        super().__init__(monitor, tenant, own)
        self._read: set[int] = set()
        self._k3_words: deque[str] = deque(maxlen=monitor.fingerprinter.n)

    def _consume(self, new_words: list[str]) -> LeakEvidence | None:
        recent = self._k3_words
        for word in new_words:
            recent.append(canonical(word))
            if len(recent) == recent.maxlen:
                self._read.add(self._monitor.fingerprinter.of_words(tuple(recent)))
        return super()._consume(new_words)

    def _caught(self, evidence: LeakEvidence, ordinary: tuple[int, ...] = ()) -> LeakEvidence:
        self.evidence = evidence
        self._record()
        return evidence

    def _record_received(self) -> None:
        self._record()

    def _record(self) -> None:
        if self._read and not self._recorded:
            self._recorded = True
            self._monitor.index.add(received_by(self._tenant), self._read)


class Monitor(LeakMonitor):
    def __init__(self, index: FingerprintIndex, rule: str) -> None:
        # current: withheld_orgs 3 (the default) for runs of ordinary words only; never: withheld_orgs 0;
        # any3: withheld_orgs 3 for any run, distinctive or not (what the ordinariness test adds)
        super().__init__(index, Fingerprinter(KEY, 4), min_run=4, max_owners=1, common_orgs=3,
                         withheld_orgs=0 if rule in ("previous", "k3", "never") else 3)
        self.rule = rule

    def is_ordinary(self, word: str, is_number: bool) -> bool:
        return True if self.rule == "any3" else super().is_ordinary(word, is_number)

    def scanner(self, tenant: str, own: frozenset[int]) -> AnswerScanner:
        kind = {"previous": PreviousScanner, "k3": K3Scanner}.get(self.rule, AnswerScanner)
        return kind(self, tenant, own)


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def answer(m: Monitor, tenant: str, prompt: Iterable[str], text: str, chunk: int | None) -> bool:
    """True when the answer was withheld."""
    scanner = m.scanner(tenant, m.record_prompt(tenant, prompt))
    step = chunk or len(text) or 1
    for i in range(0, len(text), step):
        if scanner.feed(text[i:i + step]) is not None:
            return True
    return scanner.finish() is not None


RULES = ("previous", "k3", "never", "any3", "current")


def run(rule: str, args: argparse.Namespace, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    index: FingerprintIndex = (RedisIndex(args.redis_url, window_s=900, prefix=f"bench-lp:{seed}:{rule}:{time.time()}:")
                               if args.redis_url else InMemoryIndex(900))
    m = Monitor(index, rule)
    tenants = [f"org{i}" for i in range(args.tenants)]
    poisoners, honest = tenants[:args.poisoners], tenants[args.poisoners:]
    phrases = COMMON[:args.phrases]
    chunk = 5 if args.stream else None
    for phrase in phrases:  # a warm gateway: the model wrote its phrases before anyone sent them
        for j in range(args.warm):
            answer(m, f"early{j}", [f"question {j}: {words(rng, 8)}"], f"{words(rng, 6)} {phrase} {words(rng, 6)}",
                   chunk)
    for i, phrase in enumerate(phrases):  # each phrase sent by one poisoner: no second sender makes it common
        m.record_prompt(poisoners[i % len(poisoners)], [f"Repeat this exactly: {phrase}"])
    secrets = {t: words(rng, 60) for t in honest}
    false_withheld = answers = 0
    caught = leaks = 0
    hist_caught = hist = 0
    rep_caught = rep = 0
    scan_s = 0.0
    leak_at = set(rng.sample(range(1, args.rounds * len(honest)), args.leaks))
    step = 0
    sent: list[str] = []  # who has sent its prompt: a stale page can only hold what was sent
    for _ in range(args.rounds):
        for t in honest:
            prompt = [secrets[t], f"question {step}: {words(rng, 8)}"]
            if step in leak_at:  # the model answers over another tenant's stale prompt
                owner = rng.choice([o for o in sent if o != t] or [o for o in honest if o != t])
                start = rng.randrange(0, 60 - 16)
                span = " ".join(secrets[owner].split()[start:start + 16])
                leaks += 1
                caught += answer(m, t, prompt, f"{rng.choice(phrases)} {span}", chunk)
            else:
                started = time.perf_counter()
                withheld = answer(m, t, prompt, f"{words(rng, 6)} {rng.choice(phrases)} {words(rng, 6)}", chunk)
                scan_s += time.perf_counter() - started
                answers += 1
                false_withheld += withheld
            if t not in sent:
                sent.append(t)
            step += 1
    for i in range(args.history):
        owner, receiver = rng.sample(honest, 2)
        question = f"Summarise our confidential plan {i}: {words(rng, 30)}"
        restated = words(rng, 24)  # the model's own words about the owner's plan
        answer(m, owner, [question], restated, chunk)
        answer(m, owner, [question, restated, "Now draft the press release."], words(rng, 12), chunk)
        hist += 1
        hist_caught += answer(m, receiver, ["any news?"], f"Sure. {restated}", chunk)
    for i in range(args.repeated):  # the same stale pages read again: one span, several receivers in turn
        owner, *receivers = rng.sample(honest, args.repeat_orgs + 1)
        start = rng.randrange(0, 60 - 16)
        span = " ".join(secrets[owner].split()[start:start + 16])
        for receiver in receivers:
            rep += 1
            rep_caught += answer(m, receiver, [f"hello {i}"], f"Here is what I found: {span}", chunk)
    index.close()
    return {"false_withheld": false_withheld, "answers": answers, "caught": caught, "leaks": leaks,
            "hist_caught": hist_caught, "hist": hist, "rep_caught": rep_caught, "rep": rep,
            "us_per_answer": scan_s / max(answers, 1) * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=40)
    parser.add_argument("--poisoners", type=int, default=5)
    parser.add_argument("--phrases", type=int, default=len(COMMON))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--leaks", type=int, default=40)
    parser.add_argument("--history", type=int, default=40)
    parser.add_argument("--repeated", type=int, default=10, help="spans each leaked to --repeat-orgs organizations")
    parser.add_argument("--repeat-orgs", type=int, default=10)
    parser.add_argument("--warm", type=int, default=0,
                        help="organizations the model wrote each phrase for before the poisoners sent it")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stream", action="store_true", help="scan answers in 5-character chunks")
    parser.add_argument("--redis-url", default=None)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {rule: [] for rule in RULES}
    for r in range(args.repeat):
        for rule in RULES[r % len(RULES):] + RULES[:r % len(RULES)]:  # rotate: same seed, same traffic for all
            results[rule].append(run(rule, args, seed=r))
    print(f"leak_poisoning: {args.tenants} tenants, {args.poisoners} poisoners x {args.phrases} phrases, "
          f"{args.rounds} rounds, warm {args.warm}, {'streamed (5-char chunks)' if args.stream else 'whole answers'}, "
          f"{'redis' if args.redis_url else 'in-process'} index, {args.repeat} runs")
    print(f"{'rule':<9} {'false withheld':>18} {'leaks caught':>13} {'history caught':>15} "
          f"{'repeated caught':>16} {'scan us/answer min/med':>23}")
    for rule, runs in results.items():
        fw = statistics.median(x["false_withheld"] for x in runs)
        n = runs[0]["answers"]
        caught = statistics.median(x["caught"] for x in runs)
        hist = statistics.median(x["hist_caught"] for x in runs)
        rep = statistics.median(x["rep_caught"] for x in runs)
        us = [x["us_per_answer"] for x in runs]
        withheld = f"{fw:g}/{n:g} ({fw / n:.1%})"
        leaks = f"{caught:g}/{runs[0]['leaks']:g}"
        history = f"{hist:g}/{runs[0]['hist']:g}"
        repeated = f"{rep:g}/{runs[0]['rep']:g}"
        timing = f"{min(us):.0f} / {statistics.median(us):.0f}"
        print(f"{rule:<9} {withheld:>18} {leaks:>13} {history:>15} {repeated:>16} {timing:>23}")
    cur = statistics.median(x["us_per_answer"] for x in results["current"])
    for other in ("previous", "k3", "never"):
        ref = statistics.median(x["us_per_answer"] for x in results[other])
        print(f"scan time ratio current/{other} (median): {cur / ref:.2f}")


if __name__ == "__main__":
    main()
