"""What the endpoint says about itself: advertised context, KV capacity, and its tokenizer's rate.

Every value here is read from the endpoint (or given by the user); nothing is assumed about a
particular engine beyond the public field names listed below.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvfence.audit.client import EndpointClient
from kvfence.audit.errors import AuditCannotRun
from kvfence.audit.prompts import TokenModel, random_units
from kvfence.audit.target import Tenant

__all__ = ["Capacity", "advertised_context", "calibrate", "kv_capacity"]

log = logging.getLogger(__name__)

# /v1/models fields that carry the maximum context in the engines and gateways we know of
# (vLLM and SGLang: max_model_len; llama.cpp's llama-server: meta.n_ctx).
_CONTEXT_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length",
                   "max_input_tokens", "max_position_embeddings", "n_ctx")
# Engine routes that say the serving context when /v1/models does not: (engine, path, dotted fields).
# The first field found wins; each is the per-request limit the engine enforces, not the model's
# trained maximum (llama.cpp's n_ctx_train and Ollama's model_info context_length are not it).
_CONTEXT_ROUTES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("llama.cpp", "/props", ("default_generation_settings.n_ctx", "n_ctx")),
    ("TGI", "/info", ("max_total_tokens",)),
    ("SGLang", "/get_server_info", ("context_length", "max_model_len")),
    ("SGLang", "/server_info", ("context_length", "max_model_len")),
    ("Ollama", "/api/ps", ()),  # handled by _ollama_context: per loaded model
)
# JSON fields that carry a KV capacity in tokens (kvfence capacity endpoint, SGLang server info,
# TGI's max_batch_total_tokens: the tokens all running requests may hold together).
_CAPACITY_FIELDS = ("kv_capacity_tokens", "pool_tokens", "capacity_tokens", "max_kv_tokens",
                    "max_total_num_tokens", "kv_cache_tokens", "total_kv_tokens", "max_batch_total_tokens")
_CAPACITY_PATHS = ("/v1/capacity", "/capacity", "/kvfence/capacity", "/get_server_info", "/server_info", "/info")
# vLLM's vllm:cache_config_info and kvfence's kvfence_cache_config_info carry the pool as labels.
_CACHE_INFO_METRIC = re.compile(r"^(?P<name>[\w:]*cache_config_info)\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_OLLAMA_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Capacity:
    """The KV pool size in tokens and where the number came from."""

    tokens: int
    source: str


async def advertised_context(client: EndpointClient, override: int | None) -> tuple[int | None, str]:
    """The maximum context the endpoint serves for the audited model, and which source said so.

    In order: ``--max-context``; the model's ``/v1/models`` entry (vLLM, SGLang, kvfence, llama.cpp
    ``meta.n_ctx``); llama.cpp ``/props``; TGI ``/info``; SGLang ``/get_server_info``; Ollama
    ``/api/ps`` and ``/api/show`` (``num_ctx``).
    """
    if override is not None:
        return override, "--max-context"
    model = await client.resolve_model()
    for entry in await client.models():
        if str(entry.get("id")) != model:
            continue
        for holder_name, holder in (("", entry), ("metadata.", entry.get("metadata")), ("meta.", entry.get("meta"))):
            if not isinstance(holder, dict):
                continue
            for name in _CONTEXT_FIELDS:
                value = _positive_int(holder.get(name))
                if value is not None:
                    return value, f"/v1/models {holder_name}{name}"
    for engine, path, fields in _CONTEXT_ROUTES:
        if engine == "Ollama":
            found = await _ollama_context(client, model)
            if found is not None:
                return found
            continue
        data = await _get_json(client, path)
        if not isinstance(data, dict):
            continue
        for dotted in fields:
            value = _positive_int(_dig(data, dotted))
            if value is not None:
                log.info("context %s from %s %s (%s)", value, path, dotted, engine)
                return value, f"{path} {dotted} ({engine})"
    return None, "not advertised"


async def _ollama_context(client: EndpointClient, model: str) -> tuple[int, str] | None:
    """Ollama serves ``num_ctx`` tokens (and cuts longer prompts); its model card's maximum is not that."""
    running = await _get_json(client, "/api/ps")
    if isinstance(running, dict) and isinstance(running.get("models"), list):
        for entry in running["models"]:
            if isinstance(entry, dict) and model in (entry.get("name"), entry.get("model")):
                value = _positive_int(entry.get("context_length"))
                if value is not None:
                    return value, "/api/ps context_length (Ollama, the loaded model's num_ctx)"
    response = await client.post("/api/show", {"model": model}, client.target.tenant_a)
    if response is None or response.status_code != 200:
        return None
    try:
        data = response.json()
    except ValueError:
        return None
    parameters = data.get("parameters") if isinstance(data, dict) else None
    match = _OLLAMA_NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    if match:
        return int(match.group(1)), "/api/show parameters num_ctx (Ollama)"
    return None


