"""POSTAL_ADDRESS by class of form (issue #19, A1): the lines around the street, CSV rows and line
breaks, post-office boxes of every country, house numbers with their parts, New Zealand, Singapore,
Mexico and the Nordic countries; each found whole and with its bounds right. Things that look
like addresses are not."""

from __future__ import annotations

import pytest

from kvfence.gateway.protection.detect.detector import build_detector

DETECTOR = build_detector(use_presidio=False)


def addresses(text: str) -> list[str]:
    return [text[f.start:f.end] for f in DETECTOR.scan(text) if f.entity == "POSTAL_ADDRESS"]


POSITIVES = [
    # the unit, floor and building lines before the street belong to it
    ("unit number", "Collect from Unit 12, Meadow Business Park, Swindon SN5 7XF today",
     "Unit 12, Meadow Business Park, Swindon SN5 7XF"),
    ("floor", "Reception: 3rd Floor, 22 Bishopsgate Street, London EC2N 4BQ", "3rd Floor, 22 Bishopsgate Street, London EC2N 4BQ"),
    ("building", "Send to Kestrel House, 9 Mill Road, Cambridge CB1 2AD", "Kestrel House, 9 Mill Road, Cambridge CB1 2AD"),
    ("flat and building", "Flat 4, Albion Court, 17 Peel Street, Manchester M1 2AB",
     "Flat 4, Albion Court, 17 Peel Street, Manchester M1 2AB"),
    ("résidence", "Résidence du Parc, Bât. C, 12 rue des Écoles, 21000 Dijon",
     "Résidence du Parc, Bât. C, 12 rue des Écoles, 21000 Dijon"),
    ("escalier", "Bâtiment A, escalier 3, 8 avenue Foch, 54000 Nancy", "Bâtiment A, escalier 3, 8 avenue Foch, 54000 Nancy"),
    ("tower floor", "Marunouchi Building 15F, 2-4-1 Marunouchi, Chiyoda-ku, Tokyo 100-6390",
     "Marunouchi Building 15F, 2-4-1 Marunouchi, Chiyoda-ku, Tokyo 100-6390"),
    # a region or a country after the town
    ("country", "4 George Street, Edinburgh EH2 2PF, Scotland.", "4 George Street, Edinburgh EH2 2PF, Scotland"),
    ("state after PIN", "c/o Gupta Stores, Gandhi Road, Madurai 625001, Tamil Nadu", "Gandhi Road, Madurai 625001, Tamil Nadu"),
    # a town ends at a full stop, a line break or a lower-case word
    ("town then sentence", "Schreib an Kantstraße 4, 10623 Berlin. Danke", "Kantstraße 4, 10623 Berlin"),
    ("town then words", "passe au 12 rue Sainte-Catherine, 33000 Bordeaux demain", "12 rue Sainte-Catherine, 33000 Bordeaux"),
    ("town then line", "Ship to: 3 rue Oberkampf, 75011 Paris\nQty: 2", "3 rue Oberkampf, 75011 Paris"),
    ("town particle", "Boltzmannstraße 3, 85748 Garching b. München", "Boltzmannstraße 3, 85748 Garching b. München"),
    ("cedex number", "Service courrier, BP 2201, 44022 Nantes Cedex 1", "BP 2201, 44022 Nantes Cedex 1"),
    # CSV rows and lines without commas
    ("US csv", "7,Jo Lee,5 Elm St,Salem,MA,01970", "5 Elm St,Salem,MA,01970"),
    ("DE csv", "88;Goethestraße 3;80336;München", "Goethestraße 3;80336;München"),
    ("NL csv", "kees,Kerkweg 4,1234 AB,Hoorn", "Kerkweg 4,1234 AB,Hoorn"),
    ("UK lines", "Mr A Shah\n7 Albion Street\nLeeds\nLS1 5ER", "7 Albion Street\nLeeds\nLS1 5ER"),
    ("US lines", "1 Hacker Way\nMenlo Park, CA 94025", "1 Hacker Way\nMenlo Park, CA 94025"),
    # post-office boxes of every country
    ("NO box", "Postboks 45 Sentrum, 0101 Oslo", "Postboks 45 Sentrum, 0101 Oslo"),
    ("SE box", "Faktura: Box 1234, 114 79 Stockholm", "Box 1234, 114 79 Stockholm"),
    ("BR box", "Caixa Postal 55, Campinas - SP, 13010-970", "Caixa Postal 55, Campinas - SP, 13010-970"),
    ("PL box", "Skrytka pocztowa 12, 30-960 Kraków", "Skrytka pocztowa 12, 30-960 Kraków"),
    ("PT box", "Apartado 512, 1000-001 Lisboa", "Apartado 512, 1000-001 Lisboa"),
    ("CH numberless Postfach", "Steueramt, Postfach, 8021 Zürich", "Postfach, 8021 Zürich"),
    ("NL box on two lines", "Postbus 1234\n3000 BE Rotterdam", "Postbus 1234\n3000 BE Rotterdam"),
    ("CA station", "PO Box 311, Station A, Toronto, ON M5W 1C2", "PO Box 311, Station A, Toronto, ON M5W 1C2"),
    ("CA case postale", "CP 1500, succursale B, Montréal (Québec) H3B 3L6", "CP 1500, succursale B, Montréal (Québec) H3B 3L6"),
    ("NZ box", "PO Box 909, Dunedin 9054, New Zealand", "PO Box 909, Dunedin 9054, New Zealand"),
    ("rural route", "RR 1 Box 40, Dover, DE 19901", "RR 1 Box 40, Dover, DE 19901"),
    ("military", "PSC 4321, Box 9876, APO AP 96205", "PSC 4321, Box 9876, APO AP 96205"),
    ("FR CS", "Retours : CS 70012, 69007 Lyon Cedex", "CS 70012, 69007 Lyon Cedex"),
    # house numbers with their parts
    ("AT stiege top", "Schönbrunner Straße 30/Stiege 1/Top 7, 1050 Wien", "Schönbrunner Straße 30/Stiege 1/Top 7, 1050 Wien"),
    ("IT letter", "Via Nizza 15/B, 10125 Torino", "Via Nizza 15/B, 10125 Torino"),
    ("NL floor", "Prinsengracht 400-III, 1016 HS Amsterdam", "Prinsengracht 400-III, 1016 HS Amsterdam"),
    ("ES sin número", "Calle Real, s/n, 18009 Granada", "Calle Real, s/n, 18009 Granada"),
    ("ES escalera", "Calle de Goya 7, Esc. Dcha., 4º B, 28001 Madrid", "Calle de Goya 7, Esc. Dcha., 4º B, 28001 Madrid"),
    ("PL flat", "ul. Mokotowska 12 m. 4, 00-561 Warszawa", "ul. Mokotowska 12 m. 4, 00-561 Warszawa"),
    ("SE flat", "Sveavägen 20 lgh 1203, 111 57 Stockholm", "Sveavägen 20 lgh 1203, 111 57 Stockholm"),
    ("DE hyphen and floor", "Konrad-Adenauer-Straße 8, 2. OG, 53113 Bonn", "Konrad-Adenauer-Straße 8, 2. OG, 53113 Bonn"),
    ("DE adjective", "Obere Donaustraße 12, 1020 Wien", "Obere Donaustraße 12, 1020 Wien"),
    ("UK range", "Shop at 12-14 Market Street, Leicester LE1 5GF", "12-14 Market Street, Leicester LE1 5GF"),
    ("US range", "37-12 Main St, Flushing, NY 11354", "37-12 Main St, Flushing, NY 11354"),
    ("FR range", "12-14 rue des Arts, 59000 Lille", "12-14 rue des Arts, 59000 Lille"),
    ("US ordinal street", "310 W 72nd St, New York, NY 10023", "310 W 72nd St, New York, NY 10023"),
    ("US state name", "44 Elm Street, Hartford, Connecticut 06103", "44 Elm Street, Hartford, Connecticut 06103"),
    ("US floor", "75 State Street, 14th Floor, Boston, MA 02109", "75 State Street, 14th Floor, Boston, MA 02109"),
    ("US number word", "Two Penn Plaza, New York, NY 10121", "Two Penn Plaza, New York, NY 10121"),
    ("IT lower-case via", "ci vediamo in via Mazzini 12, 37121 Verona", "via Mazzini 12, 37121 Verona"),
    ("CA lower-case boulevard", "455 boulevard Saint-Laurent, Montréal (Québec) H2Y 2Y7",
     "455 boulevard Saint-Laurent, Montréal (Québec) H2Y 2Y7"),
    ("IN door number", "Door No. 7-12, Gandhi Nagar, Vijayawada, Andhra Pradesh 520003",
     "Door No. 7-12, Gandhi Nagar, Vijayawada, Andhra Pradesh 520003"),
    ("IN after a label", "Address: 45/2, 1st Main, 3rd Block, Koramangala, Bengaluru 560034",
     "45/2, 1st Main, 3rd Block, Koramangala, Bengaluru 560034"),
    ("JP hyphenated area", "4-2-8 Shiba-Koen, Minato-ku, Tokyo 105-0011", "4-2-8 Shiba-Koen, Minato-ku, Tokyo 105-0011"),
    ("IE no number", "Main Street, Kenmare, Co. Kerry, V93 X2P4", "Main Street, Kenmare, Co. Kerry, V93 X2P4"),
    # a house or building name and a street without a number, with the full postcode
    ("UK house name", "Ivy Cottage\nMill Lane\nUpper Slaughter\nCheltenham\nGL54 2JD", "Ivy Cottage\nMill Lane\nUpper Slaughter\nCheltenham\nGL54 2JD"),
    ("IE building", "Apt 7, The Granary, Kilkenny, Co. Kilkenny, R95 BX12", "Apt 7, The Granary, Kilkenny, Co. Kilkenny, R95 BX12"),
    ("FR appt", "Appt 12, 5 rue Nationale, 59000 Lille", "Appt 12, 5 rue Nationale, 59000 Lille"),
    # countries of their own
    ("NZ", "Office: 18 Cuba Street, Te Aro, Wellington 6011", "18 Cuba Street, Te Aro, Wellington 6011"),
    ("SG", "Blk 88 Tampines Ave 1, #03-12, Singapore 520088", "Blk 88 Tampines Ave 1, #03-12, Singapore 520088"),
    ("SG building", "20 Cecil Street, #14-01 Plus Building, Singapore 049705", "20 Cecil Street, #14-01 Plus Building, Singapore 049705"),
    ("MX", "Av. Juárez 14, Col. Centro, C.P. 06050, Cuauhtémoc, CDMX", "Av. Juárez 14, Col. Centro, C.P. 06050, Cuauhtémoc, CDMX"),
    ("MX state", "Calle Morelos 210, Col. Centro, 44100 Guadalajara, Jal.", "Calle Morelos 210, Col. Centro, 44100 Guadalajara, Jal."),
    ("NO", "Bygdøy allé 23, 0262 Oslo", "Bygdøy allé 23, 0262 Oslo"),
    ("DK", "Amagerbrogade 100, 2300 København S", "Amagerbrogade 100, 2300 København S"),
    ("NL bare", "Kantoor: Rokin 75, 1012 KL Amsterdam.", "Rokin 75, 1012 KL Amsterdam"),
    ("BE bare with box", "Groenplaats 21 bus 4, 2000 Antwerpen", "Groenplaats 21 bus 4, 2000 Antwerpen"),
]


