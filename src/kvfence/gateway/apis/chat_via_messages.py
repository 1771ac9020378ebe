"""A chat completion request for a backend that speaks only Anthropic's Messages API.

The request is translated (:func:`kvfence.apis.messages.messages_request_from_chat`: what does not
translate is a 400 naming the field), the answer translated back to a chat completion, whole or as
chunks, and only then filtered as any chat answer (the same slots: content, reasoning, tool-call
arguments), so restoring and leak detection are chat's own.
"""

from __future__ import annotations

from typing import Any

from kvfence.apis import messages as api
from kvfence.errors import RequestError
from kvfence.gateway.answer.filter import AnswerFilter
from kvfence.gateway.apis.base import ApiCall, MakeChain, NativeStream, event_object, request_error
from kvfence.gateway.apis.messages import ANTHROPIC_VERSION
from kvfence.gateway.errors import GatewayError
from kvfence.gateway.policy.schema import BackendConfig
from kvfence.openai_wire import DONE, encode_event

__all__ = ["ChatViaMessagesCall"]


class ChatViaMessagesCall(ApiCall):
    endpoint = "chat"

    def upstream(self, backend: BackendConfig, body: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
        self.model = str(self.original.get("model") or body.get("model") or "")
        options = body.get("stream_options")
        self.include_usage = isinstance(options, dict) and options.get("include_usage") is True
        try:
            native = api.messages_request_from_chat(body)
        except RequestError as exc:
            raise request_error(exc) from None
        return "/messages", native, {"anthropic-version": ANTHROPIC_VERSION}

    def filter_whole(self, answer: dict[str, Any], make_chain: MakeChain | None) -> dict[str, Any]:
        chat = api.chat_from_message(answer, self.model)
        if make_chain is not None:
            AnswerFilter("chat", make_chain).filter_completion(chat)
        return chat

    def stream(self, make_chain: MakeChain | None) -> NativeStream:
        return _ChatStream(api.ChatChunks(self.model, include_usage=self.include_usage), make_chain)


class _ChatStream(NativeStream):
    def __init__(self, chunks: api.ChatChunks, make_chain: MakeChain | None) -> None:
        self._chunks = chunks
        self._filters = AnswerFilter("chat", make_chain) if make_chain is not None else None
        self._texts: list[str] = []

    def _out(self, chunk: dict[str, Any]) -> bytes:
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content")
            if isinstance(text, str):
                self._texts.append(text)
        if self._filters is not None and chunk.get("choices"):
            self._filters.filter_chunk(chunk)
        return encode_event(chunk)

    def event(self, name: str | None, data: str) -> list[bytes]:
        event = event_object(data)
        kind = event.get("type") or name
        if kind == "error":
            self.ended = True
            inner = event.get("error")
            found = inner.get("message") if isinstance(inner, dict) else None
            message = str(found or "the backend ended the stream with an error")
            return [encode_event(GatewayError(message, code="upstream_stream_error").to_body())]
        out = [self._out(chunk) for chunk in self._chunks.feed(event)]
        self.reported_output_tokens = self._chunks.output_tokens()
        if kind == "message_stop":
            self.ended = True
            out += self.flush()
            out.append(encode_event(DONE))
        return out

    def flush(self) -> list[bytes]:
        if self._filters is None:
            return []
        return [encode_event(c) for c in self._filters.flush()]

    def error_event(self, error: GatewayError) -> bytes:
        return encode_event(error.to_body())

    def texts(self) -> list[str]:
        return self._texts
