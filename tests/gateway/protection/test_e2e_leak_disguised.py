"""Through a real gateway process: another tenant's prompt coming back in capitals, with its
whitespace changed and zero-width characters inside its words, is still withheld, streamed (an
error event, no 200 carrying the text) and whole (502 with the incident)."""

from __future__ import annotations

import openai
import pytest

from tests.gateway.conftest import Gateway
from tests.gateway.protection.test_e2e_protection import KEYS, LeakyBackend, audit_url, backend, chat, gw

__all__ = ["audit_url", "backend", "gw"]  # the fixtures, shared with test_e2e_protection

SECRET = ("Strictly private: Orvella Biotech will close its Leiden research site and move eighty "
          "researchers to Basel before the summer, the staff will be told in May.")


@pytest.mark.parametrize("stream", [False, True])
def test_a_disguised_leak_is_withheld(gw: Gateway, backend: LeakyBackend, stream: bool) -> None:
    backend.mode("benign")
    chat(gw, "acme", SECRET)
    backend.mode("leak_disguised")
    c = openai.OpenAI(base_url=gw.url, api_key=KEYS["globex"], max_retries=0, timeout=30)
    seen: list[str] = []
    messages = [{"role": "user", "content": "What is the capital of Portugal?"}]
    try:
        with pytest.raises(openai.APIError) as caught:
            if stream:
                for chunk in c.chat.completions.create(model="m", messages=messages, stream=True):  # type: ignore[arg-type]
                    seen.extend(ch.delta.content or "" for ch in chunk.choices)
            else:
                seen.append(c.chat.completions.create(model="m", messages=messages).choices[0].message.content or "")  # type: ignore[arg-type]
    finally:
        c.close()
        backend.mode("benign")
    emitted = "".join(seen).replace("\u200b", "").lower()
    assert "orvella" not in emitted or "basel" not in emitted  # the run is stopped, the rest withheld
    if not stream:
        assert isinstance(caught.value, openai.APIStatusError) and caught.value.status_code == 502
        assert isinstance(caught.value.body, dict) and caught.value.body.get("code") == "cross_tenant_leak_suspected"
