"""E-mail addresses spelled out to dodge scrapers: ``alice (at) example (dot) com``, ``alice[at]example.com``.

People write addresses this way in signatures, forums and tickets, and a model reads them as the
address. Bracketed forms (``(at)``, ``[at]``, ``{at}``, ``<at>``, ``(@)``, with ``(dot)`` or a plain
``.`` in the domain) are unambiguous and always count. The bare form ``alice at example dot com``
is ordinary English word by word, so it counts only when written in capitals (``alice AT example DOT
com``) or after a mail cue word just before it (``email``, ``contact``, ``write to`` ...), and only
with a real-looking top-level domain. The placeholder replaces the spelled-out address; restoring it
gives back what the caller wrote.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.findings import Category
from kvfence.gateway.protection.detect.scanner import Anchor, Rule

__all__ = ["OBFUSCATED_EMAIL_RULES"]

_LOCAL = r"[^\W_](?:[\w.+'-]{0,62}[^\W_])?"
_LABEL = r"[^\W_](?:[\w-]{0,61}[^\W_])?"
_TLD = r"[^\W\d_]{2,24}"
_BR_AT = r"\s*[(\[{<]\s*(?:at|@)\s*[)\]}>]\s*"
_BR_ONLY_DOT = r"\s*[(\[{<]\s*(?:dot|\.)\s*[)\]}>]\s*"
_BR_DOT = r"(?:\s*[(\[{<]\s*(?:dot|\.)\s*[)\]}>]\s*|\.)"

# Generic and common top-level domains; any two-letter one is a country code.
_TLDS = frozenset(["com", "org", "net", "edu", "gov", "mil", "int", "io", "co", "ai", "app", "dev", "info", "biz", "me", "tv", "xyz", "online", "site", "tech", "cloud", "email", "mail", "name", "pro", "shop", "store", "blog", "page", "live"])
# in the pattern, not a validator: "bob at bob dot smith at acme dot io" must go on to the real one
_SPELLED_TLD = r"(?:" + "|".join(sorted(_TLDS, key=len, reverse=True)) + r"|[a-z]{2})"
_MAIL_CUES = ("email", "e-mail", "mail", "contact", "write to", "write me", "reach", "address", "send",
              "ping me", "message me", "drop me", "courriel", "correo", "kontakt")


OBFUSCATED_EMAIL_RULES: list[Rule] = [
    Rule("email_bracketed", "EMAIL_ADDRESS", Category.PII,
         re.compile(rf"(?<![\w.+%-]){_LOCAL}(?:{_BR_ONLY_DOT}{_LOCAL}){{0,4}}{_BR_AT}(?:{_LABEL}{_BR_DOT}){{1,6}}{_TLD}(?![\w-])"),
         score=0.9, on_lowered=True,
         anchor=Anchor(re.compile(r"[(\[{<]\s*(?:[aA][tT]|@)\s*[)\]}>]"), before=200, after=260)),
    Rule("email_spelled_caps", "EMAIL_ADDRESS", Category.PII,
         re.compile(rf"(?<![\w.+%-]){_LOCAL}(?:\s+DOT\s+{_LOCAL}){{0,4}}\s+AT\s+(?:{_LABEL}\s+DOT\s+){{1,4}}(?i:{_SPELLED_TLD})(?![\w-])"),
         score=0.8, hints=("dot",),
         anchor=Anchor(re.compile(r"\bDOT\b"), before=140, after=30)),
    Rule("email_spelled_context", "EMAIL_ADDRESS", Category.PII,
         re.compile(rf"(?<![\w.+%-]){_LOCAL}(?:\s+dot\s+{_LOCAL}){{0,4}}\s+at\s+(?:{_LABEL}\s+dot\s+){{1,4}}{_SPELLED_TLD}(?![\w-])"),
         score=0.7, on_lowered=True, context=_MAIL_CUES, needs_context=True, hints=("dot",),
         anchor=Anchor(re.compile(r"(?i)\bdot\b"), before=140, after=30)),
]
