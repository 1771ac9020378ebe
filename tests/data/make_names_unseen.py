"""Generate tests/data/pii_names_unseen.jsonl: a second, independent evaluation corpus for PERSON and
POSTAL_ADDRESS (issue #19), with hard negatives.

Written without reading the detector, its name lists, or the other names corpora and their generators;
names, streets and templates were written fresh for this file. Stdlib only, seeded: the same bytes every run.

    python3 tests/data/make_names_unseen.py        # writes the corpus and prints its totals
    python3 tests/data/make_names_unseen.py -v     # also lists pool names seen outside any span
    python3 tests/data/make_names_unseen.py --check  # regenerate in memory, compare with the file on disk

Labelling conventions (those of tests/data/README_names_corpus.md):

- PERSON: the name as written, with middle names, initials, particles (van der, de, bin, al-, O') and
  hyphenated or double surnames. Titles (Dr, Ms., Herr, Mme, Sra., Sig.ra, mevr. ...) and a possessive 's
  stay outside. "Family, Given" in one CSV cell is one span; first_name / last_name cells are separate
  spans. Surname-first orders (Chinese, Japanese, Korean, Vietnamese) are one span. A single given name or
  surname in a clear person context is PERSON, so are lower-case names in chat and upper-case names on
  labels. Every mention is its own span. E-mail addresses, phone numbers, companies are not labelled.
- POSTAL_ADDRESS: one span from house number / street (or PO Box, Postfach, BP, Apartado de Correos,
  Casella Postale, Postbus, Caixa Postal, or Flat / Unit / Apt / Suite / Room / Appartement first) through
  postcode and city, plus state / province and country when they follow directly. A multi-line address is
  one span with its newlines inside. Name, company, c/o and Attn lines stay outside; so does trailing
  sentence punctuation. A city, street or postcode on its own is not labelled.
- Hard negatives (negative: true) mention no person and no address at all: companies, brands, tools,
  units, laws, prizes and diseases named after people, places and months that double as given names,
  title-case headings and UI labels, street-like phrases that are not addresses, words that are names in
  some language.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEED = 20261202
OUT = Path(__file__).with_name("pii_names_unseen.jsonl")
LANGS = ("en", "de", "fr", "es", "it", "nl")
N_POS = {"en": 195, "de": 13, "fr": 13, "es": 13, "it": 13, "nl": 13}
N_NEG = {"en": 112, "de": 12, "fr": 12, "es": 12, "it": 12, "nl": 12}
TYPES = {"P": "PERSON", "A": "POSTAL_ADDRESS"}

# ---------------------------------------------------------------------------------------------------
# name pools: f / m given names, family names, order (w: given first, e: family first)

POOLS: dict[str, dict[str, str]] = {
    "irish_uk": dict(
        f="Siobhan;Aoife;Niamh;Gráinne;Orla;Bethan;Morag;Imogen;Harriet;Kayleigh;Tamsin;Eilidh",
        m="Declan;Ciarán;Eoin;Pádraig;Ronan;Callum;Rhys;Alistair;Hamish;Toby;Dwayne;Fergus",
        s="O'Sullivan;McGrath;O'Donoghue;Fitzgerald;MacLeod;McAllister;Whitfield;Pemberton;Ashworth;"
          "Hargreaves;Thistlethwaite;Llewellyn;Prothero;Gallagher;Kavanagh;Rutherford;Higginbotham;"
          "Hartley-Moore;Ashby-Crane;Blenkinsop",
        order="w"),
    "german": dict(
        f="Anneliese;Ute;Wiebke;Hannelore;Gesine;Franziska;Kerstin;Birgit;Svenja;Henrike;Liesl;Mareike",
        m="Jörg;Friedrich;Sönke;Matthias;Dietmar;Lukas;Tobias;Volker;Jannik;Ulrich;Korbinian;Wolfram",
        s="Brandstätter;Oberhuber;Wendlinger;Kößler;Riedmüller;Stadelmann;Ziegelbauer;Hörmann;"
          "Pfannenstiel;Gruber-Lenz;Eichhorn;Lindemann;Achterberg;Kuhnert;Mahlmann;Tiedemann;Brüggemann;"
          "Jungbluth;von Ahlefeldt;Brandl-Söllner",
        order="w"),
    "french": dict(
        f="Océane;Gaëlle;Maëlys;Clémence;Solène;Mathilde;Capucine;Anaïs;Ombeline;Bérénice",
        m="Thibault;Benoît;Yannick;Arnaud;Grégoire;Loïc;Hervé;Aurélien;Gwenaël;Jean-Baptiste",
        s="Lefèvre;Duchêne;Bonnaire;Rousselot;Grandjean;Vautrin;Aubertin;Fournel;Le Goff;de Villeneuve;"
          "Pellerin;Desmarais;Lacombe;Dufresne-Morel;Lemaire-Duval;Quéméner",
        order="w"),
    "spanish": dict(
        f="Itziar;Rocío;Nerea;Macarena;Ainhoa;Begoña;Montserrat;Lucía;Inmaculada;Maite",
        m="Iñaki;Álvaro;Guillermo;Joaquín;Rodrigo;Sergio;Ignacio;Borja;Xabier;Gonzalo",
        s="Echeverría Olmedo;Garrido;Villanueva Sáez;Urrutia;Peñalver;Castaño Ríos;Barrenechea;Cifuentes;"
          "Arrieta;de la Fuente;Montoya Gil;Zubizarreta",
        order="w"),
    "italian": dict(
        f="Ludovica;Benedetta;Chiara;Serena;Ilaria;Federica;Arianna;Ornella;Gaia;Annunziata",
        m="Gianluca;Ottavio;Raffaele;Piergiorgio;Corrado;Massimo;Tommaso;Ercole;Vittorio;Saverio",
        s="Bernasconi;Scarpelli;Lombardo;De Santis;Ferraresi;Zanetti;Mancuso;Di Stefano;Pellegrini;"
          "Gualtieri;Bottazzi;Esposito;Morandi;Lo Iacono",
        order="w"),
    "dutch": dict(
        f="Femke;Marieke;Anouk;Lieke;Sanne;Eline;Noortje;Hanneke;Ilse;Wietske",
        m="Joost;Sander;Wouter;Bram;Jeroen;Maarten;Thijs;Gijs;Sjoerd;Pieter-Jan",
        s="van der Wal;de Graaf;Bosman;Verhoeven;Timmermans;van den Broek;Kuipers;Hoekstra;Brouwer;"
          "van Leeuwen;ter Horst;Mulder;Wijnands;van 't Hof",
        order="w"),
    "polish": dict(
        f="Małgorzata;Agnieszka;Katarzyna;Zofia;Joanna;Bożena",
        m="Krzysztof;Wojciech;Grzegorz;Tomasz;Przemysław;Jarosław",
        s="Kowalczyk;Wójcik;Pawlak;Mazur",
        sf="Wiśniewska;Szymańska;Dąbrowska;Grabowska;Nowak-Jeziorańska;Zielińska",
        sm="Zieliński;Kamiński;Wiśniewski;Lewandowski;Dąbrowski",
        order="w"),
    "turkish": dict(
        f="Ayşe;Elif;Zeynep;Selin;Gülşen;Ebru",
        m="Mehmet;Emre;Burak;Oğuz;Kerem;Serkan",
        s="Yılmaz;Şahin;Çelik;Aydın;Öztürk;Arslan;Doğan;Karaca;Erdem;Kılıç",
        order="w"),
    "arabic": dict(
        f="Fatima;Layla;Nour;Mariam;Rania;Aisha;Hala",
        m="Youssef;Omar;Khalid;Tariq;Hamza;Samir;Faisal",
        s="al-Farsi;bin Saleh;Haddad;El-Amin;al-Qasimi;Nasser;Mansour;bin Rashid;Khoury;al-Hashimi;"
          "Abdelrahman",
        order="w"),
    "indian": dict(
        f="Priyanka;Lakshmi;Ananya;Kavitha;Meenakshi;Sunita;Nandini;Shreya",
        m="Arjun;Venkatesh;Rohan;Sanjay;Aditya;Harish;Rajesh;Siddharth",
        s="Subramanian;Iyer;Chatterjee;Deshpande;Reddy;Bhattacharya;Krishnamurthy;Nair;Menon;Kulkarni;"
          "Ganguly;Venkataraman;Pillai",
        order="w"),
    "chinese": dict(
        f="Meiling;Yuting;Xinyi;Lihua;Jiahui;Shuang",
        m="Xiaoming;Jianguo;Haoran;Zhiwei;Wenjie;Yifan",
        s="Wang;Zhang;Liu;Chen;Zhao;Huang;Zhou;Xu;Sun;Guo",
        order="e"),
    "japanese": dict(
        f="Yui;Aoi;Hina;Sakura;Misaki;Nanami",
        m="Haruto;Sota;Kenta;Daiki;Takumi;Ryosuke",
        s="Takahashi;Watanabe;Yamamoto;Nakamura;Kobayashi;Yoshida;Matsumoto;Inoue;Kimura;Fujiwara",
        order="e"),
    "korean": dict(
        f="Seo-yeon;Ha-eun;Ye-jin;Soo-ah;Eun-ji;Min-seo",
        m="Ji-hoon;Min-jun;Do-yun;Hyun-woo;Jae-won;Sung-min",
        s="Kim;Park;Choi;Jung;Kang;Cho;Yoon;Jang;Shin;Hwang",
        order="e"),
    "vietnamese": dict(
        f="Thị Hương;Thị Thảo;Ngọc Mai;Thu Phương;Thị Linh",
        m="Văn Tuấn;Đức Dũng;Minh Quang;Văn Khoa;Quốc Bảo",
        s="Nguyễn;Trần;Lê;Phạm;Hoàng;Vũ;Đặng;Bùi;Đỗ;Ngô",
        order="e"),
    "nigerian": dict(
        f="Chiamaka;Ngozi;Adaeze;Folake;Temitope;Yetunde",
        m="Oluwaseun;Emeka;Babatunde;Chukwuemeka;Ikechukwu;Obinna",
        s="Okonkwo;Adeyemi;Nwosu;Oyelaran;Eze;Balogun;Okafor;Adebayo;Afolabi;Nwachukwu",
        order="w"),
    "greek": dict(
        f="Eleni;Katerina;Vasiliki;Despina;Athina;Chrysoula",
        m="Giorgos;Dimitris;Panagiotis;Stavros;Thanasis;Christos",
        s="Georgiou;Christodoulou;Alexiou",
        sf="Konstantinidou;Vlachou;Papadopoulou;Antonopoulou;Mavridou",
        sm="Papadopoulos;Konstantinidis;Antonopoulos;Vlachos;Mavridis",
        order="w"),
    "brazilian": dict(
        f="Larissa;Fernanda;Beatriz;Juliana;Gabriela;Ana Luísa",
        m="João Pedro;Thiago;Gustavo;Rafael;Vinícius;Leandro",
        s="da Silva Santos;Oliveira;Carvalho;Albuquerque;Figueiredo;Nascimento;dos Anjos;Magalhães;"
          "Conceição;Ribeiro Lima",
        order="w"),
}
LOCAL_CULTURES = {"de": ("german",), "fr": ("french",), "es": ("spanish",), "it": ("italian",),
                  "nl": ("dutch",)}
TITLES = {"en": ("Ms.", "Mr."), "de": ("Frau", "Herr"), "fr": ("Mme", "M."), "es": ("Sra.", "Sr."),
          "it": ("Sig.ra", "Sig."), "nl": ("mevr.", "dhr.")}
DOCTOR = {"en": ("Dr", "Dr"), "de": ("Dr.", "Dr."), "fr": ("Dr", "Dr"), "es": ("Dra.", "Dr."),
          "it": ("Dott.ssa", "Dott."), "nl": ("dr.", "dr.")}
DOMAINS = ("example.com", "example.org", "mail.example.net", "corp.example")


def _fold(s: str) -> str:
    s = unicodedata.normalize("NFKD", s.replace("ß", "ss").replace("ı", "i").replace("ł", "l")
                              .replace("Ł", "L").replace("đ", "d").replace("Đ", "D"))
    return re.sub(r"[^a-z0-9]", "", "".join(c for c in s if not unicodedata.combining(c)).lower())


@dataclass(frozen=True)
class Person:
    given: str
    family: str
    female: bool
    eastern: bool

    def form(self, name: str, lang: str, rng: random.Random) -> str:
        g, f = self.given, self.family
        full = f"{f} {g}" if self.eastern else f"{g} {f}"
        if name == "full":
            return full
        if name in ("given", "first"):
            return g.split()[-1] if self.eastern and " " in g else g
        if name in ("family", "last"):
            return f
        if name == "lf":
            return f"{f}, {g}"
        if name == "gl":
            return self.form("given", lang, rng).lower()
        if name == "fl":
            return full.lower()
        if name == "fu":
            return full.upper()
        if name == "fau":
            return f.upper()
        if name == "ini":
            return full if self.eastern else f"{g[0]}. {f}"
        if name == "email":
            return f"{_fold(g)[:1] if rng.random() < 0.4 else _fold(g)}.{_fold(f)}@{rng.choice(DOMAINS)}"
        if name == "t":
            return TITLES[lang][0 if self.female else 1]
        if name == "dr":
            return DOCTOR[lang][0 if self.female else 1]
        raise KeyError(name)


def _pool(culture: str) -> tuple[list[str], list[str], list[str], bool]:
    p = POOLS[culture]
    return p["f"].split(";"), p["m"].split(";"), p["s"].split(";"), p["order"] == "e"


def _families(culture: str, female: bool) -> list[str]:
    """Family names that agree with the given name's gender where the language inflects them."""
    p = POOLS[culture]
    gendered = p.get("sf" if female else "sm")
    return p["s"].split(";") + (gendered.split(";") if gendered else [])


