"""The last word on a PERSON finding: the words around it say it names a thing, not a person.

Every PERSON rule's finding passes here (``find_persons``), so no rule can skip it. A finding is
dropped when

- it is made only of service words, greetings, vocatives or departments ("Mundo" in "Hola Mundo",
  "Signori", "Legal", "Truly": ``data/words_not_names.txt``);
- a dedication word is before it or starts it: a place, building, prize, storm or illness named after
  a person, in six languages ("Fort William", "Hurricane Katrina", "aeroporto Leonardo da Vinci",
  "estadio Santiago Bernabéu", "syndrome de Gilles de la Tourette", "ziekte van Parkinson");
- a thing noun follows it ("Laura Ashley wallpaper", "Robert Mondavi cabernet", "Tommy John surgery"),
  or a possessive and an eponym's noun ("Lou Gehrig's disease", "Bell's palsy") or a capitalised
  ordinary word ("Halley's Comet", "Martha's Vineyard", "Jacob's Creek");
- an English verb and "a" / "an" are before it: a product, not a person ("our kettle is a Russell Hobbs",
  "and a Tia Maria");
- the sentence says what it is, and that is a thing ("Ben Nevis is the highest mountain", "Stella
  Artois and Peroni are the two beers on tap", "..., a cocktail");
- it is one of a few brands written as a possessive given name ("Nando's", "Wendy's");
- it starts with an article of another language ("Les Achats");
- it lies inside a known firm or brand named after a person, matched as a whole run of words
  (``data/firms.txt``: "Baker McKenzie", "Dr. Oetker", "Mr Kipling", "Tío Pepe", "Heinz"), or a dish,
  greeting or place of another culture written like a name (``data/things_named_like_people.txt``:
  "Tom Yum", "Bok Choy", "Ramadan Kareem", "Siem Reap"), unless a
  person's title stands right before the run ("Mr. Ford", "Herr Oetker") or a greeting or cue made a
  one-word given name ("Hi Hema,"); a run with more words is no entry ("Anna Ferrari"); a name that
  runs on into "von"/"van"/"of" and such a firm keeps only its part before ("Sabine Wolff von
  Hengeler Mueller");
- a street word ("Viale", "Rue", "Avenida") stands inside it after one word: a firm and its address
  ("Esselunga Viale Piave"); after two or more the name keeps its part before ("Mario Rossi Viale Monza");
- a legal form is its last word or follows it ("Beiersdorf AG", "Otto Group", "Gleiss Lutz GmbH"), or
  a firm's or premises word starts it or is right before it ("Kanzlei Hengeler Mueller", "Magasin Louis
  Pasteur", "Paketzentrum Frankfurt");
- it is the module of an import statement in code ("from kalman import KalmanFilter");
- its words are, elsewhere in the same text, a thing by the rules above or by the PERSON rules' own ("the Douglas Peucker
  simplification", then "Ramer Douglas Peucker");
- it is the value of a key or label that names a thing (``"brand": "Cherry Garcia"``, "Ville : Alba",
  ``"author_org"``), or a cell of a CSV column whose header does ("city", "product", "Lieferant").
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
import unicodedata

from kvfence.gateway.protection.detect.findings import Finding
from kvfence.gateway.protection.detect.recognizers.csv_names import csv_thing_cells
from kvfence.gateway.protection.detect.recognizers.gazetteer import Gazetteer, data_lines, gazetteer
from kvfence.gateway.protection.detect.recognizers.not_names import FIRMS
from kvfence.gateway.protection.detect.recognizers.person_labels import thing_key_before
from kvfence.gateway.protection.detect.recognizers.person_words import (
    _PARTICLES,
    _TITLES,
    _WEAK_CUES,
    _WORD,
    _cue_before,
)

__all__ = ["drop_things", "noun_after"]

# A capitalised first word, or a word right before: the run after it is named after a person, or is a
# project's or a holiday's name ("Project Athena", "projet Apollon", "Día de Reyes", "Fête de Jeanne").
_DEDICATION = frozenset("""
fort port mount mt lake cape bay san santa santo são sankt saint ste sint hurricane storm typhoon cyclone
tropical ouragan tempête huracán tormenta uragano tempesta orkaan sturm airport aeropuerto aeroporto
aéroport flughafen luchthaven stadium stadio estadio stade stadion station gare stazione estación bahnhof
hauptbahnhof hospital ospedale hôpital krankenhaus ziekenhuis klinikum policlinico lycée liceo colegio
gymnasium collège escuela scuola école university universität université università universidad
universiteit fondation fundación fondazione stiftung stichting foundation premio prix preis prijs prize
award medal teatro théâtre theater theatre museo musée museum syndrome sindrome síndrome syndrom syndroom
disease maladie enfermedad morbo malattia krankheit ziekte sclerosis royal national federal general united
international global central jalan jl
project projekt projet proyecto progetto programme programma programa operation opération operación operazione
operatie codename mission missione misión missie
día jour giorno fête fiesta festa feast noche nuit notte
sant estádio estadi escola institut instituto liceu universidade universitat museu teatre aeroport estação
estació ponte puente palau palacio palácio puerta diada semana métro metro metrô
""".split())  # noqa: SIM905
# shops, in six languages: a firm's word before or after a surname ("Bäckerei Schulz", "Müller Drogerie",
# "Pharmacie Dupont", "Farmacia Rossi", "Slagerij Jansen")
_SHOP_WORDS = """drogerie apotheke bäckerei metzgerei konditorei optik autohaus reisebüro buchhandlung blumenladen
getränkemarkt möbelhaus friseur pharmacie boulangerie boucherie pâtisserie librairie quincaillerie fleuriste
farmacia panadería carnicería pastelería librería ferretería floristería panetteria macelleria pasticceria
libreria ferramenta gelateria fioreria apotheek bakkerij slagerij boekhandel bloemist drogisterij kapsalon
banketbakkerij""".split()  # noqa: SIM905
# a firm's word right before: "les laboratoires Pierre Fabre", "die Firma Otto", "el grupo ..."
# premises, in six languages: a warehouse, depot, branch, shop or room named after a person, or a firm's
# site ("Lager Gottlieb Daimler", "Magasin Louis Pasteur", "Negozio Vittorio Emanuele", "Winkel Albert Heijn",
# "Salle Pierre Curie", "Raum Konrad Zuse"); English "room", "store" and "shop" are left out ("the room Maria
# booked"; "the Alan Turing room" is a room by the word after it, not_names.py)
_PREMISES = """warehouse depot lager filiale magasin entrepôt dépôt agence succursale salle almacén tienda sucursal
magazzino negozio deposito sala magazijn winkel filiaal vestiging zaal raum saal aula""".split()  # noqa: SIM905
# the same as the last part of a German or Dutch compound: "Paketzentrum Frankfurt", "Zentrallager Hamm",
# "Distributiecentrum Tilburg"
_PREMISES_SUFFIXES = ("zentrum", "centrum", "lager", "depot", "filiale", "magazijn")
_FIRM_BEFORE = frozenset("""
laboratoires laboratorios laboratori laboratorium labs groupe gruppo grupo gruppe société sociedad società
empresa azienda bedrijf cabinet bufete kanzlei bodegas bodega maison casa verlag editorial éditions edizioni
uitgeverij brand label firm retailer chain carmaker winery distillery brewery brasserie ristorante trattoria
pizzeria bistrot hotel hôtel albergo hostal restaurant restaurante
""".split()) | frozenset(_SHOP_WORDS) | frozenset(_PREMISES)  # noqa: SIM905
_RIGHT_BEFORE = _DEDICATION | _FIRM_BEFORE
# an illness or a prize may name its person after a preposition: "maladie de Parkinson", "ziekte van Lyme"
_OF_WORDS = frozenset("""syndrome sindrome síndrome syndrom syndroom disease maladie enfermedad morbo malattia
krankheit ziekte sclerosis prix premio preis prijs law wet gesetz loi ley legge lei paradox paradoxe paradoja paradosso
theorem théorème teorema stelling principle principe principio prinzip""".split())  # noqa: SIM905
_OF = frozenset("de di du des del della van von of".split())  # noqa: SIM905
# a noun right after the name (lower case; no word that is also a verb here or in another of the six
# languages, such as "lecture", "range", "test", "watches", "chairs"): the name is a brand, a product
# or an eponym; "_" joins two-word nouns
_THING_NOUNS = frozenset(w.replace("_", " ") for w in """
disease syndrome palsy surgery nurses hospice wallpaper candles mascara serums perfume perfumes parfum parfums
parfüm profumo profumi fragrance
fragrances lipstick lipsticks cosmetics cabernet merlot chardonnay pinot shiraz rosé rosés rose roses whisky
whiskey bourbon vodka kettle kettles toaster toasters blender blenders printer printers vacuum vacuums
appliances dealer dealers dealership outlet outlets boutique boutiques handbag handbags sneakers jeans dresses
franchise foundations models escape_room algorithm simplification decomposition transform filter distribution
coefficient polynomial polynomials splines tea pizza pasta salad sauce sponge cake pie cocktail cocktails
terrier terriers spaniel spaniels retriever retrievers charity beer beers lager cider boats yachts sandwiches
magazine pharmacy pharmacies restaurants cookware cafe café bakery bread recipes grill burgers coffee chocolate
chocolates cookies biscuits ice_cream wine wines restaurant machine machines cartoon shampoo guitars pianos furniture sofas mattress mattresses bikes
motorcycles tractors tyres tires lenses cameras headphones laptops collection underwear swimwear eyewear
sunglasses knives cutlery stationery toys sarcoma lymphoma tumour tumor carcinoma leukaemia leukemia
catheter maneuver manoeuvre procedure reflex triad phenomenon
zumo soep soupe sopa zuppa suppe saft jus succo vino vin wein wijn bier birra cerveza bière sidra cidre koffie
kaffee caffè thé tee tè té thee chocolade schokolade cioccolato chocolat nudeln ravioli tortellini salsa soße
saus käse kaas queso formaggio fromage biscotti koekjes kekse jamón schinken jambon prosciutto rookworst wurst
worst schuhe chaussures zapatos scarpe schoenen crème creme crema
""".split()) | frozenset(_SHOP_WORDS)  # noqa: SIM905
# an eponym's noun after a possessive ("Bell's palsy", "Ohm's law"); "Priya's test" stays a person
_EPONYM_NOUNS = frozenset("""disease syndrome palsy chorea sarcoma lymphoma law theorem lemma conjecture
principle paradox equation constant algorithm comet razor oesophagus esophagus phenomenon thyroiditis
contracture apple triad encephalopathy""".split())  # noqa: SIM905
_NEXT_WORDS = re.compile(r"(['’]s)?\s+([^\W\d_]+)(?:\s+([^\W\d_]+))?")
_CAPITALISED = re.compile(r"(?: [A-Z][^\W\d_]+){0,4}")  # bounded: a run of names must not make each finding read to the end
# after a closing or at a line start in French, Spanish, Italian, Dutch, German: an article is no name
# street words written glued to a name in Dutch and German ("Coenstraat", "Goethestraße", "Mozartplatz")
_STREET_SUFFIXES = ("straat", "straße", "strasse", "gracht", "plein", "kade", "steeg", "singel", "gasse", "platz",
                    "allee", "laan", "dreef", "ufer", "damm")
# street words that are no surname or middle name, inside a run: a street follows ("Esselunga Viale Piave")
_STREET_INSIDE = frozenset("viale avenida paseo rue rua travessa vicolo strada straße strasse chaussée".split())  # noqa: SIM905
_CAPITALISED_BEFORE = re.compile(r"[A-Z][^\W\d_]+ $")
_ARTICLE_FIRST = frozenset("les los las het gli die das".split())  # noqa: SIM905
# "..., a cocktail", "... is the highest mountain in Britain", "... are the two beers on tap", "Dr. House is
# a TV show": the sentence says what the run is, and it is a thing
_IS_A_THING = re.compile(
    r"(?:\s+(?:and|&|or)\s+[A-Z][^\W\d_]*(?:\s+[A-Z][^\W\d_]*)*)?"
    r"(?:,\s+|\s+(?:is|was|are|were)\s+)(?:a|an|the|one of the|two|three|our|their)\s+(?:(?:[a-z]+|TV)\s+){0,2}"
    r"(?:mountain|peak|hill|river|lake|island|capital|city|town|village|county|province|region|district|suburb|"
    r"airport|station|stadium|brand|brands|company|firm|bank|retailer|chain|label|cocktail|cocktails|drink|"
    r"drinks|dish|beer|beers|wine|whisky|restaurant|hotel|charity|band|ship|software|library|framework|"
    r"language|tool|app|product|products|car|cars|search engine|engine|website|site|platform|assistants?|"
    r"chatbot|bot|film|movie|show|series|sitcom|musical|cartoon|game|novel|play)"
    r"(?=\s*(?:[.,;:!?)]|$)|\s+(?:in|of|on|at|for|with|from|near|by|and|that|which|since)\b)"
    r"|(?:\s+(?:and|&|or)\s+[A-Z][^\W\d_]*(?:\s+[A-Z][^\W\d_]*)*)?\s+(?:is|are)\s+(?:on the (?:[a-z]+\s+)?menu|on tap)\b")
_IS_A_START = (",", " is ", " was ", " are ", " were ", " and ", " & ", " or ")
# "... said it would", "... says its margin": the speaker is a firm or a government
_IT_SAID = re.compile(r"\s+(?:said|says|announced|reported)\s+(?:that\s+|on \w+\s+)?(?:its\b|it (?:would|will|plans to|"
                      r"expects to)\s+(?:cut|raise|close|open|hire|buy|sell|acquire|invest|expand|launch|list|merge|"
                      r"resume|recall|build)\b|it (?:had|has) agreed to (?:buy|acquire|sell|merge)\b)")
# a firm's context, with no list of firms: a ticker, its shares, its results, a statement that says "it",
# a spokesperson for it ("Fenwick Ashby (NYSE: FWA)", "Garrison Lowe shares fell", "Marcus Delaney's
# quarterly revenue", "X said in a statement that it", "a spokesperson for X", "At X, we believe");
# a person who said something ("Anna Keller said she would call") has none of these
_FIRM_AFTER = re.compile(
    r"\s*\((?:NYSE|NASDAQ|Nasdaq|LSE|TSX|ASX|AMEX|OTC|Euronext|Xetra|SIX|BIT|EPA|ETR|AMS|BME)\s*:\s*[A-Z][A-Z0-9.]{0,6}\)"
    r"|\s+(?:shares|stock)\s+(?:fell|rose|jumped|slid|slipped|dropped|climbed|gained|tumbled|surged|soared|sank|plunged"
    r"|rallied|were|are|have|closed|opened|traded)\b"
    r"|['’]s\s+(?:(?:first|second|third|fourth)-quarter|quarterly|annual|full-year|half-year|interim)\s+(?:[a-z-]+\s+)?"
    r"(?:revenue|revenues|profit|profits|earnings|results|sales|loss|losses|report|dividend|guidance)\b"
    r"|\s+(?:said|says|confirmed|announced)\s+in\s+(?:a|its)\s+(?:statement|filing|press release|regulatory filing)"
    r"\s+(?:on\s+\w+\s+)?(?:that\s+)?(?:it|its)\b"
    r"|\s+(?:announced|declared|raised|cut|approved)\s+(?:a|an|its)\s+(?:[a-z-]+\s+)?(?:dividend|buyback|share buyback)\b"
    r"|\s+reported\s+(?:record|higher|lower|flat|weaker|stronger)?\s*(?:sales|revenue|revenues|profits?|earnings|results)\b"
    r"|\s+(?:a annoncé|a indiqué|a confirmé|ha annunciato|ha comunicato|ha dichiarato)\s+(?:dans un communiqué|par voie de"
    r" communiqué|in una nota|in un comunicato)\b")
_FIRM_BEFORE_RE = re.compile(
    r"(?:\b(?:shares|stock|shareholders|investors|analysts)\s+(?:of|in|at)|\bspokes(?:person|man|woman)\s+(?:for|at)"
    r"|\brepresentative\s+for|\bporte-parole\s+de|\bportavoce\s+di|\bazioni\s+di|\bactions\s+de)\s+$")
_AT_WE = re.compile(r"(?:^|[.!?\n]\s*)(?:At|Chez|Presso|Bei|Bij|En)\s+$")
# a group noun right after one word: a team, office or branch named after a place, firm or project ("Hi
# Jordan team,", "Thanks Lincoln team!", "Hello Austin crew"); not a person's role ("Tom, team lead")
_GROUP_AFTER = re.compile(r" (?:team|office|crew|squad|branch|staff|folks|Team|Office|Crew|Squad|Branch)\b"
                          r"(?! (?:lead|leads|leader|leaders|member|members|mate|mates|manager|managers)\b)")
# an import statement of code: the word after it is a module ("from kalman import", "import dijkstra")
_IMPORT_BEFORE = re.compile(r"(?:^|\n)[ \t]{0,12}(?:import[ \t]+(?:[\w.]{1,40},[ \t]*){0,3}|from[ \t]+[\w.]{0,40}\.?)$")
_POSSESSIVE_CAP = re.compile(r"['’]s\s+([A-Z][a-z]+)\b")
# an English verb and "a"/"an" before: a product ("is a Russell Hobbs", "won an Oscar")
_A_VERBS = frozenset("""is was it's it’s bought buy buying got get own owns drive drives drove wear wears wore
drink drinks drank order ordered with and use uses used prefer like love try tried won win wins received
""".split())  # noqa: SIM905
# brands written as a possessive given name
_POSSESSIVE_BRANDS = frozenset("""nando wendy denny claire arby chili moe hardee carl dillard levi macy kohl sotheby
harrod kellogg""".split())  # noqa: SIM905


# --- firms and brands named after people, matched as whole runs of words
_FIRM_WORD = re.compile(r"[^\W_]+(?:['’][^\W\d_]+)?")
_FIRM_REACH = 60  # characters read on each side of a finding: bounded, so a text of names stays linear
_FIRM_MAX = 5  # words in the longest entry
_CUE_RULES = frozenset(["person_cue", "person_introduced", "person_title", "person_lowercase_cue", "person_field"])
_OF_FIRM = frozenset("von van of de di da del du bei chez presso bij".split())  # noqa: SIM905
# legal forms and group words, as written (case matters: "se", "sa" in lower case are words)
_LEGAL_FORMS = frozenset("""AG GmbH gGmbH KG KGaA OHG SE Inc Inc. Ltd Ltd. LLC LLP PLC plc Corp Corporation Limited SA
S.A. SAS SARL SpA S.p.A. Srl S.r.l. SL S.L. BV B.V. NV N.V. Group Groep Gruppe Groupe Gruppo Grupo Holding Holdings
Cie""".split())  # noqa: SIM905
_LEGAL_AFTER = re.compile(r"(?:,\s?|\s)(\S{2,8})")


def _firm_key(word: str) -> str:
    """One spelling of a word for the firm list: lower case, no accents, no apostrophes."""
    word = word.lower().replace("'", "").replace("’", "")
    if word.isascii():
        return word
    return "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c))


@functools.cache
def _firm_runs() -> frozenset[tuple[str, ...]]:
    package = __name__.rpartition(".")[0]
    entries = data_lines(package, "firms.txt") + data_lines(package, "things_named_like_people.txt") + list(FIRMS)
    return frozenset(k for k in (tuple(_firm_key(w) for w in _FIRM_WORD.findall(e) if w.lower() != "and") for e in entries)
                     if k)


@functools.cache
def _firm_words() -> frozenset[str]:
    return frozenset(w for run in _firm_runs() for w in run)


def _may_be_firm(text: str, start: int, end: int) -> bool:
    """Cheap test first: every word of the finding is a firm's word, or every word after a particle
    in it is ("Sabine Wolff von Hengeler Mueller"); most findings have a word no firm has."""
    words = _firm_words()
    if text.startswith(("'s", "’s"), end):
        end += 2  # "Lloyd" of "Lloyd's of London"
    inner = [_firm_key(m.group()) for m in _FIRM_WORD.finditer(text, start, end)]
    if all(w in words for w in inner):
        return True
    return any(w in _OF_FIRM and all(v in words for v in inner[k + 1:]) for k, w in enumerate(inner[1:-1], 1))


def _firm_span(text: str, start: int, end: int, f: Finding, g: Gazetteer) -> tuple[int, int] | None:
    """The known firm run (character bounds) that holds the finding, or that a name runs on into after
    a particle ("... von Hengeler Mueller"); None when there is none, or the words around say person."""
    if not _may_be_firm(text, start, end):
        return None
    lo = max(0, start - _FIRM_REACH)
    toks = [(m.start(), m.end(), _firm_key(m.group()))
            for m in _FIRM_WORD.finditer(text, lo, min(len(text), end + _FIRM_REACH))]
    toks = [t for t in toks if t[2] != "and"]
    inside = [k for k, t in enumerate(toks) if t[0] < end and t[1] > start]
    if not inside:
        return None
    runs = _firm_runs()
    k0, k1 = inside[0], inside[-1]
    for a in range(max(0, k0 - _FIRM_MAX + 1), k1 + 1):
        for b in range(max(a + 1, k1 + 1 if a <= k0 else a + 1), min(len(toks), a + _FIRM_MAX) + 1):
            if tuple(t[2] for t in toks[a:b]) not in runs:
                continue
            if a > k0:  # the finding runs on into the firm: "Sabine Wolff von Hengeler Mueller"
                if toks[a - 1][2] in _OF_FIRM and a - 1 > k0:
                    return toks[a - 1][0], toks[b - 1][1]
                continue
            if a > 0 and toks[a - 1][2] in _TITLES and toks[a][2] not in _TITLES \
                    and text[toks[a - 1][1]:toks[a][0]].strip(" .") == "":
                return None  # "Mr. Ford", "Herr Oetker": a person's title before the firm's name
            if b - a == 1 and f.rule in _CUE_RULES and g.is_given(toks[a][2]) \
                    and _cue_before(text[max(0, toks[a][0] - 40):toks[a][0]]) not in (None, *_WEAK_CUES):
                return None  # "Hi Hema,": a greeting before a given name that is also a brand ("and Heinz" is none)
            return toks[a][0], toks[b - 1][1]
    return None


def _legal_form(text: str, start: int, end: int) -> bool:
    """"Beiersdorf AG", "Otto Group": a legal form or group word ends the finding or follows it."""
    words = text[start:end].split()
    if len(words) > 1 and words[-1] in _LEGAL_FORMS:
        return True
    m = _LEGAL_AFTER.match(text, end, end + 10)
    return m is not None and m.group(1).rstrip(",;:)") in _LEGAL_FORMS


def _firm_trim(text: str, f: Finding, g: Gazetteer) -> Finding | None:
    """``f`` without the firm it names or runs on into; None when nothing of a person is left."""
    if f.entity != "PERSON":
        return f
    span = _firm_span(text, f.start, f.end, f, g)
    if span is None:
        return None if _legal_form(text, f.start, f.end) else f
    if span[0] <= f.start:
        return None
    cut = text[f.start:span[0]].rstrip()  # the part before "von <firm>"
    words = _WORD.findall(cut)
    if not words or (len(words) == 1 and f.rule != "person_title" and not g.is_given(words[0].lower())):
        return None  # "Rechnung von Aldi": a noun and a firm, no person ("Frau Wolff von ..." keeps "Wolff")
    return dataclasses.replace(f, end=f.start + len(cut))


def _street_trim(text: str, f: Finding) -> Finding | None:
    """``f`` without the street that a run of words ran on into ("Mario Rossi" of "Mario Rossi Viale
    Monza"); None when one word is left before the street: a firm and its address ("Esselunga Viale Piave")."""
    if f.entity != "PERSON":
        return f
    words = list(_WORD.finditer(text, f.start, f.end))
    cut = next((k for k, m in enumerate(words[1:-1], 1) if m.group().lower() in _STREET_INSIDE), None)
    if cut is None:
        return f
    return dataclasses.replace(f, end=words[cut - 1].end()) if cut >= 2 else None


def drop_things(text: str, found: list[Finding], g: Gazetteer, things: set[str] | None = None) -> list[Finding]:
    """``found`` without the PERSON findings that the words around them show to be things; ``things``
    holds the words of capitalised runs the rules already took for things (they are things in the
    whole text: "the Douglas Peucker simplification ... Ramer Douglas Peucker")."""
    things = set() if things is None else things  # and here the words of findings a noun after them shows to be things
    trimmed = [t for t in (_firm_trim(text, f, g) for f in found) if t is not None]
    trimmed = [t for t in (_street_trim(text, f) for f in trimmed) if t is not None]
    cells = csv_thing_cells(text) if trimmed else []
    starts = [a for a, _ in cells]

    def in_thing_cell(f: Finding) -> bool:
        k = bisect.bisect_right(starts, f.start) - 1
        return k >= 0 and f.end <= cells[k][1]

    kept = [f for f in trimmed if f.entity != "PERSON" or not (in_thing_cell(f) or thing_key_before(text, f.start)
                                                               or _is_thing(text, f.start, f.end, g, things))]
    if not things or not kept:
        return kept

    def thing_words(f: Finding) -> bool:
        # the finding and the capitalised words right after it: most of them are the thing's
        m = _CAPITALISED.match(text, f.end)
        words = _WORD.findall(text[f.start:f.end]) + (_WORD.findall(m.group()) if m is not None else [])
        return 2 * sum(w.lower() in things for w in words) > len(words)

    return [f for f in kept if f.entity != "PERSON" or f.rule == "person_title" or not thing_words(f)]


def noun_after(text: str, pos: int) -> bool:
    """A thing noun right after ``pos``, or an eponym's noun after a possessive there."""
    m = _NEXT_WORDS.match(text, pos, pos + 40)
    if m is None:
        return False
    nouns = _EPONYM_NOUNS if m.group(1) else _THING_NOUNS
    word = m.group(2)
    if word[:1].isupper() and word[1:].islower() and not m.group(1):
        low = word.lower()  # a capitalised noun (German, or a product's title case): "Heidi Klum Parfum"
        return low in nouns and not gazetteer().is_given(low)
    return word in nouns or (m.group(3) is not None and f"{word} {m.group(3)}" in nouns)


def _is_thing(text: str, start: int, end: int, g: Gazetteer, things: set[str]) -> bool:
    words = [w.lower() for w in _WORD.findall(text[start:end])]
    core = [w for w in words if w not in _PARTICLES]
    if not core or all(g.is_not_name(w) for w in core):
        return bool(core)
    if words[0] in _ARTICLE_FIRST and len(words) > 1:
        return True  # "Les Achats", "Het Bestuur"
    if len(core) > 1 and core[-1].endswith(_STREET_SUFFIXES) and len(core[-1]) >= 7 and not g.is_surname(core[-1]):
        return True  # "Jan Pieterszoon Coenstraat": a street named after a person, its word glued on
    if len(core) > 1 and core[-1] in _THING_NOUNS and not g.is_given(core[-1]) and not g.is_surname(core[-1]):
        return True  # "Boris Becker Parfüm": the run took a capitalised noun (German, a title-case product)
    if core[0] in _THING_NOUNS and len(core) > 1 and _CAPITALISED_BEFORE.search(text, max(0, start - 30), start):
        return True  # "Tea Blend" of "Summer Rose Tea Blend": a product's title-case name, a noun first
    if (core[0] in _DEDICATION or core[0] in _FIRM_BEFORE) and len(core) > 1:
        return True  # "Fort William", "Storm Ciara", "Flughafen Franz Josef Strauß", "Kanzlei Hengeler Mueller"
    if len(core) > 1 and core[0].endswith(_PREMISES_SUFFIXES) and len(core[0]) >= 9 and not g.is_name(core[0]):
        return True  # "Paketzentrum Frankfurt": a premises word glued into a compound
    if len(words) == 1 and _GROUP_AFTER.match(text, end, end + 24) is not None:
        return True  # "Hi Jordan team,": the team of a place or firm
    m = _IMPORT_BEFORE.search(text, max(0, start - 60), start)
    if m is not None and (m.group().lstrip().startswith("import") or text.startswith(" import ", end)):
        return True  # "from kalman import KalmanFilter", "import dijkstra": a module in code
    before = text[max(0, start - 40):start]
    if before[-1:].isspace():
        prev = [w.rsplit("'", 1)[-1].rsplit("’", 1)[-1].lstrip("\"“(") for w in before.lower().split()[-4:]]
        if prev and (prev[-1] in _RIGHT_BEFORE
                     or (len(prev) >= 2 and prev[-1] in _OF and (prev[-2] in _OF_WORDS or prev[-2] in _DEDICATION))
                     or (len(prev) >= 3 and prev[-1] in ("la", "le") and prev[-2] in _OF and prev[-3] in _OF_WORDS)):
            return True  # "estadio Santiago Bernabéu", "syndrome de Gilles de la Tourette", "Estación de Atocha"
        if len(prev) >= 2 and prev[-1] in ("a", "an") and (prev[-2] in _A_VERBS or prev[-3:-1] == ["nominated", "for"]):
            return True  # "our kettle is a Russell Hobbs"
    more = _CAPITALISED.match(text, end)  # "Frank Lloyd" of "Frank Lloyd Wright furniture"
    if noun_after(text, end) or (more is not None and more.end() > end and noun_after(text, more.end())):
        things.update(words)
        if more is not None:
            things.update(w.lower() for w in _WORD.findall(more.group()))
        return True
    after = text[end:end + 60]
    if after.startswith(_IS_A_START) and _IS_A_THING.match(after) is not None:
        return True
    if after.startswith(" ") and _IT_SAID.match(after) is not None:
        return True
    if _FIRM_AFTER.match(after) is not None or _FIRM_BEFORE_RE.search(before) is not None:
        return True  # a firm: its ticker, shares, results, statement or spokesperson
    if after.startswith((", we ", ", our ", ", nous ", ", noi ")) and _AT_WE.search(before) is not None:
        return True  # "At Winslow Carter, we believe ...": the speaker works there, it is a firm
    if after.startswith(("'s", "’s")):
        m = _POSSESSIVE_CAP.match(after)
        if m is not None and g.is_ordinary(m.group(1).lower()) and not g.is_given(m.group(1).lower()):
            return True  # "Halley's Comet", "Murphy's Law"
        return len(core) == 1 and core[0] in _POSSESSIVE_BRANDS
    return False
