"""kvfence against llama.cpp on the same SmolLM-135M-shaped random weights, fp32, bf16 and fp16, in one run.

For each thread count and weight dtype (float32, bfloat16, float16), alternated kvfence / llama.cpp, repeated:
  * the memory-bandwidth roofline of the dtype (a ``sum()`` over 1 GiB at that thread count, divided
    by the bytes of weights one token reads: 4 or 2 per parameter);
  * batch-1 decode tok/s (and its fraction of the roofline), prefill pp128 / pp512 tok/s,
    batched decode B=8 / B=32 tok/s (prompts of 32 tokens);
  * peak RSS of a process serving 32 sequences over an 8,192-token pool (one child process each).
kvfence runs once per runtime (``--runtimes torch,native``: PyTorch, and the CPU kernels from NumPy
with no torch in the process), each its own column, alternated with the others and llama.cpp.
KV cache: float16 in both by default (llama.cpp's default, and llama-bench takes no f32 cache; kvfence's
``kv_cache_dtype="float16"``); ``--kv-cache-dtype auto`` gives kvfence the model's dtype instead (a
float32 pool for float32 weights: twice llama.cpp's KV bytes).

With ``--llama-cpp`` llama.cpp is built from the llama-cpp-python sdist (``pip download``, cmake, in
``$KVFENCE_HOME/bench/llama.cpp``; minutes on a small machine, once) and the model written as GGUF
(f32 and bf16) with the sdist's own ``gguf-py``; where that cannot be done the llama.cpp columns are
skipped with the reason. Without it only kvfence and the roofline run.

    python bench/vs_llamacpp.py [--llama-cpp] [--threads 1,2] [--dtypes float32,bfloat16,float16] [--repeats 3]
                                [--runtimes torch,native]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kvfence.engine.config import kvfence_home
from kvfence.engine.kernels.library import cpu_kernels
from kvfence.engine.kernels.loading import WEIGHT_KINDS
from kvfence_runs import DECODE_TOKENS, POOL_TOKENS, PROMPT_LEN, kvfence_decode, kvfence_llm, kvfence_prefill
from throughput import build_model, measure_bandwidth

SDIST = "llama-cpp-python"
LLAMA_KV = "f16"  # llama-bench takes no f32 KV cache: its default f16 for every weight dtype
GGUF_TYPE = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
WEIGHT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


# ---- llama.cpp -------------------------------------------------------------------------------------


def build_llama_cpp(root: Path) -> tuple[Path | None, str]:
    """The llama.cpp source tree with llama-bench and llama-batched-bench built under ``root``, or
    None and why."""
    root.mkdir(parents=True, exist_ok=True)
    trees = sorted(root.glob("llama_cpp_python-*/vendor/llama.cpp"))
    if not trees:
        done = subprocess.run([sys.executable, "-m", "pip", "download", SDIST, "--no-deps", "--no-binary", SDIST,
                               "-d", str(root)], capture_output=True, text=True, check=False)
        sdists = sorted(root.glob("llama_cpp_python-*.tar.gz"))
        if not sdists:
            return None, f"pip download {SDIST} failed: {done.stderr.strip()[-300:]}"
        subprocess.run(["tar", "xzf", str(sdists[-1]), "-C", str(root)], check=True)
        trees = sorted(root.glob("llama_cpp_python-*/vendor/llama.cpp"))
        if not trees:
            return None, f"{sdists[-1].name} has no vendor/llama.cpp"
    tree = trees[-1]
    if not all((tree / "build" / "bin" / b).is_file() for b in ("llama-bench", "llama-batched-bench")):
        configure = ["cmake", "-S", str(tree), "-B", str(tree / "build"), "-DCMAKE_BUILD_TYPE=Release",
                     "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                     "-DLLAMA_OPENSSL=OFF"]
        build = ["cmake", "--build", str(tree / "build"), "-j", str(os.cpu_count() or 2), "--target", "llama-bench",
                 "llama-batched-bench"]
        for cmd in (configure, build):
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            except OSError as exc:
                return None, f"{cmd[0]}: {exc}"
            if done.returncode != 0:
                return None, f"{' '.join(cmd[:3])} failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return tree, "built"


def write_gguf(tree: Path, model_dir: Path, dtype: str) -> Path:
    """The checkpoint as a llama-architecture GGUF in ``dtype`` (tensors named and q/k permuted as
    convert_hf_to_gguf.py does; a placeholder SPM vocabulary: llama-bench never tokenizes)."""
    out = model_dir / f"model-{GGUF_TYPE[dtype]}.gguf"
    if out.is_file():
        return out
    sys.path.insert(0, str(tree / "gguf-py"))
    import gguf
    from safetensors.torch import load_file

    cfg = json.loads((model_dir / "config.json").read_text())
    state = load_file(str(next(model_dir.glob("*.safetensors"))))
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(cfg["hidden_size"] // heads)
    writer.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_file_type({"bfloat16": gguf.LlamaFileType.MOSTLY_BF16, "float16": gguf.LlamaFileType.MOSTLY_F16}.get(
        dtype, gguf.LlamaFileType.ALL_F32))
    vocab = cfg["vocab_size"]
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<t{i}>".encode() for i in range(vocab)])
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types([gguf.TokenType.NORMAL] * vocab)
    writer.add_bos_token_id(cfg.get("bos_token_id") or 0)
    writer.add_eos_token_id(cfg.get("eos_token_id") or 0)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for name, tensor in state.items():
        t = tensor.float()
        if name == "model.embed_tokens.weight":
            target = "token_embd.weight"
        elif name == "model.norm.weight":
            target = "output_norm.weight"
        elif name == "lm_head.weight":
            target = "output.weight"
        else:
            m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name)
            if m is None:
                continue
            target = f"blk.{m.group(1)}.{names[m.group(2)]}.weight"
            if m.group(2) in ("self_attn.q_proj", "self_attn.k_proj"):  # rotate-half -> interleaved RoPE rows
                n = heads if m.group(2) == "self_attn.q_proj" else kv_heads
                t = t.reshape(n, 2, t.shape[0] // n // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)
        if t.dim() == 2 and dtype == "bfloat16":
            writer.add_tensor(target, t.bfloat16().view(torch.int16).numpy(), raw_dtype=gguf.GGMLQuantizationType.BF16)
        elif t.dim() == 2 and dtype == "float16":
            writer.add_tensor(target, t.half().numpy())
        else:
            writer.add_tensor(target, t.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def llama_bench(tree: Path, gguf_path: Path, threads: int) -> dict[str, float]:
    kv = LLAMA_KV
    cmd = [str(tree / "build" / "bin" / "llama-bench"), "-m", str(gguf_path), "-t", str(threads), "-p", "128,512",
           "-n", str(DECODE_TOKENS), "-r", "1", "-ctk", kv, "-ctv", kv, "-o", "json"]
    rows = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    got = {}
    for row in rows:
        key = f"pp{row['n_prompt']}" if row["n_prompt"] else "decode_b1"
        got[key] = float(row["avg_ts"])
    return got


def llama_batched(tree: Path, gguf_path: Path, threads: int, batch: int) -> float:
    kv = LLAMA_KV
    cmd = [str(tree / "build" / "bin" / "llama-batched-bench"), "-m", str(gguf_path), "-t", str(threads),
           "-c", str(POOL_TOKENS), "-b", "2048", "-ub", "512", "-npp", str(PROMPT_LEN), "-ntg", str(DECODE_TOKENS),
           "-npl", str(batch), "-ctk", kv, "-ctv", kv]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():  # |    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s | ...
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0] == str(PROMPT_LEN) and cells[2] == str(batch):
            return float(cells[7])
    raise RuntimeError(f"no S_TG figure in llama-batched-bench's output:\n{out[-800:]}")


# ---- peak RSS (one child process each) -------------------------------------------------------------

_WRAP = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); " \
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"


def peak_rss_mb(cmd: list[str]) -> float:
    done = subprocess.run([sys.executable, "-c", _WRAP, *cmd], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1]) / 1024


# ---- the run -------------------------------------------------------------------------------------


def _fmt(values: list[float]) -> str:
    return f"{min(values):7.1f} {statistics.median(values):7.1f}" if values else "      -       -"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", action="store_true", help="build llama.cpp (once) and run it alternated with kvfence")
    ap.add_argument("--llama-cpp-dir", type=Path, default=kvfence_home() / "bench" / "llama.cpp",
                    help="where the sdist is downloaded and built (default: $KVFENCE_HOME/bench/llama.cpp)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="float32,bfloat16,float16")
    ap.add_argument("--kv-cache-dtype", default="float16",
                    help="kvfence's KV pool (default float16, llama.cpp's f16; auto: the model's dtype)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS child processes")
    ap.add_argument("--runtimes", default="torch,native",
                    help="kvfence's runtimes, one column each (torch; native: no torch in the process)")
    args = ap.parse_args()
    runtimes = args.runtimes.split(",")
    started = time.perf_counter()
    model_dir = build_model(kvfence_home() / "bench" / "models")
    params = _param_count(model_dir)
    tree, why = build_llama_cpp(args.llama_cpp_dir) if args.llama_cpp else (None, "not asked (--llama-cpp)")
    print(f"llama.cpp: {why if tree is None else tree}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {params / 1e6:.1f}M parameters; "
          f"KV cache kvfence {args.kv_cache_dtype}, llama.cpp {LLAMA_KV}; kvfence runtimes {', '.join(runtimes)}")
    workloads = ("decode_b1", "pp128", "pp512", "decode_b8", "decode_b32")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for dtype in args.dtypes.split(","):
            llms = {r: kvfence_llm(model_dir, dtype, args.kv_cache_dtype, runtime=r, threads=threads) for r in runtimes}
            gguf_path = write_gguf(tree, model_dir, dtype) if tree is not None else None
            ours: dict[str, dict[str, list[float]]] = {r: {w: [] for w in workloads} for r in runtimes}
            theirs: dict[str, list[float]] = {w: [] for w in workloads}
            roof: list[float] = []
            for _ in range(args.repeats):  # every engine once per repeat, alternated
                roof.append(measure_bandwidth(repeats=3) / (params * WEIGHT_BYTES[dtype]))
                for r, llm in llms.items():
                    ours[r]["decode_b1"].append(kvfence_decode(llm, 1))
                if gguf_path is not None and tree is not None:
                    for k, v in llama_bench(tree, gguf_path, threads).items():
                        theirs[k].append(v)
                for r, llm in llms.items():
                    ours[r]["pp128"].append(kvfence_prefill(llm, 128))
                    ours[r]["pp512"].append(kvfence_prefill(llm, 512))
                for b in (8, 32):
                    for r, llm in llms.items():
                        ours[r][f"decode_b{b}"].append(kvfence_decode(llm, b))
                    if gguf_path is not None and tree is not None:
                        theirs[f"decode_b{b}"].append(llama_batched(tree, gguf_path, threads, b))
            print(f"\n{dtype} weights, {threads} thread(s); roofline {statistics.median(roof):.1f} tok/s "
                  f"(min {min(roof):.1f}); tok/s as min / median of {args.repeats}")
            heads = "".join(f" {'kvfence ' + r:>15}" for r in runtimes)
            print(f"  {'':11}{heads} {'llama.cpp':>15}   ratio(median) to llama.cpp")
            for w in workloads:
                extra = ""
                for r in runtimes:
                    if theirs[w]:
                        extra += f"   {r} {statistics.median(ours[r][w]) / statistics.median(theirs[w]):.2f}x"
                if w == "decode_b1":
                    shares = [f"{r} {statistics.median(ours[r][w]) / statistics.median(roof):.0%}" for r in runtimes]
                    if theirs[w]:
                        shares.append(f"llama.cpp {statistics.median(theirs[w]) / statistics.median(roof):.0%}")
                    extra += "   of roofline: " + ", ".join(shares)
                cells = "".join(f" {_fmt(ours[r][w])}" for r in runtimes)
                print(f"  {w:11}{cells} {_fmt(theirs[w])}{extra}")
            lib = cpu_kernels()
            if lib is not None:  # chosen by timing on the first batch-1 products (decode_f32.cpp's PrefetchTuner)
                print(f"  batch-1 prefetch distance: {lib.kvfence_prefetch_bytes(WEIGHT_KINDS[dtype], -2)} B (-1: not chosen)")
            del llms
            if not args.no_rss:
                _print_rss(model_dir, dtype, threads, args.kv_cache_dtype, runtimes, tree, gguf_path)
    print(f"\n(run took {time.perf_counter() - started:.0f} s)")
    return 0


def _print_rss(model_dir: Path, dtype: str, threads: int, kv_cache_dtype: str, runtimes: list[str],
               tree: Path | None, gguf_path: Path | None) -> None:
    """Peak RSS of one process per engine serving B=32 over the pool, and of importing each runtime."""
    theirs = None
    if gguf_path is not None and tree is not None:
        kv = LLAMA_KV
        theirs = peak_rss_mb([str(tree / "build" / "bin" / "llama-batched-bench"), "-m", str(gguf_path),
                              "-t", str(threads), "-c", str(POOL_TOKENS), "-npp", str(PROMPT_LEN),
                              "-ntg", "8", "-npl", "32", "-ctk", kv, "-ctv", kv])
        print(f"  peak RSS, B=32 over {POOL_TOKENS} tokens: llama.cpp {theirs:.0f} MB")
    child = str(Path(__file__).with_name("kvfence_runs.py"))
    for r in runtimes:
        ours = peak_rss_mb([sys.executable, child, str(model_dir), dtype, str(threads), kv_cache_dtype, r])
        floor = peak_rss_mb([sys.executable, "-c", "import kvfence.engine.llm" + (", torch" if r == "torch" else "")])
        ratio = f" ({ours / theirs:.2f}x llama.cpp)" if theirs else ""
        print(f"  peak RSS, B=32 over {POOL_TOKENS} tokens: kvfence {r} {ours:.0f} MB{ratio}; "
              f"{floor:.0f} MB of it is importing the engine{' and torch' if r == 'torch' else ''}")


def _param_count(model_dir: Path) -> int:
    """Parameters one token reads (a tied embedding once, as the LM head)."""
    from safetensors import safe_open

    total = 0
    for path in model_dir.glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118
                n = 1
                for d in f.get_slice(name).get_shape():
                    n *= d
                total += n
    return total


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
