"""Issue 16, 3: another tenant's prompt coming back rewritten so that a reader still reads it is
withheld, through a real ``kvfence gateway`` and a backend that leaks on purpose: in leetspeak, in
ROT13, spelt backwards (the whole text, or each word), spaced out letter by letter, in base64 or
hex; streamed (an error event, less than half of the text out before it) and whole (502 with the
incident)."""

from __future__ import annotations

import base64
import codecs
import json
from typing import Any

import httpx
import pytest

from tests.gateway.conftest import Gateway
from tests.gateway.protection.test_e2e_protection import KEYS, LeakyBackend, audit_url, backend, chat, gw

__all__ = ["audit_url", "backend", "gw"]  # the fixtures, shared with test_e2e_protection

SECRET = ("Strictly private: Orvella Biotech will close its Leiden research site and move eighty "
          "researchers to Basel before the summer, the staff will be told in May.")

DISGUISES = {
    "leet": lambda t: t.translate(str.maketrans("aeiostAEIOST", "431057431057")),
    "rot13": lambda t: codecs.encode(t, "rot13"),
    "reversed": lambda t: t[::-1],
    "words_reversed": lambda t: " ".join(w[::-1] for w in t.split()),
    "spaced": lambda t: "   ".join(" ".join(w) for w in t.split()),
    "base64": lambda t: "Encoded as asked: " + base64.b64encode(t.encode()).decode(),
    "hex": lambda t: "In hex: " + t.encode().hex(),
}


def ask(gw: Gateway, stream: bool) -> httpx.Response:
    return httpx.post(gw.url + "/chat/completions", timeout=30, headers={"authorization": f"Bearer {KEYS['globex']}"},
                      json={"model": "m", "stream": stream,
                            "messages": [{"role": "user", "content": "What is the capital of Portugal?"}]})


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("transform", sorted(DISGUISES))
def test_a_rewritten_leak_is_withheld(gw: Gateway, backend: LeakyBackend, transform: str, stream: bool) -> None:
    backend.mode("benign")
    chat(gw, "acme", SECRET)
    httpx.post(backend.root + "/_mode", json={"mode": "leak_transform", "transform": transform}).raise_for_status()
    try:
        answer = ask(gw, stream)
    finally:
        backend.mode("benign")
    assert "cross_tenant_leak" in answer.text, answer.text
    if not stream:
        assert answer.status_code == 502
    else:  # what went out before the stop is at most the first few words of the disguised text
        disguised: Any = DISGUISES[transform](SECRET)
        assert len(streamed_text(answer)) < len(disguised) // 2, streamed_text(answer)


def streamed_text(answer: httpx.Response) -> str:
    parts = []
    for line in answer.text.splitlines():
        if line.startswith("data: {"):
            event = json.loads(line[6:])
            parts += [c.get("delta", {}).get("content") or "" for c in event.get("choices") or []]
    return "".join(parts)


def test_a_benign_answer_in_rot13_or_backwards_passes(gw: Gateway, backend: LeakyBackend) -> None:
    """The extra readings compare against other tenants' text only: the asker's own text, disguised, is
    no leak."""
    backend.mode("benign")
    chat(gw, "acme", SECRET)
    for transform in DISGUISES:
        httpx.post(backend.root + "/_mode", json={"mode": "echo"}).raise_for_status()
        answer = httpx.post(gw.url + "/chat/completions", timeout=30,
                            headers={"authorization": f"Bearer {KEYS['acme']}"},
                            json={"model": "m", "messages": [{"role": "user", "content": DISGUISES[transform](SECRET)}]})
        assert answer.status_code == 200, (transform, answer.text)
    backend.mode("benign")
