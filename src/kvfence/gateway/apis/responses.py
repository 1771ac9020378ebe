"""``/v1/responses`` through the gateway: routed natively to backends that speak the OpenAI API.

Model text of a Response, each a filtered slot: every ``message`` item's ``output_text`` (the answer's
content: a JSON document under a JSON ``text.format``) and ``refusal`` parts, every ``function_call``'s
``arguments`` (the text of JSON), ``custom_tool_call`` ``input``, ``reasoning`` summary and content
texts. In the stream the ``.delta`` events feed the slot's chain, the ``.done`` events and the
closing ``response.completed`` carry what the deltas said (a held-back tail goes out as one more
delta before ``.done``); an event type not known here has every string of its text fields filtered
whole. The request fields a Response echoes (``instructions``, ``tools``, ``text``, ``metadata``,
``user``) are put back as the client sent them (they went out pseudonymised, maybe with a canary).
"""

from __future__ import annotations

from typing import Any

from kvfence.apis import responses as api
from kvfence.errors import RequestError
from kvfence.gateway.apis.base import (
    ApiCall,
    MakeChain,
    NativeStream,
    SlotChains,
    encode_named,
    event_object,
    request_error,
)
from kvfence.gateway.errors import GatewayError, GatewayRequestError
from kvfence.gateway.policy.schema import BackendConfig, DataClassConfig

__all__ = ["ResponsesCall"]

_ECHOED = ("instructions", "tools", "text", "metadata", "user")
# (part type, its text key, slot kind) of a message item's content
_PART_KINDS = {"output_text": ("text", "content"), "refusal": ("refusal", "prose")}
# stream events of one text slot: delta event -> (done event, key of the full text in done, slot name, kind)
_DELTAS = {
    "response.output_text.delta": ("response.output_text.done", "text", "text", "content"),
    "response.refusal.delta": ("response.refusal.done", "refusal", "refusal", "prose"),
    "response.function_call_arguments.delta": ("response.function_call_arguments.done", "arguments", "args", "json"),
    "response.custom_tool_call_input.delta": ("response.custom_tool_call_input.done", "input", "input", "prose"),
    "response.reasoning_summary_text.delta": ("response.reasoning_summary_text.done", "text", "summary", "prose"),
    "response.reasoning_text.delta": ("response.reasoning_text.done", "text", "reasoning", "prose"),
}
_DONES = {done: (key, slot, kind) for done, key, slot, kind in _DELTAS.values()}
_TEXT_KEYS = ("text", "delta", "arguments", "input", "refusal", "transcript", "output", "summary")
_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _slot(event: dict[str, Any], name: str) -> tuple[Any, ...]:
    index = event.get("summary_index") if name == "summary" else event.get("content_index")
    return (event.get("output_index"), name, index)


def _item_fields(item: dict[str, Any], at: Any) -> list[tuple[dict[str, Any], str, tuple[Any, ...], str]]:
    """(holder, key, slot, kind) of every text of one output item."""
    out: list[tuple[dict[str, Any], str, tuple[Any, ...], str]] = []
    kind = item.get("type")
    if kind == "message":
        for j, part in enumerate(item.get("content") or []):
            if isinstance(part, dict) and part.get("type") in _PART_KINDS:
                key, slot_kind = _PART_KINDS[part["type"]]
                if isinstance(part.get(key), str):
                    out.append((part, key, (at, "text" if key == "text" else "refusal", j), slot_kind))
    elif kind == "function_call" and isinstance(item.get("arguments"), str):
        out.append((item, "arguments", (at, "args", None), "json"))
    elif kind == "custom_tool_call" and isinstance(item.get("input"), str):
        out.append((item, "input", (at, "input", None), "prose"))
    elif kind == "reasoning":
        for key, name in (("summary", "summary"), ("content", "reasoning")):
            for j, part in enumerate(item.get(key) or []):
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append((part, "text", (at, name, j), "prose"))
    else:  # another item type (a hosted tool's call or result): every text field, whole
        out += [(item, k, (at, k, None), "prose") for k in _TEXT_KEYS if isinstance(item.get(k), str)]
    return out


