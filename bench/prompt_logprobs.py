"""What scoring a prompt costs: prefill with and without ``prompt_logprobs``, in the same run.

Each trial sends one batch of fresh random prompts (no prefix-cache hit in either arm: every
trial's prompts are new) through ``LLM.generate`` with ``max_tokens=1``, once plain and once
with ``prompt_logprobs`` 0 and 5; arms are interleaved and the best of ``--trials`` is kept, so
a busy machine slows all arms alike. The difference is the LM head over every prompt position
plus the log_softmax, rank and top-n reduction, and the Python entries built per position.

    python bench/prompt_logprobs.py --prompt-len 512 --batch 4 --trials 5
"""

from __future__ import annotations

import argparse
import time

import torch

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: the built-in random model)")
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    llm = LLM(args.model, max_model_len=args.prompt_len + 8, kv_cache_tokens=(args.prompt_len + 16) * args.batch * 2,
              device="cpu", num_threads=args.threads, max_num_batched_tokens=args.prompt_len * args.batch)
    vocab = llm.engine.model_config.vocab_size
    g = torch.Generator().manual_seed(0)
    arms = {"plain": None, "prompt_logprobs=0": 0, "prompt_logprobs=5": 5}
    best = dict.fromkeys(arms, float("inf"))
    llm.generate([[1, 2, 3]], SamplingParams(max_tokens=1, prompt_logprobs=1))  # warm-up
    for _ in range(args.trials):
        for name, value in arms.items():
            prompts = [torch.randint(0, vocab, (args.prompt_len,), generator=g).tolist() for _ in range(args.batch)]
            params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=value)
            start = time.perf_counter()
            outs = llm.generate(prompts, params)
            best[name] = min(best[name], time.perf_counter() - start)
            if value is not None:
                assert all(o.prompt_logprobs is not None and len(o.prompt_logprobs) == args.prompt_len for o in outs)
    tokens = args.prompt_len * args.batch
    print(f"model {llm.engine.model_name}, vocab {vocab}, {args.batch} prompts x {args.prompt_len} tokens, "
          f"best of {args.trials}")
    for name, seconds in best.items():
        print(f"  {name:18} {seconds * 1e3:8.1f} ms  {tokens / seconds:8.0f} prompt tokens/s  "
              f"x{seconds / best['plain']:.2f} of plain")


if __name__ == "__main__":
    main()