def all_pool_tokens() -> set[str]:
    tokens: set[str] = set()
    for culture in POOLS:
        f, m, s, _ = _pool(culture)
        for name in f + m + s + _families(culture, True) + _families(culture, False):
            tokens.update(t for t in re.split(r"[\s-]+", name) if len(t) >= 3 and t[0].isupper())
    return tokens


# ---------------------------------------------------------------------------------------------------
# addresses: each country gives lines; single-line joins them with ", " (or the country's own way)


def _r(rng: random.Random, lo: int, hi: int) -> int:
    return rng.randint(lo, hi)


def addr_lines(country: str, rng: random.Random, variant: str) -> list[str]:
    """The lines of one address; variant is street / unit (flat etc. first) / po (box)."""
    c = rng.choice
    if country == "US":
        city = c(["Boise, ID 83702", "Tucson, AZ 85719", "Ann Arbor, MI 48104", "Raleigh, NC 27605",
                  "Spokane, WA 99201", "Madison, WI 53703", "Burlington, VT 05401", "Chattanooga, TN 37402",
                  "Albuquerque, NM 87102", "Lexington, KY 40507"])
        if variant == "po":
            return [f"PO Box {_r(rng, 100, 9999)}", city]
        street = f"{_r(rng, 12, 9899)} {c(['Larkspur', 'Quarry Hill', 'Birchwood', 'Tamarack', 'Cottonwood', 'Sycamore Ridge', 'Pinecrest', 'Old Mill', 'Chestnut Hollow', 'Bluebonnet'])} {c(['Drive', 'Lane', 'Avenue', 'Road', 'Court', 'Way', 'Street', 'Blvd'])}"
        if variant == "unit":
            return [f"{c(['Suite', 'Apt', 'Unit'])} {_r(rng, 2, 40)}{c(['', 'A', 'B'])}", street, city]
        return [street + c(["", "", f", Apt {_r(rng, 1, 30)}{c('ABCD')}"]), city]
    if country == "UK":
        town, pc = c([("Leeds", "LS6 2QB"), ("Bristol", "BS3 4HG"), ("Norwich", "NR2 3DX"),
                      ("Cardiff", "CF24 4HQ"), ("Glasgow", "G12 8QQ"), ("York", "YO10 5DD"),
                      ("Brighton", "BN2 1TW"), ("Sheffield", "S10 2TN"), ("Exeter", "EX4 4QJ")])
        if variant == "po":
            return [f"PO Box {_r(rng, 10, 999)}", town, pc]
        street = f"{_r(rng, 1, 240)} {c(['Wexford Gardens', 'Marlowe Crescent', 'Tanners Row', 'Ashgrove Terrace', 'Kestrel Close', 'Primrose Mews', 'Foundry Lane', 'Abbotsford Road', 'Glebe Street'])}"
        lines = [street, town, pc] if rng.random() < 0.5 else [street, f"{town} {pc}"]
        if variant == "unit":
            lines.insert(0, f"Flat {_r(rng, 1, 24)}")
        return lines
    if country == "DE":
        pcity = c(["80469 München", "50667 Köln", "04109 Leipzig", "28195 Bremen", "69117 Heidelberg",
                   "90402 Nürnberg", "24103 Kiel", "01067 Dresden"])
        if rng.random() < 0.2:
            pcity = "D-" + pcity
        if variant == "po":
            return [f"Postfach {_r(rng, 10, 99)} {_r(rng, 10, 99)} {_r(rng, 10, 99)}", pcity]
        street = f"{c(['Lindenhofweg', 'Ahornstraße', 'Am Kiesgraben', 'Mühlbachstraße', 'Talstraße', 'Rosenauer Weg', 'Hafenstraße', 'Im Winkel'])} {_r(rng, 1, 140)}{c(['', '', 'a', 'b'])}"
        return [street, pcity] + (["Deutschland"] if rng.random() < 0.25 else [])
    if country == "AT":
        pcity = c(["1070 Wien", "1020 Wien", "8010 Graz", "4020 Linz", "6020 Innsbruck", "5020 Salzburg"])
        if variant == "po":
            return [f"Postfach {_r(rng, 10, 999)}", pcity]
        street = f"{c(['Schottenfeldgasse', 'Herrengasse', 'Landstraße', 'Museumstraße', 'Kaiserfeldgasse', 'Lerchenfelder Gürtel'])} {_r(rng, 1, 90)}"
        if rng.random() < 0.5:
            street += f"/{_r(rng, 1, 4)}/{_r(rng, 1, 30)}"
        return [street, pcity] + (["Österreich"] if rng.random() < 0.3 else [])
    if country == "CH":
        pcity = c(["8001 Zürich", "3011 Bern", "4051 Basel", "1204 Genève", "6900 Lugano", "9000 St. Gallen"])
        if rng.random() < 0.2:
            pcity = "CH-" + pcity
        if variant == "po":
            return [f"Postfach {_r(rng, 100, 9999)}", pcity]
        street = f"{c(['Bahnhofstrasse', 'Spitalgasse', 'Rue du Rhône', 'Via Nassa', 'Seefeldstrasse', 'Gerbergasse'])} {_r(rng, 1, 120)}"
        return [street, pcity] + (["Schweiz"] if rng.random() < 0.3 else [])
    if country == "FR":
        pcity = c(["67000 Strasbourg", "69007 Lyon", "31000 Toulouse", "33000 Bordeaux", "44000 Nantes",
                   "13002 Marseille", "35000 Rennes", "59800 Lille"])
        if variant == "po":
            return [f"BP {_r(rng, 10, 9999)}", pcity + " Cedex"]
        street = f"{_r(rng, 1, 180)}{c(['', '', ' bis', ' ter'])} {c(['rue des Tanneurs', 'avenue des Acacias', 'allée des Cerisiers', 'boulevard de la Liberté', 'quai de la Fosse', 'rue du Moulin', 'impasse des Lilas', 'place du Marché'])}"
        if variant == "unit":
            return [f"Appartement {_r(rng, 1, 60)}", street, pcity]
        return [street, pcity] + (["France"] if rng.random() < 0.25 else [])
    if country == "ES":
        pcity = c(["28009 Madrid", "08008 Barcelona", "41001 Sevilla", "46004 Valencia", "50001 Zaragoza",
                   "31001 Pamplona", "48001 Bilbao", "29015 Málaga"])
        if variant == "po":
            return [f"Apartado de Correos {_r(rng, 100, 9999)}", pcity]
        street = f"{c(['Calle de Alcalá', 'Carrer de Provença', 'Avenida de la Constitución', 'Calle Mayor', 'Plaza del Castillo', 'Calle de las Huertas', 'Paseo de la Alameda'])} {_r(rng, 1, 250)}"
        if rng.random() < 0.6:
            street += f", {_r(rng, 1, 9)}º {c(['A', 'B', 'C', 'izda.', 'dcha.'])}"
        return [street, pcity] + (["España"] if rng.random() < 0.25 else [])
    if country == "IT":
        pcity = c(["50124 Firenze FI", "20124 Milano MI", "80134 Napoli NA", "40124 Bologna BO",
                   "10123 Torino TO", "70122 Bari BA", "00153 Roma RM", "35122 Padova PD"])
        if variant == "po":
            return [f"Casella Postale {_r(rng, 10, 999)}", pcity]
        street = f"{c(['Via dei Serragli', 'Corso Buenos Aires', 'Via Toledo', 'Piazza Maggiore', 'Via Po', 'Via delle Rose', 'Viale dei Mille', 'Vicolo del Pozzo'])} {_r(rng, 1, 200)}"
        if rng.random() < 0.2:
            street += f", scala {c('ABC')}, int. {_r(rng, 1, 20)}"
        return [street, pcity] + (["Italia"] if rng.random() < 0.25 else [])
    if country == "NL":
        pcity = c(["1016 GV Amsterdam", "3511 AW Utrecht", "9711 LV Groningen", "2312 AV Leiden",
                   "5611 HJ Eindhoven", "3012 CN Rotterdam", "6511 KL Nijmegen"])
        if variant == "po":
            return [f"Postbus {_r(rng, 100, 9999)}", pcity]
        street = f"{c(['Prinsengracht', 'Oudegracht', 'Grote Markt', 'Stationsweg', 'Lange Nieuwstraat', 'Bloemstraat', 'Kerkpad'])} {_r(rng, 1, 300)}{c(['', '', '-1', ' bis', 'A'])}"
        return [street, pcity] + (["Nederland"] if rng.random() < 0.25 else [])
    if country == "BE":
        street, pcity = c([(f"Rue Neuve {_r(rng, 1, 150)}", "1000 Bruxelles"),
                           (f"Meir {_r(rng, 1, 120)}", "2000 Antwerpen"),
                           (f"Korenmarkt {_r(rng, 1, 40)}", "9000 Gent"),
                           (f"Boulevard d'Avroy {_r(rng, 1, 90)}", "4000 Liège"),
                           (f"Bondgenotenlaan {_r(rng, 1, 140)}", "3000 Leuven")])
        if variant == "po":
            return [f"Postbus {_r(rng, 10, 999)}", pcity]
        if rng.random() < 0.5:
            street += f" {c(['bus', 'bte'])} {_r(rng, 1, 12)}"
        return [street, pcity] + ([c(["België", "Belgique", "Belgium"])] if rng.random() < 0.3 else [])
    if country == "CA":
        city = c(["Montréal, QC H3G 1K4", "Toronto, ON M5J 2G2", "Vancouver, BC V6K 1N8",
                  "Halifax, NS B3J 2X1", "Edmonton, AB T5J 1W4", "Ottawa ON K1P 5G4", "Winnipeg, MB R3C 0V8"])
        if variant == "po":
            return [f"PO Box {_r(rng, 100, 9999)}", city]
        street = f"{_r(rng, 10, 9999)} {c(['Harbour Street', 'rue Sherbrooke Ouest', 'West 4th Avenue', 'Jasper Avenue', 'Spring Garden Road', 'Portage Avenue', 'Bank Street'])}"
        if variant == "unit":
            return [f"{c(['Unit', 'Suite', 'Apt'])} {_r(rng, 100, 2400)}", street, city]
        return [street, city] + (["Canada"] if rng.random() < 0.3 else [])
    if country == "AU":
        city = c(["Fremantle WA 6160", "Paddington NSW 2021", "Carlton VIC 3053", "Kingston ACT 2604",
                  "Fortitude Valley QLD 4006", "Glenelg SA 5045", "Sandy Bay TAS 7005"])
        if variant == "po":
            return [f"PO Box {_r(rng, 10, 9999)}", city]
        name = c(["Banksia Street", "Jacaranda Avenue", "Wattle Grove", "Kookaburra Close", "Ironbark Road",
                  "Bottlebrush Crescent", "Coolabah Parade"])
        if variant == "unit":
            return [c([f"Unit {_r(rng, 1, 40)}, {_r(rng, 1, 200)} {name}", f"{_r(rng, 1, 20)}/{_r(rng, 1, 200)} {name}"]), city]
        return [f"{_r(rng, 1, 300)} {name}", city] + (["Australia"] if rng.random() < 0.3 else [])
    if country == "IE":
        lines = c([[f"{_r(rng, 1, 90)} Shandon Street", "Cork", "T23 KX80"],
                   [f"{_r(rng, 1, 60)} Eyre Square", "Galway", "H91 FT2P"],
                   ["Ballybrack Road", "Killarney", "Co. Kerry", "V93 R2C4"],
                   [f"{_r(rng, 1, 120)} Ringsend Road", "Dublin 4", "D04 X2K8"],
                   [f"{_r(rng, 1, 80)} O'Connell Street", "Limerick", "V94 E2N7"]])
        if variant == "po":
            return [f"PO Box {_r(rng, 10, 999)}", lines[-2], lines[-1]]
        if variant == "unit":
            lines = [f"Apartment {_r(rng, 1, 40)}, Riverside Court", *lines]
        return lines + (["Ireland"] if rng.random() < 0.3 else [])
    if country == "IN":
        lines = c([[f"Flat {_r(rng, 101, 905)}, Sai Krupa Apartments", "14th Cross, Indiranagar", "Bengaluru 560038"],
                   [f"B-{_r(rng, 1, 90)}, Sector 22", "Noida, Uttar Pradesh 201301"],
                   [f"{_r(rng, 1, 40)}/{_r(rng, 1, 9)} Lake Gardens", "Kolkata 700045"],
                   [f"Plot {_r(rng, 1, 120)}, Road No. 10, Jubilee Hills", "Hyderabad, Telangana 500033"],
                   [f"{_r(rng, 1, 60)}, Nungambakkam High Road", "Chennai 600034"]])
        if variant == "po":
            return [f"PO Box {_r(rng, 100, 9999)}", lines[-1]]
        return lines + (["India"] if rng.random() < 0.3 else [])
    if country == "JP":
        if variant == "po" or rng.random() < 0.15:
            return [f"〒604-8005 京都府京都市中京区恵比須町{_r(rng, 100, 600)}-{_r(rng, 1, 9)}"]
        lines = c([[f"{_r(rng, 1, 6)}-{_r(rng, 1, 30)}-{_r(rng, 1, 20)} Jingumae", "Shibuya-ku, Tokyo 150-0001"],
                   [f"{_r(rng, 1, 6)}-{_r(rng, 1, 20)}-{_r(rng, 1, 20)} Nishi-Tenma", "Kita-ku, Osaka 530-0047"],
                   [f"{_r(rng, 1, 9)}-{_r(rng, 1, 20)} Kita 3-jo Nishi", "Chuo-ku, Sapporo 060-0003"]])
        if variant == "unit":
            lines[0] = f"Room {_r(rng, 101, 1205)}, {lines[0]}"
        return lines + (["Japan"] if rng.random() < 0.3 else [])
    if country == "BR":
        if variant == "po":
            return [f"Caixa Postal {_r(rng, 100, 9999)}", "70001-970 Brasília - DF"]
        lines = c([[f"Rua Augusta, {_r(rng, 100, 2800)}", "Consolação", "São Paulo - SP", "01304-001"],
                   [f"Avenida Atlântica, {_r(rng, 100, 4000)}", "Copacabana", "Rio de Janeiro - RJ", "22041-001"],
                   [f"Rua da Bahia, {_r(rng, 100, 2000)}", "Centro", "Belo Horizonte - MG", "30160-011"]])
        if variant == "unit":
            lines[0] += f", {c(['apto', 'sala'])} {_r(rng, 11, 1204)}"
        return lines + (["Brasil"] if rng.random() < 0.3 else [])
    if country == "PT":
        return [f"Rua Garrett {_r(rng, 1, 120)}, {_r(rng, 1, 6)}º Esq.", "1200-204 Lisboa"]
    raise KeyError(country)


