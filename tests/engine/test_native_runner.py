"""The native runner (numpy + ctypes, no torch) against the torch ModelRunner on the same checkpoint
and schedule: logits and the KV pool, for prefill, decode, chunked prefill, a start past a shared
prefix, mixed batches and sliding windows; I2 (scrub before any pool access); and a process that
runs a step with ``import torch`` made impossible."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from kvfence.engine.config import ModelConfig
from kvfence.engine.core.scheduler import ScheduledSeq
from kvfence.engine.core.sequence import Sequence
from kvfence.engine.native.runner import MAX_ROWS_PER_CALL, NativeRunner
from kvfence.engine.runner.model_runner import ModelRunner
from kvfence.engine.sampling import prompt_logprobs
from kvfence.engine.sampling.prompt_logprobs import PromptScores
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ConfigError, IsolationViolation
from tests.engine.kernel_marks import needs_kernels
from tests.engine.tiny_models import build_tiny_model

pytestmark = needs_kernels

PAGE = 4
PAGES = 24
# float32 weights: both runtimes sum the same float32 products in different orders (torch's SDPA and
# MKL for prefill): tight. Half weights: the same rounded weights on both sides, so still close; the
# looser bound covers sums over half-precision K/V read back from a 2-byte pool.
TOLERANCE = {"float32": (1e-4, 1e-4), "bfloat16": (2e-3, 2e-3), "float16": (2e-3, 2e-3)}

# arch -> config overrides: windows short enough for the prompts below to pass them
MODELS: dict[str, dict[str, Any]] = {
    "llama": {},
    "qwen2": {},  # q/k/v biases, tied embeddings
    "qwen3": {},  # q/k norms, head_dim != hidden / heads
    "mistral": {"sliding_window": 6},
    "qwen2-mixed": {"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1},
    "phi3": {},  # fused qkv / gate_up in the checkpoint
    # YaRN: frequencies ramped between extrapolated and interpolated, cos/sin scaled by the attention factor
    "llama-yarn": {"max_position_embeddings": 128, "rope_parameters": {
        "rope_theta": 10000.0, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}},
    "qwen2-yarn-mscale": {"max_position_embeddings": 128, "rope_parameters": {
        "rope_theta": 1e6, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
        "beta_fast": 16, "beta_slow": 2, "truncate": False, "mscale": 1.0, "mscale_all_dim": 0.5}},
    # dynamic NTK past max_position_embeddings (8): the 16-token sequences below are rotated for their length
    "llama-dynamic": {"max_position_embeddings": 8, "rope_parameters": {
        "rope_theta": 10000.0, "rope_type": "dynamic", "factor": 4.0}},
}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("native")
    return {name: build_tiny_model(root / name, name.split("-")[0], seed=3, **over) for name, over in MODELS.items()}


@dataclass
class Ledger:
    """The page ledger's scrub surface: a list of pages owed their zero-fill."""

    pending: list[int] = field(default_factory=list)
    swallow: bool = False  # a zero_fill that "forgets" the pages: the runner must refuse the pool

    @property
    def num_pending_scrub(self) -> int:
        return len(self.pending)

    def flush_scrub(self, zero_fill: Callable[[list[int]], None]) -> None:
        pages, self.pending = self.pending, []
        if self.swallow:
            self.pending = pages
            return
        zero_fill(pages)


def native(model_dir: Path, dtype: str = "float32", kv_dtype: str | None = None, ledger: Ledger | None = None,
           **kw: Any) -> NativeRunner:
    return NativeRunner(model_dir, ModelConfig.from_dir(model_dir), max_len=PAGES * PAGE, num_pages=PAGES,
                        page_size=PAGE, dtype=dtype, kv_dtype=kv_dtype or dtype, ledger=ledger or Ledger(),
                        num_threads=kw.get("num_threads", 2))


def torch_runner(model_dir: Path, dtype: str = "float32", kv_dtype: str | None = None) -> ModelRunner:
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    return ModelRunner(model_dir, ModelConfig.from_dir(model_dir), max_len=PAGES * PAGE, num_pages=PAGES,
                       page_size=PAGE, dtype=dt[dtype], device=torch.device("cpu"), ledger=Ledger(),
                       kv_dtype=dt[kv_dtype or dtype])


def pool_of(runner: ModelRunner) -> np.ndarray:
    pool = runner.kv_pool
    if pool.dtype == torch.bfloat16:
        return pool.view(torch.int16).numpy().view(np.uint16)
    return pool.numpy()


