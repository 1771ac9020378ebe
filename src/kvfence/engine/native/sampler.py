"""The NumPy sampler of the ``native`` runtime: the torch sampler's steps, in its order, on float32 arrays.

Per row: logits processors (called with the row as a NumPy float32 array), ``min_tokens`` bans, logit bias, repetition / frequency / presence penalties (these decide
greedy picks and the returned log-probabilities), then, for sampled rows, temperature, ``min_p``,
``top_k``, ``top_p`` and an inverse-CDF draw of one float64 uniform from the row's generator (its
own when the request is seeded). Greedy rows pick the first of equal maxima, as the torch sampler.

A seeded request draws its own stream (NumPy's PCG64): the same seed gives the same tokens run after
run under this runtime, not the tokens the torch runtime draws for that seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvfence.engine.sampling.sample_rows import Generator, SampledToken, SampleRow

__all__ = ["NumpyGenerator", "sample"]


class NumpyGenerator:
    """A seeded PCG64 stream with the ``get_state`` / ``set_state`` the engine rewinds on a failed step."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def uniform(self) -> float:
        """One float64 in [0, 1)."""
        return float(self._rng.random())

    def get_state(self) -> Any:
        return self._rng.bit_generator.state

    def set_state(self, state: Any) -> None:
        self._rng.bit_generator.state = state


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of float32 ``x`` [N, V] (rows of -inf only stay NaN, as torch's)."""
    top = x.max(axis=-1, keepdims=True)
    shifted = x - top
    with np.errstate(divide="ignore", invalid="ignore"):
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def softmax(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - top)
        return e / e.sum(axis=-1, keepdims=True)


def sample(logits: np.ndarray, rows: list[SampleRow], default_generator: Generator) -> list[SampledToken]:
    """One token per row of ``logits`` [N, V] float32 (changed in place by bans, biases and penalties)."""
    for i, row in enumerate(rows):
        for processor in row.params.logits_processors:
            logits[i] = processor(row.output_token_ids, logits[i])
        if row.num_generated < row.params.min_tokens and row.banned_until_min_tokens:
            logits[i, row.banned_until_min_tokens] = -np.inf
        for token_id, bias in row.params.logit_bias.items():
            logits[i, token_id] += np.float32(bias)
        if row.params.has_penalties:
            _penalize(logits[i], row)
    want_logprobs = any(row.params.logprobs is not None for row in rows)
    logprobs = log_softmax(logits) if want_logprobs else None

    token_ids = [int(t) for t in np.argmax(logits, axis=-1)] if len(rows) else []
    for i, row in enumerate(rows):
        if not row.params.is_greedy:
            generator = row.generator or default_generator
            token_ids[i] = _draw(logits[i], row, generator)

    out: list[SampledToken] = []
    for i, (row, token) in enumerate(zip(rows, token_ids, strict=True)):
        top: dict[int, float] | None = None
        if logprobs is not None and row.params.logprobs is not None:
            top = {token: float(logprobs[i, token])}
            n = row.params.logprobs
            if n > 0:
                picked = np.argpartition(-logprobs[i], n - 1)[:n]
                picked = picked[np.argsort(-logprobs[i, picked], kind="stable")]
                for tid in picked.tolist():
                    top.setdefault(int(tid), float(logprobs[i, tid]))
        out.append(SampledToken(token, top))
    return out


def _penalize(x: np.ndarray, row: SampleRow) -> None:
    """Repetition (over prompt and output), then frequency and presence (over the output), in place."""
    params = row.params
    outputs = np.asarray(row.output_token_ids, dtype=np.int64)
    if params.repetition_penalty != 1.0:
        seen = np.unique(np.concatenate([np.asarray(row.prompt_token_ids, dtype=np.int64), outputs]))
        values = x[seen]
        penalty = np.float32(params.repetition_penalty)
        x[seen] = np.where(values > 0, values / penalty, values * penalty)
    if params.frequency_penalty and outputs.size:
        np.add.at(x, outputs, -np.float32(params.frequency_penalty))
    if params.presence_penalty and outputs.size:
        x[np.unique(outputs)] -= np.float32(params.presence_penalty)


def _draw(logits: np.ndarray, row: SampleRow, generator: Generator) -> int:
    """Temperature, ``min_p``, ``top_k``, ``top_p``, then one inverse-CDF draw."""
    params = row.params
    vocab = logits.shape[-1]
    x = logits / np.float32(params.temperature)
    if params.min_p > 0:
        probs = softmax(x)
        x = np.where(probs < np.float32(params.min_p) * probs.max(), np.float32(-np.inf), x)
    if params.top_k is not None and params.top_k < vocab:
        kth = np.partition(x, vocab - params.top_k)[vocab - params.top_k]
        x = np.where(x < kth, np.float32(-np.inf), x)  # ties with the k-th are kept
    if params.top_p < 1.0:
        order = np.argsort(-x, kind="stable")
        ordered = x[order]
        probs = softmax(ordered)
        drop = (np.cumsum(probs) - probs) >= np.float32(params.top_p)  # keeps the first always
        x = np.empty_like(x)
        x[order] = np.where(drop, np.float32(-np.inf), ordered)
    if not isinstance(generator, NumpyGenerator):
        raise TypeError(f"the native sampler draws from a NumpyGenerator, got {type(generator).__name__}")
    cdf = np.cumsum(softmax(x).astype(np.float64))
    return int(min(np.searchsorted(cdf, generator.uniform() * cdf[-1], side="right"), vocab - 1))
