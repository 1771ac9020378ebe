"""``/v1/messages`` (and ``/v1/messages/count_tokens``) through the gateway.

Routed natively to a backend that speaks the Anthropic API (``apis: [anthropic]``), translated to a
chat completion request for a backend that speaks only OpenAI's (:mod:`kvfence.apis.messages` says
what does not translate). Model text, each a filtered slot: ``text`` and ``thinking`` blocks and each
``tool_use`` block's input (streamed: the ``input_json_delta`` text, restored as the text of JSON;
whole: every string in the ``input`` object). A block's held-back tail goes out as one more delta
before its ``content_block_stop``. Translated answers are filtered as chat answers (the same slots)
and then translated. Every error the caller gets is in Anthropic's shape.

``count_tokens`` is answered by the gateway itself with the chosen backend's counter (exact with its
tokenizer, else the stated over-counting bound): nothing of the text leaves the gateway for it.
"""

from __future__ import annotations

import json
from typing import Any

from kvfence.apis import messages as api
from kvfence.errors import RequestError
from kvfence.gateway.answer.filter import AnswerFilter
from kvfence.gateway.apis.base import (
    ApiCall,
    MakeChain,
    NativeStream,
    SlotChains,
    encode_named,
    event_object,
    request_error,
    strings_filtered,
)
from kvfence.gateway.errors import GatewayError, UpstreamUnavailable
from kvfence.gateway.policy.schema import BackendConfig
from kvfence.openai_wire import DONE

__all__ = ["CountTokensCall", "MessagesCall"]

ANTHROPIC_VERSION = "2023-06-01"
_DELTA_FIELDS = {"text_delta": ("text", "content"), "thinking_delta": ("thinking", "prose"),
                 "input_json_delta": ("partial_json", "json")}


def _translated(exc: RequestError) -> GatewayError:
    return request_error(exc)


class MessagesCall(ApiCall):
    endpoint = "messages"

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body)
        self.translate = False
        self.version = ANTHROPIC_VERSION

    def check(self, body: dict[str, Any]) -> None:
        try:
            self.req = api.MessagesRequest.parse(body)
        except RequestError as exc:
            raise request_error(exc) from None

    def usable(self, backend: BackendConfig) -> bool:
        return "anthropic" in backend.apis or "openai" in backend.apis

    def upstream(self, backend: BackendConfig, body: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
        if "anthropic" in backend.apis:
            self.translate = False
            return "/messages", body, {"anthropic-version": self.version}
        self.translate = True
        try:
            chat = api.chat_request(api.MessagesRequest.parse(body))
        except RequestError as exc:
            raise _translated(exc) from None
        return "/chat/completions", chat, {}

    # -- answers ------------------------------------------------------------------------------
    def filter_whole(self, answer: dict[str, Any], make_chain: MakeChain | None) -> dict[str, Any]:
        if self.translate:
            if make_chain is not None:
                AnswerFilter("chat", make_chain).filter_completion(answer)
            try:
                return api.message_from_chat(answer, self.req)
            except RequestError as exc:
                raise UpstreamUnavailable(f"the backend's answer does not translate to a Message: {exc.message}") \
                    from None
        chains = SlotChains(make_chain)
        if chains.active:
            for block in answer.get("content") or []:
                if isinstance(block, dict):
                    _filter_block(block, chains)
        return answer

    def answer_texts(self, answer: Any) -> list[str]:
        if self.translate:
            return []
        out = []
        for block in (answer or {}).get("content") or []:
            if isinstance(block, dict):
                out += [v for k in ("text", "thinking") if isinstance(v := block.get(k), str)]
                if block.get("type") == "tool_use":
                    out.append(json.dumps(block.get("input")))
        return out

    def output_tokens(self, answer: Any) -> int | None:
        if self.translate and isinstance(answer, dict):
            usage = answer.get("usage")
            value = usage.get("completion_tokens") if isinstance(usage, dict) else None
            return value if isinstance(value, int) and value >= 0 else None
        return super().output_tokens(answer)

    def stream(self, make_chain: MakeChain | None) -> NativeStream:
        if self.translate:
            return _TranslatedStream(self.req, make_chain)
        return _MessagesStream(SlotChains(make_chain))

    def error_body(self, error: GatewayError) -> dict[str, Any]:
        return api.anthropic_error(error.status_code, error.message)

    def upstream_error(self, raw: bytes, status: int, backend: str) -> bytes | None:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("type") == "error" and isinstance(parsed.get("error"), dict):
            return None  # already Anthropic's
        message = f"backend {backend} answered HTTP {status}"
        if isinstance(parsed, dict):
            inner = parsed.get("error")
            found = inner.get("message") if isinstance(inner, dict) else parsed.get("message") or parsed.get("detail")
            if isinstance(found, str):
                message = found
        return json.dumps(api.anthropic_error(status, message), ensure_ascii=False).encode()


def _filter_block(block: dict[str, Any], chains: SlotChains) -> None:
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        block["text"] = chains.whole("content", block["text"])
    elif kind == "thinking" and isinstance(block.get("thinking"), str):
        block["thinking"] = chains.whole("prose", block["thinking"])
    elif "input" in block:  # tool_use, server_tool_use: each string of the input object
        block["input"] = strings_filtered(block["input"], chains)
    else:  # another block (a server tool's result ...): its text fields, whole
        for key in ("text", "content"):
            if isinstance(block.get(key), str):
                block[key] = chains.whole("prose", block[key])
            elif isinstance(block.get(key), list):
                block[key] = strings_filtered(block[key], chains)


_DELTA_FOR_KIND = {"content": "text_delta", "prose": "thinking_delta", "json": "input_json_delta"}


class _MessagesStream(NativeStream):
    END_NAMES = frozenset({"message_stop", "error"})

    def __init__(self, chains: SlotChains) -> None:
        self._chains = chains
        self.relays_unchanged = not chains.active
        self._kinds: dict[int, str] = {}  # open block index -> its delta type
        self._texts: list[str] = []

    def _tail(self, index: int) -> list[bytes]:
        delta_type = self._kinds.pop(index, None)
        if delta_type is None:
            return []
        key, _ = _DELTA_FIELDS[delta_type]
        tail = self._chains.finish((index, delta_type))
        if not tail:
            return []
        return [encode_named("content_block_delta", {"type": "content_block_delta", "index": index,
                                                     "delta": {"type": delta_type, key: tail}})]

    def event(self, name: str | None, data: str) -> list[bytes]:
        event = event_object(data)
        kind = event.get("type") or name
        name = name or str(kind)
        if kind in ("message_stop", "error"):
            self.ended = True
            return [*self.flush(), encode_named(name, event)]
        if kind == "message_start" and isinstance(event.get("message"), dict):
            for block in event["message"].get("content") or []:
                if isinstance(block, dict):
                    _filter_block(block, self._chains)
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            _filter_block(event["content_block"], self._chains)
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            delta = event["delta"]
            index = int(event.get("index") or 0)
            field = _DELTA_FIELDS.get(str(delta.get("type")))
            if field is not None and isinstance(delta.get(field[0]), str):
                key, slot_kind = field
                self._kinds[index] = str(delta["type"])
                self._texts.append(delta[key])
                delta[key] = self._chains.feed((index, delta["type"]), slot_kind, delta[key])
                if not delta[key]:
                    return []
            elif delta.get("type") not in ("signature_delta",):
                for key in ("text", "citation"):
                    if isinstance(delta.get(key), str):
                        delta[key] = self._chains.whole("prose", delta[key])
        elif kind == "content_block_stop":
            return [*self._tail(int(event.get("index") or 0)), encode_named(name, event)]
        elif kind == "message_delta":
            usage = event.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("output_tokens"), int):
                self.reported_output_tokens = usage["output_tokens"]
        return [encode_named(name, event)]

    def flush(self) -> list[bytes]:
        return [e for index in list(self._kinds) for e in self._tail(index)]

    def error_event(self, error: GatewayError) -> bytes:
        return encode_named("error", api.anthropic_error(error.status_code, error.message))

    def texts(self) -> list[str]:
        return self._texts