async def _get_json(client: EndpointClient, path: str) -> Any:
    response = await client.get(path, client.target.tenant_a)
    if response is None or response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _dig(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


async def kv_capacity(client: EndpointClient, override: int | None) -> Capacity | None:
    """The KV pool size in tokens, when the endpoint exposes it (or ``--kv-capacity`` says)."""
    if override is not None:
        return Capacity(override, "--kv-capacity")
    tenant = client.target.tenant_a
    for path in _CAPACITY_PATHS:
        response = await client.get(path, tenant)
        if response is None or response.status_code != 200:
            continue
        try:
            data = response.json()
        except ValueError:
            continue
        found = _find_capacity(data)
        if found is not None:
            return Capacity(found[0], f"{path} {found[1]}")
    response = await client.get("/metrics", tenant)
    if response is not None and response.status_code == 200:
        for match in _CACHE_INFO_METRIC.finditer(response.text):
            found = _find_capacity(dict(_LABEL.findall(match.group("labels"))))
            if found is not None:
                return Capacity(found[0], f"/metrics {match.group('name')} {found[1]}")
    # llama.cpp: each of total_slots slots holds n_ctx tokens of KV.
    props = await _get_json(client, "/props")
    if isinstance(props, dict):
        n_ctx = _positive_int(_dig(props, "default_generation_settings.n_ctx") or props.get("n_ctx"))
        slots = _positive_int(props.get("total_slots")) or 1
        if n_ctx is not None:
            return Capacity(n_ctx * slots, f"/props n_ctx*total_slots (llama.cpp, {slots} slot(s))")
    return None


def _find_capacity(data: Any, depth: int = 0) -> tuple[int, str] | None:
    if isinstance(data, list) and depth <= 3:  # SGLang's internal_states: one entry per data-parallel rank
        return next((f for f in (_find_capacity(v, depth + 1) for v in data[:8]) if f is not None), None)
    if not isinstance(data, dict) or depth > 3:
        return None
    for name in _CAPACITY_FIELDS:
        value = _positive_int(data.get(name))
        if value is not None:
            return value, name
    blocks = _positive_int(next((data[k] for k in ("num_blocks", "num_gpu_blocks", "num_pages", "total_blocks")
                                 if k in data), None))
    block_size = _positive_int(data.get("block_size", data.get("page_size")))
    if blocks and block_size:
        return blocks * block_size, "num_blocks*block_size"
    for value in data.values():
        found = _find_capacity(value, depth + 1)
        if found is not None:
            return found
    return None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    if isinstance(value, str) and value.isdigit() and int(value) > 0:
        return int(value)
    return None


async def calibrate(
    client: EndpointClient, tenant: Tenant, rng: random.Random, max_context: int | None,
    make_units: Callable[[random.Random, int], list[str]] = random_units, tokens_per_unit_at_most: int = 2,
) -> tuple[TokenModel, str, bool]:
    """Fit prompt tokens per random letter from ``usage.prompt_tokens`` of three short probes.

    Returns the model, how it was obtained, and whether it was measured (False when the endpoint
    reports no usage and one token per letter is assumed: a lower bound for the usual tokenizers,
    which spend at least one token on a space-separated letter, but not a measurement).
    """
    # Long probes (up to a quarter of the context) pin the slope down for tokenizers whose letters
    # cost different numbers of tokens; short ones alone missed by up to 7 %.
    top = 256 if max_context is None else max(8, min(256, max_context // (2 * tokens_per_unit_at_most)))
    samples: list[tuple[int, int]] = []
    for units in sorted({max(2, top // 12), max(4, top // 3), top}):
        reply = await client.generate(tenant, " ".join(make_units(rng, units)), max_tokens=1, transient_retries=2)
        client.raise_for_auth(reply, tenant)
        if not reply.ok:
            raise AuditCannotRun(
                f"a {units}-letter probe prompt failed ({reply.status}): {reply.error or reply.transport_error}"
            )
        if reply.prompt_tokens is not None:
            samples.append((units, reply.prompt_tokens))
    try:
        return TokenModel.fit(samples), "fitted from usage.prompt_tokens", True
    except ValueError as exc:
        log.warning("token calibration failed (%s); assuming one token per letter", exc)
        return TokenModel(overhead=0.0, tokens_per_unit=1.0), f"assumed 1 token per letter ({exc})", False
