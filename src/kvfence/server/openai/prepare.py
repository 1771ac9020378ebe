"""From a validated request to engine inputs: model name, token ids, sampling parameters.

Pure logic, no I/O: every function here either returns engine inputs or raises the
:class:`~kvfence.server.api_errors.APIError` the client gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvfence.engine.sampling.parallel_sampling import check_choices_fit
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import InvalidParameterError, RequestError
from kvfence.server.api_errors import APIError, from_request_error
from kvfence.server.auth.keys import ApiKey
from kvfence.server.openai.protocol import ChatCompletionRequest, CompletionRequest, GenerationRequest
from kvfence.server.openai.structured import structured_output

__all__ = [
    "DEFAULT_COMPLETION_MAX_TOKENS",
    "LoadedModel",
    "chat_prompt",
    "check_choices",
    "content_format",
    "resolve_model_name",
    "sampling_params",
    "tokenize_prompt",
]

DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


@dataclass(frozen=True)
class LoadedModel:
    """What the HTTP side needs to know about the loaded model.

    ``sampling_defaults`` (from ``generation_config.json``, see
    :mod:`kvfence.engine.sampling.generation_defaults`) fill the sampling fields a request leaves out.
    ``serves_prompt_only``: the engine takes ``max_tokens=0`` (score the prompt, sample nothing);
    without it a ``max_tokens: 0`` call samples one position that the answer drops.
    """

    name: str
    served_names: tuple[str, ...]
    tokenizer: Any
    capacity: Any
    is_random_weights: bool
    vocab_size: int | None
    sampling_defaults: Mapping[str, float] = field(default_factory=dict)
    # The engine runs max_tokens 0 as "compute the prompt, sample nothing" (the disaggregated one does not).
    serves_prompt_only: bool = False

    @property
    def public_name(self) -> str:
        return self.served_names[0]


def resolve_model_name(requested: str | None, model: LoadedModel) -> str:
    """The name to answer with; an unknown model is a 404 ``model_not_found``, as OpenAI and vLLM answer."""
    if requested is None or requested in model.served_names or requested == model.name:
        return requested or model.public_name
    raise APIError(
        404, f"the model {requested!r} does not exist on this server; available: {', '.join(model.served_names)}",
        param="model", code="model_not_found", reason="model_not_found",
    )


def tokenize_prompt(prompt: str | list[int], model: LoadedModel, *, add_special_tokens: bool | None = None) -> list[int]:
    """Token ids of a completion prompt; given ids are checked against the vocabulary and used as sent.

    ``add_special_tokens`` (vLLM's extra, default true) adds the tokenizer's special tokens (BOS) to a text prompt.
    """
    if isinstance(prompt, str):
        ids: list[int] = model.tokenizer.encode(prompt, add_special_tokens=add_special_tokens is not False)
        return ids
    vocab = model.vocab_size
    if vocab is not None:
        bad = next((t for t in prompt if t >= vocab), None)
        if bad is not None:
            raise APIError.bad_request(f"token id {bad} is out of range: the vocabulary has {vocab} tokens",
                                       param="prompt")
    return prompt


def content_format(model: LoadedModel) -> str:
    """How the model's chat template takes content parts: ``"openai"`` (the list) or ``"string"`` (joined)."""
    return str(getattr(model.tokenizer, "chat_template_content_format", "string"))


def chat_prompt(
    messages: list[dict[str, Any]], add_generation_prompt: bool, model: LoadedModel, *,
    add_special_tokens: bool | None = None, **template_options: Any,
) -> list[int]:
    """Token ids of the chat template rendered over the messages (``template_options``: see
    :meth:`ChatCompletionRequest.template_options`); a template error is a 400.

    A real template writes its own special tokens, so by default (as vLLM's chat default
    ``add_special_tokens: false``, and transformers' ``apply_chat_template``) none are added: a
    template that writes BOS gets one BOS, a template that does not gets none. With
    ``add_special_tokens`` true the tokenizer's are added too, but never a second BOS in front of
    the template's own. The plain fallback (a model without a template) adds them by default.
    """
    tok = model.tokenizer
    try:
        text = tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **template_options)
    except InvalidParameterError as exc:
        raise from_request_error(exc) from exc
    if add_special_tokens is None:
        add_special_tokens = tok.chat_template is None
    ids: list[int] = tok.encode(text, add_special_tokens=add_special_tokens)
    bos = getattr(tok, "bos_token_id", None)
    if add_special_tokens and bos is not None and ids[:2] == [bos, bos] and tok.encode(text, add_special_tokens=False)[:1] == [bos]:
        ids = ids[1:]  # the template's BOS and the tokenizer's: keep one
    return ids


