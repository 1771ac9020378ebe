"""A logits processor that lets a sequence sample only the tokens its grammar allows next.

The engine calls it with the tokens generated so far and the logits row; it returns the row with
every disallowed token at ``-inf``. EOS is allowed only where the grammar accepts the text so far,
and once the grammar can take nothing more, EOS is the only token left, so a completed answer stops.

It is a function of its arguments, as :class:`~kvfence.engine.sampling.sampling_params.LogitsProcessor`
asks: the matcher state of a sequence is looked up by its generated tokens. States live in a small
least-recently-used table keyed by the token prefix; a call extends the state of the longest known
prefix (advancing it in place when it is a strict prefix, the usual step), or copies and rolls back
a state that diverged (``n > 1`` sequences of one request share the processor), or starts over. So
a repeated call for the same position (preemption recomputes) and sequences that branch from one
prompt all see the state their own tokens lead to. It is driven by the engine thread alone.

Masks are NumPy; a row is a ``torch.Tensor`` under the torch runtime and a NumPy array under the
native one (which has no torch in its process), and either is masked in place.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvfence.engine.structured.compiler import CompiledGrammar

__all__ = ["DEFAULT_MAX_STATES", "GrammarLogitsProcessor"]

log = logging.getLogger(__name__)

# Enough for every sequence of a large n plus a few re-calls; each state is a matcher and a mask.
DEFAULT_MAX_STATES = 64


@dataclass
class _State:
    matcher: Any  # llguidance.LLMatcher after consuming the key's tokens
    disallowed: np.ndarray | None = None  # bool [vocabulary size], computed on first use


class GrammarLogitsProcessor:
    """Mask the logits of one request's sequences to what ``grammar`` allows next.

    With ``ignore_eos`` EOS stays masked until the grammar can take nothing more (a regex such as
    ``a+`` accepts early but may go on); the caller should then let EOS end the sequence (the
    server adds the EOS ids to ``stop_token_ids``) or it will generate EOS tokens until max_tokens.
    """

    def __init__(self, grammar: CompiledGrammar, *, ignore_eos: bool = False,
                 max_states: int = DEFAULT_MAX_STATES) -> None:
        if max_states < 1:
            raise ValueError(f"max_states must be >= 1, got {max_states}")
        self.grammar = grammar
        self.ignore_eos = ignore_eos
        self.max_states = max_states
        vocab = grammar.vocabulary
        self._size = vocab.size
        self._eos_ids = [t for t in vocab.eos_token_ids if t < vocab.size]
        self._only_eos = np.ones(self._size, dtype=bool)
        self._only_eos[self._eos_ids] = False
        self._states: OrderedDict[tuple[int, ...], _State] = OrderedDict()
        self._warned = False

    def __call__(self, output_token_ids: Sequence[int], logits: Any) -> Any:
        # logits: [V], torch or NumPy; V may exceed the tokenizer's vocabulary (padded embeddings): those never win.
        state = self._state_for(tuple(output_token_ids))
        if state.disallowed is None:
            state.disallowed = self._disallowed(state.matcher)
        n = min(self._size, logits.shape[-1])
        if isinstance(logits, np.ndarray):
            logits[:n][state.disallowed[:n]] = -np.inf
        else:
            import torch  # the torch runtime's row: torch is loaded already

            logits[:n].masked_fill_(torch.from_numpy(state.disallowed[:n]).to(logits.device), float("-inf"))
        if logits.shape[-1] > n:
            logits[n:] = float("-inf")
        return logits

    def allowed_token_ids(self, output_token_ids: Sequence[int]) -> list[int]:
        """The tokens the grammar allows after ``output_token_ids`` (for tests and debugging)."""
        row = self(output_token_ids, np.zeros(self._size, dtype=np.float32))
        return [int(t) for t in np.flatnonzero(np.isfinite(row))]

    def _disallowed(self, matcher: Any) -> np.ndarray:
        if matcher.is_error():
            # Only reachable when something after this processor forced a token the grammar
            # refuses (or the grammar hit a resource limit): end the answer rather than go on.
            if not self._warned:
                log.warning("structured output matcher failed (%s); only EOS is allowed from here",
                            str(matcher.get_error()).splitlines()[0][:200])
                self._warned = True
            return self._only_eos
        if matcher.is_stopped():
            return self._only_eos
        # Bit i of the bitmask (little-endian within each byte) says whether token i is allowed;
        # NumPy throughout, cheaper than torch ops this small.
        bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        bits = bits[: self._size]
        if self.ignore_eos and self._eos_ids:
            held = bits.copy()
            held[self._eos_ids] = 0
            if held.any():
                bits = held
        if not bits.any():  # nothing allowed: a grammar that ended without saying so
            return self._only_eos
        return bits == 0

    def _state_for(self, tokens: tuple[int, ...]) -> _State:
        found = self._states.get(tokens)
        if found is not None:
            self._states.move_to_end(tokens)
            return found
        best_key: tuple[int, ...] | None = None
        best_common = -1
        for key in self._states:
            common = _common_prefix_len(key, tokens)
            # Prefer an exact prefix at equal depth: it is advanced in place, no copy.
            if common > best_common or (common == best_common and common == len(key)):
                best_key, best_common = key, common
        if best_key is not None and best_common == len(best_key):
            state = self._states.pop(best_key)
            state.disallowed = None
            self._advance(state, tokens[best_common:], tokens)
        else:
            state = self._branch(best_key, best_common, tokens)
        self._states[tokens] = state
        while len(self._states) > self.max_states:
            self._states.popitem(last=False)
        return state

    def _branch(self, base_key: tuple[int, ...] | None, common: int, tokens: tuple[int, ...]) -> _State:
        matcher = None
        if base_key is not None and common > 0:
            matcher = self._states[base_key].matcher.deep_copy()
            if not matcher.rollback(len(base_key) - common) or matcher.is_error():
                matcher = None
        if matcher is None:
            matcher, common = self.grammar.new_matcher(), 0
        state = _State(matcher)
        self._advance(state, tokens[common:], tokens)
        return state

    @staticmethod
    def _advance(state: _State, new_tokens: tuple[int, ...], all_tokens: tuple[int, ...]) -> None:
        if new_tokens and not state.matcher.is_error() and not state.matcher.consume_tokens(list(new_tokens)):
            log.debug("token outside the grammar after %d tokens", len(all_tokens))


def _common_prefix_len(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]; slices compare in C
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
