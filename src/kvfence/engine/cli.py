"""``kvfence generate``: one offline generation through the engine, for a quick look or a smoke test."""

from __future__ import annotations

import logging
import sys
from dataclasses import asdict
from typing import Any

import click

from kvfence.engine.cli_options import engine_config, engine_options
from kvfence.engine.sampling_params import SamplingParams

__all__ = ["generate"]


@click.command("generate")
@click.option("--prompt", "prompts", multiple=True, required=True, help="Prompt text (repeat for a batch).")
@click.option("--max-tokens", default=32, show_default=True, type=int, help="Tokens to generate per prompt.")
@click.option("--temperature", default=0.0, show_default=True, type=float, help="0 = greedy.")
@click.option("--top-p", default=1.0, show_default=True, type=float)
@click.option("--top-k", default=None, type=int)
@click.option("--seed", default=None, type=int, help="Sampling seed (reproducible output).")
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@click.option("--chat", is_flag=True, help="Wrap the prompt as a user message in the model's chat template.")
@engine_options
@click.option("-v", "--verbose", is_flag=True, help="Log engine start-up details.")
def generate(
    prompts: tuple[str, ...],
    max_tokens: int,
    temperature: float,
    top_p: float,
    top_k: int | None,
    seed: int | None,
    stop: tuple[str, ...],
    chat: bool,
    verbose: bool,
    **opts: Any,
) -> None:
    """Generate a completion for each --prompt and print it."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from kvfence.engine.llm import LLM  # torch is imported only when the command runs

    params = SamplingParams(
        max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, stop=list(stop)
    )
    llm = LLM(**asdict(engine_config(opts)))
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
