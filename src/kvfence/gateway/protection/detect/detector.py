"""The detector the gateway runs on every message: personal data (Presidio), names, and secrets.

``Detector.scan`` is synchronous and pure CPU; :meth:`Detector.scan_texts` runs it off the event
loop with a deadline, and turns any failure or timeout into :class:`DetectorFailure`, so that a
request is never forwarded unscanned (fail closed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from kvfence.gateway.errors import DetectorFailure
from kvfence.gateway.protection.detect.concatenated import joined_literals
from kvfence.gateway.protection.detect.encoded import decoded_runs
from kvfence.gateway.protection.detect.findings import Finding, resolve_overlaps
from kvfence.gateway.protection.detect.normalise import fold
from kvfence.gateway.protection.detect.recognizers.address_parts import extend_address
from kvfence.gateway.protection.detect.recognizers.person import find_persons, link_mentions
from kvfence.gateway.protection.detect.recognizers.pii import PII_RULES, PRIVATE_IP_RULES
from kvfence.gateway.protection.detect.recognizers.secrets import SECRET_RULES
from kvfence.gateway.protection.detect.reformatted import KINDS as REFORMATTED
from kvfence.gateway.protection.detect.reformatted import reformatted_runs
from kvfence.gateway.protection.detect.scanner import CONTEXT_WINDOW, RuleSet

__all__ = ["Detector", "PiiEngine", "build_detector"]

log = logging.getLogger("kvfence.gateway.protection")

INLINE_SCAN_CHARS = 4096


class PiiEngine(Protocol):
    def detect(self, text: str) -> list[Finding]: ...


class _RulesOnly:
    """Personal data straight from kvfence's rule set, without Presidio: what Presidio answers when it runs
    these rules and no NER model (tests/gateway/protection/test_rules_engine.py compares them)."""

    def __init__(self, rules: RuleSet, score_threshold: float = 0.0) -> None:
        self._rules = rules
        self._threshold = score_threshold

    def detect(self, text: str) -> list[Finding]:
        return [f for f in self._rules.raw_findings(text) if f.score >= self._threshold]


class Detector:
    """Finds personal data and secrets in a text; findings do not overlap and are sorted."""

    def __init__(self, pii: PiiEngine, secrets: RuleSet, *, timeout_s: float = 2.0, workers: int = 2,
                 names: bool = True) -> None:
        self._pii = pii
        self._secrets = secrets
        self._names = names
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvfence-detect")
        # One scan now, so that what the rules load or compile on first use (the name lists, ~0.3 s;
        # the CSV reader, regex caches, codecs) is paid at start-up, not by the first client's request.
        self.scan(_WARM_UP_TEXT)

    def scan(self, text: str) -> list[Finding]:
        """Findings in ``text``, as spans of ``text`` itself. The detectors see it folded
        (``normalise.py``: no zero-width or soft-hyphen characters; full-width forms, no-break spaces,
        odd dashes, look-alike letters of other scripts and escapes such as ``\\u0040`` or ``%40``
        made plain), so those disguises do not hide a value; each span is mapped back to the caller's
        characters. A base64 or hex run that decodes to text (``encoded.py``), and string literals
        joined by ``+`` and the like (``concatenated.py``), and values reformatted out of every pattern's
        reach (spaced out, dotted, in words, in lower case: ``reformatted.py``) are scanned decoded / joined too, and a
        finding there covers the whole run or expression (its ``value`` is what was decoded)."""
        if not text:
            return []
        folded = fold(text, lookalikes=True, escapes=True)
        plain = folded.text
        found = self._detect(plain)
        for run in decoded_runs(plain) + joined_literals(plain) + reformatted_runs(plain):
            # a value inside one literal of a concatenation is found in the text itself
            # the placeholder stands for the decoded value: restored, the answer gets the e-mail
            # itself (never quotes or operators that could break the JSON a tool call carries)
            # a reformatted value is read after the words before it: a rule may need its context word
            context = plain[max(0, run.start - CONTEXT_WINDOW):run.start] if run.encoding in REFORMATTED else ""
            skip = len(context)
            found.extend(replace(f, start=run.start, end=run.end, rule=f"{f.rule}:{run.encoding}",
                                 value=run.decoded[f.start - skip:f.end - skip])
                         for f in self._scan_folded(context + run.decoded)
                         if f.end > skip and f.start >= skip
                         and (not run.joints or any(f.start - skip < joint < f.end - skip for joint in run.joints)))
        found = resolve_overlaps(found)
        if not folded.changed:
            return found
        # a name is one person however it was escaped ("W\u00f3jcik" in tool arguments, "Wójcik" in a
        # message): it stands for its plain form, so both get one placeholder
        return [replace(f, start=start, end=end,
                        value=plain[f.start:f.end] if f.rule.startswith("person_") and f.value is None else f.value)
                for f in found for start, end in (folded.span(f.start, f.end),)]

    def _scan_folded(self, text: str) -> list[Finding]:
        # a decoded run: folded like any text, never decoded again (no nesting, bounded cost)
        plain = fold(text, lookalikes=True, escapes=True).text
        return resolve_overlaps(self._detect(plain))

    def _detect(self, plain: str) -> list[Finding]:
        # one scan, every kind: pattern rules, secrets and names (recognizers/person.py)
        found = [self._whole_address(plain, f) if f.entity == "POSTAL_ADDRESS" else f for f in self._pii.detect(plain)]
        found += self._secrets.raw_findings(plain)
        if self._names:
            found += find_persons(plain)
        return found

    @staticmethod
    def _whole_address(text: str, finding: Finding) -> Finding:
        start, end = extend_address(text, finding.start, finding.end)  # "Flat 2," before, "Canada" after
        return finding if (start, end) == (finding.start, finding.end) else replace(finding, start=start, end=end)

    def scan_all(self, texts: Sequence[str]) -> list[list[Finding]]:
        """Each text's findings; the names among them linked across the request (one person, one
        value, so one placeholder: ``recognizers/person.py``'s :func:`link_mentions`)."""
        per_text = [self.scan(text) for text in texts]
        if self._names:
            per_text = [resolve_overlaps(found) for found in link_mentions(list(texts), per_text)]
        return per_text

    async def scan_texts(self, texts: Sequence[str]) -> list[list[Finding]]:
        """Scan off the event loop; an error or a timeout raises :class:`DetectorFailure` (fail closed).

        Short requests are scanned inline: every rule is linear with bounded repetitions
        (tests/gateway/protection/test_pathological.py), so a few kilobytes take well under a
        millisecond, less than the hop to a worker thread would.
        """
        if sum(len(text) for text in texts) <= INLINE_SCAN_CHARS:
            try:
                return self.scan_all(texts)
            except Exception as exc:
                log.exception("data-protection detector failed; request refused")
                raise DetectorFailure(
                    "data-protection scan failed; the request was not forwarded (fail closed)") from exc
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(loop.run_in_executor(self._pool, self.scan_all, list(texts)),
                                          timeout=self.timeout_s)
        except TimeoutError:
            log.error("data-protection detectors timed out after %.2fs; request refused", self.timeout_s)
            raise DetectorFailure(
                f"data-protection scan did not finish within {self.timeout_s:g}s; the request was not "
                "forwarded (fail closed). Retry, or send a shorter prompt.") from None
        except Exception as exc:
            log.exception("data-protection detector failed; request refused")
            raise DetectorFailure(
                "data-protection scan failed; the request was not forwarded (fail closed)") from exc

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def build_detector(*, use_presidio: bool | None = None, ner_model: Path | None = None,
                   cache_dir: Path | None = None, disabled: Sequence[str] = (), timeout_s: float = 2.0,
                   score_threshold: float = 0.5, private_ips: bool = False) -> Detector:
    """The default detector: kvfence's PII rules (through Presidio with spaCy NER when ``ner_model`` names
    a pipeline: the ``ner`` extra), plus kvfence's secret rules.

    ``use_presidio``: ``None`` (the default) runs Presidio only for a NER model; without one Presidio would
    run the same rules to the same findings, so the gateway's base install does without it.
    ``private_ips``: also report addresses of private / loopback / documentation ranges as personal data.
    """
    if use_presidio is None:
        use_presidio = ner_model is not None
    off = frozenset(disabled) | (frozenset() if private_ips else frozenset(PRIVATE_IP_RULES))
    pii_rules = [r for r in PII_RULES if r.name not in off and r.entity not in off]
    pii: PiiEngine
    if use_presidio:
        from kvfence.gateway.protection.detect.presidio_engine import PresidioPiiDetector

        pii = PresidioPiiDetector(pii_rules, ner_model=ner_model, cache_dir=cache_dir,
                                  score_threshold=score_threshold)
    else:
        pii = _RulesOnly(RuleSet(pii_rules), score_threshold)
    names = not ({"PERSON", "person"} & off)
    return Detector(pii, RuleSet(SECRET_RULES, off), timeout_s=timeout_s, names=names)


_WARM_UP_TEXT = """Hi Priya, Dr. Jonas Meyer (jonas.meyer@example.com, +49 30 1234567) asked for the file.
name,surname,city
Ana,Souza,Lisboa
Ship to 221B Baker Street, London NW1 6XE. Key sk-test-0000000000000000 \u0040 d2FybQ=="""
