"""``kvfence generate``: one offline generation through the engine, for a quick look or a smoke test."""

from __future__ import annotations

import logging
import sys
from dataclasses import asdict
from typing import Any

import click

from kvfence.engine.cli_options import engine_config, engine_options, generation_config_option
from kvfence.engine.sampling.generation_defaults import sampling_defaults_for
from kvfence.engine.sampling.sampling_params import SamplingParams

__all__ = ["generate"]

# What `generate` samples with when neither an option nor the model's generation_config.json says.
_CLI_DEFAULTS: dict[str, float | int | None] = {
    "temperature": 0.0, "top_p": 1.0, "top_k": None, "min_p": 0.0, "repetition_penalty": 1.0,
}


@click.command("generate")
@click.option("--prompt", "prompts", multiple=True, required=True, help="Prompt text (repeat for a batch).")
@click.option("--max-tokens", default=32, show_default=True, type=int, help="Tokens to generate per prompt.")
@click.option("--temperature", default=None, type=float,
              help="0 = greedy. Default: the model's generation_config.json (see --generation-config), else 0.")
@click.option("--top-p", default=None, type=float, help="Default: the model's, else 1.")
@click.option("--top-k", default=None, type=int, help="Default: the model's, else off.")
@click.option("--seed", default=None, type=int, help="Sampling seed (reproducible output).")
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@click.option("--presence-penalty", default=0.0, show_default=True, type=float,
              help="OpenAI presence penalty in [-2, 2]: subtracted once from every token already generated.")
@click.option("--frequency-penalty", default=0.0, show_default=True, type=float,
              help="OpenAI frequency penalty in [-2, 2]: subtracted per occurrence of a generated token.")
@click.option("--repetition-penalty", default=None, type=float,
              help="HF/vLLM repetition penalty > 0 over prompt and output tokens (1 = off). Default: the model's, else 1.")
@click.option("--min-p", default=None, type=float,
              help="Drop tokens less likely than this fraction of the most likely one (0 = off). "
                   "Default: the model's, else 0.")
@click.option("--logit-bias", "logit_bias", multiple=True, metavar="TOKEN_ID=BIAS",
              help="Add BIAS in [-100, 100] to a token's logit (repeatable).")
@click.option("-n", "--n", "num_choices", default=1, show_default=True, type=int,
              help="Independent choices per prompt (seeded per choice with --seed).")
@click.option("--chat", is_flag=True, help="Wrap the prompt as a user message in the model's chat template.")
@generation_config_option
@engine_options
@click.option("-v", "--verbose", is_flag=True, help="Log engine start-up details.")
def generate(
    prompts: tuple[str, ...],
    max_tokens: int,
    temperature: float | None,
    top_p: float | None,
    top_k: int | None,
    seed: int | None,
    stop: tuple[str, ...],
    presence_penalty: float,
    frequency_penalty: float,
    repetition_penalty: float | None,
    min_p: float | None,
    logit_bias: tuple[str, ...],
    num_choices: int,
    chat: bool,
    generation_config: str,
    verbose: bool,
    **opts: Any,
) -> None:
    """Generate a completion for each --prompt and print it."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from kvfence.engine.llm import LLM  # torch is imported only when the command runs

    logit_biases = _parse_logit_bias(logit_bias)  # a bad option fails before the model loads
    llm = LLM(**asdict(engine_config(opts)), generation_config=generation_config)
    given = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p,
             "repetition_penalty": repetition_penalty}
    # An option given wins; then the model's generation_config.json (as `kvfence serve` and vLLM); then
    # this command's own defaults (greedy).
    sampling = {**_CLI_DEFAULTS, **sampling_defaults_for(generation_config, llm.engine.model_dir),
                **{name: value for name, value in given.items() if value is not None}}
    params = SamplingParams(
        max_tokens=max_tokens, seed=seed, stop=list(stop), presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty, logit_bias=logit_biases, n=num_choices, **sampling,  # type: ignore[arg-type]
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
        for choice in out.outputs:
            if len(out.outputs) > 1:
                click.echo(f"--- choice {choice.index}")
            click.echo(choice.text)
            click.echo(
                f"[{len(choice.token_ids)} tokens, finish_reason={choice.finish_reason}, "
                f"prompt={out.num_prompt_tokens} tokens, cached={out.num_cached_tokens}]",
                err=True,
            )
    sys.stdout.flush()


def _parse_logit_bias(items: tuple[str, ...]) -> dict[int, float]:
    bias: dict[int, float] = {}
    for item in items:
        token, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError(item)
            bias[int(token)] = float(value)
        except ValueError:
            raise click.BadParameter(f"expected TOKEN_ID=BIAS, got {item!r}", param_hint="--logit-bias") from None
    return bias
