"""Checksums of national identifiers added after the first rule set: German Steuer-ID, French NIR.

Each function takes the matched text (separators allowed) and says whether the check digits and the
structure hold; a random number of the right length passes about one time in ten (Steuer-ID) or
one in ninety-seven (NIR), so the rules add context words or structure on top where that is not
enough.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["de_tax_id_ok", "fr_nir_ok"]

_NON_ALNUM = re.compile(r"[^0-9A-Za-z]")


def de_tax_id_ok(text: str) -> bool:
    """German Steuerliche Identifikationsnummer: 11 digits, ISO 7064 MOD 11,10 check digit.

    The first ten digits never start with 0, and exactly one digit value occurs two or three
    times among them (the others at most once) — the Bundeszentralamt's allocation rule.
    """
    digits = _NON_ALNUM.sub("", text)
    if len(digits) != 11 or not digits.isdigit() or digits[0] == "0":
        return False
    counts = Counter(digits[:10]).values()
    repeated = [n for n in counts if n > 1]
    if len(repeated) != 1 or repeated[0] > 3:
        return False
    product = 10
    for ch in digits[:10]:
        total = (int(ch) + product) % 10 or 10
        product = (total * 2) % 11
    check = (11 - product) % 10
    return check == int(digits[10])


def fr_nir_ok(text: str) -> bool:
    """French NIR (numéro de sécurité sociale): 13 characters + a 2-digit key, key = 97 - (NIR mod 97).

    Corsican département codes 2A / 2B count as 19 / 18 for the key. Sex digit 1/2 (3, 4, 7, 8 for
    provisional numbers); month 01-12, or 20-42 / 50-99 where the birth month is unknown.
    """
    compact = _NON_ALNUM.sub("", text).upper()
    if len(compact) != 15 or compact[0] not in "123478":
        return False
    month = compact[3:5]
    if not month.isdigit() or not (1 <= int(month) <= 12 or 20 <= int(month) <= 42 or 50 <= int(month) <= 99):
        return False
    body, key = compact[:13], compact[13:]
    if body[5:7] == "2A":
        body = body[:5] + "19" + body[7:]
    elif body[5:7] == "2B":
        body = body[:5] + "18" + body[7:]
    if not body.isdigit() or not key.isdigit():
        return False
    return 97 - int(body) % 97 == int(key)
