"""The offline Python API: ``LLM(...).generate(prompts, params, tenant=...)``, in the spirit of vLLM's."""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass
from typing import Literal

from kvfence.engine.config import DType, EngineConfig
from kvfence.engine.llm_engine import LLMEngine
from kvfence.engine.outputs import RequestOutput
from kvfence.engine.sampling_params import SamplingParams
from kvfence.engine.scope import CacheScope, TenantIdentity, compute_scope_key
from kvfence.engine.tokenizer import Tokenizer
from kvfence.errors import InvalidParameterError

__all__ = ["LLM", "CompletionOutput"]

_ANONYMOUS = TenantIdentity(organization="anonymous")


@dataclass
class CompletionOutput:
    """One prompt's result. ``num_cached_tokens`` counts prompt tokens served from the tenant's cache scope."""

    request_id: str
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    finish_reason: str | None
    num_prompt_tokens: int
    num_cached_tokens: int
    logprobs: list[dict[int, float]] | None = None


class LLM:
    """Generate offline with the kvfence engine.

    ``cache_scope`` (org, workspace, key, request or global) decides which tenants share prefix-cache
    pages: the scope key is an HMAC of the tenant identity under a secret of this instance (I5),
    so two organisations never share a page with the default ``"org"`` scope.
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
        verify_isolation: bool = False,
        seed: int = 0,
        device: str = "auto",
        num_threads: int | None = None,
        scope_secret: bytes | None = None,
    ) -> None:
        self.cache_scope = CacheScope.parse(cache_scope)
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
                verify_isolation=verify_isolation,
                seed=seed,
                num_threads=num_threads,
            )
        )
        self._ids = itertools.count()

    @property
    def tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    def scope_key(self, tenant: TenantIdentity | None) -> bytes:
        return compute_scope_key(tenant or _ANONYMOUS, self.cache_scope, self._secret)

    def generate(
        self,
        prompts: str | list[str] | list[list[int]],
        params: SamplingParams | list[SamplingParams] | None = None,
        tenant: TenantIdentity | None = None,
    ) -> list[CompletionOutput]:
        """Run every prompt to completion in one continuous batch; results in prompt order.

        Every prompt is checked (I3) before any is queued, so a bad one leaves nothing behind.
        """
        items: list[str] | list[list[int]] = [prompts] if isinstance(prompts, str) else prompts
        if not items:
            return []
        if isinstance(params, list):
            if len(params) != len(items):
                raise InvalidParameterError(
                    f"got {len(params)} sampling params for {len(items)} prompts", param="params"
                )
            per_prompt = params
        else:
            per_prompt = [params or SamplingParams()] * len(items)
        token_lists = [self._tokens(p) for p in items]
        for ids, sp in zip(token_lists, per_prompt, strict=True):
            self.engine.scheduler.check_admissible(len(ids), sp.max_tokens)
        request_ids = [f"llm-{next(self._ids)}" for _ in token_lists]
        added: list[str] = []
        try:
            for rid, ids, sp in zip(request_ids, token_lists, per_prompt, strict=True):
                # each request gets its own key under the "request" scope, so compute per request
                self.engine.add_request(rid, ids, sp, self.scope_key(tenant))
                added.append(rid)
            finals: dict[str, RequestOutput] = {}
            while len(finals) < len(request_ids):
                if not self.engine.has_unfinished_requests():
                    raise RuntimeError("the engine stopped with requests unfinished")
                for out in self.engine.step():
                    if out.finished:
                        finals[out.request_id] = out
        except BaseException:
            for rid in added:
                self.engine.abort_request(rid)
            raise
        return [_completion(finals[rid]) for rid in request_ids]

    def _tokens(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.engine.tokenizer.encode(prompt)
        if isinstance(prompt, list):
            return list(prompt)
        raise InvalidParameterError(f"a prompt must be a string or a list of token ids, got {type(prompt).__name__}", param="prompt")


def _completion(out: RequestOutput) -> CompletionOutput:
    return CompletionOutput(
        request_id=out.request_id,
        prompt_token_ids=out.prompt_token_ids,
        text=out.text,
        token_ids=out.token_ids,
        finish_reason=out.finish_reason,
        num_prompt_tokens=out.num_prompt_tokens,
        num_cached_tokens=out.num_cached_tokens,
        logprobs=out.logprobs,
    )
