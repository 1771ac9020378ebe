"""What a backend can really hold: advertised context versus KV-cache capacity.

The incident behind this project was a backend advertising 1,048,576 tokens of context on a KV pool
of 681,280. The gateway therefore asks each backend (kvfence's capacity endpoint; vLLM's
``vllm:cache_config_info`` metric, num_gpu_blocks x block_size; SGLang's ``/get_server_info``
``max_total_num_tokens``; and ``max_model_len`` from ``/v1/models``), falls back to the policy's vendor facts, flags a backend that advertises more than
it holds, and caps requests to what it holds.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import httpx

from kvfence.gateway.policy.schema import BackendConfig, CapacitySource

__all__ = [
    "KVFENCE_CAPACITY_PATHS",
    "CapacityInfo",
    "discover_capacity",
    "parse_kvfence_capacity",
    "parse_model_ids",
    "parse_models_max_len",
    "parse_sglang_server_info",
    "parse_vllm_cache_config",
]

log = logging.getLogger("kvfence.gateway.admission.capacity")

# Tried in order, relative to the server root (the backend URL without its trailing /v1).
KVFENCE_CAPACITY_PATHS = ("/v1/capacity", "/capacity", "/kvfence/capacity")


@dataclass(frozen=True, slots=True)
class CapacityInfo:
    """Known limits of one backend; ``None`` means unknown."""

    advertised_context: int | None
    kv_capacity_tokens: int | None
    source: str
    model_ids: tuple[str, ...] = ()
    # One copy of the prompt serves all of a request's choices (n / best_of): kvfence says so through
    # its capacity endpoint's cache scope; unknown elsewhere, so assumed not (see caps.py).
    shares_prompt: bool = False
    # ``max_tokens: 0`` computes the prompt and samples nothing (kvfence says so through its capacity
    # endpoint): such a call needs prompt tokens only. Other backends may compute one position past it.
    scores_max_tokens_0: bool = False

    @property
    def advertises_more_than_it_holds(self) -> bool:
        return (self.advertised_context is not None and self.kv_capacity_tokens is not None
                and self.advertised_context > self.kv_capacity_tokens)

    @property
    def max_context(self) -> int | None:
        """The largest prompt + completion the backend can really serve."""
        known = [v for v in (self.advertised_context, self.kv_capacity_tokens) if v is not None]
        return min(known) if known else None


_LABELS = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_vllm_cache_config(metrics_text: str) -> int | None:
    """Tokens of KV capacity from vLLM's ``vllm:cache_config_info`` metric labels, or None."""
    for line in metrics_text.splitlines():
        if not line.startswith("vllm:cache_config_info{"):
            continue
        labels = dict(_LABELS.findall(line[line.index("{"):line.rindex("}") + 1]))
        try:
            blocks = int(float(labels["num_gpu_blocks"]))
            block_size = int(float(labels["block_size"]))
        except (KeyError, ValueError):
            continue
        if blocks > 0 and block_size > 0:
            return blocks * block_size
    return None


def parse_sglang_server_info(payload: Any) -> int | None:
    """Tokens of KV capacity from SGLang's ``/get_server_info``: ``max_total_num_tokens``, at the top
    (older releases) or per scheduler in ``internal_states`` (newer ones; the smallest pool counts,
    since any one of them may get the request)."""
    if not isinstance(payload, dict):
        return None
    holders = [payload]
    states = payload.get("internal_states")
    if isinstance(states, list):
        holders += [s for s in states if isinstance(s, dict)]
    values = [h["max_total_num_tokens"] for h in holders
              if isinstance(h.get("max_total_num_tokens"), int) and not isinstance(h.get("max_total_num_tokens"), bool)
              and h["max_total_num_tokens"] > 0]
    return min(values) if values else None


def parse_models_max_len(payload: Any, model: str | None = None) -> int | None:
    """``max_model_len`` (vLLM, kvfence) or ``context_length`` from an OpenAI ``/v1/models`` answer."""
    entries = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        return None
    lengths: list[int] = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        if model is not None and entry.get("id") not in (model, None) and len(entries) > 1:
            continue
        for key in ("max_model_len", "context_length", "context_window", "max_context_length"):
            value = entry.get(key)
            if isinstance(value, int) and value > 0:
                lengths.append(value)
                break
    return min(lengths) if lengths else None


