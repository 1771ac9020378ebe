"""Names in CSV text: the cells of a column whose header says it holds names, and the cells of a
column whose header says it holds things.

A CSV attachment carries names in columns ("first_name", "Nachname", "nom", "Customer"), often
lower-case, surname-first or from no list; the header says what the column holds, so every cell of
such a column that looks like a name (letters, at most five words, no digits or ``@``) is one. A
column headed "city", "product", "brand" or "Lieferant" holds no person, whatever its cells look
like ("Alba", "Carter Office Supplies"): ``person_things.py`` drops a finding inside one.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator

from kvfence.gateway.protection.detect.findings import Category, Finding
from kvfence.gateway.protection.detect.recognizers.gazetteer import gazetteer
from kvfence.gateway.protection.detect.recognizers.person_labels import NOT_VALUES, thing_header
from kvfence.gateway.protection.detect.recognizers.person_words import _WORD, _known

__all__ = ["csv_name_cells", "csv_thing_cells"]

_HEADER_WORDS = re.compile(
    r"(?i)^(?:full[ _-]?name|first[ _-]?name|last[ _-]?name|given[ _-]?names?|family[ _-]?name|middle[ _-]?name"
    r"|fore[ _-]?names?|christian[ _-]?name|nom[ _-]de[ _-]famille|primer[ _-]apellido|segundo[ _-]apellido"
    r"|surname|name|names|customer(?:[ _-]?name)?|client(?:[ _-]?name)?|contact(?:[ _-]?(?:person|name))?"
    r"|patient(?:[ _-]?name)?|employee(?:[ _-]?name)?|recipient(?:[ _-]?name)?|sender(?:[ _-]?name)?"
    r"|owner|assignee|reporter|author|tenant|holder|cardholder|account[ _-]?holder|signatory|person"
    r"|vorname|nachname|familienname|kunde|kundenname|ansprechpartner(?:in)?|empfänger|mitarbeiter(?:in)?"
    r"|nom|prénom|prenom|nom[ _-]complet|destinataire|titulaire|client|nombre|apellidos?[12]?|nombre[ _-]completo"
    r"|cognoms?|primer[ _-]cognom|segon[ _-]cognom|nom[ _-]i[ _-]cognoms|sobrenome|apelidos?|nome[ _-]completo"
    r"|destinatario|titular|cognome|nome|nominativo|intestatario|voornaam|achternaam|naam|volledige[ _-]naam"
    r"|klant|ontvanger|contactpersoon)$")
# headers that say "this is a name part" outright; a bare "name" or "owner" column may hold products,
# hosts or teams, so its cells must look like a person's name (``person.py`` decides)
_STRONG_HEADER = re.compile(r"(?i)first|last|given|family|middle|sur|full|fore|christian|vorname|nachname|familienname|pr[ée]nom"
                            r"|apellido|cognom|sobrenome|apelido|cognome|voornaam|achternaam|customer|client|patient|employee|contact|kunde"
                            r"|mitarbeiter|klant|recipient|sender|cardholder|holder|tenant|signatory")
_CELL_OK = re.compile(r"^[^\W\d_][^\W\d_ .,'’-]*(?:[ .,'’-]{1,2}[^\W\d_]+){0,5}\.?$")
_DELIMS = (",", ";", "\t", "|")


_Columns = tuple[str, list[int], set[int]]  # a header's delimiter, its columns, the strong ones


def _header_cells(line: str) -> Iterator[tuple[str, list[str]]]:
    """Each delimiter that splits ``line`` into two or more cells, with the cells."""
    for delim in _DELIMS:
        if delim in line:
            cells = [c.strip().strip('"').strip() for c in line.split(delim)]
            if len(cells) >= 2:
                yield delim, cells


def _thing_columns(line: str) -> _Columns | None:
    for delim, cells in _header_cells(line):
        cols = [k for k, cell in enumerate(cells) if thing_header(cell)]
        if cols:
            return delim, cols, set(cols)
    return None


def _header_columns(line: str) -> _Columns | None:
    for delim, cells in _header_cells(line):
        cols = [k for k, cell in enumerate(cells) if _HEADER_WORDS.match(cell)]
        lows = [cell.lower() for cell in cells]
        if "first" in lows and "last" in lows:  # "id|last|first": a pair of bare name-part headers
            cols = sorted(set(cols) | {lows.index("first"), lows.index("last")})
        if cols:
            strong = {k for k in cols if _HEADER_WORDS.match(cells[k]) and _STRONG_HEADER.search(cells[k])}
            # "nom,prénom", "cognome,nome", "nombre;apellidos": beside a name-part column, a bare
            # "nom" / "nome" / "nombre" / "name" column holds a name part too
            return delim, cols, set(cols) if strong else strong
    return None


def _cells(line: str, delim: str) -> list[tuple[int, int]]:
    """Spans of the cells of ``line`` (quotes excluded), as the csv module splits it."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for cell in next(csv.reader([line], delimiter=delim, skipinitialspace=False)):
        # find the cell's text from pos: quoted or not
        raw_end = pos
        if line.startswith('"', pos):
            close = pos + 1
            while True:
                close = line.find('"', close)
                if close < 0 or not line.startswith('""', close):
                    break
                close += 2
            close = len(line) if close < 0 else close
            spans.append((pos + 1, close) if cell else (pos, pos))
            raw_end = line.find(delim, close)
        else:
            raw_end = line.find(delim, pos)
            end = len(line) if raw_end < 0 else raw_end
            start = pos + (len(line[pos:end]) - len(line[pos:end].lstrip()))
            spans.append((start, start + len(line[start:end].rstrip())))
        if raw_end < 0:
            break
        pos = raw_end + 1
    return spans


