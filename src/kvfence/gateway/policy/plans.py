"""Decisions that depend only on who asks and where it goes, made once and reused per request.

The policy, the tenants and the upstream credentials are fixed after start-up; a backend's
discovered capacity changes only when it is refreshed. So for one (tenant, data class, model) the
route is the same every time until the next refresh, and for one (backend, tenant, data class) so are
the upstream headers and the cache salt (I5: an HMAC of the tenant's scope; only a per-request scope
draws a fresh one each time). :class:`PlanCache` keeps both; the runtime clears it whenever capacity
is rediscovered.

It also says when the client's own request bytes can be forwarded as they came
(:func:`parse_forwardable`), and splices the gateway's salt into them (:func:`with_cache_salt`), so the
common request is not serialised again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kvfence.gateway.routing.classes import RouteDecision
from kvfence.openai_wire import decode_request_json
from kvfence.scope import CacheScope

__all__ = ["PlanCache", "UpstreamPlan", "parse_forwardable", "with_cache_salt"]

# Model names come from callers: bound what an endless supply of new ones can make the cache hold.
MAX_CACHED_ROUTES = 4096


@dataclass(frozen=True, slots=True)
class UpstreamPlan:
    """What every request of one tenant and class sends to one backend, besides its body."""

    headers: Mapping[str, str]          # non-streamed request; copy before adding the request id
    stream_headers: Mapping[str, str]   # the same with ``accept: text/event-stream``
    salt: str | None                    # the cache salt to inject, when it is the same every time
    salt_scope: CacheScope | None       # set when a salt is due; REQUEST: a fresh one per request

    @property
    def salt_per_request(self) -> bool:
        return self.salt_scope is CacheScope.REQUEST


class PlanCache:
    """Routes per (tenant, class, model) and upstream plans per (backend, tenant, class)."""

    def __init__(self) -> None:
        self._routes: dict[tuple[str, str, str], RouteDecision] = {}
        self._plans: dict[tuple[str, str, str], UpstreamPlan] = {}

    def clear(self) -> None:
        self._routes.clear()
        self._plans.clear()

    def route(self, key: tuple[str, str, str], decide: Callable[[], RouteDecision]) -> RouteDecision:
        """The cached decision for ``key`` (tenant, class, model), else ``decide()``'s, kept.

        A refusal raises out of ``decide`` and is not kept: refused requests take the long way."""
        decision = self._routes.get(key)
        if decision is None:
            decision = decide()
            if len(self._routes) >= MAX_CACHED_ROUTES:
                self._routes.clear()
            self._routes[key] = decision
        return decision

    def plan(self, key: tuple[str, str, str], build: Callable[[], UpstreamPlan]) -> UpstreamPlan:
        """The cached plan for ``key`` (backend, tenant, class), else ``build()``'s, kept."""
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = build()
        return plan


class _DuplicateKey(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKey
    return obj


def _no_constant(name: str) -> Any:
    # NaN / Infinity / -Infinity are not JSON (RFC 8259); Python accepts them, most backends do not,
    # and a NaN max_tokens or temperature would pass every numeric comparison of the caps unnoticed.
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every request: ``json.loads(..., object_pairs_hook=...)`` would build a new one each time.
_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
_LENIENT_DECODER = json.JSONDecoder(parse_constant=_no_constant)  # a repeated key: the last value


def parse_forwardable(raw: bytes) -> tuple[Any, bool]:
    """``json.loads(raw)``, and whether ``raw`` may be forwarded as it came: True unless some object
    in it (at any depth) repeats a key, or it is not plain UTF-8.

    Parsers disagree on duplicate keys (Python keeps the last, others the first): with a duplicate
    ``max_tokens`` or message ``content`` the gateway could cap one value while a backend generates
    from the other. A body with duplicates is therefore re-serialised from what the gateway parsed.
    Keys are compared decoded, so escaped spellings (``"max_tok\\u0065ns"``) count as the same key.
    Raises ``ValueError`` for invalid JSON, as ``json.loads``, and for ``NaN`` / ``Infinity``;
    :class:`~kvfence.openai_wire.InvalidJSON` (a ``ValueError``) for what no server should read.
    """
    # as json.loads does (UTF-8 with or without BOM, -16, -32); a body that opens with "{" and a
    # second byte that is not NUL is UTF-8 without BOM in its rules: the common case, decided here
    encoding = "utf-8" if raw[:1] == b"{" and raw[1:2] != b"\x00" else json.detect_encoding(raw)
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ValueError(str(exc)) from None
    try:
        body = decode_request_json(text, _STRICT_DECODER)  # depth, digits, lone surrogates: InvalidJSON
    except _DuplicateKey:
        return decode_request_json(text, _LENIENT_DECODER), False
    return body, encoding == "utf-8"  # other encodings (or a BOM) are re-serialised, not passed on


def with_cache_salt(raw: bytes, salt: str, has_keys: bool) -> bytes:
    """``raw`` (a JSON object without any salt field) with ``"cache_salt": salt`` added at its end."""
    end = raw.rstrip()
    if not end.endswith(b"}"):
        raise ValueError("not a JSON object")
    field = b'"cache_salt":"' + salt.encode("ascii") + b'"}'
    return end[:-1] + (b"," + field if has_keys else field)
