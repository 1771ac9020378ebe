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
- its words are, elsewhere in the same text, a thing by the rules above ("the Douglas Peucker
  simplification", then "Ramer Douglas Peucker").
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.findings import Finding
from kvfence.gateway.protection.detect.recognizers.gazetteer import Gazetteer
from kvfence.gateway.protection.detect.recognizers.person_words import _PARTICLES, _WORD

__all__ = ["drop_things"]

# A capitalised first word, or a word right before: the run after it is named after a person.
_DEDICATION = frozenset("""
fort port mount mt lake cape bay san santa santo são sankt saint ste hurricane storm typhoon cyclone
tropical ouragan tempête huracán tormenta uragano tempesta orkaan sturm airport aeropuerto aeroporto
aéroport flughafen luchthaven stadium stadio estadio stade stadion station gare stazione estación bahnhof
hauptbahnhof hospital ospedale hôpital krankenhaus ziekenhuis klinikum policlinico lycée liceo colegio
gymnasium collège escuela scuola école university universität université università universidad
universiteit fondation fundación fondazione stiftung stichting foundation premio prix preis prijs prize
award medal teatro théâtre theater theatre museo musée museum syndrome sindrome síndrome syndrom syndroom
disease maladie enfermedad morbo malattia krankheit ziekte sclerosis
""".split())  # noqa: SIM905
# a firm's word right before: "les laboratoires Pierre Fabre", "die Firma Otto", "el grupo ..."
_FIRM_BEFORE = frozenset("""
laboratoires laboratorios laboratori laboratorium labs groupe gruppo grupo gruppe société sociedad società
empresa azienda bedrijf cabinet bufete kanzlei bodegas bodega maison casa verlag editorial éditions edizioni
uitgeverij brand label firm retailer chain carmaker winery distillery brewery
""".split())  # noqa: SIM905
# an illness or a prize may name its person after a preposition: "maladie de Parkinson", "ziekte van Lyme"
_OF_WORDS = "syndrome|sindrome|síndrome|syndrom|syndroom|disease|maladie|enfermedad|morbo|malattia|krankheit|ziekte" \
    "|sclerosis|prix|premio|preis|prijs"
_DEDICATED_BEFORE = re.compile(
    r"\b(?:(?:" + "|".join(sorted(_DEDICATION | _FIRM_BEFORE, key=len, reverse=True)) + r")"
    r"|(?:" + _OF_WORDS + r")\s+(?:de|di|du|des|del|della|van|von|of)(?:\s+(?:la|le|l'))?)\s+$", re.I)
# a noun right after the name (lower case; no word that is also a verb here or in another of the six
# languages, such as "lecture", "range", "test", "watches"): the name is a brand, a product or an eponym
_THING_NOUNS = (
    r"disease|syndrome|palsy|surgery|nurses|hospice|wallpaper|candles|mascara|serums|perfumes?|"
    r"fragrances?|lipsticks?|cosmetics|cabernet|merlot|chardonnay|pinot|shiraz|ros[ée]s?|whisk(?:e)?y|bourbon|"
    r"vodka|kettles?|toasters?|blenders?|printers?|vacuums?|appliances|dealers?|dealership|outlets?|"
    r"boutiques?|handbags?|sneakers|jeans|dresses|franchise|foundations|models|escape room|algorithm|"
    r"simplification|decomposition|transform|filter|distribution|coefficient|polynomials?|splines|"
    r"tea|pizza|pasta|salad|sauce|sponge|cake|pie|cocktails?|terriers?|spaniels?|retrievers?|charity|beers?|"
    r"lager|cider|boats|yachts|sandwiches|magazine|pharmacy|pharmacies|restaurants|cookware|cafe|café|bakery|"
    r"bread|recipes|grill|burgers|coffee|chocolates?|cookies|biscuits|ice cream|shampoo|guitars|pianos|"
    r"furniture|sofas|mattress(?:es)?|bikes|motorcycles|tractors|tyres|tires|lenses|cameras|headphones|"
    r"laptops|collection|underwear|swimwear|eyewear|sunglasses|knives|cutlery|stationery|toys")
# an eponym's noun after a possessive ("Bell's palsy", "Ohm's law"); "Priya's test" stays a person
_EPONYM_NOUNS = (
    r"disease|syndrome|palsy|chorea|sarcoma|lymphoma|law|theorem|lemma|conjecture|principle|"
    r"paradox|equation|constant|algorithm|comet|razor")
_THING_AFTER = re.compile(r"^\s+(?:" + _THING_NOUNS + r")\b")
_EPONYM_AFTER = re.compile(r"^['’]s\s+(?:" + _EPONYM_NOUNS + r")\b")
# the same anywhere in the text, with the capitalised run before: its words are a thing in the whole
# text ("the Douglas Peucker simplification ... Ramer Douglas Peucker in the literature")
_THING_RUN = re.compile(r"((?:[A-Z][^\W\d_]+[ -]){1,4})(?:" + _THING_NOUNS + r")\b|((?:[A-Z][^\W\d_]+[ -]){0,3}"
                        r"[A-Z][^\W\d_]+)['’]s\s+(?:" + _EPONYM_NOUNS + r")\b")
_CAPITALISED = re.compile(r"(?: [A-Z][^\W\d_]+)*")
# after a closing or at a line start in French, Spanish, Italian, Dutch, German: an article is no name
_ARTICLE_FIRST = frozenset("les los las het gli die das".split())  # noqa: SIM905
# "..., a cocktail", "... is the highest mountain in Britain", "... are the two beers on tap": the
# sentence says what the run is, and it is a thing
_IS_A_THING = re.compile(
    r"^(?:\s+(?:and|&|or)\s+[A-Z][^\W\d_]*(?:\s+[A-Z][^\W\d_]*)*)?"
    r"(?:,\s+|\s+(?:is|was|are|were)\s+)(?:a|an|the|one of the|two|three|our|their)\s+(?:[a-z]+\s+){0,2}"
    r"(?:mountain|peak|hill|river|lake|island|capital|city|town|village|county|province|region|district|suburb|"
    r"airport|station|stadium|brand|brands|company|firm|bank|retailer|chain|label|cocktail|cocktails|drink|"
    r"drinks|dish|beer|beers|wine|whisky|restaurant|hotel|charity|band|ship|software|library|framework|"
    r"language|tool|app|product|products|car|cars|search engine|engine|website|site|platform|assistants?|"
    r"chatbot|bot)"
    r"(?=\s*(?:[.,;:!?)]|$)|\s+(?:in|of|on|at|for|with|from|near|by|and|that|which|since)\b)"
    r"|^(?:\s+(?:and|&|or)\s+[A-Z][^\W\d_]*(?:\s+[A-Z][^\W\d_]*)*)?\s+(?:is|are)\s+(?:on the (?:[a-z]+\s+)?menu|on tap)\b")
# "... said it would", "... says its margin": the speaker is a firm or a government
_IT_SAID = re.compile(r"^\s+(?:said|says|announced|reported)\s+(?:that\s+|on \w+\s+)?(?:its\b|it (?:would|will|plans to|"
                      r"expects to)\s+(?:cut|raise|close|open|hire|buy|sell|acquire|invest|expand|launch|list|merge|"
                      r"resume|recall|build)\b)")
_POSSESSIVE_CAP = re.compile(r"^['’]s\s+([A-Z][a-z]+)\b")
_A_BEFORE = re.compile(
    r"\b(?:is|was|it's|it’s|bought|buy|buying|got|get|own|owns|drive|drives|drove|wear|wears|wore|drink|"
    r"drinks|drank|order|ordered|with|and|use|uses|used|prefer|like|love|try|tried|won|win|wins|"
    r"nominated for|received)\s+an?\s+$", re.I)
# brands written as a possessive given name
_POSSESSIVE_BRANDS = frozenset("nando wendy denny claire arby chili moe hardee carl dillard levi macy kohl sotheby harrod kellogg".split())  # noqa: SIM905


def drop_things(text: str, found: list[Finding], g: Gazetteer) -> list[Finding]:
    """``found`` without the PERSON findings that the words around them show to be things."""
    kept = [f for f in found if f.entity != "PERSON" or not _is_thing(text, f.start, f.end, g)]
    if not kept or _THING_RUN.search(text) is None:
        return kept
    things = {w.lower() for m in _THING_RUN.finditer(text) for w in _WORD.findall(m.group(1) or m.group(2))}

    def thing_words(f: Finding) -> bool:
        # the finding and the capitalised words right after it: most of them are the thing's
        m = _CAPITALISED.match(text, f.end)
        words = _WORD.findall(text[f.start:f.end]) + (_WORD.findall(m.group()) if m is not None else [])
        return 2 * sum(w.lower() in things for w in words) > len(words)

    return [f for f in kept if f.entity != "PERSON" or f.rule == "person_title" or not thing_words(f)]


def _is_thing(text: str, start: int, end: int, g: Gazetteer) -> bool:
    words = [w.lower() for w in _WORD.findall(text[start:end])]
    core = [w for w in words if w not in _PARTICLES]
    if not core or all(g.is_not_name(w) for w in core):
        return bool(core)
    if words[0] in _ARTICLE_FIRST and len(words) > 1:
        return True  # "Les Achats", "Het Bestuur"
    if core[0] in _DEDICATION and len(core) > 1:
        return True  # "Fort William", "Storm Ciara", "Flughafen Franz Josef Strauß"
    before = text[max(0, start - 40):start]
    if _DEDICATED_BEFORE.search(before) is not None:
        return True
    after = text[end:end + 40]
    more = _CAPITALISED.match(text, end)  # "Frank Lloyd" of "Frank Lloyd Wright houses"
    later = text[more.end():more.end() + 40] if more is not None else after
    if _THING_AFTER.match(after) is not None or _EPONYM_AFTER.match(after) is not None \
            or _THING_AFTER.match(later) is not None or _IT_SAID.match(after) is not None \
            or _IS_A_THING.match(text[end:end + 60]) is not None:
        return True
    m = _POSSESSIVE_CAP.match(after)
    if m is not None:
        low = m.group(1).lower()
        if g.is_ordinary(low) and not g.is_given(low):
            return True  # "Halley's Comet", "Murphy's Law"
    if _A_BEFORE.search(before) is not None:
        return True
    return len(core) == 1 and core[0] in _POSSESSIVE_BRANDS and after.startswith(("'s", "’s"))
