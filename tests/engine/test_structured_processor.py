"""The grammar logits processor on real tokenizers: byte-level BPE and SentencePiece byte fallback.

Random walks pick uniformly among the tokens the mask allows (EOS only some of the time), so any
token the mask wrongly lets through shows up as text the grammar does not accept, checked by an
independent validator. Other tests pin down the EOS rule, the prefix-keyed state (repeated calls,
branching sequences, eviction), vocabulary padding, errors, and the compile cache.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.structured import (
    GrammarCompiler,
    GrammarLogitsProcessor,
    GrammarSpec,
    compile_grammar,
    vocabulary_of,
)
from kvfence.engine.text.tokenizer import Tokenizer
from kvfence.errors import InvalidParameterError
from tests.engine.test_structured_schemas import SCHEMAS, check_instance
from tests.server.foreign_models import CORPUS, build_foreign_model

KINDS = ["builtin", "gpt2_bpe", "llama2_sentencepiece", "metaspace"]


def _metaspace_tokenizer() -> Tokenizer:
    """SentencePiece BPE with byte fallback whose decoder is ``Metaspace`` (newer conversions), which
    llguidance's own reader leaves as a literal "▁"."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers
    from tokenizers import Tokenizer as HFTokenizer

    learner = HFTokenizer(models.BPE(unk_token="<unk>"))
    learner.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    learner.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                             special_tokens=["<unk>"]))
    learned = json.loads(learner.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"<0x{b:02X}>": 3 + b for b in range(256)}
    for piece in sorted(learned["vocab"], key=learned["vocab"].get):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="first"),
                                         decoders.ByteFallback(), decoders.Fuse()])
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<unk>", "<s>", "</s>")])
    return Tokenizer(backend, bos_token="<s>", eos_token="</s>", add_bos_token=True)


@pytest.fixture(scope="module")
def tokenizers(default_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Tokenizer]]:
    found = {"builtin": Tokenizer.from_dir(default_model_dir), "metaspace": _metaspace_tokenizer()}
    for kind in ("gpt2_bpe", "llama2_sentencepiece", "wordpiece"):
        found[kind] = Tokenizer.from_dir(build_foreign_model(tmp_path_factory.mktemp(kind), kind).path)
    yield found


def test_a_metaspace_decoder_gets_the_tokenizers_own_bytes(tokenizers: dict[str, Tokenizer]) -> None:
    """llguidance alone reads "▁x" as the bytes of "▁x"; the vocabulary must say " x", as decoding does."""
    import llguidance

    tok = tokenizers["metaspace"]
    raw = llguidance.LLTokenizer(tok._backend.to_str(), eos_token=tok.eos_token_ids)
    spaced = next(t for t in range(tok.vocab_size) if tok.token_bytes(t) == b" the")
    assert raw.decode_bytes([spaced]) == "▁the".encode()
    assert vocabulary_of(tok).llg_tokenizer.decode_bytes([spaced]) == b" the"
    texts = _texts(GrammarSpec.regex(r"[a-z]+( [a-z]+)+"), tok, walks=6)
    assert all(re.fullmatch(r"[a-z]+( [a-z]+)+", t) for t in texts)


def _walk(processor: GrammarLogitsProcessor, tok: Tokenizer, rng: random.Random,
          max_steps: int = 3000) -> tuple[list[int], bool]:
    """Tokens of one random walk over allowed tokens, and whether it ended on an allowed EOS."""
    eos = set(tok.eos_token_ids)
    out: list[int] = []
    for _ in range(max_steps):
        allowed = processor.allowed_token_ids(out)
        assert allowed, f"nothing allowed after {tok.decode(out)!r}"
        ends = [t for t in allowed if t in eos]
        others = [t for t in allowed if t not in eos]
        if ends and (not others or rng.random() < 0.3):
            return out, True
        out.append(rng.choice(others))
    return out, False


def _texts(spec: GrammarSpec, tok: Tokenizer, walks: int, seed: int = 0) -> list[str]:
    compiled = compile_grammar(tok, spec)
    rng = random.Random(seed)
    texts = []
    for _ in range(walks):
        tokens, ended = _walk(GrammarLogitsProcessor(compiled), tok, rng)
        if ended:
            text = tok.decode(tokens)
            assert "\ufffd" not in text, f"the mask let a broken UTF-8 sequence through: {text!r}"
            texts.append(text)
    assert len(texts) >= walks // 2, "random walks should mostly reach an accepting end"
    return texts


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_random_walks_satisfy_the_schema(tokenizers: dict[str, Tokenizer], kind: str, name: str) -> None:
    for text in _texts(GrammarSpec.json_schema(SCHEMAS[name]), tokenizers[kind], walks=6):
        check_instance(json.loads(text), SCHEMAS[name])


