"""Stable placeholders for findings, and their restoration in the answer.

Within one request (which carries its whole conversation) the same value always gets the same
placeholder, numbered by first appearance (``<EMAIL_1>``, ``<EMAIL_2>`` ...), so consecutive turns of
a conversation see the same placeholders too. The mapping lives only in this object, in memory,
for the life of the request. Secrets get placeholders as well but are never put in the restore
table: an answer can mention ``<AWS_ACCESS_KEY_1>``, never the key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from kvfence.gateway.protection.detect.findings import Category, Finding
from kvfence.gateway.protection.pseudonymise.forms import PlaceholderForms, written_placeholders

__all__ = ["PLACEHOLDER", "Pseudonymiser", "label_for"]

# What a placeholder looks like; also used to find ones already present in the caller's text.
PLACEHOLDER = re.compile(r"<([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)_(\d{1,6})>")

_LABELS = {
    "EMAIL_ADDRESS": "EMAIL",
    "PHONE_NUMBER": "PHONE",
    "IP_ADDRESS": "IP",
    "IBAN_CODE": "IBAN",
    "CREDIT_CARD": "CARD",
    "CRYPTO_WALLET": "WALLET",
}


def label_for(entity: str) -> str:
    """The placeholder label of an entity type: short for the common ones, the type itself otherwise."""
    return _LABELS.get(entity, entity)


class Pseudonymiser:
    """Replaces findings with placeholders and restores personal-data placeholders in answers."""

    def __init__(self, reserved_texts: Iterable[str] = ()) -> None:
        self._by_value: dict[tuple[str, str], str] = {}
        self._restore: dict[str, str] = {}
        self._counters: dict[str, int] = {}
        # Placeholders that already occur in the caller's own text, in any written form, are never
        # handed out, so a literal "<EMAIL_1>" (or "\u003cEMAIL_1\u003e" in pasted JSON) the user typed
        # is not later "restored" into someone's address.
        self._reserved = {p for text in reserved_texts for p in written_placeholders(text)}

    @property
    def restore_table(self) -> dict[str, str]:
        """placeholder -> original value, personal data only (secrets are never restored)."""
        return dict(self._restore)

    @property
    def longest_placeholder(self) -> int:
        return max((len(p) for p in self._restore), default=0)

    def placeholder_for(self, value: str, finding: Finding) -> str:
        label = label_for(finding.entity)
        key = (label, value)
        existing = self._by_value.get(key)
        if existing is not None:
            return existing
        number = self._counters.get(label, 0)
        while True:
            number += 1
            placeholder = f"<{label}_{number}>"
            if placeholder not in self._reserved:
                break
        self._counters[label] = number
        self._by_value[key] = placeholder
        if finding.category is Category.PII:
            self._restore[placeholder] = value
        return placeholder

    def apply(self, text: str, findings: Sequence[Finding]) -> str:
        """``text`` with every finding (non-overlapping, sorted by start) replaced by its placeholder."""
        if not findings:
            return text
        parts: list[str] = []
        cursor = 0
        for finding in findings:
            parts.append(text[cursor:finding.start])
            if not finding.continued:  # a later piece of a split value goes: the first piece holds it
                value = finding.value if finding.value is not None else text[finding.start:finding.end]
                parts.append(self.placeholder_for(value, finding))
            cursor = finding.end
        parts.append(text[cursor:])
        return "".join(parts)

    def restore(self, text: str, *, json_string: bool = False) -> str:
        """Put the original personal data back, in every written form of a placeholder
        (:mod:`.placeholder_forms`); unknown and secret placeholders stay as they are."""
        return PlaceholderForms(self._restore).restore(text, json_string=json_string)