def _looks_like_a_person(value: str) -> bool:
    from kvfence.gateway.protection.detect.recognizers.person import find_persons

    return any(f.start == 0 and f.end >= len(value.rstrip(". ")) for f in find_persons(value, cells=False))


def _name_words(value: str) -> bool:
    """Capitalised words that the lists know as names, none of them an ordinary word that is no name
    ("Papadopoulos-Schmidt", "Eleni" under "last" and "first"; not "morning")."""
    g = gazetteer()
    words = _WORD.findall(value)
    return bool(words) and all(w[:1].isupper() and _known(g, w.lower(), False) and not g.month_or_day(w.lower())
                               and not (g.is_ordinary(w.lower()) and not g.is_name(w.lower())) for w in words)


def _column_cells(text: str, header_of: Callable[[str], _Columns | None]) -> Iterator[tuple[int, int, bool]]:
    """The non-empty cells (start, end, strong) of the columns that ``header_of`` finds in the header
    line of every CSV table of ``text``."""
    offset = 0
    header: tuple[str, list[int], set[int], int] | None = None  # delimiter, columns, strong ones, cells
    for line in text.split("\n"):
        stripped = line.rstrip("\r")
        if header is not None:
            delim, cols, strong, width = header
            if delim not in stripped:
                header = None
            else:
                try:
                    spans = _cells(stripped, delim)
                except csv.Error:
                    spans = []
                if abs(len(spans) - width) > 1:
                    header = None
                else:
                    for k in cols:
                        if k < len(spans) and spans[k][1] > spans[k][0]:
                            yield offset + spans[k][0], offset + spans[k][1], k in strong
        if header is None:
            spotted = header_of(stripped)
            if spotted is not None:
                header = (*spotted, len(stripped.split(spotted[0])))
        offset += len(line) + 1


def csv_name_cells(text: str) -> list[Finding]:
    """PERSON findings for the cells of name columns in every CSV table of ``text``."""
    if not any(d in text for d in _DELIMS):
        return []
    found: list[Finding] = []
    for start, end, strong in _column_cells(text, _header_columns):
        value = text[start:end]
        if _CELL_OK.match(value) and len(value) <= 60 and value.lower() not in NOT_VALUES \
                and (strong or _looks_like_a_person(value) or _name_words(value)):
            found.append(Finding(start, end, "PERSON", Category.PII, 0.8, "person_csv_column"))
    return found


def csv_thing_cells(text: str) -> list[tuple[int, int]]:
    """The cells (start, end) of columns whose header names a thing ("city", "product", "brand",
    "Lieferant") in every CSV table of ``text``."""
    if not any(d in text for d in _DELIMS):
        return []
    return [(start, end) for start, end, _ in _column_cells(text, _thing_columns)]
