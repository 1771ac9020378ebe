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
    """What one level showed: ``shares`` True (detected), False (shown not to share, with the power
    to see it: ``sequential``), None (not measured, or undecided at the samples / time given)."""

    level: Level
    shares: bool | None
    p_value: float | None = None
    measured: bool = True
    stopped: str = ""


def decide(outcomes: list[LevelOutcome], allowed: AllowedSharing) -> tuple[Verdict, str]:
    """Verdict of the cache-sharing check (invariant I6 seen from outside: no signal across scopes).

    Without a detectable hit at the same-key level the audit has no power: "inconclusive", never a
    pass. Sharing at a level ``allowed`` forbids is a finding; a forbidden level that was not
    measured, or not shown to be unshared with the power to see sharing, makes a pass impossible.
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
        undecided = [m for m in missing if m in by_level and by_level[m].measured and by_level[m].p_value is not None]
        unmeasured = [m for m in missing if m not in undecided]
        parts = []
        if undecided:
            why = {by_level[m].stopped for m in undecided}
            parts.append(f"at level(s) {', '.join(m.value for m in undecided)} the samples taken "
                         f"({' / '.join(sorted(why)) or 'sample limit'} reached) cannot show that sharing would "
                         "have been detected, so no sharing is not shown either (more --samples or "
                         "--time-budget, or longer --prompt-tokens)")
        out_of_time = [m for m in unmeasured if m in by_level and by_level[m].stopped == "time budget"]
        if out_of_time:
            parts.append(f"level(s) {', '.join(m.value for m in out_of_time)} were not measured: the time budget "
                         "ran out (a larger --time-budget)")
        if len(out_of_time) < len(unmeasured):
            parts.append(f"level(s) {', '.join(m.value for m in unmeasured if m not in out_of_time)} were not "
                         "measured (give --same-org-key / --key-b)")
        return Verdict.INCONCLUSIVE, "no forbidden sharing detected, but " + "; ".join(parts)
    return Verdict.PASS, f"sharing detected only within the allowed scope '{allowed.value}' (at: {names})"
