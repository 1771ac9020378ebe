"""Allowlist models of ``/v1/chat/completions`` and ``/v1/completions`` (see :mod:`.request_model`).

OpenAI's request shapes, plus the vLLM and SGLang extras a backend honours. What is refused and why:

- engine-internal fields a backend reads from the body (``kv_transfer_params`` steers a
  disaggregated prefill/decode handoff; ``priority``, ``request_id``, ``vllm_xargs``, ``lora_request``,
  SGLang's ``rid``, ``bootstrap_*``, ``custom_logit_processor`` ...): no client may set them;
- ``chat_template``: a Jinja program the backend runs over the messages, not data to scan;
- ``prompt_cache_key``: picks the provider's prompt-cache shard; the gateway sets cache scope (I5);
- ``extra_body``: an option of the ``openai`` client (merged into the body there); the literal field is
  no part of the API.

``cache_salt`` is accepted only to be replaced by the gateway's per-tenant salt (``routing/cache_salt.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, JsonValue, StringConstraints

from kvfence.gateway.apis.request_model import (
    Nested,
    Opaque,
    Refused,
    RequestModel,
    Scan,
    Structural,
    register,
)

__all__ = ["ChatCompletionRequest", "CompletionRequest"]

Text = Annotated[str | None, Scan()]
Name = Annotated[str | None, Scan(rewrite=False)]            # referred to elsewhere: never rewritten
Json = Annotated[JsonValue, Scan()]                           # keys and structural values scan-only
Number = Annotated[float | None, Structural("a number")]
Int = Annotated[int | None, Structural("an integer")]
Flag = Annotated[bool | None, Structural("a boolean")]
TokenIds = Annotated[list[int] | None, Structural("token ids: numbers, no text")]
TokenIdKey = Annotated[str, StringConstraints(pattern=r"^-?[0-9]{1,12}$")]

_ENGINE = "an engine-internal field: only the gateway or the engine may set it, never a client"
Engine = Annotated[JsonValue, Refused(_ENGINE)]


# -- content parts --------------------------------------------------------------------------------

class TextPart(RequestModel):
    type: Annotated[Literal["text", "input_text"], Structural("the part's kind")]
    text: Annotated[str, Scan()]


class RefusalPart(RequestModel):
    type: Annotated[Literal["refusal"], Structural("the part's kind")]
    refusal: Annotated[str, Scan()]


class ImageURL(RequestModel):
    url: Annotated[str, Opaque("url")]
    detail: Annotated[Literal["auto", "low", "high"] | None, Structural("a resolution choice")] = None


class ImagePart(RequestModel):
    opaque_kind = "image"
    type: Annotated[Literal["image_url"], Structural("the part's kind")]
    image_url: Annotated[ImageURL, Nested()]


class MediaURL(RequestModel):
    url: Annotated[str, Opaque("url")]


class AudioURLPart(RequestModel):
    opaque_kind = "audio"
    type: Annotated[Literal["audio_url"], Structural("the part's kind")]
    audio_url: Annotated[MediaURL, Nested()]


class VideoURLPart(RequestModel):
    opaque_kind = "video"
    type: Annotated[Literal["video_url"], Structural("the part's kind")]
    video_url: Annotated[MediaURL, Nested()]


class InputAudio(RequestModel):
    data: Annotated[str, Opaque("audio")]
    format: Annotated[Literal["wav", "mp3", "flac", "ogg", "pcm16", "m4a", "webm"], Structural("a codec name")]


class InputAudioPart(RequestModel):
    opaque_kind = "audio"
    type: Annotated[Literal["input_audio"], Structural("the part's kind")]
    input_audio: Annotated[InputAudio, Nested()]


class FileData(RequestModel):
    file_data: Annotated[str | None, Opaque("file")] = None
    file_id: Name = None
    filename: Name = None


class FilePart(RequestModel):
    opaque_kind = "file"
    type: Annotated[Literal["file"], Structural("the part's kind")]
    file: Annotated[FileData, Nested()]


ContentPart = Annotated[TextPart | RefusalPart | ImagePart | AudioURLPart | VideoURLPart | InputAudioPart | FilePart,
                        Field(discriminator="type")]


# -- messages -------------------------------------------------------------------------------------

class FunctionCall(RequestModel):
    name: Name = None
    arguments: Text = None


class CustomCall(RequestModel):
    name: Name = None
    input: Text = None


class ToolCall(RequestModel):
    id: Name = None
    type: Annotated[Literal["function", "custom"] | None, Structural("the call's kind")] = None
    function: Annotated[FunctionCall | None, Nested()] = None
    custom: Annotated[CustomCall | None, Nested()] = None


class AudioRef(RequestModel):
    id: Name


class Message(RequestModel):
    role: Annotated[Literal["system", "developer", "user", "assistant", "tool", "function"],
                    Structural("one of six role names")]
    name: Text = None
    content: Annotated[str | list[ContentPart] | None, Scan()] = None
    refusal: Text = None
    reasoning_content: Text = None
    reasoning: Text = None
    tool_calls: Annotated[list[ToolCall] | None, Nested()] = None
    tool_call_id: Name = None
    function_call: Annotated[FunctionCall | None, Nested()] = None
    audio: Annotated[AudioRef | None, Nested()] = None


# -- tools and constraints ------------------------------------------------------------------------

class FunctionDef(RequestModel):
    name: Annotated[str, Scan(rewrite=False)]
    description: Text = None
    parameters: Json = None
    strict: Flag = None


class CustomToolDef(RequestModel):
    name: Annotated[str, Scan(rewrite=False)]
    description: Text = None
    format: Json = None


class Tool(RequestModel):
    type: Annotated[Literal["function", "custom"], Structural("the tool's kind")]
    function: Annotated[FunctionDef | None, Nested()] = None
    custom: Annotated[CustomToolDef | None, Nested()] = None


class StreamOptions(RequestModel):
    include_usage: Flag = None
    continuous_usage_stats: Flag = None
    include_obfuscation: Flag = None


class AudioOutput(RequestModel):
    voice: Name = None
    format: Annotated[Literal["wav", "mp3", "flac", "opus", "pcm16", "aac"] | None, Structural("a codec name")] = None


class _EngineFields(RequestModel):
    """Engine-internal names, each a field of its own so that the refusal names it."""

    kv_transfer_params: Engine = None
    priority: Engine = None
    request_id: Engine = None
    vllm_xargs: Engine = None
    lora_request: Engine = None
    lora_path: Engine = None
    logits_processors: Engine = None
    mm_processor_kwargs: Engine = None
    return_hidden_states: Engine = None
    rid: Engine = None
    bootstrap_host: Engine = None
    bootstrap_port: Engine = None
    bootstrap_room: Engine = None
    data_parallel_rank: Engine = None
    custom_logit_processor: Engine = None
    custom_params: Engine = None
    session_params: Engine = None
    routed_dp_rank: Engine = None
    disagg_prefill_dp_rank: Engine = None
    prompt_embeds: Engine = None
    cache_hit_threshold: Engine = None
    kv_cache_salt: Engine = None


class _Generation(_EngineFields):
    """Fields both endpoints share: sampling, limits, structured outputs, the vLLM / SGLang extras."""

    model: Annotated[str, Scan(rewrite=False)]
    stream: Flag = None
    stream_options: Annotated[StreamOptions | None, Nested()] = None
    max_tokens: Int = None
    max_completion_tokens: Int = None
    min_tokens: Int = None
    n: Int = None
    best_of: Int = None
    temperature: Number = None
    top_p: Number = None
    top_k: Int = None
    min_p: Number = None
    presence_penalty: Number = None
    frequency_penalty: Number = None
    repetition_penalty: Number = None
    length_penalty: Number = None
    seed: Int = None
    stop: Annotated[str | list[str] | None, Scan()] = None
    stop_token_ids: TokenIds = None
    bad_words: Annotated[list[str] | None, Scan()] = None
    allowed_token_ids: TokenIds = None
    logit_bias: Annotated[dict[TokenIdKey, float] | None, Structural("token ids (digits only) to numbers")] = None
    ignore_eos: Flag = None
    use_beam_search: Flag = None
    skip_special_tokens: Flag = None
    spaces_between_special_tokens: Flag = None
    include_stop_str_in_output: Flag = None
    add_special_tokens: Flag = None
    truncate_prompt_tokens: Int = None
    prompt_logprobs: Int = None
    return_tokens_as_token_ids: Flag = None
    user: Text = None
    safety_identifier: Text = None
    metadata: Json = None
    store: Flag = None
    service_tier: Annotated[Literal["auto", "default", "flex", "scale", "priority"] | None,
                            Structural("a tier name")] = None
    cache_salt: Annotated[str | None, Structural("replaced by the gateway's per-tenant salt (I5) before "
                                                 "forwarding; the client's value never leaves")] = None
    response_format: Json = None
    structured_outputs: Json = None
    guided_json: Json = None
    guided_regex: Annotated[str | None, Scan(rewrite=False)] = None
    guided_choice: Json = None
    guided_grammar: Annotated[str | None, Scan(rewrite=False)] = None
    guided_whitespace_pattern: Annotated[str | None, Scan(rewrite=False)] = None
    guided_decoding_backend: Name = None
    regex: Annotated[str | None, Scan(rewrite=False)] = None          # SGLang
    ebnf: Annotated[str | None, Scan(rewrite=False)] = None           # SGLang
    json_schema: Json = None                                           # SGLang (a string or an object)
    chat_template: Annotated[str | None, Refused("a Jinja program the backend would run over the messages; "
                                                 "the backend's own chat template is used")] = None
    prompt_cache_key: Annotated[str | None, Refused("it chooses the provider's prompt-cache shard; the gateway "
                                                    "decides cache scope (I5)")] = None
    extra_body: Annotated[JsonValue, Refused("`extra_body` is an option of the openai client, which merges it "
                                             "into the body; send those fields at the top level")] = None


class ChatCompletionRequest(_Generation):
    messages: Annotated[list[Message], Nested()]
    tools: Annotated[list[Tool] | None, Nested()] = None
    tool_choice: Annotated[JsonValue, Scan(rewrite=False)] = None
    parallel_tool_calls: Flag = None
    functions: Annotated[list[FunctionDef] | None, Nested()] = None
    function_call: Annotated[JsonValue, Scan(rewrite=False)] = None
    logprobs: Flag = None
    top_logprobs: Int = None
    echo: Flag = None
    add_generation_prompt: Flag = None
    continue_final_message: Flag = None
    chat_template_kwargs: Json = None
    documents: Json = None
    prediction: Json = None
    modalities: Annotated[list[Literal["text", "audio"]] | None, Structural("output kinds")] = None
    audio: Annotated[AudioOutput | None, Nested()] = None
    reasoning_effort: Annotated[Literal["none", "minimal", "low", "medium", "high"] | None,
                                Structural("an effort level")] = None
    verbosity: Annotated[Literal["low", "medium", "high"] | None, Structural("a verbosity level")] = None
    separate_reasoning: Flag = None                                    # SGLang
    stream_reasoning: Flag = None                                      # SGLang


class CompletionRequest(_Generation):
    prompt: Annotated[str | list[str] | list[int] | list[list[int]] | None, Opaque("token_ids", text=True)] = None
    suffix: Text = None
    echo: Flag = None
    logprobs: Int = None


register("chat", ChatCompletionRequest)
register("completions", CompletionRequest)