def parse_kvfence_capacity(payload: Any) -> tuple[int | None, int | None]:
    """(advertised context, KV capacity tokens) from kvfence's capacity endpoint."""
    if not isinstance(payload, dict):
        return None, None

    def pick(*keys: str) -> int | None:
        for key in keys:
            value = payload.get(key)
            if isinstance(value, int) and value > 0:
                return value
        return None

    capacity = pick("kv_capacity_tokens", "capacity_tokens", "kv_tokens", "pool_tokens")
    if capacity is None:
        blocks = pick("num_blocks", "num_gpu_blocks", "num_kv_blocks", "num_pages")
        size = pick("block_size", "page_size")
        if blocks is not None and size is not None:
            capacity = blocks * size
    advertised = pick("max_model_len", "advertised_context", "max_context", "context_length")
    return advertised, capacity


async def _get(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> httpx.Response | None:
    try:
        response = await client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        log.debug("capacity probe %s failed: %s", url, exc)
        return None
    return response if response.status_code == 200 else None


async def discover_capacity(
    client: httpx.AsyncClient, backend: BackendConfig, headers: dict[str, str] | None = None
) -> CapacityInfo:
    """Ask the backend what it holds; fall back to (and never widen past) the policy's vendor facts."""
    headers = headers or {}
    root = backend.base_url.removesuffix("/v1")
    facts = backend.facts
    advertised: int | None = None
    capacity: int | None = None
    sources: list[str] = []
    shares_prompt = False
    scores_max_tokens_0 = False
    mode = backend.capacity
    if mode in (CapacitySource.AUTO, CapacitySource.KVFENCE):
        for path in KVFENCE_CAPACITY_PATHS:
            response = await _get(client, root + path, headers)
            if response is None:
                continue
            try:
                payload = response.json()
            except ValueError:
                continue
            advertised, capacity = parse_kvfence_capacity(payload)
            if capacity is not None:
                sources.append("kvfence " + path)
                # kvfence's choices share the prompt's pages unless every request is its own scope
                shares_prompt = isinstance(payload, dict) and payload.get("cache_scope") not in (None, "request")
                scores_max_tokens_0 = isinstance(payload, dict) and payload.get("scores_max_tokens_0") is True
                break
    if capacity is None and mode in (CapacitySource.AUTO, CapacitySource.VLLM):
        response = await _get(client, root + "/metrics", headers)
        if response is not None:
            capacity = parse_vllm_cache_config(response.text)
            if capacity is not None:
                sources.append("vllm:cache_config_info")
    if capacity is None and mode in (CapacitySource.AUTO, CapacitySource.SGLANG):
        response = await _get(client, root + "/get_server_info", headers)
        if response is not None:
            try:
                capacity = parse_sglang_server_info(response.json())
            except ValueError:
                capacity = None
            if capacity is not None:
                sources.append("sglang /get_server_info")
    model_ids: tuple[str, ...] = ()
    response = await _get(client, backend.base_url + "/models", headers)
    if response is not None:
        try:
            payload = response.json()
        except ValueError:
            payload = None
        model_ids = parse_model_ids(payload)
        if advertised is None and mode is not CapacitySource.POLICY:
            wanted = backend.upstream_model(backend.models[0]) if backend.models else None
            advertised = parse_models_max_len(payload, wanted)
            if advertised is not None:
                sources.append("/v1/models")
    # Policy facts fill gaps; a policy capacity below the discovered one is kept (the stricter wins).
    if facts.kv_capacity_tokens is not None:
        capacity = facts.kv_capacity_tokens if capacity is None else min(capacity, facts.kv_capacity_tokens)
        sources.append("policy")
    if advertised is None and facts.advertised_context is not None:
        advertised = facts.advertised_context
        sources.append("policy")
    return CapacityInfo(advertised, capacity, ",".join(dict.fromkeys(sources)) or "unknown", model_ids,
                        shares_prompt=shares_prompt, scores_max_tokens_0=scores_max_tokens_0)


def parse_model_ids(payload: Any) -> tuple[str, ...]:
    """Model ids from an OpenAI ``/v1/models`` answer."""
    entries = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        return ()
    return tuple(e["id"] for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str))
