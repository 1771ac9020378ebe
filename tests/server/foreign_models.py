"""Tiny random Llama checkpoints with tokenizers kvfence did not write (built locally, no downloads).

Each builder trains a small tokenizer with the ``tokenizers`` library in the layout a real model
ships: a GPT-2-style byte-level BPE with merges and ChatML special tokens, a Llama-2-style
SentencePiece BPE (``▁`` spaces, ``<0xNN>`` byte fallback, ``<s>`` added by the post-processor)
with its template in ``chat_template.jinja``, and a BERT-style WordPiece. ``tokenizer_config.json``
writes bos/eos as ``AddedToken`` dicts; ``generation_config.json`` lists several EOS ids (Llama 3
style), one of which only that file declares.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

__all__ = ["CORPUS", "ForeignModel", "build_foreign_model"]

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Tenants share a server but never a cache page.",
    "Hello world, hello tenants, hello isolation contract.",
    "A paged KV cache holds keys and values for every token.",
    "Streaming text must equal the text of the full answer.",
] * 4

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA2 = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}<<SYS>>\n{{ m['content'] }}\n<</SYS>>\n\n"
    "{% elif m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]{% else %} {{ m['content'] }} {{ eos_token }}"
    "{% endif %}{% endfor %}"
)


@dataclass(frozen=True)
class ForeignModel:
    """A built model directory and the facts a test needs about it."""

    path: Path
    kind: str
    eos_token: str  # the tokenizer's own EOS (tokenizer_config.json)
    extra_eos_token: str  # an EOS only generation_config.json declares
    extra_eos_id: int


def _gpt2_bpe() -> tuple[Tokenizer, dict[str, Any]]:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=360, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>", "<|eom|>"])
    cfg = {"bos_token": None, "eos_token": {"content": "<|im_end|>", "special": True, "lstrip": False,
                                            "rstrip": False, "normalized": False, "single_word": False},
           "chat_template": CHATML, "add_bos_token": False}
    return tok, cfg


def _llama2_sentencepiece() -> tuple[Tokenizer, dict[str, Any]]:
    # Learn merges over "▁"-joined words, then lay the vocabulary out as Llama 2 does:
    # <unk>, <s>, </s>, the 256 byte tokens, then the learned pieces.
    learner = Tokenizer(models.BPE(unk_token="<unk>"))
    learner.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    learner.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                             special_tokens=["<unk>"]))
    learned = json.loads(learner.to_str())["model"]
    vocab: dict[str, int] = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece in sorted(learned["vocab"], key=learned["vocab"].get):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<unk>", "<s>", "</s>")])
    tok.add_special_tokens([AddedToken("<|eom|>", normalized=False, special=True)])
    cfg = {"bos_token": {"content": "<s>", "special": True, "normalized": False, "lstrip": False,
                         "rstrip": False, "single_word": False},
           "eos_token": {"content": "</s>", "special": True, "normalized": False, "lstrip": False,
                         "rstrip": False, "single_word": False},
           "add_bos_token": True}
    return tok, cfg


def _wordpiece() -> tuple[Tokenizer, dict[str, Any]]:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=300, show_progress=False,
                                        special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]", "<|eom|>"])
    tok.train_from_iterator([*CORPUS, "世界 你好 🎉 Grüße"], trainer)
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A", special_tokens=[("[CLS]", 1)])
    cfg = {"bos_token": "[CLS]", "eos_token": "[SEP]", "chat_template": CHATML.replace("<|im_start|>", "[CLS]")
           .replace("<|im_end|>", "[SEP]")}
    return tok, cfg


_BUILDERS = {"gpt2_bpe": _gpt2_bpe, "llama2_sentencepiece": _llama2_sentencepiece, "wordpiece": _wordpiece}


def build_foreign_model(out: Path, kind: str, *, seed: int = 0, eos_after: str | None = None) -> ForeignModel:
    """Save a 2-layer random Llama with the ``kind`` tokenizer into ``out``.

    With ``eos_after`` (a prompt) the output row of the generation-config-only EOS becomes a
    slightly scaled copy of the row of the second token greedy decoding picks after that prompt,
    so greedy decoding of that prompt emits this EOS within two tokens: a server must stop there.
    """
    import transformers

    tok, tok_cfg = _BUILDERS[kind]()
    eos_token = tok_cfg["eos_token"]["content"] if isinstance(tok_cfg["eos_token"], dict) else tok_cfg["eos_token"]
    bos = tok_cfg.get("bos_token")
    bos_token = bos["content"] if isinstance(bos, dict) else bos
    eos_id, extra_id = tok.token_to_id(eos_token), tok.token_to_id("<|eom|>")
    config = transformers.LlamaConfig(
        vocab_size=tok.get_vocab_size(with_added_tokens=True), num_hidden_layers=2, hidden_size=64,
        intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        rms_norm_eps=1e-6, bos_token_id=tok.token_to_id(bos_token) if bos_token else None, eos_token_id=eos_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 if "embed" in name else 0.5 / p.shape[1] ** 0.5)
        if eos_after is not None:
            ids = torch.tensor([tok.encode(eos_after).ids])
            greedy = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=2, do_sample=False,
                                    pad_token_id=0, eos_token_id=None)[0, ids.shape[1]:].tolist()
            model.lm_head.weight[extra_id] = model.lm_head.weight[greedy[1]] * 1.05
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))
    if kind == "llama2_sentencepiece":
        (out / "chat_template.jinja").write_text(LLAMA2, encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg), encoding="utf-8")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": config.bos_token_id, "eos_token_id": [eos_id, extra_id]}), encoding="utf-8")
    return ForeignModel(out, kind, eos_token, "<|eom|>", extra_id)


def build_parrot_model(out: Path, kind: str, text: str, prompts: list[str]) -> list[int]:
    """A model of tokenizer ``kind`` whose greedy continuation of each of ``prompts`` is ``text``, then EOS.

    Attention and MLP outputs are zero, so the last hidden state is the current token's embedding
    (random unit vectors, nearly orthogonal); the output row of each token of ``text`` points at the
    embedding of the token before it. Byte-level and byte-fallback tokenizers split a multi-byte
    character over several such tokens, so a server must stream a character it only gets in pieces.
    ``prompts`` are completion prompts or chat messages rendered by the template; their last token
    starts the chain. Returns the token ids of ``text``.
    """
    import transformers

    from kvfence.engine.text.tokenizer import Tokenizer as KvTokenizer

    build_foreign_model(out, kind)
    tok = KvTokenizer.from_dir(out)
    chain = tok.encode(text, add_special_tokens=False)
    starts = {tok.encode(p)[-1] for p in prompts}
    if len(set(chain)) != len(chain) or starts & set(chain):
        raise ValueError(f"{text!r} needs distinct tokens that no prompt ends with, got {chain}")
    successor = {s: chain[0] for s in starts} | dict(itertools.pairwise(chain))
    successor[chain[-1]] = tok.eos_token_ids[0]
    model = transformers.LlamaForCausalLM.from_pretrained(out)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        embed = torch.randn(model.config.vocab_size, model.config.hidden_size, generator=generator)
        embed /= embed.norm(dim=1, keepdim=True)
        model.model.embed_tokens.weight.copy_(embed)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        head = torch.zeros_like(model.lm_head.weight)
        for token, nxt in successor.items():
            head[nxt] += 10.0 * embed[token]
        model.lm_head.weight.copy_(head)
    model.save_pretrained(out, safe_serialization=True)
    return chain