@pytest.mark.parametrize(("case", "text", "expected"), POSITIVES, ids=[p[0] for p in POSITIVES])
def test_each_form_is_found_with_its_bounds(case: str, text: str, expected: str) -> None:
    assert addresses(text) == [expected]


NEGATIVES = [
    "Kapitel 3, 2000 AD Verlag",
    "Version 2, 2023 EU Report",
    "Model 3, 2024 EV Range",
    "Studio Bianchi, Via Po is a street we like",
    "the box 1234, 114 of them broken",
    "Suite 200 of the test harness ran in 4 minutes",
    "Level 3 support escalated it; Unit 4 covers fractions",
    "Meet at the Starbucks on Oxford Street at 3pm",
    "In 2000 Sydney hosted the Olympics; in 2012 London did",
    "Sessions by postcode: 10115 (412), 75002 (301), 28013 (88)",
    "Gira a destra in via Roma e prosegui per 200 metri",
    "PO 12345 matches invoice 9876; CP 3 du BTS",
    "Our 5th Avenue flagship opened in 2019 with 300 staff",
    "Postfach voll, 8021 Mails ungelesen",
    "Abbey Road is on the cover, London NW8 is the district",
    "Canary Wharf Group reported 12 lettings in 2024",
]


@pytest.mark.parametrize("text", NEGATIVES)
def test_things_that_look_like_addresses_are_not(text: str) -> None:
    assert addresses(text) == []