COUNTRIES_EN = ("US", "UK", "CA", "AU", "IE", "IN", "JP", "BR", "DE", "FR", "ES", "IT", "NL", "CH", "AT",
                "BE", "PT")
LOCAL_COUNTRIES = {"en": COUNTRIES_EN, "de": ("DE", "DE", "AT", "CH"), "fr": ("FR", "FR", "BE", "CH"),
                   "es": ("ES",), "it": ("IT", "IT", "CH"), "nl": ("NL", "NL", "BE")}
_POBOX_OK = {"US", "UK", "DE", "AT", "CH", "FR", "ES", "IT", "NL", "BE", "CA", "AU", "IE", "IN", "BR"}
_UNIT_OK = {"US", "UK", "FR", "CA", "AU", "IE", "JP", "BR"}


def address(country: str, rng: random.Random, variant: str, multi: bool) -> str:
    lines = addr_lines(country, rng, variant)
    if multi:
        return "\n".join(lines)
    if country == "UK" and len(lines) >= 3 and re.fullmatch(r"[A-Z0-9]{2,4} [0-9][A-Z]{2}", lines[-1]):
        lines = [*lines[:-2], f"{lines[-2]} {lines[-1]}"]
    return ", ".join(lines)


# ---------------------------------------------------------------------------------------------------
# rendering: [[P:a.full]] PERSON span, [[A:h]] address span, [[key]] plain value

_FIELD = re.compile(r"\[\[(?:([PA]):)?([\w.]+)\]\]")


class Row:
    def __init__(self, rng: random.Random, lang: str, ordinal: int):
        self.rng, self.lang, self.ordinal = rng, lang, ordinal
        self.people: dict[str, Person] = {}
        self.plain: dict[str, str] = {}
        self.countries: list[str] = []
        self.multi = 0

    def person(self, key: str) -> Person:
        if key not in self.people:
            used = {(p.given, p.family) for p in self.people.values()}
            while True:
                if self.lang in LOCAL_CULTURES and self.rng.random() < 0.55:
                    culture = self.rng.choice(LOCAL_CULTURES[self.lang])
                else:
                    culture = self.rng.choice(sorted(POOLS))
                f, m, _, eastern = _pool(culture)
                female = self.rng.random() < 0.5
                p = Person(self.rng.choice(f if female else m), self.rng.choice(_families(culture, female)),
                           female, eastern)
                if (p.given, p.family) not in used and p.given.split()[-1] not in {q.given.split()[-1] for q in self.people.values()}:
                    self.people[key] = p
                    return p
        return self.people[key]

    def address(self, key: str) -> str:
        upper = key.endswith("_uc")
        base = key.removesuffix("_uc")
        rng = self.rng
        countries = LOCAL_COUNTRIES[self.lang]
        if self.lang == "en":  # cycle through the formats so every country is covered evenly
            country = countries[(self.ordinal * 3 + len(self.countries)) % len(countries)]
        else:
            country = rng.choice(countries)
        variant = "street"
        if base.startswith("po"):
            while country not in _POBOX_OK:
                country = rng.choice(COUNTRIES_EN)
            variant = "po"
        elif base.startswith("u"):
            while country not in _UNIT_OK:
                country = rng.choice(COUNTRIES_EN)
            variant = "unit"
        elif rng.random() < 0.08 and country in _POBOX_OK:
            variant = "po"
        elif rng.random() < 0.15 and country in _UNIT_OK:
            variant = "unit"
        multi = base.startswith("m")
        value = address(country, rng, variant, multi)
        self.countries.append(country)
        self.multi += multi and "\n" in value
        return value.upper() if upper else value

    def value(self, key: str) -> str:
        if "." in key:
            who, form = key.split(".", 1)
            return self.person(who).form(form, self.lang, self.rng)
        if key not in self.plain:
            self.plain[key] = self._plain(key)
        return self.plain[key]

    def _plain(self, key: str) -> str:
        rng = self.rng
        base = key.rstrip("0123456789")
        if base == "n":
            return str(rng.randint(2, 9999))
        if base == "k":
            return str(rng.randint(2, 60))
        if base == "day":
            return f"{rng.randint(1, 28):02d}"
        if base == "phone":
            return rng.choice(["+44 20 7946 0", "+49 30 901820", "+1 415 555 0", "+33 1 70 36 0",
                               "+34 91 123 4", "+39 02 1234 5", "+31 20 555 0"]) + f"{rng.randint(100, 999)}"
        if base == "tid":
            return f"{rng.choice(['SUP', 'OPS', 'INC', 'HD', 'CS'])}-{rng.randint(1000, 99999)}"
        if base == "ref":
            return f"{rng.choice(['ORD', 'INV', 'PO', 'CT'])}-{rng.randint(2025, 2026)}-{rng.randint(1000, 9999)}"
        if base == "pol":
            return f"{rng.choice('HMPQ')}{rng.randint(10, 99)}-{rng.randint(100000, 999999)}"
        if base == "date":
            d, m = rng.randint(1, 28), rng.randint(1, 12)
            months = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
                      "October", "November", "December"]
            return {"en": f"{d} {months[m - 1]} 2026", "de": f"{d:02d}.{m:02d}.2026",
                    "nl": f"{d}-{m}-2026"}.get(self.lang, f"{d:02d}/{m:02d}/2026")
        if base == "dob":
            return f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{rng.randint(1941, 2004)}"
        if base == "iso":
            return f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
        if base == "time":
            return f"{rng.randint(7, 22):02d}:{rng.randint(0, 59):02d}"
        if base == "sha":
            return "".join(rng.choice("0123456789abcdef") for _ in range(40))
        if base == "ver":
            return f"{rng.randint(1, 9)}.{rng.randint(0, 24)}.{rng.randint(0, 15)}"
        if base == "pct":
            return f"{rng.randint(1, 9)}.{rng.randint(0, 9)}"
        if base == "dom":
            return rng.choice(DOMAINS)
        raise KeyError(key)