@pytest.mark.parametrize("kind", KINDS)
def test_random_walks_of_json_object_are_objects(tokenizers: dict[str, Tokenizer], kind: str) -> None:
    texts = _texts(GrammarSpec.json_object(), tokenizers[kind], walks=8, seed=1)
    assert all(isinstance(json.loads(t), dict) for t in texts)
    compact = _texts(GrammarSpec.json_schema(SCHEMAS["person"], compact=True), tokenizers[kind], walks=4)
    assert all(not re.search(r"\s", t.replace(json.loads(t)["name"], "")) for t in compact)


@pytest.mark.parametrize("kind", KINDS)
def test_regex_choice_and_grammar(tokenizers: dict[str, Tokenizer], kind: str) -> None:
    tok = tokenizers[kind]
    for text in _texts(GrammarSpec.regex(r"[0-9]{3}-[a-z]{2,4}"), tok, walks=6):
        assert re.fullmatch(r"[0-9]{3}-[a-z]{2,4}", text), text
    choices = ["yes", "no", "maybe so", "Grüße 世界"]
    seen = set(_texts(GrammarSpec.choice(choices), tok, walks=24, seed=2))
    assert seen <= set(choices) and len(seen) >= 2
    for text in _texts(GrammarSpec.grammar('root ::= "(" root ")" | "x" | [0-9]+'), tok, walks=6):
        assert re.fullmatch(r"\(*(x|[0-9]+)\)*", text) and text.count("(") == text.count(")"), text
    for text in _texts(GrammarSpec.grammar('start: "[" item ("," item)* "]"\nitem: /[a-c]/'), tok, walks=6):
        assert re.fullmatch(r"\[[a-c](,[a-c])*\]", text), text


@pytest.mark.parametrize("kind", KINDS)
def test_the_mask_refuses_what_the_grammar_refuses(tokenizers: dict[str, Tokenizer], kind: str) -> None:
    tok = tokenizers[kind]
    digits = GrammarLogitsProcessor(compile_grammar(tok, GrammarSpec.regex(r"[0-9]{3}")))
    first = digits.allowed_token_ids([])
    assert first and all(re.fullmatch(r"[0-9]{1,3}", tok.decode([t])) for t in first)
    every_digit = {tok.encode(d, add_special_tokens=False)[-1] for d in "0123456789"}
    assert every_digit <= set(first)


@pytest.mark.parametrize("kind", KINDS)
def test_eos_only_when_accepting_and_alone_when_complete(tokenizers: dict[str, Tokenizer], kind: str) -> None:
    tok = tokenizers[kind]
    eos = set(tok.eos_token_ids)
    processor = GrammarLogitsProcessor(compile_grammar(tok, GrammarSpec.json_schema(SCHEMAS["person"])))
    assert not eos & set(processor.allowed_token_ids([]))
    text = '{"name": "ann", "age": 30, "member": true}'
    ids = tok.encode(text, add_special_tokens=False)
    if tok.decode(ids[:1]).startswith(" ") or tok.decode(ids[:1]) == "":  # SentencePiece's leading "▁"
        ids = ids[1:]
    for i in range(len(ids)):
        allowed = processor.allowed_token_ids(ids[:i])
        assert ids[i] in allowed, f"{tok.decode(ids[:i])!r} + {tok.decode([ids[i]])!r} was refused"
        assert not eos & set(allowed)
    assert set(processor.allowed_token_ids(ids)) == eos


@pytest.mark.parametrize("kind", KINDS)
def test_ignore_eos_holds_eos_until_the_grammar_cannot_go_on(tokenizers: dict[str, Tokenizer], kind: str) -> None:
    tok = tokenizers[kind]
    eos = set(tok.eos_token_ids)
    a = [next(t for t in range(tok.vocab_size) if tok.token_bytes(t) == b"a")]
    open_ended = compile_grammar(tok, GrammarSpec.regex("a+"))
    assert eos <= set(GrammarLogitsProcessor(open_ended).allowed_token_ids(a))
    held = set(GrammarLogitsProcessor(open_ended, ignore_eos=True).allowed_token_ids(a))
    assert held and not eos & held
    closed = compile_grammar(tok, GrammarSpec.choice(["a"]))
    assert set(GrammarLogitsProcessor(closed, ignore_eos=True).allowed_token_ids(a)) == eos


