"""Sampling parameters of one request, validated once when they are built.

Every field is checked in ``__post_init__``; a bad value raises
:class:`~kvfence.errors.InvalidParameterError` whose ``param`` is the field name and whose message
gives the value and the valid range, so the server can answer HTTP 400 without further checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

from kvfence.errors import InvalidParameterError

__all__ = [
    "GREEDY_TEMPERATURE", "MAX_LOGIT_BIAS", "MAX_LOGPROBS", "MAX_N", "MAX_PENALTY", "LogitsProcessor", "SamplingParams",
]

MAX_LOGPROBS = 20
MAX_N = 128  # choices (n, best_of) per prompt: each is a sequence in the batch
MAX_PENALTY = 2.0  # OpenAI's range for presence and frequency penalties: [-2, 2]
MAX_LOGIT_BIAS = 100.0  # OpenAI's range for a logit bias: [-100, 100]
# Below this, dividing logits by the temperature only risks overflow: sample greedily instead.
GREEDY_TEMPERATURE = 1e-5
# What a torch.Generator accepts as a seed; outside it the engine would fail mid-request.
_SEED_RANGE = (-(2**63), 2**64 - 1)


class LogitsProcessor(Protocol):
    """Changes one sequence's next-token logits before sampling (constraints, biases).

    Called with the tokens generated so far and the float32 logits row ``[V]`` of that sequence (a
    ``torch.Tensor`` under the torch runtime, a NumPy array under the native one); it returns the
    logits to sample from (it may change the row in place and return it). It must be a
    function of its arguments: the engine may call it again for the same position (preemption
    recomputes), and one :class:`SamplingParams` may serve several sequences.
    """

    def __call__(self, output_token_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor: ...


def _is_int(value: Any) -> bool:
    # bool is a subclass of int, but `max_tokens=True` is a client bug, not the number 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)) and math.isfinite(value)


def _fail(name: str, value: Any, expected: str) -> InvalidParameterError:
    return InvalidParameterError(f"{name} must be {expected}; got {value!r}", param=name)


@dataclass
class SamplingParams:
    """How to sample the completion of one request.

    ``temperature=0`` (or below ``GREEDY_TEMPERATURE``) is greedy decoding. ``top_k=None`` and ``top_p=1.0`` disable those filters.
    ``stop`` strings are matched by the engine on the decoded text (the stop string itself is not
    returned by default); ``stop_token_ids`` and the model's EOS tokens (unless ``ignore_eos``) end the
    completion once at least ``min_tokens`` tokens were generated (``include_stop_str_in_output``
    keeps the matched stop string at the end of the text). ``skip_special_tokens=False`` keeps
    special tokens (chat markers, EOS) in the text. ``logprobs=n`` returns the
    chosen token's log-probability and the ``n`` most likely alternatives per generated token.
    ``prompt_logprobs=n`` returns, for every prompt token but the first, its log-probability given
    the tokens before it, its rank, and the ``n`` most likely tokens at that position (0: the
    token's own only); these are the model's raw log-probabilities (no processor, bias or penalty
    applies to the prompt), and a request asking for them computes its whole prompt (it takes no
    prefix-cache hit).
    ``max_tokens=0`` computes the prompt and generates nothing (finish reason ``"length"``): no
    position is sampled and no KV is written past the prompt, so a prompt of exactly
    ``max_model_len`` tokens can be scored (with ``prompt_logprobs``, lm-eval's loglikelihood).
    ``logits_processors`` change the logits before anything else (see :class:`LogitsProcessor`).

    Then, in this order: the ``min_tokens`` bans, ``logit_bias`` (``{token_id: bias}``, bias in
    [-100, 100], added to the logit), ``repetition_penalty`` (Hugging Face / vLLM semantics over
    the prompt *and* the generated tokens: a positive logit of a token seen there is divided by
    it, a negative one multiplied; 1 is off), ``frequency_penalty`` and ``presence_penalty``
    (OpenAI semantics over the generated tokens only: ``logit -= frequency * count +
    presence * (count > 0)``, both in [-2, 2]). Greedy decoding is the argmax of these processed
    logits, and **log-probabilities are those of the processed logits** (after processors, bans,
    bias and penalties; before temperature, ``min_p``, ``top_k`` and ``top_p``), so the top
    alternative of a greedy answer is the token it chose. (vLLM V1 returns the raw model
    logprobs by default; V0 returned processed ones after temperature.) ``min_p`` drops tokens
    whose probability, after temperature, is below ``min_p`` times the most likely one's.

    ``n`` independent choices are sampled per prompt (``best_of`` >= ``n`` are sampled and the
    ``n`` with the highest cumulative log-probability kept); with a ``seed``, choice ``i`` uses its
    own generator derived from ``(seed, i)`` (see :mod:`kvfence.engine.sampling.parallel_sampling`), so
    the choices are reproducible and differ from each other. The step-wise ``LLMEngine`` runs one
    choice per request: ``LLM.generate`` and the server expand ``n`` into requests.
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None
    min_tokens: int = 0
    logits_processors: list[LogitsProcessor] = field(default_factory=list)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    min_p: float = 0.0
    n: int = 1
    best_of: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False

    def __post_init__(self) -> None:
        if not _is_int(self.max_tokens) or self.max_tokens < 0:
            raise _fail("max_tokens", self.max_tokens, "an integer >= 0 (0: score the prompt, generate nothing)")
        if not _is_real(self.temperature) or self.temperature < 0:
            raise _fail("temperature", self.temperature, "a finite number >= 0 (0 means greedy)")
        self.temperature = float(self.temperature)
        if self.top_k is not None and (not _is_int(self.top_k) or self.top_k < 1):
            raise _fail("top_k", self.top_k, "an integer >= 1, or null to disable it")
        if not _is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise _fail("top_p", self.top_p, "a number in the interval (0, 1]")
        self.top_p = float(self.top_p)
        if self.seed is not None and (
            not _is_int(self.seed) or not _SEED_RANGE[0] <= self.seed <= _SEED_RANGE[1]
        ):
            raise _fail("seed", self.seed, f"an integer in [{_SEED_RANGE[0]}, {_SEED_RANGE[1]}] or null")
        self.stop = self._validate_stop(self.stop)
        self.stop_token_ids = self._validate_stop_token_ids(self.stop_token_ids)
        for flag in ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output"):
            if not isinstance(getattr(self, flag), bool):
                raise _fail(flag, getattr(self, flag), "a boolean")
        if self.logprobs is not None and (
            not _is_int(self.logprobs) or not 0 <= self.logprobs <= MAX_LOGPROBS
        ):
            raise _fail("logprobs", self.logprobs, f"an integer in [0, {MAX_LOGPROBS}] or null")
        if self.prompt_logprobs is not None and (
            not _is_int(self.prompt_logprobs) or not 0 <= self.prompt_logprobs <= MAX_LOGPROBS
        ):
            raise _fail("prompt_logprobs", self.prompt_logprobs,
                        f"an integer in [0, {MAX_LOGPROBS}] (0: each prompt token's own log-probability) or null")
        if not _is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise _fail("min_tokens", self.min_tokens, f"an integer in [0, max_tokens={self.max_tokens}]")
        if not isinstance(self.logits_processors, list | tuple) or not all(map(callable, self.logits_processors)):
            raise _fail("logits_processors", self.logits_processors, "a list of callables")
        self.logits_processors = list(self.logits_processors)
        self._validate_penalties()
        self.logit_bias = self._validate_logit_bias(self.logit_bias)
        if not _is_real(self.min_p) or not 0 <= self.min_p <= 1:
            raise _fail("min_p", self.min_p, "a number in [0, 1] (0 disables it)")
        self.min_p = float(self.min_p)
        if not _is_int(self.n) or not 1 <= self.n <= MAX_N:
            raise _fail("n", self.n, f"an integer in [1, {MAX_N}]")
        if self.best_of is not None and (not _is_int(self.best_of) or not self.n <= self.best_of <= MAX_N):
            raise _fail("best_of", self.best_of, f"an integer in [n={self.n}, {MAX_N}] or null")

    def _validate_penalties(self) -> None:
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not _is_real(value) or not -MAX_PENALTY <= value <= MAX_PENALTY:
                raise _fail(name, value, f"a number in [-{MAX_PENALTY:g}, {MAX_PENALTY:g}] (0 disables it)")
            setattr(self, name, float(value))
        if not _is_real(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise _fail("repetition_penalty", self.repetition_penalty, "a number > 0 (1 disables it)")
        self.repetition_penalty = float(self.repetition_penalty)

    @staticmethod
    def _validate_logit_bias(bias: Any) -> dict[int, float]:
        if bias is None:
            return {}
        if not isinstance(bias, dict):
            raise _fail("logit_bias", bias, "a mapping of token ids to numbers")
        out: dict[int, float] = {}
        for key, value in bias.items():
            # OpenAI's JSON keys are strings of digits; the Python API may use ints.
            token = int(key) if isinstance(key, str) and key.isascii() and key.isdigit() else key
            if not _is_int(token) or token < 0:
                raise _fail("logit_bias", bias, f"keyed by non-negative token ids (got key {key!r})")
            if not _is_real(value) or not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
                raise _fail("logit_bias", bias,
                            f"biases in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}] (token {key}: {value!r})")
            out[token] = float(value)
        return out

    @staticmethod
    def _validate_stop(stop: Any) -> list[str]:
        if stop is None:
            return []
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list | tuple) or not all(isinstance(s, str) and s for s in stop):
            raise _fail("stop", stop, "a non-empty string or a list of non-empty strings")
        return list(stop)

    @staticmethod
    def _validate_stop_token_ids(ids: Any) -> list[int]:
        if ids is None:
            return []
        if not isinstance(ids, list | tuple) or not all(_is_int(t) and t >= 0 for t in ids):
            raise _fail("stop_token_ids", ids, "a list of non-negative integer token ids")
        return list(ids)

    @property
    def num_sequences(self) -> int:
        """Sequences sampled for one prompt: ``best_of`` when set, else ``n``."""
        return self.best_of if self.best_of is not None else self.n

    @property
    def has_penalties(self) -> bool:
        """True when the sampler must count tokens (frequency, presence or repetition penalty)."""
        return bool(self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0)

    @property
    def is_greedy(self) -> bool:
        """True when sampling always picks the most likely token (temperature ~0 or top_k 1)."""
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1
