"""Length caps for requests with several choices (``n`` / ``best_of``): every sequence's KV counts."""

from __future__ import annotations

import pytest

from kvfence.gateway.admission.capacity import CapacityInfo
from kvfence.gateway.admission.caps import enforce_cap, num_sequences
from kvfence.gateway.admission.tokens import ApproximateCounter
from kvfence.gateway.errors import GatewayRequestError, PromptTooLongError
from kvfence.gateway.policy.schema import OverCapConfig

APPROX = ApproximateCounter()
PROMPT = list(range(100))  # token ids: counted exactly


def _cap(body: dict[str, object], *, kv: int | None, context: int | None = None, shares: bool = False) -> int:
    return enforce_cap(body, "completions", APPROX, prompt_limit=None, context_limit=context,
                       over_cap=OverCapConfig(), kv_capacity=kv, shares_prompt=shares).prompt_tokens


def test_num_sequences_is_the_larger_of_n_and_best_of() -> None:
    assert num_sequences({}) == 1
    assert num_sequences({"n": 3}) == 3
    assert num_sequences({"n": 2, "best_of": 5}) == 5
    for bad in (0, -1, "2", True, 1.5):
        with pytest.raises(GatewayRequestError, match="positive integer"):
            num_sequences({"n": bad})


def test_shared_prompt_needs_prompt_plus_k_completions() -> None:
    # 100 + 4 x 100 = 500 tokens: fits 500, not 499
    assert _cap({"prompt": PROMPT, "max_tokens": 100, "n": 4}, kv=500, shares=True) == 100
    with pytest.raises(PromptTooLongError, match=r"prompt \+ 4 x max_tokens") as info:
        _cap({"prompt": PROMPT, "max_tokens": 100, "n": 4}, kv=499, shares=True)
    assert info.value.status_code == 400


def test_unshared_prompt_needs_k_copies() -> None:
    # 4 x (100 + 100) = 800 tokens: fits 800, not 799
    assert _cap({"prompt": PROMPT, "max_tokens": 100, "n": 4}, kv=800) == 100
    with pytest.raises(PromptTooLongError, match=r"4 x \(prompt \+ max_tokens"):
        _cap({"prompt": PROMPT, "max_tokens": 100, "n": 4}, kv=799)


def test_best_of_counts_its_hidden_choices() -> None:
    body = {"prompt": PROMPT, "max_tokens": 100, "n": 1, "best_of": 3}
    assert _cap(body, kv=400, shares=True) == 100
    with pytest.raises(PromptTooLongError, match="3 choices"):
        _cap(body, kv=399, shares=True)


def test_completions_alone_over_the_pool_name_the_parameter() -> None:
    with pytest.raises(PromptTooLongError, match="leave no room") as info:
        _cap({"prompt": PROMPT, "max_tokens": 300, "n": 4}, kv=1000, context=1000, shares=True)
    assert info.value.param == "n"


def test_one_choice_keeps_the_per_sequence_limit_only() -> None:
    # a single sequence is bounded by the context limit (min of advertised context and KV) alone
    assert _cap({"prompt": PROMPT, "max_tokens": 100}, kv=200, context=200) == 100
    with pytest.raises(PromptTooLongError):
        _cap({"prompt": PROMPT, "max_tokens": 101}, kv=10_000, context=200)


def test_each_choice_must_also_fit_the_context() -> None:
    with pytest.raises(PromptTooLongError, match="prompt \\+ max_tokens"):
        _cap({"prompt": PROMPT, "max_tokens": 150, "n": 2}, kv=100_000, context=200, shares=True)


def test_capacity_info_shares_nothing_by_default() -> None:
    assert CapacityInfo(1000, 1000, "policy").shares_prompt is False


def test_tokens_per_minute_counts_every_choice() -> None:
    from kvfence.gateway.admission.usage import StreamUsage, answer_completion_tokens

    one = {"choices": [{"index": 0, "message": {"content": "x" * 30}}]}
    two = {"choices": [{"index": 0, "message": {"content": "x" * 30}}, {"index": 1, "message": {"content": "y" * 30}}]}
    assert answer_completion_tokens(two, APPROX)[0] == 2 * answer_completion_tokens(one, APPROX)[0] == 20
    # the backend's usage already sums all choices (OpenAI, vLLM, kvfence): taken as it is
    assert answer_completion_tokens({**two, "usage": {"completion_tokens": 7}}, APPROX) == (7, "usage")
    usage = StreamUsage(APPROX, injected=True)
    for index, text in ((0, "a" * 15), (1, "b" * 15), (0, "c" * 15), (1, "d" * 15)):
        assert usage.observe({"choices": [{"index": index, "delta": {"content": text}}]}) == "pass"
    assert usage.completion_tokens() == (20, "count")


def test_a_batch_is_capped_by_its_largest_prompt_and_charged_for_all_of_them() -> None:
    body: dict[str, object] = {"prompt": [list(range(30)), list(range(50)), list(range(20))], "max_tokens": 10}
    cap = enforce_cap(body, "completions", APPROX, prompt_limit=None, context_limit=60,
                      over_cap=OverCapConfig())
    assert (cap.prompt_tokens, cap.total_prompt_tokens) == (50, 100)  # each fits 60 alone; 100 are sent
    with pytest.raises(PromptTooLongError):
        enforce_cap({**body, "max_tokens": 11}, "completions", APPROX, prompt_limit=None, context_limit=60,
                    over_cap=OverCapConfig())
    one = enforce_cap({"prompt": PROMPT, "max_tokens": 5}, "completions", APPROX, prompt_limit=None,
                      context_limit=None, over_cap=OverCapConfig())
    assert one.prompt_tokens == one.total_prompt_tokens == len(PROMPT)