def test_state_is_a_function_of_the_prefix_across_branches_and_evictions(tokenizers: dict[str, Tokenizer]) -> None:
    """n sequences sharing one processor, re-called and extended in random order, with a tiny state
    table: every mask equals the mask a fresh processor computes for the same prefix."""
    tok = tokenizers["gpt2_bpe"]
    compiled = compile_grammar(tok, GrammarSpec.json_schema(SCHEMAS["nested"]))
    shared = GrammarLogitsProcessor(compiled, max_states=2)
    rng = random.Random(7)
    eos = set(tok.eos_token_ids)
    sequences: list[list[int]] = [[] for _ in range(4)]
    for _ in range(150):
        seq = rng.choice(sequences)
        if rng.random() < 0.2 and len(seq) > 2:  # branch: a new sequence from a prefix of another
            sequences.append(seq[: rng.randrange(1, len(seq))])
            seq = sequences[-1]
        allowed = shared.allowed_token_ids(seq)
        assert allowed == GrammarLogitsProcessor(compiled).allowed_token_ids(seq)
        assert shared.allowed_token_ids(seq) == allowed  # a repeated call for the same position
        choices = [t for t in allowed if t not in eos]
        if choices:
            seq.append(rng.choice(choices))


def test_logits_are_masked_in_place_and_padding_rows_never_win(tokenizers: dict[str, Tokenizer]) -> None:
    tok = tokenizers["builtin"]
    processor = GrammarLogitsProcessor(compile_grammar(tok, GrammarSpec.choice(["yes", "no"])))
    logits = torch.randn(tok.vocab_size + 40)
    original = logits.clone()
    out = processor([], logits)
    allowed = torch.isfinite(out).nonzero().flatten().tolist()
    assert allowed == sorted({tok.encode("y", add_special_tokens=False)[0], tok.encode("n", add_special_tokens=False)[0]})
    assert torch.equal(out[allowed], original[allowed])
    assert torch.isinf(out[tok.vocab_size:]).all()


@pytest.mark.parametrize(("spec", "param"), [
    (lambda: GrammarSpec.json_schema({"type": "foo"}), "schema"),
    (lambda: GrammarSpec.json_schema({"type": "array", "uniqueItems": True}), "schema"),
    (lambda: GrammarSpec.json_schema({"$ref": "#/$defs/missing"}), "schema"),
    (lambda: GrammarSpec.json_schema('{"type": '), "schema"),
    (lambda: GrammarSpec.json_schema([1, 2]), "schema"),
    (lambda: GrammarSpec.regex("a(b"), "regex"),
    (lambda: GrammarSpec.regex(""), "regex"),
    (lambda: GrammarSpec.choice([]), "choice"),
    (lambda: GrammarSpec.choice(["a", 3]), "choice"),
    (lambda: GrammarSpec.grammar("root ::= missing_rule"), "grammar"),
    (lambda: GrammarSpec.grammar("start: undefined_rule"), "grammar"),
])
def test_bad_specs_are_parameter_errors(tokenizers: dict[str, Tokenizer], spec: Any, param: str) -> None:
    with pytest.raises(InvalidParameterError) as caught:
        compile_grammar(tokenizers["builtin"], spec())
    assert caught.value.param == param and caught.value.message


def test_a_tokenizer_without_byte_tokens_is_refused(tokenizers: dict[str, Tokenizer]) -> None:
    with pytest.raises(InvalidParameterError, match="tokenizer"):
        compile_grammar(tokenizers["wordpiece"], GrammarSpec.json_object())


def test_compiled_grammars_are_cached_per_tokenizer_and_spec_with_a_bound(tokenizers: dict[str, Tokenizer]) -> None:
    compiler = GrammarCompiler(max_entries=2)
    tok, other = tokenizers["builtin"], tokenizers["gpt2_bpe"]
    first = compiler.compile(tok, GrammarSpec.json_schema({"type": "integer"}))
    assert compiler.compile(tok, GrammarSpec.json_schema('{"type": "integer"}')) is first
    assert compiler.compile(other, GrammarSpec.json_schema({"type": "integer"})) is not first
    compiler.compile(tok, GrammarSpec.regex("x+"))  # evicts the least recently used entry
    assert len(compiler) == 2 and (compiler.hits, compiler.misses) == (1, 3)
    assert compiler.compile(tok, GrammarSpec.json_schema({"type": "integer"})) is not first
    # A processor's matchers are copies: two requests never share state.
    a, b = GrammarLogitsProcessor(first), GrammarLogitsProcessor(first)
    one = tok.encode("1", add_special_tokens=False)
    a.allowed_token_ids(one)
    assert b.allowed_token_ids([]) == GrammarLogitsProcessor(first).allowed_token_ids([])