def seq(name: str, n: int, pages: list[int], *, seed: int, prefix: list[int] | None = None) -> Sequence:
    rng = np.random.default_rng(seed)
    tokens = (prefix or []) + rng.integers(3, 250, n - len(prefix or [])).tolist()
    s = Sequence(name, tokens, b"scope")
    s.block_table = list(pages)
    return s


def schedules() -> dict[str, list[list[tuple[str, int, int, bool]]]]:
    """name -> steps, each a list of (sequence, start, new tokens, samples)."""
    return {
        # A: a whole prompt then decodes past the window (6) and over page ends
        "prefill-decode": [[("A", 0, 10, True)], [("A", 10, 1, True)], [("A", 11, 1, True)], [("A", 12, 1, True)]],
        # A in two chunks (the first does not sample), then a decode
        "chunked": [[("A", 0, 5, False)], [("A", 5, 6, True)], [("A", 11, 1, True)]],
        # B shares A's first two pages (8 tokens) and prefills from there, as after a prefix hit
        "prefix-start": [[("A", 0, 9, True)], [("B", 8, 7, True)], [("B", 15, 1, True)]],
        # decodes of A and B batched with C's prefill, then a batch of three decodes
        "mixed": [[("A", 0, 8, True)], [("B", 0, 3, True)], [("A", 8, 1, True), ("C", 0, 13, True), ("B", 3, 1, True)],
                  [("C", 13, 1, True), ("A", 9, 1, True), ("B", 4, 1, True)]],
    }


def sequences() -> dict[str, Sequence]:
    a = seq("A", 16, [3, 7, 1, 12, 20], seed=1)
    return {
        "A": a,
        "B": seq("B", 18, [3, 7, 5, 9, 15], seed=2, prefix=a.token_ids[:8]),
        "C": seq("C", 16, [0, 2, 4, 6], seed=4),
    }


def run_both(native_runner: NativeRunner, torch_r: ModelRunner, steps: list[list[tuple[str, int, int, bool]]],
             rtol: float, atol: float, seqs: dict[str, Sequence] | None = None) -> None:
    seqs = seqs or sequences()
    for i, step in enumerate(steps):
        items = [ScheduledSeq(seqs[name], start, n, samples) for name, start, n, samples in step]
        got_items, got = native_runner.execute(items)
        want_items, want = torch_r.execute(items)
        assert [it.seq.request_id for it in got_items] == [it.seq.request_id for it in want_items]
        assert got.dtype == np.float32 and got.shape == tuple(want.shape)
        np.testing.assert_allclose(got, want.numpy(), rtol=rtol, atol=atol, err_msg=f"step {i}: {step}")


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("schedule", list(schedules()))
def test_logits_and_pool_equal_the_torch_runner_at_float32(model_dirs: dict[str, Path], model: str,
                                                            schedule: str) -> None:
    a, b = native(model_dirs[model]), torch_runner(model_dirs[model])
    run_both(a, b, schedules()[schedule], *TOLERANCE["float32"])
    np.testing.assert_allclose(a.kv_pool, pool_of(b), rtol=1e-4, atol=1e-5)
    assert not a.kv_pool[:, :, a.null_page].any()


