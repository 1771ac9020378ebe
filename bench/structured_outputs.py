"""Cost of structured outputs: grammar compile time, per-token mask time, decode tok/s with and without.

Two vocabularies: the built-in model's (262 tokens, byte-level) and a 49,152-token byte-level BPE
trained here on the Python standard library's sources (SmolLM's vocabulary size), paired with a
small random Llama (2 layers, hidden 256) so the mask's share of a decode step is visible.

    python bench/structured_outputs.py            # compile + mask figures, and tok/s A/B
    python bench/structured_outputs.py --quick    # fewer repeats

Compile time is a cold compile (a fresh cache) of each spec, best of N; the first compile for a
tokenizer also builds llguidance's token trie, timed on its own. Mask time is the processor call
(state lookup, mask, ``masked_fill``) on a random walk over allowed tokens. The tok/s A/B runs the
same prompts with and without ``json_schema``, interleaved, best of N, batch 8, greedy by default; each unconstrained
request generates exactly as many tokens as its constrained twin did (``ignore_eos``), so both
runs have the same batch shape and differ only by the mask.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.engine.test_structured_schemas import SCHEMAS  # noqa: E402

from kvfence.engine.config import kvfence_home  # noqa: E402
from kvfence.engine.llm import LLM  # noqa: E402
from kvfence.engine.runner.default_model import ensure_default_model  # noqa: E402
from kvfence.engine.sampling.sampling_params import SamplingParams  # noqa: E402
from kvfence.engine.structured import GrammarCompiler, GrammarLogitsProcessor, GrammarSpec, compile_grammar  # noqa: E402
from kvfence.engine.structured import vocabulary as vocabulary_module  # noqa: E402
from kvfence.engine.text.tokenizer import Tokenizer  # noqa: E402

EOS = "<|endoftext|>"


def build_large_vocab_model(root: Path) -> Path:
    """A 2-layer random Llama with a 49,152-token byte-level BPE (trained on stdlib sources); reused."""
    import transformers
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    out = root / "bench-structured-49152-v1"
    if (out / "model.safetensors").is_file():
        return out
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))

    def texts(limit: int = 30_000_000) -> Any:
        size = 0
        for f in files:
            text = f.read_text(encoding="utf-8", errors="replace")
            size += len(text)
            yield text
            if size > limit:
                return

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts(), trainers.BpeTrainer(
        vocab_size=49152, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[EOS],
        show_progress=False))
    config = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=256, intermediate_size=704,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=2048, eos_token_id=tok.token_to_id(EOS),
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    tmp = out.with_suffix(".tmp")
    model.save_pretrained(tmp)
    tok.save(str(tmp / "tokenizer.json"))
    (tmp / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS}))
    tmp.rename(out)
    return out


def specs() -> dict[str, GrammarSpec]:
    return {
        "json_object": GrammarSpec.json_object(),
        "schema person": GrammarSpec.json_schema(SCHEMAS["person"]),
        "schema nested": GrammarSpec.json_schema(SCHEMAS["nested"]),
        "schema $defs": GrammarSpec.json_schema(SCHEMAS["defs"]),
        "regex": GrammarSpec.regex(r"[A-Z]{2}-[0-9]{3}( [a-z]+)*"),
    }


def compile_times(tok: Tokenizer, repeats: int) -> dict[str, float]:
    """Milliseconds: the trie (first use of the tokenizer), then each spec cold, best of ``repeats``."""
    vocabulary_module._cache.pop(tok, None)
    started = time.perf_counter()
    vocabulary_module.vocabulary_of(tok)
    out = {"token trie (once per tokenizer)": (time.perf_counter() - started) * 1e3}
    for name, spec in specs().items():
        best = float("inf")
        for _ in range(repeats):
            compiler = GrammarCompiler()
            t = time.perf_counter()
            compiler.compile(tok, spec)
            best = min(best, time.perf_counter() - t)
        out[name] = best * 1e3
    return out


def mask_times(tok: Tokenizer, steps: int) -> dict[str, float]:
    """Median and p99 microseconds per processor call along random walks (schema nested)."""
    compiled = GrammarCompiler().compile(tok, GrammarSpec.json_schema(SCHEMAS["nested"]))
    eos = set(tok.eos_token_ids)
    rng = random.Random(0)
    samples: list[float] = []
    while len(samples) < steps:
        processor = GrammarLogitsProcessor(compiled)
        out: list[int] = []
        for _ in range(400):
            logits = torch.randn(tok.vocab_size)
            t = time.perf_counter()
            processor(out, logits)
            samples.append(time.perf_counter() - t)
            allowed = [i for i in torch.isfinite(logits).nonzero().flatten().tolist() if i not in eos]
            if not allowed:
                break
            out.append(rng.choice(allowed))
    samples.sort()
    return {"median_us": statistics.median(samples) * 1e6, "p99_us": samples[int(len(samples) * 0.99)] * 1e6}


def run_batch(llm: LLM, lengths: list[int] | None, batch: int, max_tokens: int, seed: int,
              temperature: float = 0.0) -> tuple[float, list[int]]:
    """Generated tok/s of one batch, and each request's token count.

    ``lengths=None`` runs the batch under ``json_schema`` (it ends when each JSON does); otherwise
    the batch runs unconstrained with ``ignore_eos`` and exactly those lengths, so both runs have
    the same batch shape step by step and differ only in the mask.
    """
    prompts = [f"Request {i}: describe a pet owner as JSON." for i in range(batch)]
    params = []
    for i in range(batch):
        if lengths is None:
            compiled = compile_grammar(llm.engine.tokenizer, GrammarSpec.json_schema(SCHEMAS["nested"]))
            params.append(SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed + i,
                                         logits_processors=[GrammarLogitsProcessor(compiled)]))
        else:
            params.append(SamplingParams(max_tokens=max(1, lengths[i]), temperature=temperature, seed=seed + i,
                                         ignore_eos=True))
    t = time.perf_counter()
    out = llm.generate(prompts, params)
    elapsed = time.perf_counter() - t
    counts = [len(o.token_ids) for o in out]
    return sum(counts) / elapsed, counts


def throughput(model_dir: Path, repeats: int, batch: int, max_tokens: int, temperature: float) -> dict[str, Any]:
    llm = LLM(model=str(model_dir), kv_cache_tokens=batch * (max_tokens + 64) * 2, max_model_len="auto",
              device="cpu", cache_scope="request")
    run_batch(llm, None, 2, 16, 0)  # warm up both paths (and compile the schema once, as a server would)
    run_batch(llm, [16, 16], 2, 16, 0)
    plain: list[float] = []
    guided: list[float] = []
    tokens = 0
    for r in range(repeats):  # interleaved: a busy machine slows both alike
        rate, counts = run_batch(llm, None, batch, max_tokens, 100 * r, temperature)
        guided.append(rate)
        plain.append(run_batch(llm, counts, batch, max_tokens, 100 * r, temperature)[0])
        tokens = sum(counts)
    return {"plain_tok_s": round(max(plain), 1), "json_schema_tok_s": round(max(guided), 1),
            "tokens_per_run": tokens, "overhead_pct": round((1 - max(guided) / max(plain)) * 100, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="0 (default) keeps the sampler's own cost (torch.multinomial) out of the A/B")
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--builtin-only", action="store_true", help="skip the 49,152-token model")
    args = ap.parse_args()
    repeats = 2 if args.quick else args.repeats
    torch.set_num_threads(max(1, torch.get_num_threads()))
    models = {"built-in (262 tokens)": ensure_default_model()}
    if not args.builtin_only:
        models["49152-token BPE"] = build_large_vocab_model(kvfence_home() / "models")
    results: dict[str, Any] = {}
    for label, model_dir in models.items():
        tok = Tokenizer.from_dir(model_dir)
        results[label] = {
            "vocab": tok.vocab_size,
            "compile_ms": compile_times(tok, repeats),
            "mask": mask_times(tok, 500 if args.quick else 2000),
            "decode_batch8": throughput(model_dir, repeats if not args.quick else 1, 8,
                                        64 if args.quick else args.max_tokens, args.temperature),
        }
        print(label, json.dumps(results[label], indent=2), flush=True)
    out = ROOT / "bench" / "results" / f"structured_outputs_t{args.temperature:g}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
