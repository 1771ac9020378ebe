"""The offline Python API: ``LLM(...).generate(prompts, params, tenant=...)``, in the spirit of vLLM's."""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field
from typing import Literal

from kvfence.engine.config import DType, EngineConfig, KVCacheDType, Runtime
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.core.outputs import PromptLogprobs, RequestOutput
from kvfence.engine.sampling.generation_defaults import check_generation_config, sampling_defaults_for
from kvfence.engine.sampling.parallel_sampling import (
    check_choices_fit,
    choice_params,
    cumulative_logprob,
    rank_best,
)
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.engine.text.tokenizer import Tokenizer
from kvfence.errors import InvalidParameterError
from kvfence.scope import CacheScope, TenantIdentity, compute_scope_key

__all__ = ["LLM", "CompletionOutput", "SampleOutput"]

_ANONYMOUS = TenantIdentity(organization="anonymous")


@dataclass
class SampleOutput:
    """One choice of a prompt (``SamplingParams.n`` of them). ``cumulative_logprob`` is the sum of
    the chosen tokens' log-probabilities when they were recorded (``logprobs`` or ``best_of``)."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[dict[int, float]] | None = None
    cumulative_logprob: float | None = None


@dataclass
class CompletionOutput:
    """One prompt's result. ``num_cached_tokens`` counts prompt tokens served from the tenant's cache scope.

    ``outputs`` holds the prompt's ``n`` choices (with ``best_of``: the best ``n``, best first);
    ``text``, ``token_ids``, ``finish_reason`` and ``logprobs`` are those of ``outputs[0]``.
    With several choices ``num_cached_tokens`` is the fewest any choice had (the prompt was
    computed at least once; the others map its pages). ``prompt_logprobs`` (when asked for) has
    one entry per prompt token, the first None, shared by the prompt's choices.
    """

    request_id: str
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    finish_reason: str | None
    num_prompt_tokens: int
    num_cached_tokens: int
    logprobs: list[dict[int, float]] | None = None
    outputs: list[SampleOutput] = field(default_factory=list)
    prompt_logprobs: PromptLogprobs | None = None


class LLM:
    """Generate offline with the kvfence engine.

    ``cache_scope`` (org, workspace, key, request or global) decides which tenants share prefix-cache
    pages: the scope key is an HMAC of the tenant identity under a secret of this instance (I5),
    so two organisations never share a page with the default ``"org"`` scope.

    ``generation_config`` says where default sampling parameters come from, as vLLM's option:
    ``"auto"`` (the default) reads the model's ``generation_config.json`` (temperature, top_p,
    top_k, min_p, repetition_penalty), ``"vllm"`` uses :class:`SamplingParams`' own defaults, and
    a directory path reads that directory's ``generation_config.json``. These defaults are what
    :meth:`get_default_sampling_params` returns and what :meth:`generate` samples with when it
    is given no parameters (``params=None``, or ``None`` for a prompt in a list), as
    ``kvfence serve`` does for the fields a request leaves out. A :class:`SamplingParams` passed
    explicitly is used as it is (as in vLLM); to change one field of the model's defaults, use
    ``dataclasses.replace(llm.get_default_sampling_params(), max_tokens=64)``.

    ``runtime="native"`` computes with kvfence's CPU kernels from NumPy, with no PyTorch in the
    process (about 220 MB less resident memory; Llama-family models on the CPU; see
    :mod:`kvfence.engine.core.runtime`).
    """

    def __init__(
        self,
        model: str | None = None,
        max_model_len: int | Literal["auto"] | None = None,
        kv_cache_tokens: int | None = None,
        page_size: int = 16,
        cache_scope: str | CacheScope = "org",
        dtype: DType = "float32",
        *,
        kv_cache_memory: int | None = None,
        max_num_seqs: int = 64,
        max_num_batched_tokens: int = 2048,
        max_prefill_chunk: int = 512,
        scrub: bool = True,
        prefix_cache_tokens: int | None = None,
        prefix_cache_scope_tokens: int | None = None,
        unsafe_shared_prefix_cache: bool = False,
        verify_isolation: bool = False,
        seed: int = 0,
        device: str = "auto",
        num_threads: int | None = None,
        scope_secret: bytes | None = None,
        kv_cache_dtype: KVCacheDType = "auto",
        generation_config: str = "auto",
        runtime: Runtime = "torch",
    ) -> None:
        self.cache_scope = CacheScope.parse(cache_scope)
        check_generation_config(generation_config)  # before the model loads: a typo fails fast
        self._secret = scope_secret or secrets.token_bytes(32)
        self.engine = LLMEngine(
            EngineConfig(
                model=model,
                max_model_len=max_model_len,
                kv_cache_tokens=kv_cache_tokens,
                kv_cache_memory=kv_cache_memory,
                page_size=page_size,
                dtype=dtype,
                device=device,
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                max_prefill_chunk=max_prefill_chunk,
                scrub=scrub,
                prefix_cache_tokens=prefix_cache_tokens,
                prefix_cache_scope_tokens=prefix_cache_scope_tokens,
                unsafe_shared_prefix_cache=unsafe_shared_prefix_cache,
                verify_isolation=verify_isolation,
                seed=seed,
                num_threads=num_threads,
                kv_cache_dtype=kv_cache_dtype,
                runtime=runtime,
            )
        )
        self._ids = itertools.count()
        self._sampling_defaults = sampling_defaults_for(generation_config, self.engine.model_dir)

    def get_default_sampling_params(self) -> SamplingParams:
        """The sampling parameters :meth:`generate` uses when given none (see ``generation_config``)."""
        return SamplingParams(**self._sampling_defaults)  # type: ignore[arg-type]  # fields checked by the reader

    @property
    def tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    def scope_key(self, tenant: TenantIdentity | None) -> bytes:
        return compute_scope_key(tenant or _ANONYMOUS, self.cache_scope, self._secret)

    def generate(
        self,
        prompts: str | list[str] | list[list[int]],
        params: SamplingParams | list[SamplingParams | None] | None = None,
        tenant: TenantIdentity | None = None,
    ) -> list[CompletionOutput]:
        """Run every prompt to completion in one continuous batch; one result per prompt, in order.

        ``params`` None (for all prompts, or for one prompt in a list) means
        :meth:`get_default_sampling_params`: the model's ``generation_config.json`` defaults.

        A prompt with ``n`` (or ``best_of``) > 1 runs as that many engine requests, seeded per
        choice. Every prompt is checked (I3: each choice fits the context, all of a prompt's
        choices fit the pool at once) before any is queued, so a bad one leaves nothing behind.
        """
        items: list[str] | list[list[int]] = [prompts] if isinstance(prompts, str) else prompts
        if not items:
            return []
        if isinstance(params, list):
            if len(params) != len(items):
                raise InvalidParameterError(
                    f"got {len(params)} sampling params for {len(items)} prompts", param="params"
                )
            per_prompt = [p if p is not None else self.get_default_sampling_params() for p in params]
        else:
            per_prompt = [params if params is not None else self.get_default_sampling_params()] * len(items)
        token_lists = [self._tokens(p) for p in items]
        bm = self.engine.block_manager
        shares = self.cache_scope is not CacheScope.REQUEST
        for ids, sp in zip(token_lists, per_prompt, strict=True):
            self.engine.scheduler.check_admissible(len(ids), sp.max_tokens)
            check_choices_fit(len(ids), sp, bm.num_pages, bm.page_size, shares_prefix=shares)
        # request ids per prompt, one per choice
        request_ids = [[f"llm-{next(self._ids)}" for _ in range(sp.num_sequences)] for sp in per_prompt]
        added: list[str] = []
        try:
            for rids, ids, sp in zip(request_ids, token_lists, per_prompt, strict=True):
                # One key per prompt, shared by its choices (a fresh, unshared one per prompt
                # under the "request" scope, where nothing is shared, not even between choices).
                scope_key = self.scope_key(tenant)
                for index, rid in enumerate(rids):
                    self.engine.add_request(rid, ids, choice_params(sp, index), scope_key)
                    added.append(rid)
            finals: dict[str, RequestOutput] = {}
            while len(finals) < len(added):
                if not self.engine.has_unfinished_requests():
                    raise RuntimeError("the engine stopped with requests unfinished")
                for out in self.engine.step():
                    if out.finished:
                        finals[out.request_id] = out
                _raise_for_failed(self.engine.take_failed_requests(), request_ids)
        except BaseException:
            for rid in added:
                self.engine.abort_request(rid)
            raise
        return [_completion([finals[rid] for rid in rids], sp) for rids, sp in zip(request_ids, per_prompt, strict=True)]

    def _tokens(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.engine.tokenizer.encode(prompt)
        if isinstance(prompt, list):
            return list(prompt)
        raise InvalidParameterError(f"a prompt must be a string or a list of token ids, got {type(prompt).__name__}", param="prompt")


def _completion(choices: list[RequestOutput], params: SamplingParams) -> CompletionOutput:
    """One prompt's result from its choices' final outputs (ranked and trimmed for ``best_of``)."""
    scores = [cumulative_logprob(c.token_ids, c.logprobs) for c in choices]
    order = rank_best(scores, params.n) if len(choices) > params.n else list(range(len(choices)))
    samples = [
        SampleOutput(
            index=i,
            text=choices[k].text,
            token_ids=choices[k].token_ids,
            finish_reason=choices[k].finish_reason,
            logprobs=choices[k].logprobs if params.logprobs is not None else None,
            cumulative_logprob=scores[k] if choices[k].logprobs is not None else None,
        )
        for i, k in enumerate(order)
    ]
    first = choices[order[0]]
    return CompletionOutput(
        request_id=first.request_id,
        prompt_token_ids=first.prompt_token_ids,
        text=samples[0].text,
        token_ids=samples[0].token_ids,
        finish_reason=samples[0].finish_reason,
        num_prompt_tokens=first.num_prompt_tokens,
        num_cached_tokens=min(c.num_cached_tokens for c in choices),
        logprobs=samples[0].logprobs,
        outputs=samples,
        prompt_logprobs=choices[0].prompt_logprobs,  # choice 0 scores the prompt (choice_params)
    )


def _raise_for_failed(failed: list[tuple[str, BaseException]], request_ids: list[list[str]]) -> None:
    """Raise for the first of our prompts the engine aborted because the forward pass failed on it alone
    (fault isolation); the other prompts of the call are aborted by the caller, not left running."""
    for rid, error in failed:
        for index, rids in enumerate(request_ids):
            if rid in rids:
                raise RuntimeError(f"the forward pass failed on prompt {index}: {error}") from error

