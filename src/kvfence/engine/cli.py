"""``kvfence generate``: one offline generation through the engine, for a quick look or a smoke test."""

from __future__ import annotations

import logging
import sys

import click

from kvfence.engine.sampling_params import SamplingParams
from kvfence.errors import ConfigError

__all__ = ["generate"]


def _max_model_len(value: str | None) -> int | str | None:
    if value is None or value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"--max-model-len must be a positive integer or 'auto', got {value!r}") from None


@click.command("generate")
@click.option("--prompt", "prompts", multiple=True, required=True, help="Prompt text (repeat for a batch).")
@click.option("--model", default=None, help="Local Hugging Face model directory (default: built-in random model).")
@click.option("--max-tokens", default=32, show_default=True, type=int, help="Tokens to generate per prompt.")
@click.option("--temperature", default=0.0, show_default=True, type=float, help="0 = greedy.")
@click.option("--top-p", default=1.0, show_default=True, type=float)
@click.option("--top-k", default=None, type=int)
@click.option("--seed", default=None, type=int, help="Sampling seed (reproducible output).")
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@click.option("--chat", is_flag=True, help="Wrap the prompt as a user message in the model's chat template.")
@click.option("--max-model-len", default=None, help="Maximum context, or 'auto' to fit the KV pool.")
@click.option("--kv-cache-tokens", default=None, type=int, help="KV pool size in tokens.")
@click.option("--page-size", default=16, show_default=True, type=int)
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default="float32", show_default=True)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda[:N].")
@click.option("--threads", default=None, type=int, help="CPU threads for torch (default: torch's choice).")
@click.option("--unsafe-no-scrub", is_flag=True, help="UNSAFE, benchmarks only: do not zero freed KV pages.")
@click.option("--verify-isolation", is_flag=True, help="Paranoid mode: re-check I1 on every step.")
@click.option("-v", "--verbose", is_flag=True, help="Log engine start-up details.")
def generate(
    prompts: tuple[str, ...],
    model: str | None,
    max_tokens: int,
    temperature: float,
    top_p: float,
    top_k: int | None,
    seed: int | None,
    stop: tuple[str, ...],
    chat: bool,
    max_model_len: str | None,
    kv_cache_tokens: int | None,
    page_size: int,
    dtype: str,
    device: str,
    threads: int | None,
    unsafe_no_scrub: bool,
    verify_isolation: bool,
    verbose: bool,
) -> None:
    """Generate a completion for each --prompt and print it."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from kvfence.engine.llm import LLM  # torch is imported only when the command runs

    params = SamplingParams(
        max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, stop=list(stop)
    )
    llm = LLM(
        model=model,
        max_model_len=_max_model_len(max_model_len),  # type: ignore[arg-type]
        kv_cache_tokens=kv_cache_tokens,
        page_size=page_size,
        dtype=dtype,  # type: ignore[arg-type]
        device=device,
        num_threads=threads,
        scrub=not unsafe_no_scrub,
        verify_isolation=verify_isolation,
    )
    if llm.engine.is_random_weights:
        click.echo(
            f"note: {llm.engine.model_name} has RANDOM WEIGHTS (built-in offline model): the text is gibberish. "
            "Use --model DIR for a real model.",
            err=True,
        )
    token_prompts = []
    for text in prompts:
        if chat:
            rendered = llm.tokenizer.apply_chat_template([{"role": "user", "content": text}])
            token_prompts.append(llm.tokenizer.encode(rendered, add_special_tokens=False))
        else:
            token_prompts.append(llm.tokenizer.encode(text))
    outputs = llm.generate(token_prompts, params)
    for text, out in zip(prompts, outputs, strict=True):
        if len(prompts) > 1:
            click.echo(f"--- prompt: {text!r}")
        click.echo(out.text)
        click.echo(
            f"[{len(out.token_ids)} tokens, finish_reason={out.finish_reason}, "
            f"prompt={out.num_prompt_tokens} tokens, cached={out.num_cached_tokens}]",
            err=True,
        )
    sys.stdout.flush()
