"""The written forms of a placeholder (``placeholder_forms.py``) as pure logic, exhaustively.

Properties: (1) any JSON document whose strings hold placeholders, written as ``json.dumps`` or Go's
encoder would, restored as a JSON string's text, parses to the same document with the values in
place, whatever the values hold; (2) a stream cut anywhere gives exactly what the whole text gives
(backslash runs cut in the middle included), holding back no more than ``max_hold`` characters;
(3) no table, no change and no delay.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.gateway.protection.pseudonymise.forms import PlaceholderForms, json_escape, written_placeholders
from kvfence.gateway.protection.pseudonymise.streaming import StreamRestorer

PLACEHOLDERS = ["<EMAIL_1>", "<EMAIL_12>", "<PHONE_1>", "<PERSON_3>", "<IBAN_1>", "<POSTAL_ADDRESS_2>"]
VALUE_PIECES = ['"', "\\", "\n", "\t", "\x00", "\x1f", "é", "\u2028", "😀", "<", ">", "&", "u003c", " ",
                '", "admin": true, "x": "', "}", "]", "a", "\\u003cEMAIL_1\\u003e"]
TEXT_PIECES = [" ", "a", "\\", "\\\\", '\\"', "u003c", "u003e", "\\u003c", "\\u003e", "\\\\u003c", "<", ">",
               "&", "&lt;", "&gt;", "&#60;", "&#x3C;", "EMAIL_", "EMAIL_1", "EMAIL_12", "PHONE_1", "_1",
               "<EMAIL_1>", "\\u003cPHONE_1\\u003e", "\\\\u003cEMAIL_1\\\\u003e", "&lt;PERSON_3&gt;", "é", "\n"]

values = st.lists(st.sampled_from(VALUE_PIECES), min_size=1, max_size=6).map("".join)
tables = st.fixed_dictionaries({p: values for p in PLACEHOLDERS})
texts = st.lists(st.sampled_from(TEXT_PIECES), max_size=40).map("".join)
cuts = st.lists(st.integers(min_value=0, max_value=400), max_size=10)


def stream(restorer: StreamRestorer, text: str, at: list[int], bound: int | None = None) -> str:
    bounds = sorted({min(c, len(text)) for c in at})
    out, prev = [], 0
    for b in [*bounds, len(text)]:
        out.append(restorer.feed(text[prev:b]))
        if bound is not None:
            assert restorer.held <= bound
        prev = b
    return "".join(out) + restorer.finish()


@st.composite
def documents(draw: st.DrawFn) -> Any:
    strings = st.lists(st.sampled_from([*PLACEHOLDERS, " ", "to ", "x", '"', "\\", "\n", "<EMAIL_9>", "<b>"]),
                       max_size=8).map("".join)
    leaves = strings | st.integers() | st.booleans()
    return draw(st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                             | st.dictionaries(strings, inner, max_size=3), max_leaves=10))


def put_values(doc: Any, table: dict[str, str]) -> Any:
    if isinstance(doc, str):
        for placeholder in table:
            doc = doc.replace(placeholder, f"\x00{placeholder}\x00")
        return "".join(table.get(part, part) for part in doc.split("\x00"))
    if isinstance(doc, list):
        return [put_values(x, table) for x in doc]
    if isinstance(doc, dict):
        return {put_values(k, table): put_values(v, table) for k, v in doc.items()}
    return doc


@settings(max_examples=300, deadline=None)
@given(documents(), tables, st.booleans(), st.booleans(), cuts)
def test_restored_json_parses_to_the_values(doc: Any, table: dict[str, str], go: bool, indent: bool,
                                            at: list[int]) -> None:
    written = json.dumps(doc, indent=1 if indent else None, ensure_ascii=False)
    if go:
        written = written.replace("<", "\\u003c").replace(">", "\\u003e")
    expected = put_values(doc, table)
    assert json.loads(PlaceholderForms(table).restore(written, json_string=True)) == expected
    assert json.loads(stream(StreamRestorer(table, json_string=True), written, at)) == expected


@settings(max_examples=500, deadline=None)
@given(texts, tables, st.booleans(), cuts)
def test_a_stream_cut_anywhere_gives_the_whole_texts_restoration(text: str, table: dict[str, str],
                                                                 json_string: bool, at: list[int]) -> None:
    forms = PlaceholderForms(table)
    whole = forms.restore(text, json_string=json_string)
    assert stream(StreamRestorer(table, json_string=json_string), text, at, bound=forms.max_hold) == whole
    assert stream(StreamRestorer(table, json_string=json_string), text, list(range(len(text)))) == whole


def test_every_cut_of_backslash_runs() -> None:
    table = {"<EMAIL_1>": 'a"b'}
    for run in range(0, 9):
        text = "x" + "\\" * run + "u003cEMAIL_1\\u003e" + "\\" * run + "<EMAIL_1>"
        whole = PlaceholderForms(table).restore(text, json_string=True)
        for a in range(len(text) + 1):
            for b in range(a, len(text) + 1):
                assert stream(StreamRestorer(table, json_string=True), text, [a, b]) == whole, (run, a, b)


def test_backslash_parity() -> None:
    forms = PlaceholderForms({"<EMAIL_1>": 'a"b'})
    one, two = json_escape('a"b'), json_escape('a"b', 2)
    assert forms.restore("\\u003cEMAIL_1\\u003e") == one                  # one level
    assert forms.restore("\\\\u003cEMAIL_1\\\\u003e") == two              # two levels
    assert forms.restore("\\\\\\u003cEMAIL_1\\u003e") == "\\\\" + one     # escaped backslash, then one level
    assert forms.restore("\\\\\\\\u003cEMAIL_1\\\\u003e") == "\\\\\\\\u003cEMAIL_1\\\\u003e"  # 4: letters
    assert forms.restore("\\\\\\\\\\\\u003cEMAIL_1\\\\u003e") == "\\\\\\\\" + two          # 6: two levels


def test_no_table_no_change_no_delay() -> None:
    restorer = StreamRestorer({}, json_string=True)
    assert restorer.feed("\\u003cEMA") == "\\u003cEMA" and restorer.held == 0
    assert PlaceholderForms({}).restore("<EMAIL_1> \\u003cEMAIL_1\\u003e", json_string=True) == \
        "<EMAIL_1> \\u003cEMAIL_1\\u003e"


def test_written_placeholders() -> None:
    assert written_placeholders("a <EMAIL_1> \\u003cPHONE_2\\u003e &lt;IBAN_1&gt; &#60;CARD_1&#62; <x>") == \
        {"<EMAIL_1>", "<PHONE_2>", "<IBAN_1>", "<CARD_1>"}
    assert written_placeholders("plain text & more") == set()