def render(template: str, row: Row) -> tuple[str, list[list[Any]], list[str]]:
    parts: list[str] = []
    spans: list[list[Any]] = []
    intended: list[str] = []
    pos = length = 0
    for m in _FIELD.finditer(template):
        parts.append(template[pos:m.start()])
        length += m.start() - pos
        key = m.group(2)
        value = row.address(key) if m.group(1) == "A" else row.value(key)
        if m.group(1):
            spans.append([length, length + len(value), TYPES[m.group(1)]])
            intended.append(value)
        parts.append(value)
        length += len(value)
        pos = m.end()
    parts.append(template[pos:])
    return "".join(parts), spans, intended


# ---------------------------------------------------------------------------------------------------
# positive templates, (kind, template) per language

POS: dict[str, list[tuple[str, str]]] = {
    "en": [
        ("email", "Subject: spare keys\n\nMorning [[P:a.given]],\n\nthe spare set is with the concierge now. If nobody answers, ring [[P:b.full]] on [[phone]] and they will let you in. Post for you still goes to [[A:h]] until the end of the month.\n\nBest,\n[[P:c.given]]"),
        ("email", "From: [[P:a.full]] <[[a.email]]>\nTo: billing@[[dom]]\nSubject: new invoice address for [[ref]]\n\nHello,\n\nfrom next month please send invoices to\n\n[[A:m]]\n\nand no longer to [[A:h]]. Questions go to my colleague [[P:b.full]] ([[b.email]]).\n\nRegards,\n[[P:a.full]]"),
        ("email", "Hi [[P:a.given]] — did [[P:b.given]] ever send back the signed NDA? Legal ([[P:c.full]]) needs it before Thursday, otherwise the kickoff with the vendor slips again. Thanks!"),
        ("email", "Dear [[a.t]] [[P:a.family]],\n\nthank you for your letter of [[date]]. We have updated your correspondence address to [[A:h]]. Your case officer remains [[P:b.full]].\n\nYours sincerely,\n[[P:c.full]]\nCustomer Relations"),
        ("email", "Subject: welcome aboard\n\nTeam, please welcome [[P:a.full]], who joins us from the Lisbon office as a senior analyst. [[P:a.given]] will sit with [[P:b.given]]'s group on the third floor, so do say hello. Desk equipment requests go to [[P:c.full]] as usual."),
        ("email", "---------- Forwarded message ---------\nFrom: [[P:a.full]] <[[a.email]]>\nDate: [[date]]\n\nCould you courier the original certificate to my home address, [[A:h]], rather than the office? [[P:b.given]] at reception said that is fine as long as [[P:c.full]] countersigns the release form."),
        ("email", "Automatic reply: I am on leave until [[date]]. For urgent matters contact [[P:a.full]] ([[phone]]) or, for anything about payroll, [[P:b.full]]. — [[P:c.given]]"),
        ("email", "Hi [[P:a.given]],\nmy new place is [[A:u]]; the buzzer still says [[P:b.fau]] from the previous tenant, just press it anyway.\nSee you Saturday,\n[[P:c.given]]"),
        ("email", "Following up on the call with the insurer this morning, where [[P:a.full]] confirmed the excess, I have asked [[P:b.full]] to send the repair quote to [[A:h]] and to copy [[P:c.given]] so the file is complete before the audit next week."),
        ("email", "Please send the completed form to [[A:po]]. Mark the envelope for the attention of [[P:a.full]].\n\nWith thanks,\nMembership Office"),
        ("chat", "ok ping [[P:a.gl]] about it, [[P:b.gl]] is out till monday"),
        ("chat", "meeting w/ [[P:a.fl]] moved to 3pm, [[P:b.gl]] can't make it so [[P:c.gl]]/[[P:d.gl]] will cover"),
        ("notes", "| Owner | Task | Due |\n|---|---|---|\n| [[P:a.full]] | vendor contract | Fri |\n| [[P:b.given]] | badge printing | Mon |\n| [[P:c.lf]] | catering | Tue |"),
        ("email", "Thanks, that works for us.\n\n--\n[[P:a.full]] | Senior Buyer\nT [[phone]] | [[a.email]]\nAcme Components Ltd, [[A:h]]"),
        ("code", "    assignee = \"[[P:a.full]]\"  # fallback while [[P:b.given]] is on leave, see [[tid]]"),
        ("delivery", "Northwind Logistics Ltd\nAttn: [[P:a.full]]\n[[A:m]]"),
        ("delivery", "[[P:a.full]]\nc/o [[P:b.full]]\n[[A:m]]"),
        ("delivery", "Deliver to [[A:u]] (ring [[P:a.given]], side door). Signature: [[P:a.fau]]"),
        ("chat", "[[P:a.gl]]: anyone got the guest wifi password?\n[[P:b.gl]]: ask [[P:c.given]], it changed yesterday\n[[P:a.gl]]: ty"),
        ("chat", "can u send me [[P:a.given]]'s new address? I only have [[A:h]] and I'm pretty sure that's old"),
        ("chat", "lol [[P:a.gl]] just joined the call from the car park. [[P:b.given]], can you record it for [[P:c.given]]?"),
        ("chat", "@[[P:a.full]] the parcel for [[P:b.full]] came back, label said [[A:h]] but the courier couldn't find the door"),
        ("chat", "[[time]] <[[P:a.gl]]> who is covering on-call tonight?\n[[time2]] <[[P:b.gl]]> [[P:c.gl]] swapped with me, ping them"),
        ("chat", "Said [[P:a.given]] would bring the cake but [[P:b.given]] says no?? anyone"),
        ("chat", "fyi [[P:a.full]] (the new landlord) wants the deposit sent by friday.\naddress for the paperwork:\n[[A:m]]"),
        ("ticket", "Ticket [[tid]] | Priority: P2 | Reporter: [[P:a.full]]\n\nCustomer says the parcel never arrived at [[A:h]]. Courier claims it was signed for by \"[[P:b.fau]]\". [[P:a.given]] says nobody of that name lives there."),
        ("ticket", "#[[n]] Refund request\nOpened by: [[P:a.lf]]\nAssignee: [[P:b.full]]\n\nHi, I was charged twice for order [[ref]]. Please refund the second payment. My billing address is [[A:h]].\n\n-- [[P:a.given]]"),
        ("ticket", "[[tid]]: account locked\nCaller [[a.t]] [[P:a.family]] (callback [[phone]]) could not log in after the password reset. Identity verified with date of birth and postcode. Escalated to [[P:b.full]] in tier 2."),
        ("ticket", "Issue: duplicate customer record\nRecord A: [[P:a.full]], [[A:h]]\nRecord B: [[P:a.ini]], same street, no postcode\nPlease merge; keep the e-mail [[a.email]]. Flagged by [[P:b.given]]."),
        ("ticket", "Complaint [[tid]]\nThe engineer, [[P:a.full]], arrived four hours late at [[A:h]] and left without fixing the boiler. [[P:b.full]] from your office promised a call back, which never came."),
        ("csv", "customer_id,name,email,shipping_address\n[[n]],\"[[P:a.lf]]\",[[a.email]],\"[[A:h]]\"\n[[n2]],\"[[P:b.lf]]\",[[b.email]],\"[[A:w]]\""),
        ("csv", "first_name,last_name,department,start_date\n[[P:a.first]],[[P:a.last]],Finance,2025-01-06\n[[P:b.first]],[[P:b.last]],Logistics,2025-02-17\n[[P:c.first]],[[P:c.last]],Legal,2025-03-03"),
        ("csv", "Attachment: guests_week49.csv\n\nGuest;Room;Arrival;Notes\n[[P:a.lf]];214;Mon;late check-in\n[[P:b.lf]];309;Tue;\n[[P:c.lf]];117;Wed;nut allergy"),
        ("csv", "name\tphone\taddress\n[[P:a.full]]\t[[phone]]\t[[A:h]]\n[[P:b.full]]\t[[phone2]]\t[[A:w]]"),
        ("csv", "Here is the export you asked for:\n\nid,contact,city,notes\n[[n]],[[P:a.full]],Leeds,prefers phone\n[[n2]],[[P:b.full]],Perth,ask [[P:c.given]] first"),
        ("log", "[[iso]] INFO orders.api created order=[[ref]] customer_name=\"[[P:a.full]]\" ship_to=\"[[A:h]]\" items=3"),
        ("log", "[[iso]] WARN geocode: no match for '[[A:h]]' (customer [[n]], [[P:a.full]]); falling back to postcode centroid"),
        ("log", "audit: record [[n]] updated by [[P:a.full]] role=admin field=delivery_address old=\"[[A:h]]\" new=\"[[A:w]]\""),
        ("log", "[[iso]] ERROR mailer: bounce for [[a.email]] (recipient [[P:a.full]]), retry 3/5\n[[iso2]] INFO mailer: message to [[P:b.full]] delivered"),
        ("log", "[[iso]]\tuser=[[a.email]]\tdisplay_name=[[P:a.full]]\taction=profile.update\tmanager=[[P:b.full]]"),
        ("json", "{\"customer\": {\"name\": \"[[P:a.full]]\", \"email\": \"[[a.email]]\", \"address\": \"[[A:h]]\"}, \"items\": [[n]], \"gift\": false}"),
        ("json", "{\"first_name\": \"[[P:a.first]]\", \"last_name\": \"[[P:a.last]]\", \"emergency_contact\": {\"name\": \"[[P:b.full]]\", \"relation\": \"sibling\", \"phone\": \"[[phone]]\"}}"),
        ("json", "{\"tool\": \"create_shipment\", \"arguments\": {\"recipient\": \"[[P:a.full]]\", \"address\": \"[[A:h]]\", \"notes\": \"call [[P:b.given]] if nobody answers\"}}"),
        ("json", "[{\"attendee\": \"[[P:a.lf]]\", \"diet\": \"vegetarian\"}, {\"attendee\": \"[[P:b.lf]]\", \"diet\": \"none\"}]"),
        ("contract", "THIS TENANCY AGREEMENT is made on [[date]] between [[P:a.full]] (\"the Landlord\") of [[A:h]] and [[P:b.full]] (\"the Tenant\"). The Landlord lets to the Tenant the property at [[A:w]] for a term of twelve months."),
        ("contract", "SIGNED by [[P:a.fu]]\n\nin the presence of:\nWitness name: [[P:b.full]]\nWitness address: [[A:h]]\nOccupation: teacher"),
        ("contract", "Power of attorney. I, [[P:a.full]], of [[A:h]], appoint [[P:b.full]] as my attorney to act for me in the sale of the property known as [[A:w]]."),
        ("contract", "Schedule 2 – Notices\nNotices to the Supplier shall be sent to:\n[[A:m]]\nAttn: [[P:a.full]], General Counsel"),
        ("notes", "Attendees: [[P:a.full]], [[P:b.full]], [[P:c.full]]\nApologies: [[P:d.given]]\n\n1. Budget: [[P:a.given]] to circulate revised numbers by Friday.\n2. Office move: [[P:b.family]] confirmed the lease for [[A:w]].\nAction: [[P:c.given]] books the movers."),
        ("notes", "1:1 [[P:a.given]] / [[P:b.given]]\n- [[P:a.given]] wants to rotate into the data team next quarter\n- pairing with [[P:c.full]] on the migration went well\n- follow up: training budget"),
        ("notes", "Site visit notes. Met [[a.t]] [[P:a.family]] at [[A:h]]; the boiler is in the loft. Neighbour [[P:b.given]] has a key. Next visit together with [[P:c.full]]."),
        ("notes", "Decision log [[date]]:\n- [[P:a.full]] approved the vendor switch;[[P:b.given]] objected (cost).\n- Next review: [[P:c.family]] and [[P:d.family]]."),
        ("code", "# TODO: ask [[P:a.given]] why the retry is needed here (see [[tid]])\nfor attempt in range(3):\n    resp = client.post(url, json=payload)"),
        ("code", "/*\n * Original implementation by [[P:a.full]], reviewed by [[P:b.full]].\n * Do not change the rounding without talking to [[P:b.given]] first.\n */"),
        ("code", "TEST_ADDRESS = \"[[A:h]]\"  # [[P:a.given]]'s office, used by the geocoder fixture"),
        ("code", "commit [[sha]]\nAuthor: [[P:a.full]] <[[a.email]]>\nDate:   [[date]]\n\n    Fix VAT rounding for invoices\n\n    Co-authored-by: [[P:b.full]] <[[b.email]]>"),
        ("hr_form", "EMPLOYEE CHANGE FORM\nEmployee name: [[P:a.lf]]\nManager: [[P:b.full]]\nNew home address:\n[[A:m]]\nEffective date: [[date]]\nApproved: [[P:c.ini]]"),
        ("hr_form", "Reference request\n\n[[P:a.full]] worked for us from 2019 to 2024 as a warehouse supervisor. [[P:a.given]] was reliable and well liked. Please contact [[P:b.full]] in HR for exact dates."),
        ("hr_form", "NEXT OF KIN\nName: [[P:a.full]]\nRelationship: partner\nAddress: [[A:h]]\nPhone: [[phone]]"),
        ("medical", "Re: [[P:a.full]], DOB [[dob]]\n[[A:m]]\n\nDear Dr [[P:b.family]],\n\nthank you for referring this patient. I saw [[P:a.given]] in clinic today; the knee has improved and I have discharged the patient back to your care.\n\nYours sincerely,\n\nDr [[P:c.full]]\nConsultant Orthopaedic Surgeon"),
        ("medical", "Dear [[a.t]] [[P:a.family]],\n\nyour appointment with Dr [[P:b.family]] is on [[date]] at the clinic, [[A:h]]. If you cannot attend, please call [[phone]].\n\nOutpatient Bookings"),
        ("insurance", "Policyholder: [[P:a.full]]\nPolicy no.: [[pol]]\nRisk address: [[A:h]]\n\nDear [[a.t]] [[P:a.family]],\n\nwe have received your claim dated [[date]]. A loss adjuster, [[P:b.full]], will contact you within five working days."),
        ("insurance", "Claim [[pol]]: third party [[P:a.full]] of [[A:h]] reported the collision. Our insured, [[P:b.full]], disputes liability; statement taken by [[P:c.given]]."),
        ("delivery", "DELIVERY NOTE [[n]]\nShip to:\n[[P:a.fu]]\n[[A:m_uc]]\n\nContents: 2 x printer toner\nPacked by: [[P:b.given]]"),
        ("delivery", "Driver note: left the parcel with neighbour [[P:b.given]] next door, customer [[P:a.family]] informed by SMS. Address on label: [[A:h]]."),
        ("delivery", "Return to sender\nFrom: [[P:a.full]], [[A:po]]\nTo: [[P:b.full]]\n[[A:m]]"),
    ],
    "de": [
        ("email", "Hallo [[P:a.given]],\n\nkannst du die Rechnung bitte an [[A:h]] schicken? [[P:b.full]] aus der Buchhaltung hat noch die alte Anschrift im System.\n\nViele Grüße\n[[P:c.given]]"),
        ("chat", "hab [[P:a.gl]] gerade erreicht, kommt 10 min später. [[P:b.gl]] bringt den Beamer mit"),
        ("ticket", "Störung [[tid]]: [[a.t]] [[P:a.family]] meldet, dass das Paket an [[A:h]] nicht angekommen ist. Rückruf unter [[phone]] durch [[P:b.full]]."),
        ("csv", "Nachname;Vorname;Abteilung\n[[P:a.last]];[[P:a.first]];Einkauf\n[[P:b.last]];[[P:b.first]];Vertrieb"),
        ("contract", "Mietvertrag\n\nzwischen [[P:a.full]], wohnhaft [[A:h]], – nachstehend Vermieter – und [[P:b.full]] – nachstehend Mieter – wird folgender Vertrag geschlossen."),
        ("notes", "Protokoll vom [[date]]\nAnwesend: [[P:a.full]], [[P:b.full]], [[P:c.full]]\nTOP 1: [[P:a.family]] stellt den neuen Standort vor: [[A:w]]."),
        ("medical", "Sehr geehrte Frau Dr. [[P:a.family]],\n\nwir berichten über unsere gemeinsame Behandlung.\nPatient(in): [[P:b.full]], geb. [[dob]]\nAnschrift:\n[[A:m]]\n\nMit freundlichen Grüßen\n[[c.dr]] [[P:c.full]]"),
        ("json", "{\"empfaenger\": \"[[P:a.full]]\", \"anschrift\": \"[[A:h]]\", \"hinweis\": \"bei [[P:b.given]] abgeben\"}"),
        ("code", "// Workaround von [[P:a.given]] ([[tid]]), bitte nicht entfernen – [[P:b.full]] weiß Bescheid"),
        ("log", "[[iso]] WARN versand: Adresse ungültig für Kunde \"[[P:a.lf]]\": \"[[A:h]]\""),
        ("delivery", "LIEFERSCHEIN [[n]]\nEmpfänger:\n[[P:a.fu]]\n[[A:m_uc]]"),
        ("hr_form", "Personalbogen\nName, Vorname: [[P:a.lf]]\nPostanschrift: [[A:po]]\nVorgesetzte(r): [[P:b.full]]"),
    ],
    "fr": [
        ("email", "Bonjour [[P:a.given]],\n\npourrais-tu envoyer le contrat au [[A:h]] ? [[P:b.full]] n'a toujours pas reçu l'exemplaire signé.\n\nBien à toi,\n[[P:c.given]]"),
        ("chat", "je viens d'avoir [[P:a.gl]] au tel, [[P:b.gl]] sera en retard ce matin"),
        ("ticket", "Réclamation [[tid]] : [[a.t]] [[P:a.family]] signale un colis non livré au [[A:h]]. Dossier suivi par [[P:b.full]]."),
        ("contract", "ENTRE LES SOUSSIGNÉS :\n[[P:a.full]], demeurant [[A:h]], ci-après « le Bailleur »,\nET\n[[P:b.full]], ci-après « le Locataire »."),
        ("notes", "Compte rendu du [[date]]\nPrésents : [[P:a.full]], [[P:b.full]]\nExcusé(e) : [[P:c.full]]\n[[P:a.given]] présentera le budget la semaine prochaine."),
        ("medical", "Cher confrère,\n\nje vois ce jour en consultation [[a.t]] [[P:a.full]], né(e) le [[dob]], demeurant :\n[[A:m]]\n\nConfraternellement,\nDr [[P:b.full]]"),
        ("json", "{\"nom\": \"[[P:a.last]]\", \"prenom\": \"[[P:a.first]]\", \"adresse\": \"[[A:h]]\"}"),
        ("code", "# Correctif proposé par [[P:a.full]] ; à valider avec [[P:b.given]] avant la mise en prod"),
        ("csv", "Nom, Prénom;Ville;Téléphone\n\"[[P:a.lf]]\";Lyon;[[phone]]\n\"[[P:b.lf]]\";Nantes;[[phone2]]"),
        ("delivery", "BON DE LIVRAISON [[n]]\nDestinataire : [[P:a.fu]]\n[[A:m_uc]]"),
        ("insurance", "Objet : sinistre [[pol]]\n\nMadame, Monsieur,\n\nnotre expert, [[P:a.full]], passera au [[A:h]] le [[date]]. Merci de prévenir [[P:b.given]] en cas d'absence."),
    ],
    "es": [
        ("email", "Hola [[P:a.given]]:\n\n¿puedes mandar la factura a [[A:h]]? [[P:b.full]] todavía tiene la dirección antigua.\n\nUn saludo,\n[[P:c.given]]"),
        ("chat", "acabo de hablar con [[P:a.gl]], dice que [[P:b.gl]] llega tarde"),
        ("ticket", "Incidencia [[tid]]: [[a.t]] [[P:a.family]] indica que el pedido no llegó a [[A:h]]. Lo gestiona [[P:b.full]]."),
        ("contract", "REUNIDOS\n\nDe una parte, [[P:a.full]], con domicilio en [[A:h]].\nDe otra parte, [[P:b.full]], con domicilio en [[A:w]]."),
        ("notes", "Acta de la reunión del [[date]]\nAsistentes: [[P:a.full]], [[P:b.full]] y [[P:c.full]]\n[[P:b.given]] enviará el presupuesto revisado."),
        ("csv", "apellidos,nombre,ciudad\n[[P:a.last]],[[P:a.first]],Bilbao\n[[P:b.last]],[[P:b.first]],Málaga"),
        ("json", "{\"destinatario\": \"[[P:a.full]]\", \"direccion\": \"[[A:h]]\", \"telefono\": \"[[phone]]\"}"),
        ("log", "[[iso]] ERROR envios: código postal inválido para [[P:a.full]] en \"[[A:h]]\""),
        ("medical", "Estimado/a [[a.dr]] [[P:a.family]]:\n\nle remito a [[P:b.full]], con domicilio en\n[[A:m]]\npara valoración.\n\nAtentamente,\n[[c.dr]] [[P:c.full]]"),
        ("delivery", "Remitente: [[P:a.full]], [[A:po]]\nDestinatario: [[P:b.fu]]\n[[A:m_uc]]"),
    ],
    "it": [
        ("email", "Ciao [[P:a.given]],\n\npuoi spedire il pacco a [[A:h]]? [[P:b.full]] ha ancora il vecchio indirizzo.\n\nA presto,\n[[P:c.given]]"),
        ("chat", "ho sentito [[P:a.gl]] adesso, [[P:b.gl]] arriva dopo pranzo"),
        ("ticket", "Segnalazione [[tid]]: [[a.t]] [[P:a.family]] riferisce che la consegna in [[A:h]] non è avvenuta. In carico a [[P:b.full]]."),
        ("contract", "CONTRATTO DI LOCAZIONE\n\nTra [[P:a.full]], residente in [[A:h]] (locatore), e [[P:b.full]] (conduttore), si conviene quanto segue."),
        ("notes", "Verbale del [[date]]\nPresenti: [[P:a.full]], [[P:b.full]]\nAssente giustificato: [[P:c.full]]\n[[P:a.given]] preparerà il preventivo."),
        ("code", "// Patch di [[P:a.full]]: non toccare senza sentire [[P:b.given]]"),
        ("json", "{\"cognome\": \"[[P:a.last]]\", \"nome\": \"[[P:a.first]]\", \"indirizzo\": \"[[A:h]]\"}"),
        ("medical", "Gentile [[a.dr]] [[P:a.family]],\n\nLe invio [[b.t]] [[P:b.full]], residente in\n[[A:m]]\nper una visita di controllo.\n\nCordiali saluti,\n[[c.dr]] [[P:c.full]]"),
        ("csv", "Cognome;Nome;Città\n[[P:a.last]];[[P:a.first]];Torino\n[[P:b.last]];[[P:b.first]];Bari"),
        ("delivery", "DDT [[n]]\nDestinatario: [[P:a.fu]]\n[[A:m_uc]]\nVettore: corriere espresso"),
    ],
    "nl": [
        ("email", "Hoi [[P:a.given]],\n\nkun je de factuur naar [[A:h]] sturen? [[P:b.full]] heeft nog het oude adres.\n\nGroet,\n[[P:c.given]]"),
        ("chat", "net [[P:a.gl]] gesproken, [[P:b.gl]] is ziek vandaag"),
        ("ticket", "Melding [[tid]]: [[a.t]] [[P:a.family]] meldt dat het pakket niet is bezorgd op [[A:h]]. Opgepakt door [[P:b.full]]."),
        ("contract", "HUUROVEREENKOMST\n\nDe ondergetekenden:\n[[P:a.full]], wonende te [[A:h]], hierna verhuurder,\nen [[P:b.full]], hierna huurder."),
        ("notes", "Notulen [[date]]\nAanwezig: [[P:a.full]], [[P:b.full]], [[P:c.full]]\nActie: [[P:c.given]] regelt de verhuizer."),
        ("csv", "achternaam,voornaam,afdeling\n[[P:a.last]],[[P:a.first]],Inkoop\n[[P:b.last]],[[P:b.first]],Verkoop"),
        ("json", "{\"naam\": \"[[P:a.full]]\", \"adres\": \"[[A:h]]\", \"opmerking\": \"bel [[P:b.given]] bij geen gehoor\"}"),
        ("log", "[[iso]] WARN bezorging: adres onbekend voor [[P:a.full]]: \"[[A:h]]\""),
        ("medical", "Geachte collega [[P:a.family]],\n\nHierbij verwijs ik [[b.t]] [[P:b.full]], wonende\n[[A:m]]\nnaar uw spreekuur.\n\nMet collegiale groet,\ndr. [[P:c.full]]"),
        ("delivery", "Afzender: [[P:a.full]], [[A:po]]\nOntvanger: [[P:b.fu]]\n[[A:m_uc]]"),
    ],
}

