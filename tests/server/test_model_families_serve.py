"""`kvfence serve` on Qwen3, Gemma 3 and Phi-3 checkpoints, through the official ``openai`` client.

Each tiny random model ships a chat template in its family's form (Gemma 3's role alternation check,
``model`` role and system prefix; Phi-3's ``<|user|>`` / ``<|end|>`` turns; Qwen3's ChatML with its
``</think>`` stripping and ``enable_thinking``). The reference is transformers end to end:
``AutoTokenizer.apply_chat_template`` renders and tokenizes the conversation, the model's greedy
``generate`` continues it; the server's answer must be that prompt (``usage.prompt_tokens``) and
those tokens (each ``logprobs`` entry's bytes), streamed or not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.engine.tiny_models import build_tiny_model, hf_greedy
from tests.server.conftest import RunningServer, engine_factory, serve

NEW_TOKENS = 10

GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

PHI3_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
    "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

QWEN3_TEMPLATE = """{%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if message.role == "user" and ns.last_query_index == messages|length - 1 %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "system" or message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

FAMILIES: dict[str, str] = {"qwen3": QWEN3_TEMPLATE, "gemma3": GEMMA3_TEMPLATE, "phi3": PHI3_TEMPLATE}

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You answer in one line."},
    {"role": "user", "content": "Which tenant owns page 7?"},
    {"role": "assistant", "content": "<think>\nchecking\n</think>\n\nNone: it was scrubbed."},
    {"role": "user", "content": "  And page 9?  "},
]


def _with_template(model_dir: Path, template: str) -> Path:
    path = model_dir / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = template
    # the byte-level test tokenizer is no SentencePiece file: without a class, AutoTokenizer would
    # rebuild it as GemmaTokenizer (by model_type) and fail on its missing <unk>
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config))
    return model_dir


def _reference(model_dir: Path) -> tuple[list[int], list[int]]:
    """transformers' prompt ids for MESSAGES and its greedy continuation."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    rendered = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    prompt = tok(rendered, add_special_tokens=False)["input_ids"]
    return prompt, hf_greedy(model_dir, [prompt], NEW_TOKENS)[0]


Served = tuple[str, RunningServer, list[int], list[int], Any]


@pytest.fixture(scope="module", params=list(FAMILIES))
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    import transformers

    arch = request.param
    model_dir = _with_template(build_tiny_model(tmp_path_factory.mktemp(arch), arch), FAMILIES[arch])
    prompt, answer = _reference(model_dir)
    factory = engine_factory(model=str(model_dir), max_model_len=512, kv_cache_tokens=4096)
    with serve(tmp_path_factory.mktemp("srv"), factory=factory) as running:
        yield arch, running, prompt, answer, transformers.AutoTokenizer.from_pretrained(model_dir)


def _client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys["alice"], max_retries=0, timeout=120)


def _kwargs(server: RunningServer) -> dict[str, Any]:
    return {"model": str(server.app.state.serving.model.public_name), "messages": MESSAGES,
            "max_tokens": NEW_TOKENS, "temperature": 0, "logprobs": True,
            "extra_body": {"min_tokens": NEW_TOKENS}}


def _byte_ids(reply: Any) -> list[int | None]:
    """The answer's token ids where the byte tokenizer's token is a single byte (ids 0-255), else None."""
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    return [entry.bytes[0] if entry.bytes is not None and len(entry.bytes) == 1 else None
            for entry in choice.logprobs.content]


def _expected(answer: list[int]) -> list[int | None]:
    return [i if i < 256 else None for i in answer]


def test_chat_answer_is_transformers_prompt_and_greedy_tokens(served: Served) -> None:
    arch, server, prompt, answer, _ = served
    assert sum(i < 256 for i in answer) >= NEW_TOKENS // 2  # the comparison below is not vacuous
    with _client(server) as client:
        chat = client.chat.completions.create(**_kwargs(server))
        # again: the conversation's full pages now come from the prefix cache
        again = client.chat.completions.create(**_kwargs(server))
        stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                **_kwargs(server))
        chunks = list(stream)
    for reply in (chat, again):
        assert reply.usage is not None
        assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (len(prompt), NEW_TOKENS), arch
        assert _byte_ids(reply) == _expected(answer), arch
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == chat.choices[0].message.content
    usage = [c.usage for c in chunks if c.usage is not None]
    assert usage and usage[-1].prompt_tokens == len(prompt)


def test_template_refusal_is_a_400(served: Served) -> None:
    """Gemma 3's template raises on roles that do not alternate: the client gets a 400, not a 500."""
    arch, server, *_ = served
    if arch != "gemma3":
        pytest.skip("only Gemma 3's template refuses")
    kwargs = {**_kwargs(server), "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    with _client(server) as client, pytest.raises(openai.BadRequestError, match="alternate"):
        client.chat.completions.create(**kwargs)
