"""Dates of birth: a date is personal data when the text says it is someone's birth date.

A bare date ("released 12.03.2024", "due 2025-01-31") names no one, so the rule only fires on a
date that follows a birth-date cue ("born", "DOB", "date of birth", "geboren", "né le", "fecha de
nacimiento" ...), a few words at most before it. Numeric (12.03.1984, 03/12/1984, 1984-03-12,
12/03/84) and written forms (March 12, 1984; 12th March 1984; 12. März 1984; 12 de marzo de 1984)
are recognised; the date must be a real calendar date in the past, after 1900.
"""

from __future__ import annotations

import calendar
import datetime
import re

from kvfence.gateway.protection.detect.findings import Category
from kvfence.gateway.protection.detect.scanner import Rule

__all__ = ["DOB_RULES", "plausible_birth_date"]

_MONTHS: dict[str, int] = {}
for _number, _names in enumerate((
        "january jan januar jänner janvier enero gennaio januari",
        "february feb februar février fevrier febrero febbraio februari",
        "march mar märz maerz mars marzo maart",
        "april apr avril abril aprile",
        "may mai mayo maggio mei",
        "june jun juni juin junio giugno",
        "july jul juli juillet julio luglio",
        "august aug août aout agosto augustus",
        "september sep sept septembre septiembre settembre",
        "october oct oktober octobre octubre ottobre",
        "november nov novembre noviembre",
        "december dec dezember décembre decembre diciembre dicembre"), start=1):
    for _name in _names.split():
        _MONTHS[_name] = _number

_MONTH = "|".join(sorted((re.escape(m) for m in _MONTHS), key=len, reverse=True))
_DAY = r"(?:0?[1-9]|[12]\d|3[01])"
_DATE = (rf"\d{{4}}[-/.]\d{{1,2}}[-/.]\d{{1,2}}"                                  # 1984-03-12
         rf"|\d{{1,2}}[./-]\d{{1,2}}[./-](?:\d{{4}}|\d{{2}})"                     # 12.03.1984, 03/12/84
         rf"|{_DAY}(?:st|nd|rd|th|er|\.|º)?\s+(?:of\s+|de\s+)?(?:{_MONTH})\.?,?\s+(?:de\s+)?\d{{4}}"  # 12 March 1984
         rf"|(?:{_MONTH})\.?\s+{_DAY}(?:st|nd|rd|th)?,?\s+\d{{4}}")              # March 12, 1984
_CUES = (r"born|date\s+of\s+birth|birth\s*date|birthdate|birthday|d\.?o\.?b\.?|geboren|geb\.|geburtsdatum"
         r"|geburtstag|n[ée]e?\s+le|n[ée]\(e\)\s+le|date\s+de\s+naissance|fecha\s+de\s+nacimiento|nacid[oa]\s+el"
         r"|data\s+di\s+nascita|nat[oa]\s+il|geboortedatum|geboren\s+op")
# The cue, then at most a few words (no digits, no clause or sentence end) before the date itself.
_DOB = re.compile(rf"(?<![\w.])(?:{_CUES})(?![\w])[^\d\n,.;!?]{{0,24}}?(?P<value>{_DATE})(?![\w]|[./-]\d)")


def _year(text: str) -> int:
    year = int(text)
    if len(text) == 2:
        # "DOB 03/12/84": a birth date is in the past, so the century is the latest one not ahead.
        now = datetime.date.today().year
        year += 2000 if 2000 + year <= now else 1900
    return year


def _real(year: int, month: int, day: int) -> bool:
    if not 1900 <= year <= datetime.date.today().year or not 1 <= month <= 12:
        return False
    return 1 <= day <= calendar.monthrange(year, month)[1]


def plausible_birth_date(value: str) -> bool:
    """True when ``value`` reads as a real date between 1900 and today (either day/month order)."""
    lowered = value.lower()
    words = re.findall(r"[^\W\d_]+", lowered)
    numbers = re.findall(r"\d+", lowered)
    month_names = [w for w in words if w in _MONTHS]
    if month_names:
        if len(numbers) < 2:
            return False
        day, year = (numbers[0], numbers[-1])
        return _real(_year(year), _MONTHS[month_names[0]], int(day))
    if len(numbers) != 3:
        return False
    if len(numbers[0]) == 4:  # year first: ISO order
        return _real(int(numbers[0]), int(numbers[1]), int(numbers[2]))
    year = _year(numbers[2])
    a, b = int(numbers[0]), int(numbers[1])
    return _real(year, b, a) or _real(year, a, b)  # day-month (most of the world) or month-day (US)


DOB_RULES: list[Rule] = [
    Rule("date_of_birth", "DATE_OF_BIRTH", Category.PII, _DOB, score=0.85, group="value",
         hints=("born", "birth", "dob", "d.o.b", "geb", "naissance", "nacid", "nacimiento", "nascita", "nato", "nata",
                "né", "ne le", "nee le", "geboorte"),
         validate=plausible_birth_date, on_lowered=True),
]