# ---------------------------------------------------------------------------------------------------
# hard negatives: sentences with no person and no address, set in the same genres as the positives

NEG_SENTENCES: dict[str, list[str]] = {
    "en": [
        "We moved the nightly build from Jenkins to GitHub Actions; the Kafka consumers now lag about [[k]] ms after a deploy.",
        "Goldman Sachs and Morgan Stanley both raised their forecasts, while Procter & Gamble slipped [[pct]]%.",
        "Can you order two Dell monitors and a Lenovo dock for room 12B?",
        "The Paris office closes early on Friday, so the Jordan and Georgia teams will join remotely.",
        "Release v[[ver]]: Grafana dashboards refreshed, Ansible roles added for the Rust toolchain, Django bumped to 5.1.",
        "May we push the review to August? The Florence and Victoria sales offices have not sent their numbers yet.",
        "Will the grant committee mark this as approved before the Bill of Materials is frozen?",
        "Main Street Capital reported higher net investment income this quarter.",
        "Boarding for the Lisbon flight moved to Gate 22; parking at Building 7 is closed until noon.",
        "The foundation funds research into Parkinson's disease and Alzheimer's, and last year one of its grantees shared in the Nobel Prize.",
        "Tighten the wheel nuts to 120 Newton meters and check them again after 50 km.",
        "McDonald's, Ferrari and Louis Vuitton all moved up in this year's brand ranking.",
        "Baker McKenzie sent the draft term sheet; Clifford Chance will review it for the lenders.",
        "Hope this helps! Frank feedback on the new onboarding flow is very welcome.",
        "Amber and Rose Gold variants are back in stock; the Midnight Blue one ships in [[k]] days.",
        "Victor is the NATO word for V, so the booking code reads Victor Echo Romeo [[k]].",
        "Said differently: the cache key ignores the salt, so two tenants can share an entry.",
        "thanks all, danke, gracias, bueno, see you after the break",
        "Click Save Changes, then open Billing Settings > Payment Methods > Add New Card.",
        "Quarterly Business Review: Revenue Growth, Customer Retention And Next Steps",
        "Model XPS-9530 fails POST after BIOS update 1.14.0; replacement unit requested under [[tid]].",
        "The Hadoop cluster and the Julia notebooks share one HDFS quota of [[k]] TB.",
        "The Ruby on Rails app still pins Puma 6, and the Sidekiq workers restart every [[k]] minutes.",
        "Mercedes-Benz and Porsche both delayed deliveries of the new models until March.",
        "Ask the Ford dealership on the ring road whether the Transit lease can start in June.",
        "Our accounts at Wells Fargo and Charles Schwab were reconciled on Monday.",
        "Disney+ and Warner Bros. Discovery renewals are due in March.",
        "The Hilton near the convention centre and the Marriott downtown both quoted for [[k]] rooms.",
        "Set the cryostat to 4 Kelvin; the Tesla coil demo is cancelled.",
        "Risk factors include Crohn's disease and Hodgkin lymphoma, according to the leaflet.",
        "The Turing Award and the Fields Medal ceremonies are both streamed this year.",
        "By Murphy's law the backup failed on the one night we needed it; Ohm's law explains the fuse.",
        "Monday's stand-up is moved because Tuesday is a public holiday in Victoria.",
        "Chanel, Hermès and Gucci reported stronger sales in Asia.",
        "Lunch is from Wendy's today, and the dessert is Ben & Jerry's.",
        "Johnson & Johnson and Johnson Controls are different companies, despite the name.",
        "Tour groups visit the Hoover Dam and then drive on to Santa Clara.",
        "Flights from San Francisco and São Paulo land at JFK Terminal 4.",
        "Apache Cassandra replaced the old Postgres cluster for the event store.",
        "The docs site is built with Hugo in about 2 s; the old Jekyll build took a minute.",
        "Ada and Pascal are still taught in the embedded systems course; Erlang comes in Unit 3 of the course.",
        "Platform 9 at Victoria is closed for maintenance this weekend.",
        "Sales grew in Jordan, Georgia and Chad, but fell in Paraguay.",
        "Bill the customer for three hours. Mark the invoice as paid. Grant access to the repo once it clears.",
        "Will do. Hope to have it by Friday.",
        "Prices are quoted in pounds sterling; Sterling Silver Bank handles the transfer.",
        "Harley-Davidson, Rolls-Royce and Aston Martin each sent a car for the motor show.",
        "The coffee order is Tim Hortons for the Toronto visit and Starbucks everywhere else.",
        "Dr. Martens boots are on the uniform list for the warehouse, size chart attached.",
        "Agenda: Q3 Numbers, Hiring Plan, Office Move, Any Other Business.",
        "Room 4.12 in Building C has the projector; Floor 2 kitchen is being repainted.",
        "Ticket [[tid]] was closed as a duplicate of [[tid2]].",
        "Upgrade Kubernetes to v[[ver]] and Helm to 3.14 before the freeze on the 15th.",
        "The Lincoln Center gala and the Kennedy Center award night fall in the same week.",
        "Join us in Florence for the May conference; the August one is in Jordan.",
        "Heineken, Philips and Albert Heijn signed the new sustainability pledge.",
        "Spin up two m5.large nodes in eu-west-1 and tag them cost-center=[[n]].",
        "Our Pandas pipeline reads the parquet files, and Jupyter runs the weekly report.",
        "Error 503 from the Stripe webhook; retry [[k]] of 5 scheduled.",
        "The Van Gogh Museum and the Rijksmuseum are closed on the same Monday.",
        "Order [[ref]] contains 3 x Sage Green mugs and 1 x Ivory Lamp.",
        "Charlie Foxtrot is the radio check phrase in the drill, nothing more.",
        "Deloitte and Ernst & Young both bid for the audit; KPMG declined.",
        "The Glasgow Coma Scale is recorded every hour on Ward 12B.",
        "Lloyd's syndicates underwrite the cyber cover; Allianz takes the property risk.",
        "Grant me access to the Hadoop bucket please, I will do the rest myself.",
        "The Ferrari in the lobby is a Lego model, in case anyone asks.",
        "Victoria sponge and Earl Grey are on the menu for the Friday social.",
        "Kafka Streams 3.7 drops the old Java 8 client; Gradle 8 is required.",
        "Halley's comet will not be visible again until 2061.",
        "August is the busiest month for the Florence and Jordan tours.",
        "The Nightingale ward reopens on Monday after the refurbishment.",
        "Carnegie Hall and Madison Square Garden are both sold out for December.",
        "MATLAB licences renew in June; Mathematica is on the same contract.",
        "Porsche Design watches and Bang & Olufsen speakers are the raffle prizes.",
        "Hope Street Ventures led the seed round; Frank & Oak joined as a strategic partner.",
        "Set the Kubernetes pod budget to [[k]] and redeploy the Grafana Loki stack.",
        "Dyson and Miele vacuum cleaners failed the dust test, Bosch passed.",
        "Pay by Visa or Mastercard; American Express is not accepted at Gate 22.",
        "Saint Lucia, Saint Kitts and San Marino were added to the shipping zones.",
        "Turn left at Building 7, then take the lift to Floor 3; the meeting is in room 3.14.",
        "Apache Hadoop and Apache Spark jobs now run on the same YARN queue.",
        "The Brooklyn Bridge photo is licensed from Getty Images.",
        "Will anyone object if the May retro moves to Zoom?",
        "Bugatti, Maserati and Lamborghini shared one stand at the Geneva show.",
        "Down syndrome awareness week starts on Monday; the Red Cross runs the stall.",
        "Mark all the Rust crates as deprecated and point people to the Go module.",
        "Prices rose after Hurricane season; Walmart and Costco raised delivery fees.",
        "Marks & Spencer and Sainsbury's both stock the new oat drink.",
        "The Euler method diverges here; use Runge-Kutta with a smaller step.",
        "Our Gaussian blur kernel is 5x5 and the Fourier transform runs on the GPU.",
    ],
    "de": [
        "Danke für die schnelle Antwort! Der Jenkins-Build läuft wieder und Kafka hat aufgeholt.",
        "Im August ziehen wir in Gebäude 7, Raum 12B.",
        "Bitte bei Dr. Oetker und Porsche die Angebote bis Freitag anfordern.",
        "Die Rechnungen von Siemens und Bosch sind eingegangen, Zahlungsziel 30 Tage.",
        "Paris und Wien sind im Mai komplett ausgebucht.",
        "Die Studie untersucht die Parkinson-Krankheit; der Nobelpreis wurde nicht erwähnt.",
        "Das Drehmoment beträgt 45 Newtonmeter, siehe Datenblatt Version [[ver]].",
        "Klicken Sie auf Einstellungen speichern und dann auf Zahlungsmethode hinzufügen.",
        "Aldi und Lidl haben die Preise für Butter um [[pct]] % gesenkt.",
        "Am Montag ist Teammeeting, am Dienstag Betriebsausflug an den Bodensee.",
        "Ticket [[tid]]: Drucker im Erdgeschoss meldet Papierstau.",
        "Die Grafana-Dashboards zeigen seit Version [[ver]] keine Daten mehr.",
        "Die Diesel-Flotte wird bis August durch Elektrofahrzeuge von Opel ersetzt.",
        "Der Röntgen-Raum im Erdgeschoss ist ab Mai wieder frei.",
        "Zeiss und Miele suchen Werkstudierende für den Standort Hamburg.",
        "Bitte die Kafka-Topics vor dem Wartungsfenster am Mittwoch leeren.",
        "Mercedes-Benz verschiebt die Auslieferung, Ferrari liefert pünktlich.",
        "Tor 22 ist ab heute gesperrt, bitte Tor 3 benutzen.",
        "Gute Besserung und viele Grüße aus dem Büro!",
    ],
    "fr": [
        "Merci ! Le build Jenkins est reparti et Kafka a rattrapé son retard.",
        "Louis Vuitton, Chanel et Hermès ont publié des résultats en hausse.",
        "Renault et Peugeot présenteront leurs nouveaux modèles en mai.",
        "La réunion est déplacée en salle 12B, bâtiment 7.",
        "Embarquement porte 22 pour le vol vers Florence.",
        "Le colloque porte sur la maladie d'Alzheimer et le prix Nobel de médecine.",
        "Cliquez sur Enregistrer les modifications puis sur Ajouter une carte.",
        "Saint-Étienne et Victoria sont jumelées depuis longtemps, paraît-il.",
        "Version [[ver]] : correctifs pour Django et mise à jour d'Ansible.",
        "Les sacs Longchamp et les montres Cartier sont en promotion en juin.",
        "La tour Eiffel et le Centre Pompidou ferment tôt le 14 juillet.",
        "Le syndrome de Down fait l'objet d'une nouvelle campagne.",
        "Bonne journée à toutes et à tous, et bon week-end !",
        "Ticket [[tid]] : l'imprimante du deuxième étage ne répond plus.",
        "Le couple de serrage est de 30 newtons-mètres.",
        "Michelin et Dassault ont signé l'accord en août.",
    ],
    "es": [
        "Gracias, bueno, el build de Jenkins ya funciona otra vez.",
        "Zara y Mango abren nuevas tiendas en mayo.",
        "El Corte Inglés y el Banco Santander patrocinan el evento de agosto.",
        "La reunión será en la sala 12B del edificio 7.",
        "El congreso trata la enfermedad de Parkinson y otras enfermedades neurodegenerativas.",
        "Santiago y San Sebastián tienen vuelos directos los lunes.",
        "Haga clic en Guardar cambios y después en Añadir tarjeta.",
        "Incidencia [[tid]]: la impresora de la segunda planta no imprime.",
        "La versión [[ver]] corrige un fallo de Grafana con Kafka.",
        "Dolores de cabeza y fiebre: consulte el prospecto antes de tomarlo.",
        "El estadio de La Cartuja acoge la final en mayo.",
        "Mercadona y Carrefour amplían el horario en agosto.",
        "Hay esperanza de cerrar el trimestre con un [[pct]] % más.",
        "Puerta de embarque 22 para el vuelo a Victoria.",
        "El Premio Cervantes se entrega en abril en Alcalá.",
    ],
    "it": [
        "Grazie! Il build di Jenkins è ripartito.",
        "Ferrari e Lamborghini hanno presentato i nuovi modelli a maggio.",
        "Barilla, Benetton e Prada hanno chiuso l'anno in crescita.",
        "La riunione è in aula 12B, edificio 7.",
        "Il convegno sul morbo di Parkinson si terrà ad agosto a Firenze.",
        "Clicca su Salva modifiche e poi su Aggiungi carta.",
        "Segnalazione [[tid]]: la stampante del secondo piano è bloccata.",
        "La versione [[ver]] aggiorna Django e Ansible.",
        "Armani e Versace sfilano a settembre, Gucci a febbraio.",
        "La Galleria Borghese e i Musei Vaticani sono chiusi il lunedì.",
        "La sindrome di Down è il tema della giornata di sensibilizzazione.",
        "Il colore viola è esaurito, resta solo il rosa.",
        "Il Premio Nobel per la fisica è stato annunciato martedì.",
        "Benvenuto nel portale clienti: scegli la lingua e continua.",
        "San Marino e Verona sono le tappe di maggio.",
    ],
    "nl": [
        "Dank je! Jenkins draait weer en Kafka loopt niet meer achter.",
        "Albert Heijn, Philips en Heineken tekenden het nieuwe convenant.",
        "De vergadering is in lokaal 12B, gebouw 7.",
        "Het Van Gogh Museum is in mei op maandag gesloten.",
        "Onderzoek naar de ziekte van Alzheimer kreeg extra geld.",
        "Klik op Wijzigingen opslaan en daarna op Kaart toevoegen.",
        "Melding [[tid]]: de printer op de tweede verdieping doet het niet.",
        "Versie [[ver]] lost een fout in Grafana op.",
        "Hema, Jumbo en Kruidvat openen op zondag om twaalf uur.",
        "Het Concertgebouw en het Rijksmuseum krijgen extra subsidie.",
        "Hoop doet leven, zeggen ze bij de servicedesk.",
        "In augustus vliegen we via Parijs naar Georgia.",
        "Er is nog hoop dat de levering vrijdag komt.",
        "Gate 22 is verplaatst naar pier D.",
        "De Nobelprijs voor scheikunde ging dit jaar naar een onderzoeksgroep.",
    ],
}

