"""Disaggregated mode under attack: a prefill worker whose pages would not mean the same thing.

A decode worker continues from the prefill worker's KV. A worker that runs other weights under the
same architecture (a fine-tune of the same base: same config, same file names and sizes) computes
KV the decode side must never answer over; the connection is refused before any request (I4).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from kvfence.disagg.kv_pages import model_identity
from kvfence.errors import ConfigError
from tests.disagg.conftest import start_worker
from tests.disagg.helpers import make_engine


def _fine_tune(model_dir: Path, target: Path) -> Path:
    """A copy of ``model_dir`` with every weight nudged: same config, file names and file sizes."""
    shutil.copytree(model_dir, target)
    weights = target / "model.safetensors"
    tensors = load_file(weights)
    save_file({name: t + torch.full_like(t, 1e-3) if t.is_floating_point() else t for name, t in tensors.items()},
              weights, metadata={"format": "pt"})
    assert weights.stat().st_size == (model_dir / "model.safetensors").stat().st_size
    assert (target / "config.json").read_bytes() == (model_dir / "config.json").read_bytes()
    return target


def test_identity_tells_a_fine_tune_from_its_base(default_model_dir: Path, tmp_path: Path) -> None:
    tuned = _fine_tune(default_model_dir, tmp_path / "tuned")
    assert model_identity(default_model_dir) == model_identity(shutil.copytree(default_model_dir, tmp_path / "copy"))
    assert model_identity(tuned) != model_identity(default_model_dir)


def test_identity_samples_large_checkpoints(tmp_path: Path) -> None:
    """Files past the whole-file limit are sampled; a change across the weights still shows."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d, seed in ((a, 1), (b, 2)):
        d.mkdir()
        (d / "config.json").write_text('{"model_type": "llama"}')
        data = torch.randint(0, 256, (9 << 20,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
        (d / "model.safetensors").write_bytes(data.numpy().tobytes())
    assert model_identity(a) != model_identity(b)
    same = (b / "model.safetensors").read_bytes()
    (a / "model.safetensors").write_bytes(same)
    assert model_identity(a) == model_identity(b)


def test_decode_refuses_a_prefill_worker_running_a_fine_tune(default_model_dir: Path, tmp_path: Path) -> None:
    tuned = _fine_tune(default_model_dir, tmp_path / "tuned")
    worker = start_worker(tuned, tmp_path / "worker")
    try:
        with pytest.raises(ConfigError, match="another model"):
            make_engine(default_model_dir, worker.address)
    finally:
        worker.stop()


# ---- a peer of the prefill worker that does not hold the handoff key ----------------------------


def test_prefill_worker_serves_no_peer_without_the_handoff_key(default_model_dir: Path, tmp_path: Path) -> None:
    """A local process that reaches the worker's socket but lacks the handoff key gets a REJECT:
    no prefill, no KV, and no 'shared' flags that would tell it which prefixes a scope has cached."""
    import secrets

    import zmq

    from kvfence.disagg.engine import _params_to_wire
    from kvfence.disagg.wire import MessageKind, decode, encode
    from kvfence.engine.sampling.sampling_params import SamplingParams

    worker = start_worker(default_model_dir, tmp_path / "worker")
    context = zmq.Context()
    rogue = context.socket(zmq.DEALER)
    rogue.setsockopt(zmq.LINGER, 0)
    try:
        rogue.connect(worker.address)
        rogue.send_multipart(encode(MessageKind.SUBMIT, {
            "request_id": "rogue-1", "prompt_token_ids": list(range(10, 60)),
            "params": _params_to_wire(SamplingParams(max_tokens=4)), "scope_key": secrets.token_bytes(32).hex(),
        }))
        kinds = []
        while rogue.poll(10_000):
            message = decode(rogue.recv_multipart())
            kinds.append(message.kind)
            if message.kind in (MessageKind.COMMIT, MessageKind.REJECT, MessageKind.ABORT):
                break
        assert kinds == [MessageKind.REJECT], kinds
    finally:
        rogue.close(0)
        context.term()
        worker.stop()
