"""`kvfence serve --runtime native` as a user runs it: a server process with no PyTorch in it.

The server is a real subprocess on loopback, driven with the official ``openai`` client: chat
(streamed and not), a JSON-schema structured output, a seeded sample repeated, and prompt
log-probabilities on completions, equal to the torch runtime's (computed in this test's process). The process's
memory map must hold no libtorch: the point of the runtime is the memory torch would take.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.netutil import free_port

KVFENCE = str(Path(sys.executable).parent / "kvfence")


@pytest.fixture(scope="module")
def native_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    port = free_port()
    log = tmp_path_factory.mktemp("native") / "server.log"
    env = dict(os.environ, KVFENCE_SERVER_SECRET="cd" * 32)
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [KVFENCE, "serve", "--runtime", "native", "--no-auth", "--host", "127.0.0.1", "--port", str(port),
             "--max-model-len", "auto", "--kv-cache-tokens", "2048", "--num-threads", "1"],
            stdout=sink, stderr=subprocess.STDOUT, env=env,
        )
    try:
        deadline = time.monotonic() + 180
        while "kvfence serve: model=" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1", proc, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)


def test_the_server_process_never_loads_torch(native_server: tuple[str, subprocess.Popen[bytes], Path]) -> None:
    base, proc, log = native_server
    _client(base).completions.create(model="kvfence-builtin-random-llama", prompt="warm", max_tokens=2)
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert "libtorch" not in maps, "the native runtime's server mapped a torch library"
    assert "runtime=native" in log.read_text()


def test_chat_streamed_and_not_gives_the_same_greedy_answer(native_server: tuple[str, subprocess.Popen[bytes], Path]) -> None:
    client = _client(native_server[0])
    messages = [{"role": "user", "content": "Tell me about the isolation contract."}]
    whole = client.chat.completions.create(model="kvfence-builtin-random-llama", messages=messages,  # type: ignore[arg-type]
                                           max_tokens=12, temperature=0)
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage is not None and whole.usage.completion_tokens >= 1
    stream = client.chat.completions.create(model="kvfence-builtin-random-llama", messages=messages,  # type: ignore[arg-type]
                                            max_tokens=12, temperature=0, stream=True)
    pieces = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert pieces == whole.choices[0].message.content


def test_a_seeded_sample_repeats_and_another_seed_differs(native_server: tuple[str, subprocess.Popen[bytes], Path]) -> None:
    client = _client(native_server[0])

    def answer(seed: int) -> str:
        out = client.completions.create(model="kvfence-builtin-random-llama", prompt="Once upon a time",
                                        max_tokens=16, temperature=1.0, seed=seed)
        return out.choices[0].text

    first = answer(5)
    assert answer(5) == first
    assert any(answer(s) != first for s in (6, 7, 8))


def test_structured_output_runs_on_numpy_rows(native_server: tuple[str, subprocess.Popen[bytes], Path]) -> None:
    schema = {"type": "string", "enum": ["alpha", "beta", "gamma"]}
    out = _client(native_server[0]).chat.completions.create(
        model="kvfence-builtin-random-llama", messages=[{"role": "user", "content": "pick one"}],
        response_format={"type": "json_schema", "json_schema": {"name": "pick", "schema": schema, "strict": True}},  # type: ignore[typeddict-item]
        max_tokens=16, temperature=1.0, seed=3,
    )
    assert json.loads(out.choices[0].message.content or "") in schema["enum"]


def test_prompt_logprobs_over_http_equal_the_torch_runtimes(native_server: tuple[str, subprocess.Popen[bytes], Path]) -> None:
    base, _, log = native_server
    torch_llm = LLM(runtime="torch", device="cpu", kv_cache_tokens=512, max_model_len=256)
    (want_out,) = torch_llm.generate(["Scrubbed pages are zero before reuse"],
                                     SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=2))
    prompt, want = want_out.prompt_token_ids, want_out.prompt_logprobs
    out = _client(base).completions.create(model="kvfence-builtin-random-llama", prompt=prompt, max_tokens=1,
                                           temperature=0, extra_body={"prompt_logprobs": 2})
    got = out.choices[0].prompt_logprobs  # type: ignore[attr-defined]
    assert want is not None and len(got) == len(want) == len(prompt) and got[0] is None
    for g, w in zip(got[1:], want[1:], strict=True):
        assert g is not None and w is not None
        assert list(g) == [str(t) for t in w]  # the prompt's token, then the top two
        assert [v["rank"] for v in g.values()] == [lp.rank for lp in w.values()]
        assert [v["logprob"] for v in g.values()] == pytest.approx([lp.logprob for lp in w.values()], abs=1e-4)
    assert "Traceback" not in log.read_text()
