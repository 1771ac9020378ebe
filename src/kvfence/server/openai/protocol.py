"""Request bodies of the OpenAI API (completions and chat), validated once at the edge.

Types are strict: ``"max_tokens": "5"`` or ``"temperature": true`` is a 400, not a silent
coercion. Unknown fields are ignored, as OpenAI clients send fields this server has no use for;
fields that would change the answer but are not implemented (``suffix``, ``tool_choice: "auto"``, ...) are refused
with a message instead of being ignored.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvfence.openai_wire import InvalidJSON, decode_request_json
from kvfence.server.api_errors import APIError
from kvfence.server.openai.tools import tool_calling

__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "GenerationRequest",
    "StreamOptions",
    "check_json_content_type",
    "decode_body",
    "parse_body",
    "template_messages",
    "validate_body",
]

MAX_LOGPROBS = 20
MAX_N = 128  # as SamplingParams.MAX_N: choices per prompt


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    def check_supported(self) -> None:
        """Refuse values the types allow but this server does not serve (subclasses add checks)."""


class StreamOptions(_Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class GenerationRequest(_Strict):
    """Fields shared by ``/v1/completions`` and ``/v1/chat/completions``."""

    model: str | None = None
    # 0 only with completions' echo (score the prompt, generate nothing): see check_supported.
    max_tokens: int | None = Field(default=None, ge=0)
    # Newer OpenAI clients send max_completion_tokens instead of max_tokens; it wins when both are set.
    max_completion_tokens: int | None = Field(default=None, ge=0)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = None
    min_tokens: int | None = Field(default=None, ge=0)
    n: int | None = Field(default=None, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**64)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    ignore_eos: bool | None = False
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)  # vLLM extra; 1 = off
    logit_bias: dict[str, float] | None = None  # {"token id": bias in [-100, 100]}, checked in SamplingParams
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)  # vLLM extra; 0 = off
    # vLLM's extra: each prompt token's log-probability and the top n at its position (0: its own only).
    prompt_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    skip_special_tokens: bool | None = None  # vLLM extra; default true
    # vLLM extra: the tokenizer's special tokens (BOS) around the prompt. Default true for completions,
    # false for chat (the template writes its own); see prepare.tokenize_prompt / chat_prompt.
    add_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None  # vLLM extra; default false
    # vLLM extras that would change the answer and are not implemented: refused when set.
    use_beam_search: Any = None
    allowed_token_ids: Any = None
    bad_words: Any = None
    truncate_prompt_tokens: Any = None
    # Structured outputs (OpenAI's response_format; vLLM's spellings, on both endpoints as vLLM);
    # shapes are checked in kvfence.server.openai.structured.
    response_format: dict[str, Any] | None = None
    structured_outputs: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    guided_whitespace_pattern: Any = None
    guided_decoding_backend: Any = None  # one backend here: ignored

    def check_supported(self) -> None:
        """Refuse fields that would change the answer but that this server does not implement."""
        for name in ("use_beam_search", "allowed_token_ids", "bad_words", "truncate_prompt_tokens"):
            value = getattr(self, name)
            if not (value is None or value is False or value == []):
                raise APIError.bad_request(f"{name} is not supported by this server", param=name)
        if self.requested_max_tokens == 0 and not self.scores_prompt_only:
            name = "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"
            raise APIError.bad_request(f"{name} must be at least 1; 0 is allowed only with 'echo' "
                                       "(to score the prompt without generating)", param=name)
        if self.stream_options is not None and not self.stream:
            raise APIError.bad_request("'stream_options' is only allowed when 'stream' is true",
                                       param="stream_options")
        if self.top_k is not None and self.top_k < -1:
            raise APIError.bad_request(f"top_k must be -1 or 0 (disabled) or >= 1, got {self.top_k}", param="top_k")
        if any(not s for s in self.stop_list):
            raise APIError.bad_request("stop strings must not be empty", param="stop")
        if self.stop_token_ids and any(t < 0 for t in self.stop_token_ids):
            raise APIError.bad_request("stop_token_ids must be non-negative token ids", param="stop_token_ids")

    @property
    def scores_prompt_only(self) -> bool:
        """True when the call generates nothing and answers with its prompt (``max_tokens: 0`` with ``echo``)."""
        return False

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def effective_top_k(self) -> int | None:
        # vLLM clients send -1 (and some send 0) for "no top-k".
        return None if self.top_k is None or self.top_k <= 0 else self.top_k

    @property
    def num_choices(self) -> int:
        """Choices returned per prompt (``n``)."""
        return self.n or 1

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(GenerationRequest):
    """Body of ``POST /v1/completions``."""

    prompt: Any = None
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1, le=MAX_N)

    @property
    def scores_prompt_only(self) -> bool:
        return bool(self.echo) and self.requested_max_tokens == 0

    @property
    def echo_logprobs(self) -> int | None:
        """Top alternatives per echoed prompt token (``echo`` with ``logprobs``), else None."""
        return self.logprobs if self.echo else None

    def check_supported(self) -> None:
        super().check_supported()
        if self.suffix:
            raise APIError.bad_request("suffix is not supported", param="suffix")
        if self.best_of is not None and self.best_of < self.num_choices:
            raise APIError.bad_request(f"best_of must be >= n; got best_of={self.best_of}, n={self.num_choices}",
                                       param="best_of")
        if self.stream and self.best_of is not None and self.best_of > self.num_choices:
            raise APIError.bad_request("best_of > n cannot be streamed: the best choices are known only at the end",
                                       param="best_of")

    def prompts(self) -> list[str | list[int]]:
        """The prompt as a list of prompts, each a string or a list of token ids."""
        p = self.prompt
        bad = APIError.bad_request(
            "'prompt' must be a string, a list of strings, a list of token ids or a list of token-id lists",
            param="prompt",
        )
        if isinstance(p, str):
            return [p]
        if not isinstance(p, list) or not p:
            raise (APIError.bad_request("'prompt' is required and must not be empty", param="prompt")
                   if p is None or p == [] else bad)
        if all(isinstance(x, str) for x in p):
            return list(p)
        if all(_is_token_id(x) for x in p):
            return [list(p)]
        if all(isinstance(x, list) and x and all(_is_token_id(t) for t in x) for x in p):
            return [list(x) for x in p]
        raise bad


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    # Earlier tool calls in the history (no new ones are served): the template renders them.
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text_parts(self, index: int) -> list[str]:
        """The texts of the content parts; a part of another type (image_url, input_audio, file ...) is
        a 400 naming it: this server serves text models and never drops a part silently."""
        parts = self.content if isinstance(self.content, list) else []
        texts: list[str] = []
        for k, part in enumerate(parts):
            kind = part.get("type")
            if kind != "text":
                raise APIError.bad_request(
                    f"messages[{index}].content[{k}]: only parts of type 'text' are supported, got "
                    f"{json.dumps(kind)[:40]}: this server serves a text-only model",
                    param=f"messages[{index}].content",
                )
            try:
                texts.append(TextPart.model_validate(part).text)
            except ValidationError:
                raise APIError.bad_request(
                    f"messages[{index}].content[{k}]: a text part needs a string 'text'",
                    param=f"messages[{index}].content",
                ) from None
        return texts

    def text(self, index: int) -> str:
        """The message content as one string: text parts joined by newlines (as vLLM joins them)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(self.text_parts(index))

    def template_content(self, index: int, content_format: str) -> str | list[dict[str, Any]]:
        """The content as the chat template reads it: a list of parts stays the list the client sent
        when the template iterates over parts (``"openai"``), else becomes one string."""
        if content_format == "openai" and isinstance(self.content, list):
            self.text_parts(index)  # validated: text parts only
            return [dict(part) for part in self.content]
        return self.text(index)