class ResponsesCall(ApiCall):
    endpoint = "responses"

    def check(self, body: dict[str, Any]) -> None:
        try:
            self.req = api.ResponsesRequest.parse(body)
        except RequestError as exc:
            raise request_error(exc) from None
        self.stateful = bool(self.req.previous_response_id or self.req.store or self.req.conversation
                             or self.req.background)
        if self.req.prompt is not None:
            raise GatewayRequestError("`prompt` (a prompt template stored at the provider) cannot be scanned by "
                                      "the gateway: send the text in `input`", param="prompt")

    def check_class(self, data_class: DataClassConfig) -> None:
        if self.stateful and not data_class.allow_stored_responses:
            name = next(n for n in ("previous_response_id", "store", "conversation", "background")
                        if getattr(self.req, n))
            raise GatewayRequestError(
                f"`{name}` keeps or reads conversation state at the backend, which data class {data_class.name!r} "
                "does not allow (policy: allow_stored_responses); send the whole conversation in `input` and "
                "leave `store` out or false", param=name)

    def usable(self, backend: BackendConfig) -> bool:
        if "openai" not in backend.apis:
            return False
        return not self.stateful or backend.facts.keeps_response_state

    def upstream(self, backend: BackendConfig, body: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
        if not self.stateful and "store" not in body and backend.facts.keeps_response_state:
            body = {**body, "store": False}  # OpenAI stores a response unless told not to
        return "/responses", body, {}

    # -- answers ------------------------------------------------------------------------------
    def _echo(self, response: dict[str, Any]) -> None:
        for key in _ECHOED:
            if key in response:
                response[key] = self.original.get(key, response[key] if key != "instructions" else None)

    def filter_whole(self, answer: dict[str, Any], make_chain: MakeChain | None) -> dict[str, Any]:
        chains = SlotChains(make_chain)
        if chains.active:
            for at, item in enumerate(answer.get("output") or []):
                if isinstance(item, dict):
                    for holder, key, _, kind in _item_fields(item, at):
                        holder[key] = chains.whole(kind, holder[key])
            self._echo(answer)
        return answer

    def answer_texts(self, answer: Any) -> list[str]:
        out: list[str] = []
        for at, item in enumerate((answer or {}).get("output") or []):
            if isinstance(item, dict):
                out += [holder[key] for holder, key, _, _ in _item_fields(item, at)]
        return out

    def stream(self, make_chain: MakeChain | None) -> NativeStream:
        return _ResponsesStream(self, SlotChains(make_chain))

    def error_body(self, error: GatewayError) -> dict[str, Any]:
        return error.to_body()


class _ResponsesStream(NativeStream):
    END_NAMES = frozenset({*_ENDS, "error"})

    def __init__(self, call: ResponsesCall, chains: SlotChains) -> None:
        self._call = call
        self._chains = chains
        self.relays_unchanged = not chains.active
        self._seq = 0
        self._texts: list[str] = []
        self._ids: dict[Any, str] = {}  # output index -> item id (for the tail delta events)

    def _out(self, event: dict[str, Any]) -> bytes:
        event["sequence_number"] = self._seq  # renumbered: a held-back tail adds events
        self._seq += 1
        return encode_named(str(event.get("type")), event)

    def _snapshot(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        if self._chains.active:
            for at, item in enumerate(response.get("output") or []):
                if isinstance(item, dict):
                    self._item(item, at)
            self._call._echo(response)
        usage = response.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("output_tokens"), int):
            self.reported_output_tokens = usage["output_tokens"]

    def _item(self, item: dict[str, Any], at: Any) -> None:
        for holder, key, slot, kind in _item_fields(item, at):
            holder[key] = self._chains.final(slot, kind, holder[key])

    def _tails(self, only: Any = None) -> list[bytes]:
        """A delta event for each open slot's held-back tail (of one output item, or all)."""
        out = []
        for slot in self._chains.open_slots():
            if only is not None and slot[0] != only:
                continue
            tail = self._chains.finish(slot)
            if tail:
                out.append(self._out(self._tail_event(slot, tail)))
        return out

    def _tail_event(self, slot: tuple[Any, ...], tail: str) -> dict[str, Any]:
        at, name, index = slot
        kind = {"text": "response.output_text.delta", "refusal": "response.refusal.delta",
                "args": "response.function_call_arguments.delta", "input": "response.custom_tool_call_input.delta",
                "summary": "response.reasoning_summary_text.delta", "reasoning": "response.reasoning_text.delta"}
        event: dict[str, Any] = {"type": kind.get(name, "response.output_text.delta"), "output_index": at,
                                 "item_id": self._ids.get(at, ""), "delta": tail}
        if name in ("text", "refusal", "reasoning"):
            event["content_index"] = index
        if name == "summary":
            event["summary_index"] = index
        if name == "text":
            event["logprobs"] = []
        return event

    def event(self, name: str | None, data: str) -> list[bytes]:
        event = event_object(data)
        kind = event.get("type") or name
        if kind == "error":
            self.ended = True
            return [self._out(event)]
        if isinstance(event.get("item_id"), str):
            self._ids[event.get("output_index")] = event["item_id"]
        item = event.get("item")
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            self._ids[event.get("output_index")] = item["id"]
        if kind in _DELTAS:
            _, _, slot_name, slot_kind = _DELTAS[kind]
            delta = event.get("delta")
            if isinstance(delta, str):
                self._texts.append(delta)
                event["delta"] = self._chains.feed(_slot(event, slot_name), slot_kind, delta)
                if not event["delta"]:
                    return []  # all of it held back (a placeholder may be starting)
            return [self._out(event)]
        if kind in _DONES:
            key, slot_name, slot_kind = _DONES[kind]
            slot = _slot(event, slot_name)
            out = []
            if slot in self._chains.open_slots():
                tail = self._chains.finish(slot)
                if tail:
                    out.append(self._out(self._tail_event(slot, tail)))
            if isinstance(event.get(key), str):
                event[key] = self._chains.final(slot, slot_kind, event[key])
            return [*out, self._out(event)]
        if kind in ("response.content_part.added", "response.content_part.done"):
            part = event.get("part")
            if isinstance(part, dict) and kind.endswith("added"):
                self._blank(part)
            elif isinstance(part, dict) and part.get("type") in _PART_KINDS:
                key, slot_kind = _PART_KINDS[part["type"]]
                slot = (event.get("output_index"), "text" if key == "text" else "refusal", event.get("content_index"))
                if isinstance(part.get(key), str):
                    part[key] = self._chains.final(slot, slot_kind, part[key])
            return [self._out(event)]
        if kind == "response.output_item.added":
            if isinstance(item, dict):
                self._blank_item(item, event.get("output_index"))
            return [self._out(event)]
        if kind == "response.output_item.done":
            out = self._tails(only=event.get("output_index"))
            if isinstance(item, dict):
                self._item(item, event.get("output_index"))
            return [*out, self._out(event)]
        if kind in ("response.created", "response.in_progress", "response.queued") or kind in _ENDS:
            out = self._tails() if kind in _ENDS else []
            self._snapshot(event.get("response"))
            if kind in _ENDS:
                self.ended = True
            return [*out, self._out(event)]
        # an event this gateway does not know: every text in it filtered whole, never passed unchecked
        for key in _TEXT_KEYS:
            if isinstance(event.get(key), str):
                event[key] = self._chains.whole("prose", event[key])
        return [self._out(event)]

    def _blank(self, part: dict[str, Any]) -> None:
        # an added part starts empty; text in it would bypass the slot's chain: filtered whole
        for key in ("text", "refusal"):
            if isinstance(part.get(key), str) and part[key]:
                part[key] = self._chains.whole("prose", part[key])

    def _blank_item(self, item: dict[str, Any], at: Any) -> None:
        for holder, key, _, kind in _item_fields(item, at):
            if holder[key]:
                holder[key] = self._chains.whole(kind, holder[key])

    def flush(self) -> list[bytes]:
        return self._tails()

    def error_event(self, error: GatewayError) -> bytes:
        body = error.to_body()["error"]
        return self._out({"type": "error", "code": body.get("code"), "message": body.get("message"),
                          "param": body.get("param")})

    def texts(self) -> list[str]:
        return self._texts