NEG_FRAMES: dict[str, list[tuple[str, str]]] = {
    "en": [
        ("chat", "[[s1]]"),
        ("chat", "[[time]] ops-bot: [[s1]]\n[[time2]] ops-bot: [[s2]]"),
        ("email", "Subject: [[subj]]\n\nHi all,\n\n[[s1]] [[s2]]\n\nThanks,\nthe Facilities team"),
        ("email", "Good morning everyone,\n\n[[s1]]\n\nKind regards,\nAccounts Payable"),
        ("ticket", "Ticket [[tid]] | Status: Open | Component: billing\n\n[[s1]]\n\nUpdate: [[s2]]"),
        ("log", "[[iso]] INFO scheduler: [[s1]]"),
        ("notes", "Notes [[date]]\n- [[s1]]\n- [[s2]]"),
        ("json", "{\"event\": \"note.created\", \"body\": \"[[s1]]\", \"labels\": [\"ops\", \"q[[n]]\"]}"),
        ("code", "# NOTE: [[s1]]\n# See also: [[s2]]"),
        ("csv", "date,comment\n2026-11-[[day]],\"[[s1]]\"\n2026-12-01,\"[[s2]]\""),
        ("headline", "[[subj]]\n\n[[s1]]"),
    ],
    "de": [("chat", "[[s1]]"), ("email", "Hallo zusammen,\n\n[[s1]] [[s2]]\n\nBeste Grüße\nIhr IT-Service"),
           ("ticket", "Ticket [[tid]] | Status: offen\n\n[[s1]]"), ("notes", "Notizen [[date]]\n- [[s1]]\n- [[s2]]"),
           ("log", "[[iso]] INFO job: [[s1]]")],
    "fr": [("chat", "[[s1]]"), ("email", "Bonjour à tous,\n\n[[s1]] [[s2]]\n\nCordialement,\nLe service informatique"),
           ("ticket", "Ticket [[tid]] | Statut : ouvert\n\n[[s1]]"), ("notes", "Notes du [[date]]\n- [[s1]]\n- [[s2]]"),
           ("json", "{\"message\": \"[[s1]]\"}")],
    "es": [("chat", "[[s1]]"), ("email", "Hola a todos:\n\n[[s1]] [[s2]]\n\nSaludos,\nEl equipo de sistemas"),
           ("ticket", "Ticket [[tid]] | Estado: abierto\n\n[[s1]]"), ("notes", "Notas del [[date]]\n- [[s1]]\n- [[s2]]"),
           ("log", "[[iso]] INFO tarea: [[s1]]")],
    "it": [("chat", "[[s1]]"), ("email", "Ciao a tutti,\n\n[[s1]] [[s2]]\n\nUn saluto,\nIl supporto IT"),
           ("ticket", "Ticket [[tid]] | Stato: aperto\n\n[[s1]]"), ("notes", "Appunti del [[date]]\n- [[s1]]\n- [[s2]]"),
           ("json", "{\"messaggio\": \"[[s1]]\"}")],
    "nl": [("chat", "[[s1]]"), ("email", "Hallo allemaal,\n\n[[s1]] [[s2]]\n\nGroet,\nDe servicedesk"),
           ("ticket", "Ticket [[tid]] | Status: open\n\n[[s1]]"), ("notes", "Notities [[date]]\n- [[s1]]\n- [[s2]]"),
           ("log", "[[iso]] INFO taak: [[s1]]")],
}
# hard negatives written whole, in the genres that have no frame above (each used once)
NEG_TEXTS: dict[str, list[tuple[str, str]]] = {
    "en": [
        ("contract", "SERVICE LEVEL AGREEMENT\n\n4.2 The Supplier shall restore the Kafka service within four hours.\n4.3 Service credits are paid in pounds sterling.\n4.4 This Agreement is governed by the laws of England and Wales."),
        ("contract", "Schedule 3 – Permitted Subcontractors\n\nAccenture, Deloitte and Ernst & Young may be engaged with prior written consent. Hosting is provided by Amazon Web Services in the Frankfurt region."),
        ("contract", "Clause 12 (Force Majeure) covers storms named by the Met Office, strikes and outages at Gate 22 of the port terminal."),
        ("hr_form", "LEAVE REQUEST FORM\nEmployee ID: E-[[n]]\nDepartment: Finance\nType: annual leave, 4 May – 8 May\nApproved by: line manager\nStatus: Pending"),
        ("hr_form", "Benefits overview: Bupa health cover, Aviva pension with a 5% match, the Cycle to Work scheme and 25 days of leave plus bank holidays."),
        ("hr_form", "Onboarding checklist\n[ ] Collect badge at Building 7 reception\n[ ] Set up Okta and Slack\n[ ] Read the Code of Conduct\n[ ] Book Health And Safety Induction"),
        ("medical", "Patient information leaflet\n\nParkinson's disease is a long-term condition. Tremor, stiffness and slow movement are common. Ask at the pharmacy counter about the Glasgow Coma Scale chart used on Ward 12B."),
        ("medical", "Visiting hours on the Nightingale ward are 2–4 pm. Hand gel is at the entrance; the Costa kiosk on Floor 1 closes at 6."),
        ("insurance", "Policy wording, section 7\n\nStorm damage to outbuildings is covered up to £[[n]]. Claims must be made within 30 days. This policy is underwritten by Lloyd's syndicates and administered by Aviva."),
        ("insurance", "Claim checklist: photos of the damage, the repair quote, the Toyota Corolla's registration document and the police reference number."),
        ("delivery", "DELIVERY NOTE [[n]]\nShip to: Warehouse B, Gate 22\nContents: 4 x Dell OptiPlex 7010, 2 x Logitech MX Keys\nCarrier: DHL Express"),
        ("delivery", "Picking list [[n]]: 3 x Grant Tracker Pro licence cards, 1 x Amber Desk Lamp, 2 x Victoria Plum Jam"),
        ("json", "{\"sku\": \"MRT-1460\", \"brand\": \"Dr. Martens\", \"colour\": \"Cherry Red\", \"sizes\": [6, 7, 8]}"),
        ("csv", "sku,product,colour\nAMB-01,Amber Desk Lamp,amber\nROS-02,Rose Vase,rose\nVIC-03,Victoria Sponge Mix,n/a"),
        ("code", "def test_will_retry():\n    # Kafka may be slow in CI; Jenkins retries twice\n    assert retry(max_attempts=3)"),
        ("code", "import pandas as pd\n# The Julia port lives in ./jl, the Rust bindings in ./rs\norders = pd.read_parquet(\"orders.parquet\")"),
        ("log", "[[iso]] WARN grafana: datasource 'Cassandra' slow (p99 [[k]]0 ms); alert 'Main-Street-Uptime' muted"),
        ("email", "Subject: Thank You For Your Order\n\nDear Sir or Madam,\n\nwe received your order for the Sterling collection. Delivery to Building 7 is expected in August.\n\nYours faithfully,\nCustomer Services"),
        ("notes", "Retro\n- Went well: Grafana alerts, the new Jenkins agents\n- To improve: the May release notes were late\n- Action: Platform team reviews Kafka retention"),
        ("ticket", "Ticket [[tid]] | Laptop request\nModel: Dell Latitude 7440\nCost centre: [[n]]\nDeliver to: room 12B, Building 7"),
    ],
    "de": [
        ("contract", "§ 9 Gerichtsstand\n\nGerichtsstand ist München. Es gilt das Recht der Bundesrepublik Deutschland."),
        ("hr_form", "Urlaubsantrag\nPersonalnummer: [[n]]\nZeitraum: 04.05.–08.05.\nStatus: offen"),
        ("delivery", "Lieferschein [[n]]\nLieferung an: Lager Tor 3\nInhalt: 2 x Bosch Akkuschrauber, 1 x Miele Staubsauger"),
    ],
    "fr": [
        ("contract", "Article 5 – Droit applicable\n\nLe présent contrat est régi par le droit français. Tout litige relève du tribunal de commerce de Lyon."),
        ("medical", "Notice : en cas de maladie de Parkinson, demandez l'avis de votre pharmacien avant de prendre ce médicament."),
        ("delivery", "Bon de livraison [[n]] : 3 x chaises Vitra, 1 x lampe Philips Hue, livraison quai 4."),
    ],
    "es": [
        ("contract", "Cláusula 3. El pago se realizará por transferencia a la cuenta del Banco Santander en un plazo de 30 días."),
        ("insurance", "Condiciones generales: los daños por agua están cubiertos hasta [[n]] euros, salvo en la planta 12B."),
        ("delivery", "Albarán [[n]]: 4 x sillas, 2 x monitores Dell. Entrega en el muelle 3."),
    ],
    "it": [
        ("contract", "Art. 4 – Foro competente\n\nPer ogni controversia è competente in via esclusiva il Foro di Milano."),
        ("hr_form", "Richiesta ferie\nMatricola: [[n]]\nPeriodo: 4–8 maggio\nStato: in attesa"),
        ("delivery", "Bolla [[n]]: 2 x macchine da caffè Bialetti, 1 x frigorifero Smeg. Consegna al magazzino B."),
    ],
    "nl": [
        ("contract", "Artikel 7 – Toepasselijk recht\n\nOp deze overeenkomst is Nederlands recht van toepassing."),
        ("medical", "Bijsluiter: bij de ziekte van Parkinson eerst overleggen met de apotheek."),
        ("delivery", "Pakbon [[n]]: 3 x Gazelle fietsen, 1 x Philips koffiezetapparaat. Levering bij dock 2."),
    ],
}

