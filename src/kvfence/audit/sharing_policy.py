"""Which cache-sharing levels exist, which a deployment may allow, and the verdict (pure)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kvfence.audit.verdict import Verdict

__all__ = ["AllowedSharing", "Level", "LevelOutcome", "decide"]


class Level(enum.StrEnum):
    """Who sends the victim prompt and who the probing prompt (Gu et al.'s three levels)."""

    SAME_KEY = "same-key"
    SAME_ORG = "same-org"
    CROSS_ORG = "cross-org"

    @property
    def description(self) -> str:
        return {
            Level.SAME_KEY: "victim and prober use the same API key",
            Level.SAME_ORG: "victim and prober use different keys of one organisation",
            Level.CROSS_ORG: "victim and prober belong to different organisations",
        }[self]


class AllowedSharing(enum.StrEnum):
    """The widest cache sharing the operator accepts; sharing wider than this is a finding."""

    KEY = "key"
    ORG = "org"
    GLOBAL = "global"

    def forbids(self, level: Level) -> bool:
        if self is AllowedSharing.GLOBAL:
            return False
        if self is AllowedSharing.ORG:
            return level is Level.CROSS_ORG
        return level is not Level.SAME_KEY


@dataclass(frozen=True, slots=True)
class LevelOutcome:
    """What was measured at one level; ``shares`` is None when the level was not measured."""

    level: Level
    shares: bool | None
    p_value: float | None = None


def decide(outcomes: list[LevelOutcome], allowed: AllowedSharing) -> tuple[Verdict, str]:
    """Verdict of the cache-sharing check (invariant I6 seen from outside: no signal across scopes).

    Without a detectable hit at the same-key level the audit has no power: "inconclusive", never a
    pass. Sharing at a level ``allowed`` forbids is a finding; a forbidden level that was not
    measured makes a pass impossible.
    """
    by_level = {o.level: o for o in outcomes}
    same_key = by_level.get(Level.SAME_KEY)
    if same_key is None or not same_key.shares:
        return Verdict.INCONCLUSIVE, (
            "power check failed: a cache hit was not detectable even for the same key, so the audit "
            "cannot tell whether other keys share a cache (longer prompts or more samples may help; "
            "the endpoint may also have no prompt cache)"
        )
    shared = [lvl for lvl in Level if by_level.get(lvl) and by_level[lvl].shares]
    forbidden = [lvl for lvl in shared if allowed.forbids(lvl)]
    names = ", ".join(lvl.value for lvl in shared)
    if forbidden:
        return Verdict.FINDING, (
            f"the prompt cache is shared at level(s) {', '.join(f.value for f in forbidden)}, wider than "
            f"the allowed scope '{allowed.value}' (sharing detected at: {names})"
        )
    missing = [lvl for lvl in Level if allowed.forbids(lvl) and (lvl not in by_level or by_level[lvl].shares is None)]
    if missing:
        return Verdict.INCONCLUSIVE, (
            f"no forbidden sharing detected, but level(s) {', '.join(m.value for m in missing)} were not "
            "measured (give --same-org-key / --key-b)"
        )
    return Verdict.PASS, f"sharing detected only within the allowed scope '{allowed.value}' (at: {names})"
