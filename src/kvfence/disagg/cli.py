"""``kvfence disagg``: run a prefill worker, or a demo of disaggregated prefill/decode."""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from kvfence.engine.cli_options import engine_config, engine_options
from kvfence.engine.config import EngineConfig
from kvfence.errors import ConfigError

__all__ = ["disagg"]


def _engine_options(fn: Any) -> Any:
    """The shared engine options plus ``--seed`` (the built-in model's weights, unseeded sampling)."""
    return engine_options(click.option("--seed", type=int, default=0, show_default=True)(fn))


def _engine_config(opts: dict[str, Any]) -> EngineConfig:
    return engine_config(opts, seed=opts["seed"])


def _check_loopback(listen: str, allow_remote: bool) -> None:
    if not listen.startswith("tcp://") or allow_remote:
        return
    host = listen[len("tcp://") :].rsplit(":", 1)[0].strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"--listen {listen} is not a loopback address; prompts and KV travel unencrypted. "
            "Use 127.0.0.1, ipc://PATH, or pass --allow-remote on a private network"
        )


def _exit_with_parent(parent_pid: int, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        if os.getppid() != parent_pid:
            logging.getLogger(__name__).warning("the engine process %d is gone; the prefill worker stops", parent_pid)
            stop.set()


@click.group("disagg")
def disagg() -> None:
    """Disaggregated prefill/decode with a verified KV handoff (invariant I4)."""


@disagg.command("prefill-worker")
@_engine_options
@click.option("--listen", default="tcp://127.0.0.1:5600", show_default=True,
              help="ZeroMQ endpoint to bind: tcp://127.0.0.1:PORT (PORT may be *) or ipc://PATH.")
@click.option("--allow-remote", is_flag=True, help="Allow a non-loopback tcp address.")
@click.option("--ready-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the bound endpoint to this file once listening.")
@click.option("--handoff-key-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Hex key for page checksums and manifest MACs (default: $KVFENCE_HANDOFF_KEY, else unkeyed).")
@click.option("--parent-pid", type=int, default=None, hidden=True,
              help="Exit when this process (the engine that spawned the worker) is gone.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True)
def prefill_worker(listen: str, allow_remote: bool, ready_file: Path | None, handoff_key_file: Path | None,
                   parent_pid: int | None, log_level: str, **opts: Any) -> None:
    """Run the prefill side: take prompts from decode workers and hand their KV over."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _check_loopback(listen, allow_remote)
    from kvfence.disagg.config import read_handoff_key

    key = read_handoff_key(handoff_key_file)
    if not key:  # I4: without a key, checksums and SUBMIT MACs are plain digests anybody can compute
        logging.getLogger("kvfence.disagg").warning(
            "UNSAFE: no handoff key (--handoff-key-file or $KVFENCE_HANDOFF_KEY): any process that reaches "
            "%s can have prompts prefilled under any scope key and read their KV back", listen)
    config = _engine_config(opts)
    from kvfence.disagg.prefill_worker import PrefillWorker

    worker = PrefillWorker(config, listen=listen, key=key)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if parent_pid is not None:
        # A spawned worker must not outlive its engine (e.g. a server killed by a signal skips atexit).
        threading.Thread(target=_exit_with_parent, args=(parent_pid, stop), daemon=True).start()
    if ready_file is not None:
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(worker.endpoint, encoding="utf-8")
        tmp.replace(ready_file)
    click.echo(f"prefill worker {worker.instance_id} listening on {worker.endpoint}", err=True)
    try:
        worker.serve(stop)
    finally:
        worker.close()


@disagg.command("demo")
@_engine_options
@click.option("--prompt", "prompts", multiple=True, required=True, help="Prompt text (repeat for a batch).")
@click.option("--max-tokens", type=int, default=32, show_default=True)
@click.option("--compare/--no-compare", default=True, show_default=True,
              help="Also run the colocated engine and report whether the greedy outputs are equal.")
def demo(prompts: tuple[str, ...], max_tokens: int, compare: bool, **opts: Any) -> None:
    """Spawn a prefill worker, decode here, and print each answer with the handoff statistics."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from kvfence.disagg.config import DisaggConfig
    from kvfence.disagg.engine import DisaggregatedEngine, run_to_completion
    from kvfence.engine.sampling.sampling_params import SamplingParams

    config = _engine_config(opts)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    scope = b"demo-scope"
    with DisaggregatedEngine(DisaggConfig(engine=config)) as engine:
        token_prompts = [engine.tokenizer.encode(p) for p in prompts]
        outputs = run_to_completion(engine, token_prompts, params, scope)
        stats = engine.stats()
    for text, out in zip(prompts, outputs, strict=True):
        click.echo(f"--- {text!r}\n{out.text}")
        click.echo(f"[{len(out.token_ids)} tokens, finish_reason={out.finish_reason}]", err=True)
    click.echo(f"handoffs verified: {stats.num_handoffs_verified}, failed: {dict(stats.handoff_failures)}", err=True)
    if compare:
        from kvfence.engine.core.llm_engine import LLMEngine

        colocated = run_to_completion(LLMEngine(config), token_prompts, params, scope)
        same = [a.token_ids == b.token_ids for a, b in zip(outputs, colocated, strict=True)]
        click.echo(f"greedy output equal to the colocated engine: {all(same)} {same}", err=True)


if __name__ == "__main__":  # the spawned worker runs `python -m kvfence.disagg.cli prefill-worker ...`
    from kvfence.cli import main as _main

    _main(["disagg", *sys.argv[1:]])