class ChatCompletionRequest(GenerationRequest):
    """Body of ``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None  # OpenAI's deprecated spelling of tools
    function_call: Any = None
    parallel_tool_calls: bool | None = None  # false: at most one call with tool_choice "required"
    # OpenAI fields asking for output this server cannot produce: refused, never silently dropped
    # (a client that asked for audio or a web search would read a text-only answer as one).
    modalities: list[str] | None = None
    audio: Any = None
    web_search_options: Any = None
    add_generation_prompt: bool | None = True
    continue_final_message: bool | None = False  # vLLM extra: continue the last (assistant) message
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM extra: template variables (enable_thinking ...)
    chat_template: Any = None  # vLLM extra, refused: a request-supplied template
    documents: Any = None  # vLLM extra, refused: RAG documents for the template
    best_of: int | None = None  # completions only; refused here when it would change the answer
    # vLLM extra: the answer starts with the last message's content when the model continues it
    # (the last message is the assistant's, or add_generation_prompt is false): see echo_text.
    echo: bool | None = False

    def check_supported(self) -> None:
        super().check_supported()
        if self.top_logprobs and not self.logprobs:
            raise APIError.bad_request("'top_logprobs' requires 'logprobs': true", param="top_logprobs")
        tool_calling(self)  # tools and tool_choice: a 400 for what is malformed or not served (see .tools)
        if self.functions:
            raise APIError.bad_request("the deprecated 'functions' field is not supported; send 'tools'",
                                       param="functions")
        # "none" and "auto" without functions mean plain text, which is what is served.
        if self.function_call not in (None, "none", "auto"):
            raise APIError.bad_request(f"function_call {json.dumps(self.function_call)[:80]} asks for a call "
                                       "through the deprecated 'functions' field, which is not supported; send "
                                       "'tools' and 'tool_choice'", param="function_call")
        if self.best_of not in (None, self.num_choices):
            raise APIError.bad_request("best_of is supported on /v1/completions only", param="best_of")
        other = sorted(set(self.modalities or []) - {"text"})
        if other:
            raise APIError.bad_request(f"output modalities {other} are not supported: this server answers with "
                                       "text only (send modalities ['text'] or leave it out)", param="modalities")
        if self.audio is not None:
            raise APIError.bad_request("audio output is not supported: this server answers with text only",
                                       param="audio")
        if self.web_search_options is not None:
            raise APIError.bad_request("web search is not supported by this server", param="web_search_options")
        if self.continue_final_message and self.add_generation_prompt and "add_generation_prompt" in self.model_fields_set:
            raise APIError.bad_request("continue_final_message and add_generation_prompt exclude each other: "
                                       "send add_generation_prompt: false", param="continue_final_message")
        if self.chat_template is not None:
            raise APIError.bad_request("a chat template sent with the request is not supported; the model's own "
                                       "template is used", param="chat_template")
        if self.documents:
            raise APIError.bad_request("documents are not supported", param="documents")
        reserved = {"messages", "add_generation_prompt", "bos_token", "eos_token"} & set(self.chat_template_kwargs or {})
        if reserved:
            raise APIError.bad_request(f"chat_template_kwargs may not set {', '.join(sorted(reserved))}",
                                       param="chat_template_kwargs")

    @property
    def wants_generation_prompt(self) -> bool:
        """``add_generation_prompt``; left out with ``continue_final_message``, it is false (the last
        message is continued, not answered)."""
        if "add_generation_prompt" not in self.model_fields_set and self.continue_final_message:
            return False
        return self.add_generation_prompt is not False

    def template_options(self) -> dict[str, Any]:
        """Keyword arguments of ``Tokenizer.apply_chat_template`` beyond the messages."""
        extra = dict(self.chat_template_kwargs or {})
        if self.tools:  # the template shows the model its tools (as transformers' apply_chat_template(tools=))
            extra.setdefault("tools", self.tools)
        return {"continue_final_message": bool(self.continue_final_message), "template_kwargs": extra}

    def template_messages(self, content_format: str = "string") -> list[dict[str, Any]]:
        """Messages as plain dicts for the chat template (``content_format``: see :func:`template_messages`)."""
        return template_messages(self.messages, content_format)

    @property
    def scores_prompt_only(self) -> bool:
        """``max_tokens: 0`` with ``echo``: the answer is the echoed message, nothing is generated."""
        return bool(self.echo) and self.requested_max_tokens == 0

    def echo_text(self) -> str:
        """vLLM's chat ``echo``: the text the answer starts with, the last message's content when the
        model continues that message (it is the assistant's, or no generation prompt follows it)."""
        if not self.echo:
            return ""
        last = self.messages[-1]
        if last.role == "assistant" or not self.wants_generation_prompt:
            return last.text(len(self.messages) - 1)
        return ""


def template_messages(messages: list[ChatMessage], content_format: str = "string") -> list[dict[str, Any]]:
    """Chat messages as the plain dicts a chat template reads.

    Content parts are joined by newlines into one string (``content_format="string"``), or, for a
    template that iterates over parts (``"openai"``, see
    :func:`kvfence.engine.text.chat_template.content_format`), passed on as the list the client sent, as
    transformers' ``apply_chat_template`` would pass it. Only text parts are accepted either way.

    Tool calls of earlier turns are passed on with their JSON ``arguments`` string decoded, since
    Hugging Face templates expect a mapping there (they render it with ``tojson``).
    """
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        entry: dict[str, Any] = {"role": m.role, "content": m.template_content(i, content_format)}
        if m.name:
            entry["name"] = m.name
        if m.tool_call_id:
            entry["tool_call_id"] = m.tool_call_id
        if m.tool_calls:
            entry["tool_calls"] = [_decoded_arguments(call, i) for call in m.tool_calls]
        out.append(entry)
    return out


def _decoded_arguments(call: dict[str, Any], index: int) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except json.JSONDecodeError:
        raise APIError.bad_request(f"messages[{index}].tool_calls: 'arguments' must be a JSON string",
                                   param=f"messages[{index}].tool_calls") from None
    return {**call, "function": {**function, "arguments": arguments}}


_R = TypeVar("_R", bound=_Strict)


# pydantic names the member of a union it tried (``content.str``, ``stop.list[str]``): not a field.
_UNION_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _describe(exc: ValidationError) -> APIError:
    err = exc.errors(include_url=False)[0]
    loc = [str(x) for x in err["loc"]]
    tag = next((i for i, x in enumerate(loc) if i and (x in _UNION_TAGS or "[" in x)), None)
    loc = loc if tag is None else loc[:tag]
    field = loc[0] if loc else "body"
    path = field + "".join(f"[{x}]" if x.isdigit() else f".{x}" for x in loc[1:])
    if err["type"] == "missing":
        return APIError.bad_request(f"'{path}' is required", param=field)
    value = err.get("input")
    shown = json.dumps(value)[:80] if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return APIError.bad_request(f"invalid value for '{path}': {err['msg']} (got {shown})", param=field)


def check_json_content_type(content_type: str | None) -> None:
    """Refuse a body declared as anything but JSON (415), as FastAPI-based servers (vLLM) do.

    A missing header is read as JSON (some clients send none). ``text/plain`` and form encodings
    are what a web page can make a browser send to a local server without a CORS preflight, so a
    server run with ``--no-auth`` on a workstation must not act on them.
    """
    if content_type is None:
        return
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json")):
        return
    raise APIError(415, f"unsupported Content-Type {content_type[:80]!r}: send the body as JSON with "
                        "'Content-Type: application/json'", code="unsupported_media_type")


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return obj


# JSON parsers disagree on a repeated key (Python keeps the last, others the first): a proxy in
# front that caps `max_tokens` or screens `content` could check one value while this server
# generates from the other. A repeated key at any depth is therefore a 400, not a guess.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


def parse_body(body: bytes, model: type[_R]) -> _R:
    """Decode (UTF-8), parse (JSON) and validate a request body; every failure is a 400."""
    return validate_body(decode_body(body), model)


def validate_body(data: dict[str, Any], model: type[_R]) -> _R:
    """Validate a decoded body against ``model`` and its ``check_supported``; every failure is a 400."""
    try:
        request = model.model_validate(data)
    except ValidationError as exc:
        raise _describe(exc) from None
    request.check_supported()
    return request


def decode_body(body: bytes) -> dict[str, Any]:
    """Decode (UTF-8) and parse (JSON, each key once) a request body into an object; every failure is a 400."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise APIError.bad_request(f"request body is not valid UTF-8: {exc.reason} at byte {exc.start}",
                                   code="invalid_encoding") from None
    try:
        data = decode_request_json(text, _DECODER)  # depth, digits, lone surrogates: kvfence.openai_wire
    except _DuplicateKeyError as exc:
        raise APIError.bad_request(f"request body repeats the key {json.dumps(exc.key)[:80]} in one object; send "
                                   "each field once", code="invalid_json") from None
    except InvalidJSON as exc:
        raise APIError.bad_request(exc.message, code=exc.code) from None
    if not isinstance(data, dict):
        raise APIError.bad_request("request body must be a JSON object", code="invalid_json")
    return data
