"""kvfence's side of bench/vs_llamacpp.py: the engine built and timed, with no torch import of its own.

Run as a script it is the peak-RSS child: one process that serves 32 sequences (a 32-token prompt,
8 decode steps) over an 8,192-token pool with the given runtime, so that ``runtime=native``'s
process shows what it holds without torch.

    python bench/kvfence_runs.py MODEL_DIR DTYPE THREADS KV_CACHE_DTYPE RUNTIME
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams

PROMPT_LEN, DECODE_TOKENS, POOL_TOKENS = 32, 48, 8192


def kvfence_llm(model_dir: Path, dtype: str, kv_cache_dtype: str = "float16", *, runtime: str = "torch",
                threads: int | None = None) -> LLM:
    return LLM(model=str(model_dir), dtype=dtype, device="cpu", kv_cache_tokens=POOL_TOKENS,  # type: ignore[arg-type]
               kv_cache_dtype=kv_cache_dtype, max_num_batched_tokens=2048, max_prefill_chunk=512,  # type: ignore[arg-type]
               runtime=runtime, num_threads=threads)  # type: ignore[arg-type]


def kvfence_decode(llm: LLM, batch: int, tokens: int = DECODE_TOKENS) -> float:
    """Generated tok/s of ``batch`` sequences decoding together (their prefill not timed)."""
    engine = llm.engine
    params = SamplingParams(max_tokens=tokens + 1, temperature=0, ignore_eos=True)
    for i in range(batch):
        prompt = [(7 * i + j) % 200 + 10 for j in range(PROMPT_LEN)]
        engine.add_request(f"d{i}", prompt, params, b"b" * 32)
    while any(len(o.token_ids) == 0 for o in engine.step()):  # every prefill done
        pass
    start, generated = time.perf_counter(), 0
    while engine.has_unfinished_requests():
        generated += len(engine.step())
    return generated / (time.perf_counter() - start)


def kvfence_prefill(llm: LLM, length: int) -> float:
    """Prompt tok/s of one ``length``-token prefill (one step: chunk and batch limits above it)."""
    engine = llm.engine
    prompt = [j % 200 + 10 for j in range(length)]
    engine.add_request("p", prompt, SamplingParams(max_tokens=1, temperature=0, ignore_eos=True), os.urandom(32))
    start = time.perf_counter()
    while engine.has_unfinished_requests():
        engine.step()
    return length / (time.perf_counter() - start)


def main(argv: list[str]) -> int:
    model_dir, dtype, threads, kv, runtime = argv
    llm = kvfence_llm(Path(model_dir), dtype, kv, runtime=runtime, threads=int(threads))
    kvfence_decode(llm, 32, tokens=8)
    if runtime == "native" and "torch" in sys.modules:
        raise SystemExit("the native runtime's process imported torch")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
