"""Restoring into a slot's syntax (``slot_syntax.py``) and per-token fields, as pure logic: properties.

(1) Any JSON document whose strings hold placeholders (written as ``json.dumps`` with or without
``ensure_ascii``, or Go's encoder; indented or not), restored as a JSON document and cut anywhere,
parses to the same document with the values in place, whatever they hold. (2) However a text is cut
into tokens and the tokens grouped into chunks, the restored tokens join to exactly the restored text
(prose or JSON document), one entry per token.
"""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.gateway.protection.pseudonymise.forms import PlaceholderForms
from kvfence.gateway.protection.pseudonymise.slot_syntax import SlotKind, SlotWriter
from kvfence.gateway.protection.pseudonymise.streaming import StreamRestorer
from kvfence.gateway.protection.pseudonymise.token_restore import TokenRestorer
from tests.gateway.protection.test_placeholder_forms import cuts, documents, put_values, stream, tables, texts


@settings(max_examples=300, deadline=None)
@given(documents(), tables, st.booleans(), st.booleans(), st.booleans(), cuts)
def test_any_json_document_restored_and_cut_anywhere_parses_to_the_values(
        doc: Any, table: dict[str, str], go: bool, indent: bool, ascii_only: bool, at: list[int]) -> None:
    written = json.dumps(doc, indent=1 if indent else None, ensure_ascii=ascii_only)
    if go:
        written = written.replace("<", "\\u003c").replace(">", "\\u003e")
    expected = put_values(doc, table)
    assert json.loads(SlotWriter(PlaceholderForms(table), SlotKind.JSON_DOCUMENT).restore(written)) == expected
    assert json.loads(stream(StreamRestorer(table, kind=SlotKind.JSON_DOCUMENT), written, at)) == expected


def _tokens(text: str, at: list[int]) -> list[str]:
    bounds = sorted({0, len(text), *(min(c, len(text)) for c in at)})
    return [text[a:b] for a, b in pairwise(bounds)]


@settings(max_examples=400, deadline=None)
@given(texts, tables, st.sampled_from([SlotKind.TEXT, SlotKind.JSON_DOCUMENT]), cuts, cuts)
def test_tokens_cut_anywhere_spell_the_restored_text(text: str, table: dict[str, str], kind: SlotKind,
                                                      token_cuts: list[int], chunk_cuts: list[int]) -> None:
    """Whatever the tokenization and however tokens are grouped into chunks, the restored tokens join
    to exactly the restored text (so ``logprobs`` never disagree with the content)."""
    whole = SlotWriter(PlaceholderForms(table), kind).restore(text)
    tokens = _tokens(text, token_cuts)
    restorer = TokenRestorer(table, kind)
    groups = sorted({min(c, len(tokens)) for c in chunk_cuts} | {0, len(tokens)})
    out: list[str] = []

    def token_of(entry: str) -> str:
        return entry

    def rebuild(entry: str, token: str, spanned: bool) -> str:
        return token

    for a, b in pairwise(groups):
        out += restorer.feed(tokens[a:b], token_of, rebuild)
    out += restorer.finish(token_of, rebuild)
    assert "".join(out) == whole
    assert len(out) == len(tokens)
