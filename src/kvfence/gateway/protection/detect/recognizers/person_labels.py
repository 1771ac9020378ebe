"""PERSON in labelled places: the value of a name field ("Name: Priya Raman", ``"last_name":
"Park"``, "Nachname: Keller", "Family name (as in passport): AL-SAYED"), the people after a list label
("Attendees:", "Aanwezig:", "cc:", "Chair:"), the owner of an action item in minutes ("AI: Wei to send
the slides", "- Kenji to book the room") and a ticket's passenger name ("OKAFOR/CHIDI MR"); and the
labels that say their value names a thing ("brand", "city", "Lieferant", ``"author_org"``), which
``person_things.py`` and ``csv_names.py`` read.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.findings import Category, Finding
from kvfence.gateway.protection.detect.recognizers.gazetteer import Gazetteer
from kvfence.gateway.protection.detect.recognizers.not_names import FIRMS as _NOT_PEOPLE
from kvfence.gateway.protection.detect.recognizers.not_names import NOT_ALONE as _NOT_ALONE
from kvfence.gateway.protection.detect.recognizers.not_names import ORG_WORDS as _ORG_AFTER
from kvfence.gateway.protection.detect.recognizers.not_names import PLACES as _PLACES
from kvfence.gateway.protection.detect.recognizers.person_words import (
    _GROUP_WORDS,
    _PARTICLES,
    _WORD,
    _known,
    _not_a_person,
)

__all__ = ["NOT_VALUES", "action_owners", "field_values", "list_values", "thing_header", "thing_key_before", "ticket_names"]

_FIELD = re.compile(
    r"""(?ix)(?:^|(?<=[\s{,;"'(\[]))
    (?P<key>full[\s_-]?name|first[\s_-]?name|last[\s_-]?name|given[\s_-]?name|family[\s_-]?name|middle[\s_-]?name
      |surname|name|customer(?:[\s_-]?name)?|client(?:[\s_-]?name)?|contact(?:[\s_-]?(?:person|name))?
      |patient(?:[\s_-]?name)?|employee(?:[\s_-]?name)?|recipient|sender|attn|owner|assignee|reporter
      |requester|author|signatory|tenant|landlord|holder|cardholder|account[\s_-]?holder|user[\s_-]?name
      |vorname|nachname|familienname|kunde|ansprechpartner(?:in)?|empfänger|absender|mieter|vermieter
      |nome?|prénom|prenom|destinataire|expéditeur|titulaire|locataire|nombre|apellidos?[12]?|destinatario|remitente
      |cognoms?|sobrenome|apelidos?|nome[\s_-]completo
      |titular|cognome|mittente|intestatario|voornaam|achternaam|naam|ontvanger|afzender|huurder|klant)
    (?:\(s\))?(?:[ \t]?\([^()\n]{1,30}\))?  # "Given name(s)", "Family name (as in passport)"
    ["']?\s{0,3}[:=]\s{0,3}["']?
    (?P<value>[^\W\d_][^\W\d_'’.-]*(?:(?:[ .'’-]|\.\s)[^\W\d_]+){0,5}\.?)""")


# Keys, labels and column headers whose value names a thing, in six languages: a brand, a product, a
# firm, a place, a depot, a team, a project, a title, a flavour ("brand", "author_org", "company_name",
# "Lieferant", "ville", "città"; "Ontvanger", "team" and "label" are none: they hold people as often). Its last
# word decides ("author_org" is a firm, "org_contact" no key of this kind).
_THING_WORDS = frozenset("""
brand brands marke marque marca merk product products produkt produit producto prodotto artikel article articolo
artículo articulo item sku company firma unternehmen société societe entreprise empresa azienda società societa
bedrijf org organisation organization organisatie organización organizacion organizzazione employer supplier
vendor lieferant fournisseur proveedor fornitore leverancier manufacturer maker hersteller fabricant fabricante
produttore fabrikant store shop laden filiale magasin boutique tienda negozio winkel city town stadt ort ville
ciudad città citta stad plaats gemeente country land pays país pais paese region regio región regione depot
dépôt warehouse lager entrepôt almacén magazzino magazijn hotel venue airport station department abteilung
département departement departamento reparto afdeling project projekt projet proyecto progetto title titel
titre título titulo titolo flavour flavor geschmack saveur sabor gusto smaak model modell modèle modele modelo
modello category kategorie catégorie categorie categoría categoria publisher verlag éditeur editeur editorial
editore uitgever carrier spediteur transporteur transportista vettore vervoerder bank school hospital campaign
course genre dish drink wine beer menu colour color farbe couleur colore kleur finish ship vessel schiff navire
barco nave schip room raum salle sala zaal courier forwarder haulier spedition
""".split())  # noqa: SIM905
_KEY_SUFFIXES = frozenset(["name", "names", "title", "label"])
_KEY_WORDS = "|".join(sorted(_THING_WORDS, key=len, reverse=True))
# at a line's start (after a bullet), in JSON or a table: a label, not prose ("our supplier: Anna Keller")
_THING_KEY_BEFORE = re.compile(
    rf"""(?i)(?:^|(?<=[\n{{,;"'(\[|\t]))[ \t]{{0,3}}(?:[-*•][ \t]{{1,3}})?["']?(?:[^\W\d_]+[_ -])?(?:{_KEY_WORDS})"""
    r"""(?:[_ -]?(?:name|names|title|label))?["']?[ \t]{0,3}[:=][ \t]{0,3}["']?$"""
    rf"""|(?<= )(?:{_KEY_WORDS})=["']?$""")  # logfmt: "status=ok courier=Eddie Stobart"


def thing_key_before(text: str, start: int) -> bool:
    """A key or label that names a thing ends right before ``start``: ``"brand": "``, "Ville : "."""
    if not text[max(0, start - 5):start].rstrip(" \t\"'").endswith((":", "=")):
        return False  # the common case, decided without the regex
    return _THING_KEY_BEFORE.search(text, max(0, start - 40), start) is not None


def thing_header(cell: str) -> bool:
    """A CSV header cell that names a thing ("city", "product", "Lieferant", "supplier_name")."""
    words = cell.lower().replace("-", " ").replace("_", " ").split()
    if len(words) > 1 and words[-1] in _KEY_SUFFIXES:
        words.pop()
    return 0 < len(words) <= 2 and words[-1] in _THING_WORDS


# keys that hold nothing but a name part: their value needs no gazetteer
_STRONG_KEY = re.compile(r"(?i)first|last|given|family|middle|sur|full|vorname|nachname|familienname|pr[ée]nom"
                         r"|apellido|cognom|sobrenome|apelido|voornaam|achternaam")
_NAME_KEYS = frozenset(["name", "nom", "nome", "nombre", "naam"])
# values that say no one is named (a field's, a name column's cell): "Vacant", "To be hired", "TBD"
NOT_VALUES = frozenset(["null", "none", "unknown", "n/a", "na", "nil", "undefined", "true", "false", "test", "example",
                        "sample", "vacant", "vacancy", "tbd", "tba", "tbc", "to be hired", "to be confirmed",
                        "to be announced", "to be appointed", "open position", "hiring", "anonymous", "redacted",
                        "withheld", "various", "required", "optional", "mandatory"])  # the last: a form template's row


def field_values(text: str, g: Gazetteer) -> list[Finding]:
    """PERSON findings for the values of name fields ("Name: Priya Raman", ``"first_name": "Priya"``)."""
    found: list[Finding] = []
    fields = list(_FIELD.finditer(text))
    # a form with a given-name or surname field: its plain "Nom :" / "Nome:" / "Name:" holds a name part too
    # ("Nom : Besnard\nPrénom : Anaïs", "Nome: Serena\nCognome: D'Angelo")
    form = any(_STRONG_KEY.search(m.group("key")) is not None for m in fields)
    for m in fields:
        start, end = m.span("value")
        value = text[start:end].rstrip(".")
        end = start + len(value)
        words = _WORD.findall(value)
        # "Name: Priya Raman Status: open": stop at the first ordinary word that is no name
        keep: list[str] = []
        for w in words:
            low = w.lower()
            if (g.is_ordinary(low) or low in _ORG_AFTER) and not g.is_name(low) and low not in _PARTICLES:
                break
            keep.append(w)
        if not keep:
            continue
        strong = _STRONG_KEY.search(m.group("key")) is not None or (form and m.group("key").lower() in _NAME_KEYS)
        if not any(_known(g, w.lower(), False) for w in keep) and not strong:
            continue
        plain = [w for w in keep if w.lower() not in _PARTICLES]
        if not strong and (len(plain) < 2 or not any(_known(g, w.lower(), True) for w in plain)):
            continue  # {"name": "Florence"} is a city as often as a person; "Name: Priya Raman" is not
        if all(g.is_ordinary(w.lower()) for w in plain) and not (len(plain) >= 2 and all(w[0].isupper() for w in plain)) \
                and not (strong and plain and plain[0][0].isupper() and plain[0].lower() not in NOT_VALUES):
            continue  # "Name: Unknown", "owner: admin"; but "last_name": "Park"
        if len(keep) < len(words):
            cut = value.find(keep[-1], sum(len(w) for w in keep[:-1])) + len(keep[-1])
            end = start + cut
        found.append(Finding(start, end, "PERSON", Category.PII, 0.9, "person_field"))
    return found


_LIST_LABEL = re.compile(
    r"(?im)(?:^|(?<=[\s(]))(?:attendees|participants|present|apologies|absent|invitees|speakers|panelists"
    r"|teilnehmer(?:innen)?|anwesend|entschuldigt|abwesend|participants|présents|presents|excusés|invités"
    r"|asistentes|participantes|presentes|ausentes|invitados|partecipanti|presenti|assenti|invitati"
    r"|assistents|absents|excusats|convidats"
    r"|aanwezig|afwezig|deelnemers|genodigden|cc|bcc"
    # the roles of minutes and events: "Chair: Adaora Nwachukwu-Eze", "Follow-ups: Tendai (budget)"
    r"|chairs?|chairperson|scribe|facilitators?|hosts?|moderators?|timekeeper|presenters?|note[ -]?takers?"
    r"|minute[ -]?takers?|organi[sz]ers?|sponsors?|mentors?|mentees?|drivers?|co-drivers?|interviewers?|reviewers?"
    r"|approvers?|follow[ -]ups?|regrets|guests|also[ \t]present|in[ \t]attendance|on[ -]call(?:[ \t]this[ \t]week)?"
    r"|trainers?|coordinators?|secretary|treasurer|rapporteur|convenor|panel)[ \t]*:[ \t]*"
    r"(?P<items>[^\n|]{1,400})")  # a "|" ends the items: "Host: Akira | Scribe: Leilani"
_LIST_SPLIT = re.compile(r"\s*(?:[,;/]|\band\b|\bund\b|\bet\b|\by\b|\be\b|\ben\b|&)\s*")
_LIST_ITEM = re.compile(r"^[^\W\d_][\w'’.-]*(?:\s+[^\W\d_][\w'’.-]*){0,4}$")


def starts_list(text: str, line_start: int) -> bool:
    """Whether the line at ``line_start`` opens with a list label ("Attendees:", "Panel:", "cc:")."""
    return _LIST_LABEL.match(text, line_start) is not None


def list_values(text: str, g: Gazetteer) -> list[Finding]:
    """The people listed after a label ("Attendees: Ruud Smit, Femke Mulder, Daan", "cc: Priya"):
    each item of one to five words, capitalised (particles aside), that is no firm, group or word."""
    found: list[Finding] = []
    for m in _LIST_LABEL.finditer(text):
        start = m.start("items")
        items = m.group("items")
        pos = 0
        for piece in _LIST_SPLIT.split(items):
            at = items.find(piece, pos) if piece else -1
            if at < 0:
                continue
            pos = at + len(piece)
            value = re.split(r"\s*[(<\[]", piece, maxsplit=1)[0].strip().rstrip(".")
            if not value or not _LIST_ITEM.match(value):
                continue
            words = _WORD.findall(value)
            plain = [w for w in words if w.lower() not in _PARTICLES]
            if not plain or any(not w[0].isupper() for w in plain) or " ".join(w.lower() for w in words) in _NOT_PEOPLE:
                continue
            lows = [w.lower() for w in plain]
            if any(w in _GROUP_WORDS or _not_a_person(w) or w in _ORG_AFTER or g.month_or_day(w) for w in lows):
                continue
            if not any(_known(g, w, False) for w in lows) and any(g.is_ordinary(w) for w in lows):
                continue
            # a safe given name before a surname the lists lack that is also a word: "Présents : Lionel Carré"
            given_first = len(plain) == 2 and g.is_given(lows[0]) and not g.is_ordinary(lows[0]) \
                and not g.risky_given(lows[0]) and lows[0] not in _NOT_ALONE and plain[1][1:].islower()
            if any(w in _PLACES or g.is_not_name(w) or (g.is_ordinary(w) and not g.is_name(w)
                                                        and not (given_first and w == lows[1])) for w in lows):
                continue  # "Lagos office", "Events Committee", "Security Guild": a place, a word, a department
            if len(plain) == 1 and (len(plain[0]) < 3 or not _known(g, lows[0], False) or plain[0].isupper()):
                continue  # "Safaricom", "UNICEF", "TBC": one word is a name only when the lists know it
            found.append(Finding(start + at, start + at + len(value), "PERSON", Category.PII, 0.7, "person_list"))
    return found


# an action item: a bullet or an action label at the line start, a name, then "to" / "will" and a verb
_ACTION = re.compile(
    r"(?m)(?:^[ \t]*[-*•][ \t]+(?:\[[ xX]?\][ \t]+)?"  # a bullet at the line start, or an action label there or after a sentence
    r"|(?:^[ \t]*|(?<=[.;!] ))(?:AI|A/I|Action(?:[ \t]item)?s?|ACTION(?:[ \t]ITEM)?S?|TODO|To-?do|Next[ \t]steps?)"
    r"[ \t]*:[ \t]*(?:[-*•][ \t]*)?)"
    r"@?(?P<name>[^\W\d_][^\W\d_'’-]{1,30}(?:[ \t][^\W\d_][^\W\d_'’-]{0,30}){0,2})"
    r"[ \t]+(?:to|will|should|must|is[ \t]to)[ \t]+[a-z]")


def action_owners(text: str, g: Gazetteer) -> list[Finding]:
    """The owner of an action item in minutes ("AI: Wei to send the slides", "- Kenji to book the room",
    "Action: Nguyen Thi Lan will call"): a known given name that is no English month, verb or place
    ("May", "Will", "Paris"), or a run of capitalised name words whose first is a known name."""
    found: list[Finding] = []
    for m in _ACTION.finditer(text):
        words = m.group("name").split()
        lows = [w.lower() for w in words]
        first = lows[0]
        if not all(w[:1].isupper() and (w[1:].islower() or "-" in w) for w in words) \
                or any(_not_a_person(w) or w in _GROUP_WORDS or w in _ORG_AFTER or g.is_not_name(w) for w in lows):
            continue
        if len(words) == 1:
            if not g.is_given(first) or g.risky_alone(first) or (g.month_or_day(first) and g.is_ordinary(first)):
                continue
        elif not _known(g, first, True) and not (g.is_surname(first) and _known(g, lows[-1], True)):
            continue
        if " ".join(lows) in _NOT_PEOPLE or not all(_known(g, w, False) or not g.is_ordinary(w) for w in lows):
            continue
        found.append(Finding(m.start("name"), m.end("name"), "PERSON", Category.PII, 0.65, "person_action"))
    return found


# a passenger name as tickets, boarding passes and booking systems write it: SURNAME/GIVEN NAMES and a title
_TICKET_TITLES = "(?:MR|MRS|MS|MISS|MSTR|DR|PROF|CHD|INF)"
_TICKET_NAME = re.compile(
    r"(?<![\w/])(?P<name>[A-Z][A-Z'-]{1,30}/[A-Z][A-Z'-]{0,30}(?: (?!" + _TICKET_TITLES + r"(?![\w/]))[A-Z][A-Z'-]{0,30}){0,3})"
    r"(?: ?(?P<title>" + _TICKET_TITLES + r"))?(?![\w/])")


def ticket_names(text: str, g: Gazetteer) -> list[Finding]:
    """Passenger names written "SURNAME/GIVEN TITLE" ("OKAFOR/CHIDI MR", "NGUYEN/THI LAN MS"): with the
    title, or with a surname and a given name the lists know ("AND/OR", "TCP/IP" are neither)."""
    found: list[Finding] = []
    for m in _TICKET_NAME.finditer(text):
        surname, _, given = m.group("name").lower().partition("/")
        first = given.split()[0] if given else ""
        if m.group("title") is None and not (_known(g, surname, False) and _known(g, first, True)
                                             and not g.is_ordinary(surname) and not g.is_ordinary(first)):
            continue
        if len(surname) < 2 or not first or g.is_not_name(surname) or _not_a_person(surname):
            continue
        found.append(Finding(m.start("name"), m.end("name"), "PERSON", Category.PII, 0.8, "person_ticket"))
    return found
