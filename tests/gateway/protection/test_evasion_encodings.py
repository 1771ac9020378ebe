"""Second red-team pass on the request side: look-alike letters of other scripts, spelled-out e-mail
addresses, escapes and encodings (``\\u0040``, ``%40``, ``&#64;``, base64, hex), string literals
joined in code, values split three or more ways, and topic cues written with look-alikes. Each attack
test failed on the tree before this pass (``2d53f85``); each has false-positive tests beside it, so
ordinary text in those shapes (Cyrillic or Greek prose, "meet at noon", hashes, UUIDs, base64 of
binary data, code that joins strings) stays untouched."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from kvfence.gateway.protection.detect.detector import build_detector
from kvfence.gateway.protection.detect.encoded import MAX_DECODED_CHARS, decoded_runs
from kvfence.gateway.protection.detect.normalise import fold
from kvfence.gateway.protection.detect.topics import detect_topics
from tests.gateway.protection.test_hook import answer_through, ctx, make_hook, make_policy, run

DETECTOR = build_detector(use_presidio=False)
KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"
CYR_A, CYR_E, CYR_O, CYR_P, CYR_S = "\u0410", "\u0415", "\u043e", "\u0440", "\u0455"


def found(text: str) -> list[tuple[str, str]]:
    return [(f.entity, text[f.start:f.end]) for f in DETECTOR.scan(text)]


def outgoing(body: dict[str, Any], endpoint: str = "chat") -> str:
    hook, _ = make_hook(make_policy())
    return json.dumps(run(hook.on_request(ctx(endpoint=endpoint), body)), ensure_ascii=False)


def round_trip(content: str, answer: str, *, stream: bool = False, chunk: int = 3) -> tuple[str, str]:
    """One user message through the request hook, then ``answer`` through the answer filter of the same
    request: (the content as it left, the answer as the caller gets it)."""
    hook, _ = make_hook(make_policy())
    c = ctx(stream=stream)
    out = run(hook.on_request(c, {"model": "m", "messages": [{"role": "user", "content": content}]}))
    return out["messages"][0]["content"], answer_through(hook, c, answer, chunk=chunk)


# -- look-alike letters (Unicode TR39 confusables) ------------------------------------------------

LOOKALIKE = [
    (f"key {CYR_S}k-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd", "OPENAI_API_KEY",
     f"{CYR_S}k-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"),
    (f"id {CYR_A}KIAIOSFODNN7EXAMPLE here", "AWS_ACCESS_KEY", f"{CYR_A}KIAIOSFODNN7EXAMPLE"),
    ("id AKI\u0391IOSFODNN7EXAMPLE here", "AWS_ACCESS_KEY", "AKI\u0391IOSFODNN7EXAMPLE"),  # Greek Alpha
    (f"token gh{CYR_P}_R2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u", "GITHUB_TOKEN",
     f"gh{CYR_P}_R2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u"),
    (f"id {CYR_A}\uff2b\uff29\uff21\uff29\uff2f\uff33\uff26\uff2f\uff24\uff2e\uff2e\uff17\uff25\uff38\uff21\uff2d\uff30"
     "\uff2c\uff25 here", "AWS_ACCESS_KEY",  # Cyrillic + full-width: one non-ASCII run
     f"{CYR_A}\uff2b\uff29\uff21\uff29\uff2f\uff33\uff26\uff2f\uff24\uff2e\uff2e\uff17\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25"),
    (f"IBAN D{CYR_E}89 3704 0044 0532 0130 00 ok", "IBAN_CODE", f"D{CYR_E}89 3704 0044 0532 0130 00"),
    (f"mail {CYR_A.lower()}lice@ex{CYR_A.lower()}mple.c{CYR_O}m", "EMAIL_ADDRESS",
     f"{CYR_A.lower()}lice@ex{CYR_A.lower()}mple.c{CYR_O}m"),  # guard: Unicode letters were e-mail already
]


@pytest.mark.parametrize(("text", "entity", "value"), LOOKALIKE)
def test_lookalike_letters_do_not_hide_a_value(text: str, entity: str, value: str) -> None:
    assert found(text) == [(entity, value)]


@pytest.mark.parametrize("text", [
    "Привет! Встреча в 10:30, договор № 12345 от 01.02.2024, сумма 4 500 руб.",
    "Σήμερα είναι Δευτέρα, ΑΒΓ 2024, τηλ. κέντρο",
    "Версия API 2.0 и SDK-клиент для Python", "ОАО «Рога и копыта», ИНН отсутствует",
    "Cyrillic Р and Latin P side by side: Р P, АВС ABC",
])
def test_cyrillic_and_greek_prose_is_not_folded_into_findings(text: str) -> None:
    assert found(text) == []
    # and whole words of another script are left as they are (only mixed-script tokens fold)
    assert fold(text, lookalikes=True).text.split()[0] == text.split()[0]


def test_a_lookalike_email_is_restored_in_the_callers_letters_across_one_character_chunks() -> None:
    email = f"j{CYR_A.lower()}ne.doe@ex{CYR_A.lower()}mple.org"
    sent, answer = round_trip(f"write to {email} and {CYR_S}k-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd",
                              "Sent to <EMAIL_1> with <OPENAI_API_KEY_1>.", stream=True, chunk=1)
    assert sent == "write to <EMAIL_1> and <OPENAI_API_KEY_1>"
    assert answer == f"Sent to {email} with <OPENAI_API_KEY_1>."


# -- spelled-out e-mail addresses -----------------------------------------------------------------

@pytest.mark.parametrize(("text", "value"), [
    ("contact alice (at) example (dot) com today", "alice (at) example (dot) com"),
    ("alice[at]example[dot]com", "alice[at]example[dot]com"),
    ("Nick <nick(dot)treleaven(at)btinternet(dot)com>", "nick(dot)treleaven(at)btinternet(dot)com"),
    ("mail: alice.smith{at}mail.example.co.uk", "alice.smith{at}mail.example.co.uk"),
    ("write to bob <at> corp <dot> io please", "bob <at> corp <dot> io"),
    ("Jane.Doe (AT) Example (DOT) org", "Jane.Doe (AT) Example (DOT) org"),
    ("email me: alice at example dot com", "alice at example dot com"),
    ("reach bob at bob dot smith at acme dot io", "bob dot smith at acme dot io"),
    ("alice AT example DOT com", "alice AT example DOT com"),
])
def test_spelled_out_emails_are_found(text: str, value: str) -> None:
    assert found(text) == [("EMAIL_ADDRESS", value)]


@pytest.mark.parametrize("text", [
    "meet me at noon", "we met at the office dot com bubble", "Look at this dot product",
    "He was at example dot com in 2000", "email me at noon dot", "I work at home dot not today",
    "Contact us at example.com", "at the end of the day, dot the i's", "the cat sat at the mat",
    "Please email the team at once; see the dot plot", "arrived AT HOME late",
])
def test_ordinary_english_with_at_and_dot_is_not_an_email(text: str) -> None:
    assert found(text) == []


def test_a_spelled_out_email_is_pseudonymised_and_restored_as_written() -> None:
    sent, answer = round_trip("my mail: alice (at) example (dot) com", "Noted <EMAIL_1>.")
    assert sent == "my mail: <EMAIL_1>"
    assert answer == "Noted alice (at) example (dot) com."


# -- escapes and encodings ------------------------------------------------------------------------

B64_KEY = base64.b64encode(KEY.encode()).decode()
B64_MAIL = base64.urlsafe_b64encode(b"please write to jane.doe@example.org").decode().rstrip("=")
HEX_MAIL = b"jane.doe@example.org".hex()


@pytest.mark.parametrize(("text", "entity", "value"), [
    ('{"to": "jane.doe\\u0040example.org"}', "EMAIL_ADDRESS", "jane.doe\\u0040example.org"),
    ("mailto:jane.doe%40example.org?subject=hi", "EMAIL_ADDRESS", "jane.doe%40example.org"),
    ("<a>jane.doe&#64;example.org</a>", "EMAIL_ADDRESS", "jane.doe&#64;example.org"),
    ("<a>jane.doe&#x40;example.org</a>", "EMAIL_ADDRESS", "jane.doe&#x40;example.org"),
    ("key = '\\x73k-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd'", "OPENAI_API_KEY",
     "\\x73k-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"),
    (f"decode this: {B64_KEY} thanks", "OPENAI_API_KEY", B64_KEY),
    (f"blob {B64_MAIL}", "EMAIL_ADDRESS", B64_MAIL),
    (f"hex {HEX_MAIL} end", "EMAIL_ADDRESS", HEX_MAIL),
    (f"aws {base64.b64encode(b'AKIAIOSFODNN7EXAMPLE').decode()}", "AWS_ACCESS_KEY",
     base64.b64encode(b"AKIAIOSFODNN7EXAMPLE").decode()),
])
def test_escaped_and_encoded_values_are_found(text: str, entity: str, value: str) -> None:
    assert found(text) == [(entity, value)]


def test_a_url_with_an_encoded_at_in_its_user_keeps_its_password_and_its_structure() -> None:
    # decoding %40 must not turn "%20" into a space that splits the password field off
    text = "https://jo%40email.com:a%20secret@db.example.com/x"
    assert found(text) == [("EMAIL_ADDRESS", "jo%40email.com"), ("CONNECTION_PASSWORD", "a%20secret")]


@pytest.mark.parametrize("text", [
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 ok",
    "commit 3f2a9c1e5b7d4a60e8f1c2b3a4d5e6f708192a3b", "id 123e4567-e89b-12d3-a456-426614174000",
    f"png data:image/png;base64,{base64.b64encode(bytes(range(256)) * 4).decode()}",
    f"text {base64.b64encode(b'just an ordinary sentence with no data').decode()}",
    "internationalization and getElementByIdentifier are long words",
    "path /usr/lib/python3/dist-packages/some_module/file.py and 50% off, 100%25 sure",
    "C:\\users\\docs and \\n new lines, &amp; &lt;tag&gt;",
])
def test_hashes_ids_binary_and_ordinary_encodings_are_not_findings(text: str) -> None:
    assert found(text) == []


def test_an_encoded_email_is_replaced_whole_and_restored_decoded() -> None:
    sent, answer = round_trip(f"decode {B64_MAIL}, it is jane.doe@example.org", "It says <EMAIL_1>")
    # the same address, encoded or not, is one placeholder
    assert sent == "decode <EMAIL_1>, it is <EMAIL_1>"
    assert answer == "It says jane.doe@example.org"


def test_an_email_joined_from_literals_restores_into_tool_arguments_as_valid_json() -> None:
    sent, args = round_trip('to = "jane.doe" + "@" + "example.org"; send it', '{"to": "<EMAIL_1>"}', chunk=2)
    assert sent == "to = <EMAIL_1>; send it"
    assert json.loads(args) == {"to": "jane.doe@example.org"}


def test_decoding_is_bounded_on_a_huge_base64_text() -> None:
    blob = base64.b64encode(b"lorem ipsum dolor sit amet, " * 40_000).decode()  # ~1.5 MB of base64 text
    started = time.perf_counter()
    runs = decoded_runs(" ".join([blob[:200_000]] * 8))
    assert time.perf_counter() - started < 5.0
    assert sum(len(r.decoded) for r in runs) <= MAX_DECODED_CHARS + 20_000


def test_decoding_is_one_level_only() -> None:
    twice = base64.b64encode(base64.b64encode(KEY.encode())).decode()
    assert found(f"x {twice}") == []  # documented: no nested decoding


# -- string literals joined in code ---------------------------------------------------------------

@pytest.mark.parametrize(("text", "entity"), [
    ('k = "sk-proj-Ab" + "CdEfGhIjKlMnOpQrStUvWxYz" + "0123456789abcd"', "OPENAI_API_KEY"),
    ("key = ('AKIA'\n       'IOSFODNN7EXAMPLE')", "AWS_ACCESS_KEY"),
    ("$to = 'jane.doe' . '@' . 'example.org';", "EMAIL_ADDRESS"),
    ("select 'AKIA' || 'IOSFODNN7EXAMPLE'", "AWS_ACCESS_KEY"),
])
def test_literals_joined_in_code_are_found(text: str, entity: str) -> None:
    assert [e for e, _ in found(text)] == [entity]


@pytest.mark.parametrize("text", [
    'print("Hello, " + name + "!")', 'msg = "a" + "b" + "c"', "He said 'yes' and 'no' twice",
    'x = "user" + "@" + domain', 'label = "Total: " + "42 items"',
])
def test_ordinary_string_joins_are_not_findings(text: str) -> None:
    assert found(text) == []


def test_a_key_concatenated_inside_json_tool_arguments_is_removed_and_json_stays_valid() -> None:
    args = json.dumps({"code": 'key = "AKIA" + "IOSFODNN7EXAMPLE"', "to": "jane.doe\u0040example.org"})
    raw = args.replace("@", "\\u0040")  # a client that escapes every non-alphanumeric character
    body = {"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "run", "arguments": raw}}]}]}
    sent = json.loads(outgoing(body))
    arguments = sent["messages"][0]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"code": "key = <AWS_ACCESS_KEY_1>", "to": "<EMAIL_1>"}


# -- values split three or more ways --------------------------------------------------------------

def parts(*texts: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": t} for t in texts]}]}


def test_a_key_split_over_five_content_parts_is_removed() -> None:
    pieces = ["my key: " + KEY[:6], KEY[6:14], KEY[14:30], KEY[30:40], KEY[40:] + " bye"]
    sent = outgoing(parts(*pieces))
    assert "<OPENAI_API_KEY_1>" in sent and all(p not in sent for p in (KEY[6:14], KEY[14:30], KEY[30:40]))
    assert "bye" in sent


def test_a_key_sent_a_few_characters_per_message_is_removed() -> None:
    chunks = [KEY[i:i + 4] for i in range(0, len(KEY), 4)]
    sent = outgoing({"model": "m", "messages": [{"role": "user", "content": c} for c in chunks]})
    assert "<OPENAI_API_KEY_1>" in sent and sum(c in sent for c in chunks[1:]) == 0


def test_an_email_split_over_three_content_parts_is_restored_whole() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    out = run(hook.on_request(c, parts("mail jane.", "doe@exam", "ple.org please")))
    assert [p["text"] for p in out["messages"][0]["content"]] == ["mail <EMAIL_1>", "", " please"]
    assert answer_through(hook, c, "ok <EMAIL_1>", chunk=1) == "ok jane.doe@example.org"


def test_digits_over_three_messages_are_not_a_card() -> None:
    sent = outgoing({"model": "m", "messages": [{"role": "user", "content": "order 4539"},
                                                {"role": "user", "content": "1488 0343"},
                                                {"role": "user", "content": "6467 shipped"}]})
    assert "4539" in sent and "1488 0343" in sent and "6467" in sent  # across messages only secrets join


def test_a_key_split_in_three_with_its_own_findings_in_between_is_still_one_value() -> None:
    pieces = ["see jane@example.org, key " + KEY[:10], KEY[10:25], KEY[25:] + " and bob@example.org"]
    sent = json.loads(outgoing(parts(*pieces)))
    texts = [p["text"] for p in sent["messages"][0]["content"]]
    assert texts == ["see <EMAIL_1>, key <OPENAI_API_KEY_1>", "", " and <EMAIL_2>"]


# -- topics on folded text ------------------------------------------------------------------------

def test_topic_cues_with_lookalikes_or_invisible_characters_still_route() -> None:
    assert "health" in detect_topics([f"the diagn{CYR_O}sis and the medi\u0441ation"])
    assert "health" in detect_topics(["chemo\u00adtherapy and a blood\u00a0test"])
    assert "board" in detect_topics([f"the b{CYR_O}ard meeting on the m{CYR_E.lower()}rger"])


def test_topics_do_not_fire_on_other_scripts_or_single_cues() -> None:
    assert detect_topics(["Совет директоров обсудил слияние", "Σήμερα είναι Δευτέρα"]) == set()
    assert detect_topics(["we boarded the plane", "data acquisition rate"]) == set()


def test_a_lookalike_health_request_is_raised_to_the_restricted_class() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    run(hook.on_request(c, {"model": "m", "messages": [
        {"role": "user", "content": f"my diagn{CYR_O}sis and {CYR_S}ymptoms, what medic\u0430tion?"}]}))
    assert c.data_class == "restricted"


def test_a_lookalike_board_request_is_raised_when_the_policy_routes_board_material() -> None:
    hook, _ = make_hook(make_policy({"raise_on_topics": {"board": "internal"}}))
    c = ctx()
    run(hook.on_request(c, {"model": "m", "messages": [
        {"role": "user", "content": f"summarise the b{CYR_O}ard minutes on the takeover"}]}))
    assert c.data_class == "internal"


def test_a_key_split_after_a_long_text_and_over_short_ones_is_removed() -> None:
    long_text = "lorem ipsum dolor sit amet " * 200 + "key: " + KEY[:9]  # > 1 KiB: only its tail joins
    sent = outgoing(parts(long_text, KEY[9:20], KEY[20:] + " ok"))
    assert "<OPENAI_API_KEY_1>" in sent and KEY[9:20] not in sent and KEY[20:] not in sent


def test_the_boundary_scan_of_many_short_messages_is_one_pass() -> None:
    from kvfence.gateway.protection.detect.split_values import split_findings
    from kvfence.gateway.protection.messages import text_slots

    calls: list[int] = []

    def scan(text: str) -> list[Any]:
        calls.append(len(text))
        return DETECTOR.scan(text)

    body = {"model": "m", "messages": [{"role": "user", "content": f"note {i} ok"} for i in range(2000)]}
    prompt = [slot for slot in text_slots("chat", body) if slot.rewritable]  # as the hook joins them
    assert split_findings(scan, prompt) == {}
    assert len(calls) == 1 and calls[0] == sum(len(f"note {i} ok") for i in range(2000))
