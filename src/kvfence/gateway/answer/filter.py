"""Applying the hooks' response filters to answers, streamed (server-sent events) or not.

Pure data transformation: bytes or JSON in, bytes or JSON out. Every field of every choice that
carries model text (chat ``content``, ``refusal``, ``reasoning_content`` / ``reasoning``,
``audio.transcript``, each tool call's ``function.arguments`` or, for a custom tool, its free-text
``custom.input``, a legacy ``function_call.arguments``; completions ``text``) gets its own chain of
filters, so a placeholder split across chunks of one choice is still seen whole, choices and tool
calls never mix, and no field leaves the gateway unscanned.

Arguments are the text of a JSON string, not prose: their chains are told so before the first text
(:meth:`FilterChain.restore_into_json_string`), and a filter that puts values back (the protection
hook's) JSON-escapes them there, so a restored value holding ``"`` or ``\\`` can neither break the
arguments nor add keys to them. The ``content`` (completions ``text``) chain is told it holds the
answer's content (:meth:`FilterChain.restore_into_content`): a filter that knows the request asked for
a JSON document (``response_format``) restores into that document's strings the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kvfence.gateway.answer.logprobs import LogprobsFilter, TokenFilter
from kvfence.gateway.hooks import ResponseFilter

__all__ = ["AnswerFilter", "FilterChain"]

CHAT_FIELDS = ("content", "refusal", "reasoning_content", "reasoning", "name")

# What a client can read of a chat answer, field by field; anything else an upstream adds is dropped
# before the answer leaves (an unknown field is one no filter reads). Text fields are filtered slots.
ANSWER_KEYS = frozenset({"id", "object", "created", "model", "choices", "usage", "system_fingerprint",
                         "service_tier", "prompt_logprobs", "error"})
CHOICE_KEYS = frozenset({"index", "message", "delta", "text", "finish_reason", "logprobs", "stop_reason",
                         "matched_stop"})
MESSAGE_KEYS = frozenset({"role", *CHAT_FIELDS, "audio", "tool_calls", "function_call", "annotations"})
TOOL_CALL_KEYS = frozenset({"index", "id", "type", "function", "custom"})
CALL_KEYS = frozenset({"name", "arguments", "input"})
AUDIO_KEYS = frozenset({"id", "data", "expires_at", "transcript", "format"})


def _only(holder: dict[str, Any], keys: frozenset[str]) -> None:
    for key in [k for k in holder if k not in keys]:
        del holder[key]


def drop_unknown_fields(answer: dict[str, Any]) -> None:
    """Remove, in place, every field of a (whole or streamed) answer that no filter reads."""
    _only(answer, ANSWER_KEYS)
    for choice in answer.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        _only(choice, CHOICE_KEYS)
        if isinstance(choice.get("stop_reason"), str):
            del choice["stop_reason"]  # a stop string as it went upstream (pseudonymised): not the client's text
        for key in ("message", "delta"):
            holder = choice.get(key)
            if not isinstance(holder, dict):
                continue
            _only(holder, MESSAGE_KEYS)
            if isinstance(holder.get("audio"), dict):
                _only(holder["audio"], AUDIO_KEYS)
            for call in holder.get("tool_calls") or []:
                if isinstance(call, dict):
                    _only(call, TOOL_CALL_KEYS)
                    for part in ("function", "custom"):
                        if isinstance(call.get(part), dict):
                            _only(call[part], CALL_KEYS)
            if isinstance(holder.get("function_call"), dict):
                _only(holder["function_call"], CALL_KEYS)


class FilterChain:
    """Filters applied one after the other to one text stream."""

    def __init__(self, filters: Sequence[ResponseFilter]) -> None:
        self._filters = list(filters)

    def feed(self, text: str) -> str:
        for f in self._filters:
            text = f.feed(text)
        return text

    def restore_into_json_string(self) -> None:
        """The chain's slot is the text of a JSON string (tool-call arguments): every filter that offers
        ``restore_into_json_string`` (an optional capability, like ``token_restorer``) is told so."""
        self._tell("restore_into_json_string")

    def restore_into_content(self) -> None:
        """The chain's slot is the answer's ``content`` (completions ``text``), the text a JSON
        ``response_format`` makes a JSON document: every filter that offers ``restore_into_content``
        (optional, like ``restore_into_json_string``) is told so."""
        self._tell("restore_into_content")

    def _tell(self, capability: str) -> None:
        for f in self._filters:
            mark = getattr(f, capability, None)
            if mark is not None:
                mark()

    def token_filters(self) -> list[TokenFilter]:
        """Fresh per-token filters (for ``logprobs``) of the filters that offer one (``token_restorer``)."""
        return [f.token_restorer() for f in self._filters if hasattr(f, "token_restorer")]

    def finish(self) -> str:
        # Each filter's tail still has to pass through the filters after it.
        tail = ""
        for f in self._filters:
            tail = f.feed(tail) if tail else ""
            tail += f.finish()
        return tail


# A text slot of a choice: "content", "refusal", "reasoning_content", "reasoning", "text" (completions),
# "audio" for the audio's transcript, "tool:<i>" for the arguments string of function tool call i,
# "custom:<i>" for the input of custom tool call i, or "function_call" for a legacy function call's
# arguments.
Slot = tuple[int, str]
FUNCTION_CALL = "function_call"
FUNCTION_CALL_NAME = "function_call.name"
# A tool call's name: (slot kind -> the object holding it, its key)
_CALL_PARTS = {"tool": ("function", "arguments"), "custom": ("custom", "input"),
               "toolname": ("function", "name"), "customname": ("custom", "name")}
AUDIO = "audio"
CONTENT_SLOTS = ("content", "text")


def is_json_string_slot(slot: str) -> bool:
    """Whether the slot's text is a JSON string's (tool-call or function-call arguments)."""
    return slot.startswith("tool:") or slot == FUNCTION_CALL


def _alternatives(logprobs: Any, *, chat: bool) -> list[str]:
    """The text of each rank of ``top_logprobs`` alternatives in one logprobs object (rank r: the r-th
    alternative of every position, joined)."""
    ranks: list[list[str]] = []

    def add(rank: int, token: Any) -> None:
        if isinstance(token, str):
            while len(ranks) <= rank:
                ranks.append([])
            ranks[rank].append(token)

    if not isinstance(logprobs, dict):
        return []
    if chat:
        for key in ("content", "refusal"):
            for entry in logprobs.get(key) or []:
                tops = entry.get("top_logprobs") if isinstance(entry, dict) else None
                for rank, alt in enumerate(tops if isinstance(tops, list) else []):
                    add(rank, alt.get("token") if isinstance(alt, dict) else None)
    else:
        for tops in logprobs.get("top_logprobs") or []:
            for rank, token in enumerate(tops if isinstance(tops, dict) else []):
                add(rank, token)
    return ["".join(tokens) for tokens in ranks]


class AnswerFilter:
    """Per-answer state: one :class:`FilterChain` per (choice index, text slot).

    Slots are the choice's ``content`` / ``refusal`` / ``reasoning_content`` / ``reasoning`` /
    ``audio.transcript`` (chat), ``text`` (completions), the ``function.arguments`` of each function
    tool call, the ``custom.input`` of each custom tool call and a legacy ``function_call.arguments``
    (chat), so a placeholder or another tenant's text anywhere in them is restored and scanned like
    any other text (JSON-escaped in arguments).
    """

    def __init__(self, endpoint: str, make_chain: Callable[[], FilterChain]) -> None:
        self._endpoint = endpoint
        self._make_chain = make_chain
        self._chains: dict[Slot, FilterChain] = {}
        self._finished: set[Slot] = set()
        self._last_chunk: dict[str, Any] | None = None
        self._logprobs: dict[int, LogprobsFilter] = {}  # per choice: its per-token fields (logprobs)
        self._logprobs_done: set[int] = set()
        self._alt_chains: dict[Slot, FilterChain] = {}  # per choice and rank: top_logprobs alternatives

    def _scan_alternatives(self, logprobs: Any, index: int, *, final: bool) -> None:
        """The ``top_logprobs`` alternatives are answer text a client reads too: the r-th alternative
        of each position, in order, is one more text of the choice, fed through its own chain (what
        the chain's filters say is not used: alternatives about a placeholder are emptied by the token
        restorer; a leak found in them stops the answer like one in the content)."""
        for rank, text in enumerate(_alternatives(logprobs, chat=self._endpoint == "chat")):
            if text:
                key = (index, f"top:{rank}")
                chain = self._alt_chains.get(key)
                if chain is None:
                    chain = self._alt_chains[key] = self._make_chain()
                chain.feed(text)
        if final:
            for key in [k for k in self._alt_chains if k[0] == index]:
                self._alt_chains.pop(key).finish()

    def _filter_logprobs(self, choice: dict[str, Any], index: int, *, final: bool) -> None:
        """Restore placeholders in the choice's ``logprobs`` tokens too (see :mod:`.answer_logprobs`)."""
        if index in self._logprobs_done:
            return
        logprobs = choice.get("logprobs")
        if logprobs is not None or final:
            self._scan_alternatives(logprobs, index, final=final)
        lp_filter = self._logprobs.get(index)
        if logprobs is None and (lp_filter is None or not final):
            return
        if lp_filter is None:
            lp_filter = self._logprobs[index] = LogprobsFilter(self._token_filters)
        if final:
            self._logprobs_done.add(index)
        filtered = (lp_filter.chat(logprobs, final=final) if self._endpoint == "chat"
                    else lp_filter.completion(logprobs, final=final))
        if filtered is not None:
            choice["logprobs"] = filtered

    def _token_filters(self, key: str) -> list[TokenFilter]:
        # The tokens spell the content (chat "content", completions "tokens"), or a refusal: only the
        # content is the JSON document a JSON response_format asked for; a refusal is prose.
        chain = self._make_chain()
        if key != "refusal":
            chain.restore_into_content()
        return chain.token_filters()

    def _chain(self, key: Slot) -> FilterChain:
        chain = self._chains.get(key)
        if chain is None:
            chain = self._chains[key] = self._make_chain()
            if is_json_string_slot(key[1]):
                chain.restore_into_json_string()
            elif key[1] in CONTENT_SLOTS:
                chain.restore_into_content()
        return chain

    def _slots(self, choice: dict[str, Any], *, stream: bool) -> list[tuple[dict[str, Any], str, str]]:
        """(object holding the string, its key, slot name) for every text in this choice."""
        if self._endpoint == "completions":
            return [(choice, "text", "text")]
        holder = choice.get("delta" if stream else "message")
        if not isinstance(holder, dict):
            return []
        out = [(holder, name, name) for name in CHAT_FIELDS if isinstance(holder.get(name), str)]
        audio = holder.get(AUDIO)
        if isinstance(audio, dict) and isinstance(audio.get("transcript"), str):
            out.append((audio, "transcript", AUDIO))
        for position, call in enumerate(holder.get("tool_calls") or []):
            if not isinstance(call, dict):
                continue
            index = call.get("index", position) if stream else position
            function, custom = call.get("function"), call.get("custom")
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                out.append((function, "name", f"toolname:{index}"))
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                out.append((function, "arguments", f"tool:{index}"))
            if isinstance(custom, dict) and isinstance(custom.get("name"), str):
                out.append((custom, "name", f"customname:{index}"))
            if isinstance(custom, dict) and isinstance(custom.get("input"), str):
                out.append((custom, "input", f"custom:{index}"))
        legacy = holder.get(FUNCTION_CALL)
        if isinstance(legacy, dict) and isinstance(legacy.get("name"), str):
            out.append((legacy, "name", FUNCTION_CALL_NAME))
        if isinstance(legacy, dict) and isinstance(legacy.get("arguments"), str):
            out.append((legacy, "arguments", FUNCTION_CALL))
        return out

    @staticmethod
    def _put_tail(choice: dict[str, Any], slot: str, tail: str, *, chat: bool) -> None:
        """Append held-back text of ``slot`` to a streamed choice, creating the field if needed."""
        if not chat:
            choice["text"] = (choice.get("text") or "") + tail
            return
        delta = choice.setdefault("delta", {})
        if slot in (FUNCTION_CALL, FUNCTION_CALL_NAME):
            legacy = delta.setdefault(FUNCTION_CALL, {})
            key = "arguments" if slot == FUNCTION_CALL else "name"
            legacy[key] = (legacy.get(key) or "") + tail
            return
        if slot == AUDIO:
            audio = delta.setdefault(AUDIO, {})
            audio["transcript"] = (audio.get("transcript") or "") + tail
            return
        kind, _, position = slot.partition(":")
        if kind not in _CALL_PARTS:
            delta[slot] = (delta.get(slot) or "") + tail
            return
        index = int(position)
        holder, field = _CALL_PARTS[kind]
        calls = delta.setdefault("tool_calls", [])
        for call in calls:
            if isinstance(call, dict) and call.get("index") == index:
                part = call.setdefault(holder, {})
                part[field] = (part.get(field) or "") + tail
                return
        calls.append({"index": index, holder: {field: tail}})

    # -- streaming --------------------------------------------------------------------------------
    def filter_chunk(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """Filter one streamed chunk in place; finishes a choice's chains on its ``finish_reason``."""
        self._last_chunk = chunk
        chat = self._endpoint == "chat"
        drop_unknown_fields(chunk)
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            index = int(choice.get("index") or 0)
            for holder, field, slot in self._slots(choice, stream=True):
                if (index, slot) in self._finished:
                    continue
                text = holder[field]
                holder[field] = self._chain((index, slot)).feed(text) if text else ""
            self._filter_logprobs(choice, index, final=choice.get("finish_reason") is not None)
            if choice.get("finish_reason") is not None:
                for key in [k for k in self._chains if k[0] == index and k not in self._finished]:
                    self._finished.add(key)
                    tail = self._chains[key].finish()
                    if tail:
                        self._put_tail(choice, key[1], tail, chat=chat)
        return chunk

    def flush(self) -> list[dict[str, Any]]:
        """Chunks carrying what is still held back for choices that never sent a finish_reason."""
        out: list[dict[str, Any]] = []
        chat = self._endpoint == "chat"
        for key, chain in self._chains.items():
            if key in self._finished:
                continue
            self._finished.add(key)
            tail = chain.finish()
            if not tail:
                continue
            base = {k: v for k, v in (self._last_chunk or {}).items() if k in ("id", "object", "created", "model")}
            choice: dict[str, Any] = {"index": key[0], "finish_reason": None}
            self._put_tail(choice, key[1], tail, chat=chat)
            self._filter_logprobs(choice, key[0], final=True)
            out.append({**base, "choices": [choice]})
        for index in [i for i in self._logprobs if i not in self._logprobs_done]:
            choice = {"index": index, "finish_reason": None}
            self._filter_logprobs(choice, index, final=True)
            if choice.get("logprobs"):
                base = {k: v for k, v in (self._last_chunk or {}).items() if k in ("id", "object", "created", "model")}
                out.append({**base, "choices": [{**choice, **({"delta": {}} if chat else {"text": ""})}]})
        return out

    # -- whole answers ----------------------------------------------------------------------------
    def filter_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """Filter a non-streamed answer in place."""
        drop_unknown_fields(body)
        for choice in body.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            index = int(choice.get("index") or 0)
            for holder, field, slot in self._slots(choice, stream=False):
                chain = self._chain((index, slot))
                holder[field] = chain.feed(holder[field]) + chain.finish()
                self._finished.add((index, slot))
            self._filter_logprobs(choice, index, final=True)
        return body
