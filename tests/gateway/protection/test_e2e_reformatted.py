"""Issue 16, 4: values reformatted out of the patterns' reach, and topic cues in five more languages,
through a real ``kvfence gateway`` in front of recording backends (the fixtures of
``test_e2e_request_allowlist``: class ``public`` goes to ``shared``, the classes above it to ``dedicated``)."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import FakeBackend, Gateway
from tests.gateway.protection.test_e2e_request_allowlist import (  # noqa: F401  (the fixtures)
    _clear,
    dedicated,
    forwarded,
    gateway,
    post,
    shared,
)

CARD = "4111 1111 1111 1111"
SPELLED = {"0": "zero", "1": "one", "4": "four"}

# (what the user writes, the bare digits or letters that must not leave the gateway)
PII = {
    "card_dotted": ("pay with 4111.1111.1111.1111 please", "4111"),
    "card_spaced_chars": ("pay with " + " ".join(CARD.replace(" ", "")) + " please", "4 1 1 1 1 1"),
    "card_in_words": ("pay with " + " ".join(SPELLED[d] for d in CARD.replace(" ", "")) + " please", "four one one"),
    "card_words_dashed": ("card " + "-".join(SPELLED[d] for d in CARD.replace(" ", "")), "four-one"),
    "iban_lower": ("wire it to de89 3704 0044 0532 0130 00 today", "3704 0044"),
    "iban_lower_tight": ("iban gb29nwbk60161331926819 thanks", "60161331926819"),
    "email_spaced": ("write to jane.doe @ example . com soon", "jane.doe @"),
    "email_spaced_at": ("write to jane.doe @example.com soon", "jane.doe @example"),
    "email_chars": ("write to " + " ".join("jane@example.com") + " soon", "j a n e @"),
    # issue 16, 3: digits as words in five more languages, words mixed with digits, look-alike letters
    **{f"card_in_words_{lang}": (f"{lead} " + " ".join(names[int(d)] for d in CARD.replace(" ", "")) + " ok",
                                 " ".join(names[int(d)] for d in "4111"))
       for lang, lead, names in [
           ("de", "Karte", ["null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]),
           ("fr", "carte", ["zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf"]),
           ("es", "tarjeta", ["cero", "uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve"]),
           ("it", "carta", ["zero", "uno", "due", "tre", "quattro", "cinque", "sei", "sette", "otto", "nove"]),
           ("nl", "kaart", ["nul", "een", "twee", "drie", "vier", "vijf", "zes", "zeven", "acht", "negen"])]},
    "card_words_and_digits": ("pay with 4 one 1 one 1 one 1 one 1 one 1 one 1 one 1 one", "4 one 1 one"),
    "card_letter_digits": ("pay with 4lll 1lI1 1111 1111 please", "4lll 1lI1"),
    "iban_letter_o": ("wire it to DE89 37O4 OO44 O532 O13O OO today", "37O4 OO44"),
}


@pytest.mark.parametrize("case", sorted(PII))
def test_reformatted_personal_data_does_not_leave(gateway: Gateway, shared: FakeBackend, dedicated: FakeBackend,  # noqa: F811
                                                  case: str) -> None:
    text, bare = PII[case]
    answer = post(gateway, {"messages": [{"role": "user", "content": text}]})
    assert answer.status_code == 200, answer.text
    sent = "".join(forwarded(shared, dedicated))
    assert bare not in sent, f"{case}: forwarded as written: {sent}"


@pytest.mark.parametrize("text", ["my ssn is 536.22.8741", "ssn 5 3 6 2 2 8 7 4 1", "SSN: 5 3 6 - 2 2 - 8 7 4 1",
                                  "ssn 536 . 22 . 8741"])
def test_a_reformatted_ssn_raises_the_class(gateway: Gateway, shared: FakeBackend, dedicated: FakeBackend,  # noqa: F811
                                            text: str) -> None:
    answer = post(gateway, {"messages": [{"role": "user", "content": text}]})
    assert answer.status_code in (200, 400), answer.text
    assert shared.received() == [], f"{text!r} stayed in class public"


MEDICAL = {
    "de": "Der Patient wurde mit Diabetes diagnostiziert und bekommt neue Medikamente.",
    "fr": "Le patient a reçu un diagnostic de diabète ; voici son ordonnance et la posologie.",
    "es": "La paciente tiene síntomas de depresión y su historial médico indica quimioterapia.",
    "it": "Il paziente è stato ricoverato in ospedale, diagnosi di diabete e nuovi farmaci.",
    "nl": "De patiënt ligt in het ziekenhuis met kanker en krijgt chemotherapie.",
    "en": "The patient was diagnosed with diabetes and needs new medication.",
}


@pytest.mark.parametrize("language", sorted(MEDICAL))
def test_medical_text_in_six_languages_leaves_class_public(
        gateway: Gateway, shared: FakeBackend, dedicated: FakeBackend, language: str) -> None:  # noqa: F811
    assert post(gateway, {"messages": [{"role": "user", "content": MEDICAL[language]}]}).status_code == 200
    assert shared.received() == [] and len(dedicated.received()) == 1


def test_ordinary_numbers_and_text_stay_public(gateway: Gateway, shared: FakeBackend) -> None:  # noqa: F811
    text = ("Version 1.2.3 ships on 12.03.2024; the server 10.20.30.40 costs 1.50 per hour. I a m fine. "
            "We boarded the plane at four, one of us had two bags.")
    assert post(gateway, {"messages": [{"role": "user", "content": text}]}).status_code == 200
    assert shared.received()[-1]["body"]["messages"][-1]["content"] == text
