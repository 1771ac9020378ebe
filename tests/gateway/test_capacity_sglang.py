"""KV capacity of an SGLang backend, from its ``/get_server_info`` (the gateway caps to it)."""

from __future__ import annotations

import asyncio

import httpx

from kvfence.gateway.admission.capacity import discover_capacity, parse_sglang_server_info
from kvfence.gateway.policy.schema import BackendConfig

# Trimmed from what SGLang answers: server arguments plus, in newer releases, one state per scheduler.
OLD_SERVER_INFO = {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "context_length": None, "tp_size": 1,
                   "max_total_num_tokens": 412_000, "version": "0.3.6"}
NEW_SERVER_INFO = {"model_path": "Qwen/Qwen2.5-7B-Instruct", "tp_size": 2, "version": "0.4.9",
                   "internal_states": [{"max_total_num_tokens": 681_280, "last_gen_throughput": 0.0},
                                       {"max_total_num_tokens": 650_000}]}


def test_parse_sglang_server_info() -> None:
    assert parse_sglang_server_info(OLD_SERVER_INFO) == 412_000
    assert parse_sglang_server_info(NEW_SERVER_INFO) == 650_000  # the smallest pool: any may get the request
    for payload in ({}, {"max_total_num_tokens": 0}, {"max_total_num_tokens": True}, [], "x",
                    {"internal_states": "n/a"}):
        assert parse_sglang_server_info(payload) is None


def _sglang(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/get_server_info":
        return httpx.Response(200, json=NEW_SERVER_INFO)
    if request.url.path == "/v1/models":
        return httpx.Response(200, json={"object": "list", "data": [
            {"id": "qwen", "object": "model", "owned_by": "sglang", "max_model_len": 1_048_576}]})
    return httpx.Response(404, text="not found")


def _discover(capacity: str) -> tuple[int | None, int | None, str, bool]:
    backend = BackendConfig.model_validate({"name": "sg", "url": "http://127.0.0.1:30000/v1", "tier": "shared",
                                            "capacity": capacity, "models": ["qwen"]})

    async def go() -> tuple[int | None, int | None, str, bool]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(_sglang)) as client:
            info = await discover_capacity(client, backend)
        return info.advertised_context, info.kv_capacity_tokens, info.source, info.advertises_more_than_it_holds

    return asyncio.run(go())


def test_an_sglang_backend_that_advertises_more_than_it_holds_is_capped() -> None:
    # the incident's shape: 1M tokens of context advertised on a pool of 650k
    for mode in ("auto", "sglang"):
        assert _discover(mode) == (1_048_576, 650_000, "sglang /get_server_info,/v1/models", True)
    assert _discover("vllm")[1] is None  # asked to read vLLM's metrics only: SGLang's info is not read