def sampling_params(
    req: GenerationRequest, num_prompt: int, model: LoadedModel, key: ApiKey | None, param: str,
    scope_key: bytes | None = None,
) -> SamplingParams:
    """Engine sampling parameters, after the admission checks that need no engine (I3).

    ``param`` names the request field that holds the prompt ("prompt" or "messages"), for errors;
    ``scope_key`` the cache scope whose compiled grammars a structured output may reuse (I6).
    """
    if num_prompt == 0:
        raise APIError.bad_request(f"'{param}' must contain at least one token", param=param)
    if key is not None and key.max_prompt_tokens is not None and num_prompt > key.max_prompt_tokens:
        raise APIError.bad_request(
            f"the prompt has {num_prompt} tokens but API key {key.name!r} allows at most "
            f"{key.max_prompt_tokens}; shorten the {param}",
            param=param, code="context_length_exceeded",
        )
    max_len = int(model.capacity.max_model_len)
    requested = req.requested_max_tokens
    if requested is None:
        room = max_len - num_prompt
        requested = room if isinstance(req, ChatCompletionRequest) else min(DEFAULT_COMPLETION_MAX_TOKENS, room)
        requested = max(requested, 1)
    if requested == 0 and num_prompt >= max_len and not model.serves_prompt_only:
        # This engine computes one position past the prompt (its first sample), even when it is dropped.
        raise APIError.bad_request(
            f"This model's maximum context length is {max_len} tokens; scoring a prompt with max_tokens 0 needs "
            f"one more position than the prompt's {num_prompt} tokens. Please shorten the {param}.",
            param=param, code="context_length_exceeded",
        )
    if num_prompt + requested > max_len:
        # I3: refused before anything is queued or allocated.
        raise APIError.bad_request(
            f"This model's maximum context length is {max_len} tokens. However, you requested "
            f"{num_prompt + requested} tokens ({num_prompt} in the {param}, {requested} in the completion). "
            f"Please reduce the length of the {param} or completion.",
            param=param, code="context_length_exceeded",
        )
    logprobs: int | None = None
    if isinstance(req, ChatCompletionRequest):
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
    elif isinstance(req, CompletionRequest):
        logprobs = req.logprobs
    # echo with logprobs scores the prompt too; the engine computes the larger top-n of the two asks.
    asks = [n for n in (req.prompt_logprobs, getattr(req, "echo_logprobs", None)) if n is not None]
    prompt_logprobs = max(asks) if asks else None
    if requested == 0 and not model.serves_prompt_only:
        # max_tokens 0 with echo on an engine that always samples: one token, which the answer drops.
        requested = 1
    structured = structured_output(req, model, scope_key)  # a 400 for a bad schema / regex / grammar
    default = model.sampling_defaults
    top_k = req.effective_top_k if req.top_k is not None else default.get("top_k")
    try:
        return SamplingParams(
            max_tokens=requested,
            temperature=default.get("temperature", 1.0) if req.temperature is None else req.temperature,
            top_k=None if top_k is None else int(top_k),
            top_p=default.get("top_p", 1.0) if req.top_p is None else req.top_p,
            seed=None if req.seed is None else req.seed % (2**63),  # any JSON int, one generator seed
            stop=req.stop_list,
            stop_token_ids=[*(req.stop_token_ids or []), *structured.stop_token_ids],
            ignore_eos=bool(req.ignore_eos),
            logprobs=logprobs,
            min_tokens=req.min_tokens or 0,
            logits_processors=structured.logits_processors,
            presence_penalty=req.presence_penalty or 0.0,
            frequency_penalty=req.frequency_penalty or 0.0,
            repetition_penalty=(default.get("repetition_penalty", 1.0) if req.repetition_penalty is None
                                else req.repetition_penalty),
            logit_bias=_logit_bias(req, model),
            min_p=default.get("min_p", 0.0) if req.min_p is None else req.min_p,
            n=req.num_choices,
            best_of=getattr(req, "best_of", None),
            prompt_logprobs=prompt_logprobs,
            skip_special_tokens=req.skip_special_tokens is not False,
            include_stop_str_in_output=bool(req.include_stop_str_in_output),
        )
    except InvalidParameterError as exc:
        raise from_request_error(exc) from exc


def _logit_bias(req: GenerationRequest, model: LoadedModel) -> dict[Any, float]:
    """The request's ``logit_bias``, its token ids checked against the vocabulary (a 400 naming one)."""
    bias: dict[Any, float] = dict(req.logit_bias or {})
    vocab = model.vocab_size
    for key in bias:
        if vocab is not None and key.isascii() and key.isdigit() and int(key) >= vocab:
            raise APIError.bad_request(f"logit_bias token id {key} is out of range: the vocabulary has {vocab} tokens",
                                       param="logit_bias")
    return bias


def check_choices(
    prompts: list[list[int]], params: list[SamplingParams], model: LoadedModel, *, shares_prefix: bool,
    max_sequences: int | None,
) -> None:
    """I3 for ``n`` / ``best_of``: every prompt's choices fit the KV pool at once, and the request's
    sequences fit the server's queue bound (else it could never be queued: a 400, not a 429)."""
    cap = model.capacity
    try:
        for prompt, sp in zip(prompts, params, strict=True):
            check_choices_fit(len(prompt), sp, int(cap.num_pages), int(cap.page_size), shares_prefix=shares_prefix)
    except RequestError as exc:
        raise from_request_error(exc) from exc
    total = sum(sp.num_sequences for sp in params)
    if max_sequences is not None and total > max_sequences and total > 1:
        name = "best_of" if any(sp.best_of is not None for sp in params) else "n"
        raise APIError.bad_request(
            f"the request asks for {total} sequences ({len(prompts)} prompts x {name}) but this server queues at most "
            f"{max_sequences}; lower {name} or send fewer prompts", param=name)