class _TranslatedStream(NativeStream):
    """A chat stream from an openai-only backend: filtered as chat, then told as Messages events."""

    def __init__(self, req: api.MessagesRequest, make_chain: MakeChain | None) -> None:
        self._filters = AnswerFilter("chat", make_chain) if make_chain is not None else None
        self._events = api.MessageEvents(req)
        self._texts: list[str] = []
        self._finished = False

    def _emit(self, pairs: list[tuple[str, dict[str, Any]]]) -> list[bytes]:
        return [encode_named(name, payload) for name, payload in pairs]

    def event(self, name: str | None, data: str) -> list[bytes]:
        if data.strip() == DONE:
            self.ended = True
            out = []
            if self._filters is not None:
                for chunk in self._filters.flush():
                    out += self._emit(self._events.feed(chunk))
            return [*out, *self._emit(self._events.finish())]
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ValueError("the backend sent a stream event that is not JSON") from None
        if not isinstance(chunk, dict):
            raise ValueError("the backend sent a stream event that is not a JSON object")
        if isinstance(chunk.get("error"), dict):
            self.ended = True
            message = str(chunk["error"].get("message") or "the backend ended the stream with an error")
            return [encode_named("error", api.anthropic_error(502, message))]
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.reported_output_tokens = usage["completion_tokens"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                self._texts.append(delta["content"])
            if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                self._finished = True
        if self._filters is not None and "choices" in chunk:
            self._filters.filter_chunk(chunk)
        return self._emit(self._events.feed(chunk))

    def flush(self) -> list[bytes]:
        """A chat stream that ended after its finish_reason without ``[DONE]`` (some servers send
        none) is complete: its Messages ending is written here; one cut before it is not (``ended``)."""
        if self.ended or not self._finished:
            return []
        self.ended = True
        out = []
        if self._filters is not None:
            for chunk in self._filters.flush():
                out += self._emit(self._events.feed(chunk))
        return [*out, *self._emit(self._events.finish())]

    def error_event(self, error: GatewayError) -> bytes:
        return encode_named("error", api.anthropic_error(error.status_code, error.message))

    def texts(self) -> list[str]:
        return self._texts


class CountTokensCall(MessagesCall):
    """``/v1/messages/count_tokens``: answered here (see module docstring)."""

    endpoint = "count_tokens"
    streams = False

    def check(self, body: dict[str, Any]) -> None:
        try:
            api.CountTokensRequest.parse(body)
        except RequestError as exc:
            raise request_error(exc) from None