# pool names that are ordinary words in a hard negative's language (the point of the hard negative)
NEG_WORDS_THAT_ARE_NAMES = {"Mai"}  # German "May"; a Vietnamese given name
NEG_SUBJECTS = ("Office Closure Over The Holidays", "Quarterly Review Moved To Thursday",
                "New Expense Policy Takes Effect In May", "Parking Changes At Building 7",
                "Welcome To The New Service Portal", "Reminder: Security Training Due Friday")


def make_rows() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rng = random.Random(SEED)
    rows: list[dict[str, Any]] = []
    stats: dict[str, Any] = {"countries": Counter(), "multi": 0}
    for lang in LANGS:
        templates = POS[lang]
        order: list[int] = []
        while len(order) < N_POS[lang]:
            batch = list(range(len(templates)))
            rng.shuffle(batch)
            order.extend(batch)
        for i, t in enumerate(order[:N_POS[lang]]):
            kind, template = templates[t]
            row = Row(rng, lang, i)
            text, spans, intended = render(template, row)
            check_spans(text, spans, intended)
            stats["countries"].update(row.countries)
            stats["multi"] += row.multi
            rows.append({"id": f"unseen-pos-{lang}-{i:03d}", "kind": kind, "lang": lang, "negative": False,
                         "text": text, "spans": spans})
    for lang in LANGS:
        sentences, frames = NEG_SENTENCES[lang], NEG_FRAMES[lang]
        pool = list(range(len(sentences)))
        rng.shuffle(pool)
        taken = 0  # sentences used so far: each frame takes the next one or two from the shuffled pool
        for i in range(N_NEG[lang]):
            kind, frame = frames[i % len(frames)]
            row = Row(rng, lang, i)
            a, b = pool[taken % len(pool)], pool[(taken + 1) % len(pool)]
            taken += 2 if "[[s2]]" in frame else 1
            row.plain["s1"] = render(sentences[a], row)[0]
            row.plain["s2"] = render(sentences[b], row)[0]
            row.plain["subj"] = rng.choice(NEG_SUBJECTS)
            if kind in ("json", "csv"):
                row.plain["s1"] = row.plain["s1"].replace('"', "'")
                row.plain["s2"] = row.plain["s2"].replace('"', "'")
            text, spans, _ = render(frame, row)
            if spans or row.people or row.countries:
                raise SystemExit(f"negative row {lang}-{i} has a person or an address")
            rows.append({"id": f"unseen-neg-{lang}-{i:03d}", "kind": kind, "lang": lang, "negative": True,
                         "text": text, "spans": []})
        for j, (kind, template) in enumerate(NEG_TEXTS[lang], start=N_NEG[lang]):
            row = Row(rng, lang, j)
            text, spans, _ = render(template, row)
            if spans or row.people or row.countries:
                raise SystemExit(f"negative row {lang}-{j} has a person or an address")
            rows.append({"id": f"unseen-neg-{lang}-{j:03d}", "kind": kind, "lang": lang, "negative": True,
                         "text": text, "spans": []})
    return rows, stats


