"""Postal addresses of more countries: each form is found whole (flat line and country included),
street-like phrases that are no address are not."""

from __future__ import annotations

import pytest

from kvfence.gateway.protection.detect.detector import build_detector

DETECTOR = build_detector(use_presidio=False)


def addresses(text: str) -> list[str]:
    return [text[f.start:f.end] for f in DETECTOR.scan(text) if f.entity == "POSTAL_ADDRESS"]


POSITIVES = [
    ("CA", "Clinic: 1450 Rue Sherbrooke Ouest, Montréal, QC H3G 1K4 (2nd floor)", "1450 Rue Sherbrooke Ouest, Montréal, QC H3G 1K4"),
    ("CA", "mail 88 King St W, Suite 300\nToronto, ON M5H 1A1\nCanada\nthanks", "88 King St W, Suite 300\nToronto, ON M5H 1A1\nCanada"),
    ("CA box", "Send the cheque to PO Box 3381, Halifax, NS B3J 3J5.", "PO Box 3381, Halifax, NS B3J 3J5"),
    ("AU", "Deliver to Unit 7, 88 Pitt Street, Sydney NSW 2000, today", "Unit 7, 88 Pitt Street, Sydney NSW 2000"),
    ("AU", "at 3/19 Ocean Parade, Surfers Paradise QLD 4217", "3/19 Ocean Parade, Surfers Paradise QLD 4217"),
    ("IE", "Registered: 47 Harbour Street, Dun Laoghaire, Co. Dublin, A96 K2X4", "47 Harbour Street, Dun Laoghaire, Co. Dublin, A96 K2X4"),
    ("UK flat", "Our office: Flat 2, 14 Kingsley Road, Bristol BS6 5AB", "Flat 2, 14 Kingsley Road, Bristol BS6 5AB"),
    ("ES", "Dirección: Calle de Alcalá 45, 3º B, 28014 Madrid", "Calle de Alcalá 45, 3º B, 28014 Madrid"),
    ("ES", "Avda. de la Constitución 12, 41004 Sevilla (Sevilla)", "Avda. de la Constitución 12, 41004 Sevilla (Sevilla)"),
    ("IT", "Indirizzo: Via Garibaldi 23, 20121 Milano MI", "Via Garibaldi 23, 20121 Milano MI"),
    ("IT", "Corso Vittorio Emanuele 15\n10123 Torino\nItalia", "Corso Vittorio Emanuele 15\n10123 Torino\nItalia"),
    ("PT", "Rua Augusta 100, 1100-053 Lisboa", "Rua Augusta 100, 1100-053 Lisboa"),
    ("NL", "Adres: Keizersgracht 174, 1016 DW Amsterdam", "Keizersgracht 174, 1016 DW Amsterdam"),
    ("BE", "Kerkstraat 12 bus 3, 9000 Gent", "Kerkstraat 12 bus 3, 9000 Gent"),
    ("AT", "Wohnhaft in Mariahilfer Straße 101/3/12, 1060 Wien", "Mariahilfer Straße 101/3/12, 1060 Wien"),
    ("CH", "Büro: Bahnhofstrasse 21, CH-8001 Zürich", "Bahnhofstrasse 21, CH-8001 Zürich"),
    ("PL", "adres: ul. Marszałkowska 10/12, 00-590 Warszawa", "ul. Marszałkowska 10/12, 00-590 Warszawa"),
    ("SE", "Drottninggatan 5, 111 51 Stockholm", "Drottninggatan 5, 111 51 Stockholm"),
    # issue #19 leftovers: Japan, India, Brazil
    ("JP", "Ship to 1-1-1 Marunouchi, Chiyoda-ku, Tokyo 100-0005, Japan by Friday.",
     "1-1-1 Marunouchi, Chiyoda-ku, Tokyo 100-0005, Japan"),
    ("JP", "Office: Umeda 2-4-9, Kita-ku, Osaka 530-0001", "Umeda 2-4-9, Kita-ku, Osaka 530-0001"),
    ("JP script", "住所：〒100-0005 東京都千代田区丸の内1-1-1 です", "〒100-0005 東京都千代田区丸の内1-1-1"),
    ("IN", "Deliver to Flat 302, Sunrise Apartments, 14th Cross, Indiranagar, Bengaluru, Karnataka 560038 please",
     "Flat 302, Sunrise Apartments, 14th Cross, Indiranagar, Bengaluru, Karnataka 560038"),
    ("IN", "Address: No. 12, MG Road, Bangalore - 560001", "No. 12, MG Road, Bangalore - 560001"),
    ("IN", "B-12, Vasant Vihar, New Delhi - 110057, India", "B-12, Vasant Vihar, New Delhi - 110057, India"),
    ("IN", "House No. 45, Sector 17, Chandigarh 160017", "House No. 45, Sector 17, Chandigarh 160017"),
    ("IN", "45, Park Street\nKolkata 700016", "45, Park Street\nKolkata 700016"),
    ("BR", "Entregar na Rua das Flores, 123 - Apto 45, Jardim Paulista, São Paulo - SP, 01452-000.",
     "Rua das Flores, 123 - Apto 45, Jardim Paulista, São Paulo - SP, 01452-000"),
    ("BR", "Av. Paulista, 1578, Bela Vista, São Paulo/SP CEP 01310-200", "Av. Paulista, 1578, Bela Vista, São Paulo/SP CEP 01310-200"),
    ("BR", "Rua Voluntários da Pátria, 45, Botafogo, Rio de Janeiro - RJ, 22270-000",
     "Rua Voluntários da Pátria, 45, Botafogo, Rio de Janeiro - RJ, 22270-000"),
]


@pytest.mark.parametrize(("country", "text", "expected"), POSITIVES, ids=[p[0] + ":" + p[2][:20] for p in POSITIVES])
def test_each_country_form_is_found_whole(country: str, text: str, expected: str) -> None:
    assert addresses(text) == [expected]


NEGATIVES = [
    "Main Street Capital opened an office in room 12B next to Building 4, Floor 2.",
    "Unit 3 of the course covers loops; chapter 12, 2024 edition.",
    "Via Roma 10 is closed for works.",
    "We moved 15 items, 28014 remain; Corso 3 starts in 2025.",
    "Order 12, 88 Pitt items shipped",
    "on Wall Street and in Canary Wharf",
    "Kapitel 3, 10000 Exemplare gedruckt.",
    "order 560038 shipped; ref 100-0005 and code 01452-000",
    "Release 2-4-9 of Osaka 530-0001 tests",
    "Chapter 3, Section 12, Mumbai 400001 copies were printed",
    "We moved 12, 14 Items, Sector 4 to 560001 units",
]


@pytest.mark.parametrize("text", NEGATIVES)
def test_street_like_phrases_are_no_address(text: str) -> None:
    assert addresses(text) == []