@pytest.mark.parametrize("rope_length", [5, 9, 16])
@pytest.mark.parametrize("schedule", ["prefill-decode", "chunked", "mixed"])
def test_dynamic_rope_rotates_each_row_for_its_sequences_length(model_dirs: dict[str, Path], schedule: str,
                                                                 rope_length: int) -> None:
    """A rope length under the threshold (8) rotates by position up to it and by length past it; decodes
    past the rope length are rotated for ``p + 1``, one length per row (as the torch runner)."""
    seqs = sequences()
    for s in seqs.values():
        s.rope_length = rope_length
    a, b = native(model_dirs["llama-dynamic"]), torch_runner(model_dirs["llama-dynamic"])
    run_both(a, b, schedules()[schedule], *TOLERANCE["float32"], seqs=seqs)
    np.testing.assert_allclose(a.kv_pool, pool_of(b), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", ["llama", "qwen2", "mistral"])
@pytest.mark.parametrize("schedule", list(schedules()))
def test_prompt_scores_equal_the_torch_runners(model_dirs: dict[str, Path], model: str, schedule: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prompt_logprobs, "_ROWS_PER_SLICE", 4)  # chunks of up to 13 rows: several slices
    a, b = native(model_dirs[model]), torch_runner(model_dirs[model])
    seqs = sequences()
    for name in ("A", "C"):  # B does not ask: its rows are not scored
        s = seqs[name]
        seqs[name] = Sequence(name, s.token_ids, b"scope", SamplingParams(prompt_logprobs=3))
        seqs[name].block_table = s.block_table
    scored = 0
    for step in schedules()[schedule]:
        items = [ScheduledSeq(seqs[name], start, n, samples) for name, start, n, samples in step]
        got: dict[str, PromptScores] = {}
        want: dict[str, PromptScores] = {}
        a.execute(items, got)
        b.execute(items, want)
        assert got.keys() == want.keys()
        scored += sum(len(g.token_ids) for g in got.values())
        for rid, w in want.items():
            g = got[rid]
            assert (g.first_index, g.token_ids, g.ranks, g.top_ids) == (w.first_index, w.token_ids, w.ranks, w.top_ids)
            np.testing.assert_allclose(g.logprobs, w.logprobs, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(g.top_logprobs, w.top_logprobs, rtol=1e-4, atol=1e-4)
            assert all(len(top) == 3 for top in g.top_ids)
    assert scored >= 8


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kv_dtype", ["float32", "same"])
@pytest.mark.parametrize("model", ["llama", "qwen3", "mistral"])
def test_half_weights_and_pools_stay_close_to_the_torch_runner(model_dirs: dict[str, Path], model: str, dtype: str,
                                                               kv_dtype: str) -> None:
    kv = dtype if kv_dtype == "same" else kv_dtype
    a, b = native(model_dirs[model], dtype, kv), torch_runner(model_dirs[model], dtype, kv)
    for w_native, w_torch in ((a.weights.layers[0].qkv, b.model.model.layers[0].self_attn.qkv_proj.weight),
                              (a.weights.embed, b.model.model.embed_tokens.weight)):
        want = w_torch.view(torch.int16).numpy().view(np.uint16) if w_torch.dtype == torch.bfloat16 else w_torch.numpy()
        assert np.array_equal(w_native, want)  # the same rounded weights, bit for bit
    run_both(a, b, schedules()["mixed"], *TOLERANCE[dtype])
    pool = pool_of(b)
    if kv == "bfloat16":
        wide = lambda p: (p.astype(np.uint32) << 16).view(np.float32)  # noqa: E731
        np.testing.assert_allclose(wide(a.kv_pool), wide(pool), rtol=1e-2, atol=1e-2)
    else:
        np.testing.assert_allclose(a.kv_pool.astype(np.float32), pool.astype(np.float32), rtol=1e-2, atol=1e-3)


def test_a_prefill_longer_than_one_kernel_call_is_causal_across_calls(tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / "m", "llama", seed=5)
    rows = MAX_ROWS_PER_CALL + 37
    pages = -(-(rows + 1) // PAGE)
    cfg = ModelConfig.from_dir(model_dir)
    a = NativeRunner(model_dir, cfg, max_len=pages * PAGE, num_pages=pages, page_size=PAGE, dtype="float32",
                     kv_dtype="float32", ledger=Ledger(), num_threads=2)
    b = ModelRunner(model_dir, cfg, max_len=pages * PAGE, num_pages=pages, page_size=PAGE, dtype=torch.float32,
                    device=torch.device("cpu"), ledger=Ledger())
    s = seq("L", rows + 1, list(range(pages))[::-1], seed=9)
    for items in ([ScheduledSeq(s, 0, rows, True)], [ScheduledSeq(s, rows, 1, True)]):
        got = a.execute(items)[1]
        np.testing.assert_allclose(got, b.execute(items)[1].numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(a.kv_pool, pool_of(b), rtol=1e-4, atol=1e-5)


# ---- I2 -------------------------------------------------------------------------------------------


POISON = 7.0


@pytest.mark.parametrize("on_scrub_list", [True, False])
def test_a_page_on_the_scrub_list_is_zeroed_before_the_forward_reads_it(model_dirs: dict[str, Path],
                                                                          on_scrub_list: bool) -> None:
    """A released page still holds its last owner's KV (poison) and is handed to A, whose decode reads
    positions 0-2 of it without writing them (as over pages assumed overwritten). On the scrub list, it
    is zeroed first: A reads zeros, as from a fresh pool, and the poison is gone. Off it (the control
    that shows this test can fail), the poison is read."""
    ledger = Ledger()
    a, clean = native(model_dirs["llama"], ledger=ledger), native(model_dirs["llama"])
    s = sequences()["A"]
    page = s.block_table[0]
    a.kv_pool[:, :, page] = POISON
    if on_scrub_list:
        ledger.pending = [page]
    items = [ScheduledSeq(s, 3, 1, True)]
    got, want = a.execute(items)[1], clean.execute(items)[1]
    assert np.array_equal(got, want) == on_scrub_list
    assert (a.kv_pool == POISON).any() != on_scrub_list
    if on_scrub_list:
        assert not ledger.pending and a.scrubbed_pages == 1
        np.testing.assert_array_equal(a.kv_pool, clean.kv_pool)


@pytest.mark.parametrize("call", ["execute", "read_pages", "write_page"])
def test_a_pool_still_owed_its_zero_fill_is_never_touched(model_dirs: dict[str, Path], call: str) -> None:
    ledger = Ledger(pending=[5], swallow=True)
    a = native(model_dirs["llama"], ledger=ledger)
    a.kv_pool[:, :, 5] = POISON
    before = a.kv_pool.copy()
    with pytest.raises(IsolationViolation, match="still owed"):
        if call == "execute":
            a.execute([ScheduledSeq(sequences()["A"], 0, 10, True)])
        elif call == "read_pages":
            a.read_pages([5])
        else:
            a.write_page(5, bytes(a.page_nbytes))
    np.testing.assert_array_equal(a.kv_pool, before)


@pytest.mark.parametrize("kv_dtype", ["float32", "bfloat16", "float16"])
def test_read_pages_and_write_page_round_trip(model_dirs: dict[str, Path], kv_dtype: str) -> None:
    ledger = Ledger()
    a = native(model_dirs["llama"], kv_dtype=kv_dtype, ledger=ledger)
    s = sequences()["A"]
    a.execute([ScheduledSeq(s, 0, 10, True)])
    payloads = [bytes(p) for p in a.read_pages(s.block_table[:3])]
    assert [len(p) for p in payloads] == [a.page_nbytes] * 3
    assert all(any(p) for p in payloads)
    b = native(model_dirs["llama"], kv_dtype=kv_dtype)
    for page, payload in zip((10, 11, 12), payloads, strict=True):
        b.write_page(page, payload)
    np.testing.assert_array_equal(b.kv_pool[:, :, [10, 11, 12]], a.kv_pool[:, :, s.block_table[:3]])
    ledger.pending = [s.block_table[0]]  # released: what is read next is its zero-fill, never its old KV
    assert not any(a.read_pages([s.block_table[0]])[0])
    with pytest.raises(ValueError, match="bytes"):
        b.write_page(10, b"short")


def test_scrub_zeroes_exactly_the_given_pages(model_dirs: dict[str, Path]) -> None:
    a = native(model_dirs["llama"])
    a.kv_pool[...] = 1.0
    a.scrub([9, 2, 3, 11])
    assert a.pages_are_zero([2, 3, 9, 11]) and not a.pages_are_zero([4])
    assert (a.kv_pool[:, :, [0, 1, 4, 10, 12]] == 1.0).all()


# ---- what it does not run -----------------------------------------------------------------------


def test_unsupported_models_and_options_are_config_errors(tmp_path: Path, model_dirs: dict[str, Path]) -> None:
    gemma = build_tiny_model(tmp_path / "g", "gemma3")
    with pytest.raises(ConfigError, match=r"Gemma3ForCausalLM.*--runtime torch"):
        native(gemma)
    longrope = build_tiny_model(tmp_path / "d", "llama", max_position_embeddings=128, rope_parameters={
        "rope_theta": 10000.0, "rope_type": "longrope", "original_max_position_embeddings": 32,
        "short_factor": [1.0] * 8, "long_factor": [4.0] * 8})
    with pytest.raises(ConfigError, match="rope scaling type 'longrope'"):
        native(longrope)


def test_a_block_table_outside_the_pool_is_refused_before_anything_is_written(model_dirs: dict[str, Path]) -> None:
    a = native(model_dirs["llama"])
    s = seq("X", 8, [1, PAGES], seed=1)  # PAGES is the null page: never in a block table
    with pytest.raises(IndexError, match="block table"):
        a.execute([ScheduledSeq(s, 0, 8, True)])
    assert not a.kv_pool.any()


# ---- no torch -----------------------------------------------------------------------------------


def test_a_step_runs_in_a_process_where_torch_cannot_be_imported(model_dirs: dict[str, Path]) -> None:
    script = textwrap.dedent(f"""
        import sys

        class NoTorch:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is not importable in this test")
                return None

        sys.meta_path.insert(0, NoTorch())
        from kvfence.engine.config import ModelConfig
        from kvfence.engine.core.scheduler import ScheduledSeq
        from kvfence.engine.core.sequence import Sequence
        from kvfence.engine.native.runner import NativeRunner
        from pathlib import Path

        class Ledger:
            num_pending_scrub = 0
            def flush_scrub(self, zero_fill):
                zero_fill([])

        d = Path({str(model_dirs["qwen3"])!r})
        r = NativeRunner(d, ModelConfig.from_dir(d), max_len=64, num_pages=8, page_size=4, dtype="bfloat16",
                         kv_dtype="float16", ledger=Ledger(), num_threads=2)
        s = Sequence("a", list(range(3, 13)), b"scope")
        s.block_table = [0, 1, 2]
        items, logits = r.execute([ScheduledSeq(s, 0, 10, True)])
        assert logits.shape == (1, r.cfg.vocab_size) and bool((logits == logits).all())
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if m.startswith("torch"))
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# ---- the kernel library without torch ------------------------------------------------------------


def test_the_native_self_check_passes_here_and_names_a_wrong_kernel() -> None:
    from kvfence.engine.native import kernels

    lib = kernels.native_kernels().lib
    assert kernels._self_check(lib) is None

    class OffByOne:  # every product one too large: the self-check must say which
        def __getattr__(self, name: str) -> Any:
            return getattr(lib, name)

        @staticmethod
        def kvfence_linear_typed(*args: Any) -> None:
            lib.kvfence_linear_typed(*args)
            rows, out_features, y = args[1], args[5], args[8]
            (ctypes.c_float * (rows * out_features)).from_address(y)[0] += 1.0

    assert kernels._self_check(OffByOne()) == "linear (tiled, float32 weights) (1, 29) x (37, 29) on 1 threads"  # type: ignore[arg-type]


def test_a_cpu_without_the_needed_flags_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvfence.engine.native import kernels

    monkeypatch.setattr(kernels, "cpu_flags", lambda: {"sse2", "avx", "fma"})
    with pytest.raises(ConfigError, match=r"lacks avx2, f16c .*--runtime torch"):
        kernels._load()


# ---- checkpoints ----------------------------------------------------------------------------------


def test_a_sharded_checkpoint_loads_as_the_single_file(tmp_path: Path, model_dirs: dict[str, Path]) -> None:
    import shutil

    import transformers

    sharded = tmp_path / "sharded"
    transformers.AutoModelForCausalLM.from_pretrained(model_dirs["qwen2"]).save_pretrained(sharded,
                                                                                          max_shard_size="60KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    shutil.copy(model_dirs["qwen2"] / "config.json", sharded / "config.json")
    items = [ScheduledSeq(sequences()["A"], 0, 10, True)]
    got, want = native(sharded).execute(items)[1], native(model_dirs["qwen2"]).execute(items)[1]
    assert np.array_equal(got, want)


@pytest.mark.parametrize("checkpoint_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_half_checkpoint_is_converted_as_torch_converts_it(tmp_path: Path, checkpoint_dtype: torch.dtype,
                                                             dtype: str) -> None:
    model_dir = build_tiny_model(tmp_path / "m", "qwen3", seed=2, dtype=checkpoint_dtype)
    a, b = native(model_dir, dtype), torch_runner(model_dir, dtype)
    for w_native, w_torch in ((a.weights.layers[1].gate_up, b.model.model.layers[1].mlp.gate_up_proj.weight),
                              (a.weights.layers[0].q_norm, b.model.model.layers[0].self_attn.q_norm.weight)):
        want = w_torch.view(torch.int16).numpy().view(np.uint16) if w_torch.dtype == torch.bfloat16 else w_torch.numpy()
        assert w_native.dtype == want.dtype and np.array_equal(w_native, want)
    run_both(a, b, schedules()["chunked"], *TOLERANCE[dtype])


def test_a_step_runs_on_num_threads_in_whichever_thread_calls_it(model_dirs: dict[str, Path]) -> None:
    import os
    import threading

    from kvfence.engine.native.kernels import native_kernels

    if not native_kernels().openmp or (os.cpu_count() or 1) < 2:
        pytest.skip("the kernels share no threads here")
    a = native(model_dirs["llama"], num_threads=1)
    seen: list[int] = []

    def step() -> None:  # OpenMP keeps its thread count per thread: a server steps in its own thread
        a.execute([ScheduledSeq(sequences()["A"], 0, 4, True)])
        seen.append(ctypes.CDLL("libgomp.so.1").omp_get_max_threads())

    worker = threading.Thread(target=step)
    worker.start()
    worker.join()
    assert seen == [1]
