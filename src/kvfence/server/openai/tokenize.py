"""``POST /tokenize`` and ``POST /detokenize``, shaped as vLLM's, so clients that count tokens work.

``/tokenize`` takes a completion ``prompt`` (string) or chat ``messages`` (rendered with the
model's template, as ``/v1/chat/completions`` would) and answers ``{"count", "max_model_len",
"tokens"}``; ``/detokenize`` takes ``tokens`` and answers ``{"prompt"}``. Both need an API key like
every ``/v1`` route: they run the server's tokenizer on the caller's behalf, though nothing they
return depends on another tenant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kvfence.errors import RequestError
from kvfence.server.api_errors import APIError, from_request_error
from kvfence.server.openai.prepare import chat_prompt, content_format, resolve_model_name, tokenize_prompt
from kvfence.server.openai.protocol import ChatMessage, _Strict, parse_body, template_messages

if TYPE_CHECKING:
    from kvfence.server.openai.serving import OpenAIServing

__all__ = ["DetokenizeRequest", "TokenizeRequest", "detokenize", "tokenize"]


class TokenizeRequest(_Strict):
    """Body of ``POST /tokenize``: a ``prompt`` or chat ``messages``."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    # vLLM's defaults: true for a prompt, false for messages (the chat template writes its own).
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = True
    continue_final_message: bool | None = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Any] | None = None  # rendered by the template as on /v1/chat/completions, so the counts agree
    return_token_strs: bool | None = False  # vLLM extra: each token's text as well

    def check_supported(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise APIError.bad_request("send exactly one of 'prompt' (a string) or 'messages'", param="prompt")
        if self.continue_final_message and self.add_generation_prompt and "add_generation_prompt" in self.model_fields_set:
            raise APIError.bad_request("continue_final_message and add_generation_prompt exclude each other: "
                                       "send add_generation_prompt: false", param="continue_final_message")
        reserved = {"messages", "add_generation_prompt", "bos_token", "eos_token"} & set(self.chat_template_kwargs or {})
        if reserved:
            raise APIError.bad_request(f"chat_template_kwargs may not set {', '.join(sorted(reserved))}",
                                       param="chat_template_kwargs")


class DetokenizeRequest(_Strict):
    """Body of ``POST /detokenize``."""

    model: str | None = None
    tokens: list[int] = Field(min_length=1)

    def check_supported(self) -> None:
        if any(t < 0 for t in self.tokens):
            raise APIError.bad_request("'tokens' must be non-negative token ids", param="tokens")


def _template_kwargs(req: TokenizeRequest) -> dict[str, Any]:
    extra = dict(req.chat_template_kwargs or {})
    if req.tools:
        extra.setdefault("tools", req.tools)
    return extra


async def tokenize(serving: OpenAIServing, request: Request) -> Response:
    """Token ids of a prompt or of the rendered chat messages, and how many fit."""
    try:
        _, model = serving.ready()
        req = parse_body(await serving.read_body(request), TokenizeRequest)
        resolve_model_name(req.model, model)
        if req.messages is not None:
            generation_prompt = req.add_generation_prompt is not False and not (
                req.continue_final_message and "add_generation_prompt" not in req.model_fields_set)
            ids = chat_prompt(template_messages(req.messages, content_format(model)), generation_prompt, model,
                              add_special_tokens=req.add_special_tokens,
                              continue_final_message=bool(req.continue_final_message),
                              template_kwargs=_template_kwargs(req))
        else:
            assert req.prompt is not None
            ids = tokenize_prompt(req.prompt, model, add_special_tokens=req.add_special_tokens)
    except APIError as exc:
        return serving.reject(exc)
    except RequestError as exc:
        return serving.reject(from_request_error(exc))
    body: dict[str, Any] = {"count": len(ids), "max_model_len": int(model.capacity.max_model_len), "tokens": ids}
    body["token_strs"] = None  # vLLM's shape: the field is there, null unless asked for
    if req.return_token_strs:
        # the vocabulary's pieces, as vLLM's (convert_ids_to_tokens): "Ġword", "▁word", "<0x0A>"
        backend = getattr(model.tokenizer, "backend", None)
        body["token_strs"] = [backend.id_to_token(t) if backend is not None
                              else model.tokenizer.decode([t], skip_special_tokens=False) for t in ids]
    return JSONResponse(body)


async def detokenize(serving: OpenAIServing, request: Request) -> Response:
    """The text of a list of token ids (special tokens kept, as vLLM does)."""
    try:
        _, model = serving.ready()
        req = parse_body(await serving.read_body(request), DetokenizeRequest)
        resolve_model_name(req.model, model)
        vocab = model.vocab_size
        if vocab is not None and any(t >= vocab for t in req.tokens):
            raise APIError.bad_request(f"a token id is out of range: the vocabulary has {vocab} tokens",
                                       param="tokens")
    except APIError as exc:
        return serving.reject(exc)
    return JSONResponse({"prompt": model.tokenizer.decode(req.tokens, skip_special_tokens=False)})
