"""Sensitive topics that raise a request's data class without marking any span.

Health data is the case DESIGN.md names ("HR, health and personnel data to on-prem"): a diagnosis
is not a pattern like an e-mail address, and replacing it would leave the model nothing to answer
about, so it is not pseudonymised: it only moves the request to a class whose backends may see it.
A topic needs at least two distinct cues, because single words ("patient", "therapy") are common
outside medicine. Cues are listed in English, German, French, Spanish, Italian and Dutch. The issue's deployment table also names board, M&A, investor and legal material
(``board``: opt in with ``raise_on_topics: {board: confidential}``).

Cues are matched on each text as sent and on its skeleton (``normalise.skeleton``: escapes decoded,
invisible characters gone, Cyrillic / Greek look-alike letters made Latin), so a tenant cannot keep
its request in a lower class by writing "bоard" with a Cyrillic "о" or "diagno\u00adsis"; a topic
only ever raises the class, so matching more text can only make routing stricter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kvfence.gateway.protection.detect.normalise import skeleton

__all__ = ["TOPICS", "TOPIC_LANGUAGES", "detect_topics"]

# English cues, then German, French, Spanish, Italian and Dutch (lower case, accents as written and
# without: a cue is matched on the text as sent and on its skeleton).
_HEALTH = {
    "en": r"diagnos(?:ed|is|es)|prescri(?:bed|ption)|medication|dosage|symptoms?|chemotherapy|oncolog\w*"
          r"|icd-?10|medical (?:record|history|condition|leave)|patient|clinic(?:al)?|hospitali[sz]ed|surgery"
          r"|blood (?:test|pressure|sugar)|lab results|mental health|psychiatr\w*|depression|anxiety disorder"
          r"|diabetes|cancer|hiv|pregnan\w*|allerg(?:y|ic)|sick (?:leave|note)|therapist|mg/dl|mri scan",
    "de": r"diagnose|diagnostiziert|medikament(?:e|en)?|dosierung|symptome?|chemotherapie|patient(?:in|en)?"
          r"|krankenhaus|klinik(?:um)?|blutdruck|blutzucker|laborwerte|psychiater(?:in)?|depressionen?|krebs"
          r"|schwanger(?:schaft)?|allergie|krankschreibung|arbeitsunf[aä]hig\w*|therapeut(?:in)?|befund"
          r"|krankenakte|krankengeschichte",
    "fr": r"diagnostic|diagnostiqu[ée]e?s?|ordonnance|m[ée]dicaments?|posologie|sympt[ôo]mes?|chimioth[ée]rapie"
          r"|h[ôo]pital|hospitalis[ée]e?|tension art[ée]rielle|glyc[ée]mie|psychiatr\w*|d[ée]pression|diab[èe]te"
          r"|enceinte|grossesse|arr[êe]t maladie|th[ée]rapeute|dossier m[ée]dical|ant[ée]c[ée]dents m[ée]dicaux",
    "es": r"diagn[óo]stico|diagnosticad[oa]|receta m[ée]dica|medicamentos?|s[íi]ntomas?|quimioterapia|paciente"
          r"|hospitalizad[oa]|presi[óo]n arterial|glucosa|psiquiatr\w*|depresi[óo]n|c[áa]ncer|embarazad[oa]"
          r"|embarazo|alergia|baja m[ée]dica|terapeuta|historial (?:m[ée]dico|cl[íi]nico)",
    "it": r"diagnosi|diagnosticat[oa]|ricetta medica|farmac[oi]|dosaggio|sintomi|chemioterapia|paziente"
          r"|ospedale|ricoverat[oa]|pressione arteriosa|glicemia|psichiatr\w*|depressione|diabete|cancro"
          r"|tumore|incinta|gravidanza|allergia|certificato medico|terapeuta|cartella clinica",
    "nl": r"gediagnosticeerd|diagnose|medicijnen|medicatie|dosering|symptomen|chemotherapie|pati[ëe]nt(?:en)?"
          r"|ziekenhuis|bloeddruk|bloedsuiker|psychiater|depressie|kanker|zwanger(?:schap)?|allergie"
          r"|ziekmelding|ziekteverlof|therapeut|medisch dossier",
}
_HR = {
    "en": r"performance review|disciplinary|termination|dismissal|salary|payroll|severance|grievance"
          r"|background check|sick leave|parental leave|layoffs?|redundanc(?:y|ies)|personnel file"
          r"|employee id|probation period|harassment complaint",
    "de": r"k[üu]ndigung|abmahnung|gehalt|lohnabrechnung|gehaltsabrechnung|abfindung|personalakte"
          r"|mitarbeitergespr[äa]ch|leistungsbeurteilung|elternzeit|probezeit|entlassung",
    "fr": r"licenciement|salaire|fiche de paie|bulletin de salaire|indemnit[ée] de d[ée]part|dossier du personnel"
          r"|entretien annuel|p[ée]riode d'essai|cong[ée] parental|mesure disciplinaire|rupture conventionnelle",
    "es": r"despido|salario|n[óo]mina|indemnizaci[óo]n|expediente (?:personal|disciplinario)"
          r"|evaluaci[óo]n del? desempe[ñn]o|periodo de prueba|baja por maternidad|sanci[óo]n disciplinaria",
    "it": r"licenziamento|stipendio|busta paga|buonuscita|fascicolo personale|valutazione delle prestazioni"
          r"|periodo di prova|congedo parentale|provvedimento disciplinare",
    "nl": r"ontslag|salaris|loonstrook|ontslagvergoeding|personeelsdossier|functioneringsgesprek"
          r"|beoordelingsgesprek|proeftijd|ouderschapsverlof",
}
_BOARD = {
    "en": r"board (?:meeting|minutes|resolution|of directors|deck)|m&a|merger|acquisition (?:of|target|talks|deal)"
          r"|takeover|due diligence|term sheet|letter of intent|tender offer|investor (?:update|relations|letter)"
          r"|material non-public|insider (?:information|trading)|attorney-client|privileged (?:and|&) confidential"
          r"|legal hold|shareholder agreement|cap table",
    "de": r"vorstandssitzung|aufsichtsrat(?:ssitzung)?|[üu]bernahme|fusion|absichtserkl[äa]rung|insiderinformation(?:en)?",
    "fr": r"conseil d'administration|fusion|rachat|lettre d'intention|information privil[ée]gi[ée]e|offre publique",
    "es": r"consejo de administraci[óo]n|fusi[óo]n|adquisici[óo]n de|carta de intenciones|informaci[óo]n privilegiada",
    "it": r"consiglio di amministrazione|fusione|acquisizione di|lettera d'intenti|informazione privilegiata",
    "nl": r"raad van (?:bestuur|commissarissen)|fusie|overname|intentieverklaring|voorwetenschap",
}


def _cues(by_language: dict[str, str]) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(by_language.values()) + r")\b")


TOPICS: dict[str, re.Pattern[str]] = {"health": _cues(_HEALTH), "hr": _cues(_HR), "board": _cues(_BOARD)}
TOPIC_LANGUAGES = ("en", "de", "fr", "es", "it", "nl")


def detect_topics(texts: Iterable[str], min_cues: int = 2) -> set[str]:
    """Topics with at least ``min_cues`` distinct cue words across ``texts``."""
    found: set[str] = set()
    lowered = []
    for text in texts:
        lowered.append(text.lower())
        folded = skeleton(text)
        if folded != text:
            lowered.append(folded.lower())
    for topic, pattern in TOPICS.items():
        cues: set[str] = set()
        for text in lowered:
            cues.update(match.group(0) for match in pattern.finditer(text))
            if len(cues) >= min_cues:
                found.add(topic)
                break
    return found
