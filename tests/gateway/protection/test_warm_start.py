"""The protection's word lists are read when the gateway builds it, not inside a client's request.

Reading the shipped name lists takes about 0.3 s; read lazily, the first request of a fresh
gateway waited for it (``x-kvfence-overhead-ms`` 62-129 ms under ``make run``, then 2-4 ms).
"""

from __future__ import annotations

from kvfence.gateway.protection.detect.detector import build_detector
from kvfence.gateway.protection.detect.recognizers.gazetteer import gazetteer
from kvfence.gateway.protection.leak.fingerprint import Fingerprinter
from kvfence.gateway.protection.leak.index import InMemoryIndex
from kvfence.gateway.protection.leak.ordinary import ordinary_words
from kvfence.gateway.protection.leak.scan import LeakMonitor


def test_building_the_detector_reads_the_name_lists() -> None:
    gazetteer.cache_clear()
    detector = build_detector()
    try:
        assert gazetteer.cache_info().currsize == 1
    finally:
        detector.close()


def test_a_detector_without_names_does_not_read_them() -> None:
    gazetteer.cache_clear()
    detector = build_detector(disabled=["PERSON"])
    try:
        assert gazetteer.cache_info().currsize == 0
    finally:
        detector.close()
        gazetteer()


def test_the_leak_monitor_reads_the_lexicon_when_withheld_answers_count() -> None:  # as it already did
    ordinary_words.cache_clear()
    LeakMonitor(InMemoryIndex(60.0, 1000), Fingerprinter(b"k" * 32, 4), withheld_orgs=3)
    assert ordinary_words.cache_info().currsize == 1
