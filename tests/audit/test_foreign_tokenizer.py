"""`kvfence audit admission` against `kvfence serve` on a model whose tokenizer is not byte-level.

A GPT-2-style BPE spends one or two tokens on a random letter, so prompt sizes come from a fit, not
exactly: the probes that must fit are admitted, those that must not are refused, and the check
passes without a note that a fitting prompt was refused.
"""

from __future__ import annotations

import pytest

from tests.audit.conftest import AuditRun, check_result
from tests.audit.kvfence_server import kvfence_serve
from tests.server.foreign_models import build_foreign_model


@pytest.mark.parametrize("kind", ["gpt2_bpe", pytest.param("llama2_sentencepiece", marks=pytest.mark.slow)])
def test_admission_with_an_inexact_tokenizer(kind: str, run_audit: AuditRun, tmp_path_factory: pytest.TempPathFactory
                                             ) -> None:
    model = build_foreign_model(tmp_path_factory.mktemp(kind), kind)
    args = ("--model", str(model.path), "--max-model-len", "512", "--kv-cache-tokens", "4096", "--device", "cpu")
    with kvfence_serve(tmp_path_factory.mktemp("serve"), *args) as server:
        result, data = run_audit("admission", server.url, "--seed", "5", keys=server.key_args)
    assert result.exit_code == 0, result.output
    admission = check_result(data, "admission")
    m = admission["measurements"]
    assert not m["exact_sizes"] and m["max_context"] == 512
    outcomes = {(a["probe"], a["stream"]): a for a in m["answers"]}
    for stream in (False, True):
        below = outcomes[("below context", stream)]
        assert below["status"] == 200 and below["outcome"] == "ok"
        assert below["prompt_tokens_reported"] + below["max_tokens"] <= 512
        for name in ("just above context", "prompt alone over context", "far above context", "above KV capacity"):
            assert outcomes[(name, stream)]["status"] == 400, name
    assert not any("refused" in n for n in admission["notes"])