def check_spans(text: str, spans: list[list[Any]], intended: list[str]) -> None:
    end = 0
    for (s, e, kind), value in zip(spans, intended, strict=True):
        if text[s:e] != value or not value or value != value.strip():
            raise SystemExit(f"span {s}:{e} {kind} is {text[s:e]!r}, meant {value!r}")
        if s < end:
            raise SystemExit(f"span {s}:{e} overlaps or is out of order in {text!r}")
        if value.rstrip(".,;:") != value:
            raise SystemExit(f"span {value!r} ends in punctuation")
        end = e


def check_rows(rows: list[dict[str, Any]], stats: dict[str, Any]) -> list[str]:
    """Corpus-wide checks; returns warnings (pool names seen outside spans in positive texts)."""
    texts = [r["text"] for r in rows]
    if len(set(texts)) != len(texts):
        raise SystemExit("duplicate texts")
    tokens = all_pool_tokens()
    word = re.compile(r"(?<![\w@.])[^\W\d_][\w'’-]*(?![\w@])")
    warnings = []
    for r in rows:
        text = r["text"]
        covered = [(s, e) for s, e, _ in r["spans"]]
        for m in word.finditer(text):
            parts = [p for p in re.split(r"[-']", m.group()) if p]
            if not any(p in tokens for p in parts):
                continue
            if any(s < m.end() and m.start() < e for s, e in covered):
                continue
            if r["negative"] and m.group() in NEG_WORDS_THAT_ARE_NAMES:
                continue
            if r["negative"]:
                raise SystemExit(f"{r['id']}: pool name {m.group()!r} in a hard negative")
            warnings.append(f"{r['id']}: {m.group()!r} outside any span")
    pos = [r for r in rows if not r["negative"]]
    non_en = sum(r["lang"] != "en" for r in pos) / len(pos)
    if not (len(pos) >= 250 and len(rows) - len(pos) >= 150 and 0.2 <= non_en <= 0.3):
        raise SystemExit(f"totals off: {len(pos)} positives, {len(rows) - len(pos)} negatives, {non_en:.2f} non-en")
    if len(stats["countries"]) < 11 or stats["multi"] < 30:
        raise SystemExit(f"coverage off: {len(stats['countries'])} countries, {stats['multi']} multi-line")
    return warnings


def serialise(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-v", action="store_true", help="list pool names seen outside any span")
    parser.add_argument("--check", action="store_true", help="compare with the file on disk, write nothing")
    args = parser.parse_args()
    rows, stats = make_rows()
    warnings = check_rows(rows, stats)
    data = serialise(rows)
    if args.check:
        if OUT.read_text("utf-8") != data:
            raise SystemExit(f"{OUT.name} differs from what the generator writes")
    else:
        OUT.write_text(data, "utf-8", newline="\n")
    pos = [r for r in rows if not r["negative"]]
    neg = [r for r in rows if r["negative"]]
    by_type = Counter(t for r in pos for _, _, t in r["spans"])
    by_lang: dict[str, dict[str, int]] = defaultdict(Counter)
    for r in pos:
        by_lang[r["lang"]].update(t for _, _, t in r["spans"])
    print(f"wrote {len(rows)} rows to {OUT.name}: {len(pos)} positive texts, {len(neg)} hard negatives")
    print(f"spans by type: {dict(sorted(by_type.items()))}")
    print(f"multi-line addresses: {stats['multi']}")
    print("texts by lang (pos/neg): " + str({lang: (sum(r['lang'] == lang for r in pos),
                                                   sum(r['lang'] == lang for r in neg)) for lang in LANGS}))
    print(f"texts by kind (pos): {dict(sorted(Counter(r['kind'] for r in pos).items()))}")
    print(f"texts by kind (neg): {dict(sorted(Counter(r['kind'] for r in neg).items()))}")
    print(f"spans by lang and type: { {lang: dict(sorted(by_lang[lang].items())) for lang in LANGS} }")
    print(f"addresses by country format: {dict(stats['countries'].most_common())}")
    print(f"distinct PERSON strings: {len({r['text'][s:e] for r in pos for s, e, t in r['spans'] if t == 'PERSON'})}")
    if args.v:
        print("\n".join(warnings) or "no pool names outside spans")


if __name__ == "__main__":
    main()
