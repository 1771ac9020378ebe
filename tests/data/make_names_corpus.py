"""Generate tests/data/pii_names.jsonl: a held-out corpus of PERSON names and POSTAL_ADDRESS spans.

Written independently of the detector (its code and rule files were not read), so it measures the
detector on unseen text. Seeded, so the output is reproducible:

    python3 tests/data/make_names_corpus.py

Row format (one JSON object per line, like pii_holdout.jsonl):

    {"id", "kind", "lang", "negative", "text", "spans": [[start, end, TYPE], ...]}

TYPE is "PERSON" or "POSTAL_ADDRESS" only. Offsets are Python str indices (code points), end exclusive.
Every person name and every postal address in a positive text is labelled and nothing else is:
e-mail addresses, phone numbers, company names, cities or countries standing alone are never labelled.
Rows with "negative": true are hard negatives: "spans" is [] and the text holds no person name and no
postal address, only things a detector may confuse with them.

Labelling conventions
---------------------
PERSON
  * The name as written, including middle names, initials and particles (van, van der, de, de la, von,
    bin, bint, al-, el-, da, dos, Di, Lo, D', O', Mc) and hyphenated or double surnames ("María López
    Serrano", "Müller-Lüdenscheidt").
  * Titles and honorifics are outside the span: Dr., Prof., Mr., Ms., Mrs., Mx., Frau, Herr, M., Mme,
    Madame, Monsieur, Maître, Docteur, D., Dña., Sr., Sra., Dra., Sig., Sig.ra, Dott., Dott.ssa, Avv., Ing.,
    heer, mevrouw, dhr., mevr., mr., and salutations ("Dear", "Sehr geehrte", "Gentile", "Geachte").
  * A possessive 's (or bare ') is outside the span: "[Priya Raman]'s flight".
  * Surname-first orders are one span: "[Nguyễn Văn An]", "[Tanaka Hiroshi]", "[Raman, Priya]" when the
    comma form sits in one CSV cell or one field. Separate CSV cells / JSON fields (first_name,
    last_name) are separate spans.
  * A single given name or a single surname in a clear person context is PERSON: "Hi [Priya],",
    "ask [Tom] about", "[Priya] said", "Dear Ms. [Raman]", "[Raman] will check". Each mention of the
    same person is its own span ("Dr. [Priya Raman] ... [Priya] ... [Raman]").
  * Lower-case names in chat ("talked to [priya] yesterday") and upper-case names on shipping labels
    ("[PRIYA RAMAN]") are PERSON.
  * In "c/o NAME" the NAME is PERSON (when it is a person) and the "c/o" is not part of any span.
POSTAL_ADDRESS
  * One span from the first address element (house number or street, or "PO Box" / "Postfach" /
    "Boîte postale" / "Apartado de Correos" / "Casella Postale" / "Postbus", or "Flat" / "Unit" /
    "Apt" / "Suite" / "Appartement" / "Bât."... when it comes first) through postcode and city, plus
    state / province / county code and the country when written right after.
  * Multi-line addresses are one span covering all lines; the newlines are inside the span.
  * The recipient's name line and a "c/o ..." line are NOT part of the address span.
  * Trailing sentence punctuation is outside the span; a house number written after the street
    ("Hauptstraße 12") is inside it.
  * A company / department line or an "Attn:" line before the address is not part of it.
  * A city, a street name or a postcode alone (without the rest) is not an address and is not labelled.
NOT labelled (the hard negatives lean on these)
  * Companies, brands, products, museums, awards, diseases, units and tools named after people, even
    when written as a full name ("Morgan Stanley", "Albert Heijn", "Dr. Oetker", "Parkinson's disease",
    "newtons", "Jenkins", "Julia"); places that are also given names ("Florence", "Georgia",
    "Victoria", "Lincoln, Nebraska"); months and weekdays; Title Case headlines.
  * Street-like phrases that are not an address ("on Wall Street", "Downing Street said", "room 12B",
    "Building 4, Floor 2", "Unit 3 of the course", "Piazza Affari chiude in rialzo").

Every span is built from its intended value and asserted to equal text[start:end].
"""

from __future__ import annotations

import json
import random
import re
import string
import sys
from collections import Counter
from pathlib import Path

R = random.Random(20260419)
OUT = Path(__file__).with_name("pii_names.jsonl")

# ----------------------------------------------------------------------------------------------
# Name pools (written for this corpus). "order": "GF" = given-first, "FG" = family-first.
# ----------------------------------------------------------------------------------------------

CULTURES: dict[str, dict] = {
    "anglo": dict(order="GF", given=[
        "Oliver", "Amelia", "Harry", "Isla", "George", "Ava", "Noah", "Emily", "Jack", "Sophie", "Charlie",
        "Grace", "Thomas", "Ruby", "James", "Chloe", "William", "Megan", "Daniel", "Hannah", "Samuel", "Lucy",
        "Matthew", "Abigail", "Ethan", "Madison", "Tyler", "Brooke", "Connor", "Siobhan", "Declan", "Aoife",
        "Ciarán", "Niamh", "Tom", "Kate", "Ben", "Rosie", "Alfie", "Imogen", "Zoë", "Gareth", "Bethan", "Rhys",
        "Callum", "Eilidh", "Hamish", "Morag", "Dylan", "Savannah", "Brandon", "Kayla", "Trevor", "Shannon"],
        middle=["Rose", "James", "Louise", "Edward", "Anne", "Michael", "Grace", "Alexander", "Mae", "Patrick"],
        family=[
        "Thompson", "Whitfield", "Harrington", "Caldwell", "Pemberton", "Ashworth", "Blackwood", "Fletcher",
        "Holloway", "Lawson", "Marsh", "Prescott", "Radcliffe", "Sutherland", "Thornton", "O'Brien",
        "O'Sullivan", "McAllister", "MacLeod", "Fitzgerald", "Kavanagh", "Doherty", "Gallagher", "Brennan",
        "Hughes", "Bennett", "Carter", "Mitchell", "Reynolds", "Sullivan", "Whitaker", "Underwood",
        "Goldsmith", "Hollis", "Yates", "Ellison", "Pryce", "Cartwright", "Llewellyn", "Smith-Wilson",
        "Bowes-Lyon", "Ffoulkes-Jones", "Ó Súilleabháin", "McNamara", "Featherstone", "Okafor-Hughes",
        "Abernathy", "Drummond", "Kershaw", "Pennington", "Quigley", "Roper", "Stroud", "Tennant", "Vickers"]),
    "german": dict(order="GF", given=[
        "Lukas", "Jonas", "Leonie", "Finn", "Johanna", "Maximilian", "Katharina", "Felix", "Anneliese",
        "Jürgen", "Günther", "Sabine", "Wolfgang", "Ursula", "Dieter", "Helga", "Matthias", "Franziska",
        "Tobias", "Annika", "Henrik", "Mareike", "Björn", "Jörg", "Käthe", "Lena", "Hans-Peter", "Karl-Heinz",
        "Florian", "Valentina", "Reto", "Urs", "Seraina", "Nadine", "Sebastian", "Dörte", "Gisela", "Uwe"],
        middle=["Maria", "Friedrich", "Johannes", "Elisabeth", "Wilhelm"],
        family=[
        "Müller", "Schneider", "Fischer", "Weber", "Becker", "Hoffmann", "Schäfer", "Koch", "Bauer", "Richter",
        "Schröder", "Neumann", "Schwarz", "Zimmermann", "Krüger", "Hofmann", "Hartmann", "Lange",
        "Schmitt", "Werner", "Krause", "Meier", "Lehmann", "Köhler", "Weiß", "Jäger", "von Bülow",
        "von der Heide", "Müller-Lüdenscheidt", "Schulze-Wendt", "Oberhäuser", "Eichhorn", "Brandstätter",
        "Pfeiffer", "Gruber", "Huber", "Steiner", "Moser", "Leitner", "Egger", "Brunner", "Fankhauser",
        "Zürcher", "Baumgartner", "Kälin", "Großmann", "Dreßler", "Achenbach"]),
    "french": dict(order="GF", given=[
        "Camille", "Léa", "Hugo", "Chloé", "Louis", "Manon", "Théo", "Inès", "Mathis", "Élodie", "Antoine",
        "Margaux", "Baptiste", "Océane", "Clément", "Juliette", "Maëlle", "François", "Hélène", "Gaëtan",
        "Aurélien", "Solène", "Benoît", "Agathe", "Jean-Luc", "Marie-Claire", "Anne-Sophie", "Étienne",
        "Geneviève", "Thibault", "Noémie", "Loïc", "Amélie", "Rémi"],
        middle=["Marie", "Pierre", "Louise", "Jean"],
        family=[
        "Dubois", "Lefèvre", "Moreau", "Laurent", "Girard", "Bonnet", "Rousseau", "Fontaine", "Chevalier",
        "Lambert", "Mercier", "Faure", "Blanchard", "Garnier", "Perrin", "Barbier", "Lemaire", "de Villiers",
        "Le Goff", "Le Roux", "Duval-Meunier", "D'Amboise", "Desrosiers", "Beaulieu", "Tremblay", "Gagnon",
        "Bouchard", "Côté", "Pelletier", "Giraud", "Lacroix", "de Saint-Exupéry", "Vasseur", "Roussel"]),
    "spanish": dict(order="GF", given=[
        "José", "María", "Alejandro", "Valentina", "Santiago", "Camila", "Mateo", "Ximena", "Diego",
        "Guadalupe", "Javier", "Carmen", "Rodrigo", "Paloma", "Álvaro", "Inmaculada", "Íñigo", "Nerea",
        "Joaquín", "Begoña", "Maite", "Andrés", "Renata", "Fernanda", "Juan Carlos", "María José", "Agustín",
        "Rocío", "Sebastián", "Itziar", "Esteban", "Montserrat"],
        middle=[],
        family=[
        "García", "Fernández", "López", "Martínez", "Sánchez", "Pérez", "Gómez", "Ruiz", "Hernández",
        "Jiménez", "Díaz", "Moreno", "Muñoz", "Álvarez", "Romero", "Navarro", "Torres", "Domínguez",
        "Vázquez", "Ramos", "Gil", "Serrano", "Castillo", "Ortega", "de la Cruz", "del Río", "de los Santos",
        "Ruiz-Tagle", "Echeverría", "Iglesias", "Aguirre", "Salazar", "Quintana", "Villalobos", "Zubizarreta"]),
    "italian": dict(order="GF", given=[
        "Giulia", "Alessandro", "Francesca", "Lorenzo", "Chiara", "Matteo", "Martina", "Leonardo", "Federica",
        "Gabriele", "Alessia", "Riccardo", "Beatrice", "Tommaso", "Elisa", "Davide", "Ilaria", "Niccolò",
        "Gianluca", "Ludovica", "Salvatore", "Carmela", "Pasquale", "Annunziata", "Gianmarco", "Raffaella",
        "Vittoria", "Emanuele"],
        middle=["Maria", "Giuseppe", "Anna"],
        family=[
        "Rossi", "Russo", "Esposito", "Bianchi", "Romano", "Colombo", "Ricci", "Marino", "Greco", "Gallo",
        "Conti", "De Luca", "Mancini", "Giordano", "Rizzo", "Lombardi", "Moretti", "D'Angelo",
        "D'Alessandro", "Dell'Acqua", "Di Stefano", "Lo Russo", "Barbieri", "Caruso", "Ferraro",
        "Santoro", "Marchetti", "Pellegrini", "Bellucci", "Zanetti", "Cattaneo", "La Rosa"]),
    "dutch": dict(order="GF", given=[
        "Daan", "Sanne", "Bram", "Femke", "Jeroen", "Lotte", "Thijs", "Anouk", "Sem", "Marieke", "Joost",
        "Ilse", "Ruud", "Esther", "Wouter", "Maartje", "Sjoerd", "Noortje", "Gijs", "Eline", "Koen", "Lieke",
        "Joris", "Fenna", "Stijn", "Wietske", "Hendrik", "Annelies"],
        middle=["Jan", "Maria", "Cornelis"],
        family=[
        "de Vries", "van den Berg", "van Dijk", "Bakker", "Janssen", "Visser", "Smit", "Meijer", "de Boer",
        "Mulder", "de Groot", "Bos", "Peters", "Hendriks", "van Leeuwen", "Dekker", "Brouwer", "de Wit",
        "Dijkstra", "van der Meer", "van der Linden", "Kuipers", "Verhoeven", "Willems", "Claes", "Peeters",
        "Maes", "Wouters", "Vandenbroucke", "van 't Hof", "op den Kamp", "van der Berg", "Timmermans"]),
    "polish": dict(order="GF", given=[
        "Łukasz", "Agnieszka", "Krzysztof", "Małgorzata", "Wojciech", "Katarzyna", "Piotr", "Magdalena",
        "Grzegorz", "Zofia", "Paweł", "Joanna", "Michał", "Ewa", "Jędrzej", "Bożena", "Szymon", "Aleksandra"],
        middle=[],
        family=[
        "Kowalski", "Nowak", "Wiśniewska", "Wójcik", "Kowalczyk", "Kamiński", "Lewandowska", "Zieliński",
        "Szymańska", "Woźniak", "Dąbrowski", "Kozłowska", "Jankowski", "Mazur", "Krawczyk", "Grabowski",
        "Pawlak", "Michalska", "Brzęczyszczykiewicz", "Sienkiewicz-Nowak"]),
    "turkish": dict(order="GF", given=[
        "Mehmet", "Ayşe", "Mustafa", "Fatma", "Emre", "Zeynep", "Burak", "Elif", "Selin", "Oğuz", "Gülşen",
        "Hakan", "Derya", "Kerem", "Büşra", "Yusuf", "Ebru", "Çağla", "İlker", "Tuğba"],
        middle=[],
        family=[
        "Yılmaz", "Kaya", "Demir", "Şahin", "Çelik", "Yıldız", "Yıldırım", "Öztürk", "Aydın", "Özdemir",
        "Arslan", "Doğan", "Kılıç", "Aslan", "Çetin", "Koç", "Kurt", "Özkan", "Şimşek", "Karakaya"]),
    "arabic": dict(order="GF", given=[
        "Mohammed", "Fatima", "Ahmed", "Aisha", "Omar", "Layla", "Yousef", "Mariam", "Khalid", "Huda", "Tariq",
        "Rania", "Hassan", "Salma", "Ibrahim", "Amira", "Faisal", "Zainab", "Karim", "Yasmin", "Abdullah",
        "Samira", "Mahmoud", "Hind"],
        middle=[],
        family=[
        "al-Farsi", "Al-Mansour", "El-Sayed", "bin Rashid", "bint Khalid", "bin Salman", "Haddad", "Khoury",
        "Nasser", "Saleh", "Abdelrahman", "Hamdan", "Qureshi", "al-Hashimi", "Abu-Ghazaleh", "Barakat",
        "Darwish", "Ghanem", "Jaber", "Kassab", "Sabbagh", "Al Zahrani", "el-Khatib"]),
    "persian": dict(order="GF", given=[
        "Dariush", "Shirin", "Reza", "Parisa", "Kourosh", "Negar", "Arash", "Maryam", "Babak", "Leila",
        "Farhad", "Golnaz", "Kaveh", "Roya", "Siavash", "Azadeh", "Mehdi", "Niloufar", "Behrouz", "Ladan"],
        middle=[],
        family=[
        "Hosseini", "Rezaei", "Mohammadi", "Karimi", "Ahmadi", "Jafari", "Moradi", "Tehrani", "Shirazi",
        "Esfahani", "Farahani", "Kazemi", "Rahimi", "Sadeghi", "Ghorbani", "Najafi", "Zand", "Amini",
        "Mirzaei", "Bakhtiari"]),
    "indian": dict(order="GF", given=[
        "Karthik", "Lakshmi", "Senthil", "Meenakshi", "Arun", "Kavitha", "Murugan", "Rahul", "Anjali",
        "Vikram", "Pooja", "Arjun", "Neha", "Rohit", "Sunita", "Aditya", "Deepika", "Sanjay", "Kavya",
        "Sourav", "Ananya", "Debashish", "Moumita", "Arnab", "Rituparna", "Subhajit", "Tanushree", "Priya",
        "Venkatesh", "Divya", "Harish", "Shreya"],
        middle=["Kumar", "Devi", "Prasad", "Lal"],
        family=[
        "Subramanian", "Venkataraman", "Krishnamurthy", "Natarajan", "Ramasamy", "Sundaram",
        "Balasubramanian", "Raman", "Iyer", "Pillai", "Sharma", "Verma", "Gupta", "Agarwal", "Singh", "Yadav",
        "Mishra", "Chauhan", "Malhotra", "Kapoor", "Joshi", "Chatterjee", "Banerjee", "Mukherjee",
        "Bhattacharya", "Chakraborty", "Das", "Sen", "Ghosh", "Bose", "Dutta", "Reddy", "Nair"]),
    "chinese": dict(order="FG", given=[
        "Wei", "Xiaoming", "Jing", "Hao", "Mei", "Yifan", "Xinyi", "Zihan", "Jun", "Lihua", "Haoran", "Yutong",
        "Zhiwei", "Qian", "Ruoxi", "Jiahui", "Tao", "Shuang", "Mingyu", "Xiuying"],
        middle=[],
        family=[
        "Wang", "Li", "Zhang", "Liu", "Chen", "Yang", "Huang", "Zhao", "Wu", "Zhou", "Xu", "Sun", "Zhu", "Hu",
        "Guo", "Lin", "Luo", "Gao", "Zheng", "Xie", "Ouyang"]),
    "japanese": dict(order="FG", given=[
        "Haruto", "Yui", "Sota", "Hina", "Ren", "Sakura", "Yuto", "Aoi", "Kenji", "Yuki", "Takeshi", "Emi",
        "Daisuke", "Naoko", "Shohei", "Ayumi", "Ryo", "Misaki", "Kazuki", "Chihiro"],
        middle=[],
        family=[
        "Sato", "Suzuki", "Takahashi", "Tanaka", "Watanabe", "Ito", "Yamamoto", "Nakamura", "Kobayashi",
        "Kato", "Yoshida", "Yamada", "Sasaki", "Matsumoto", "Inoue", "Kimura", "Hayashi", "Shimizu",
        "Yamaguchi", "Mori"]),
    "korean": dict(order="FG", given=[
        "Min-jun", "Seo-yeon", "Ji-ho", "Ha-eun", "Do-yun", "Ji-woo", "Seo-jun", "Su-bin", "Hyun-woo",
        "Eun-ji", "Jae-won", "Yoon-seo", "Sung-min", "Da-eun", "Tae-hyun"],
        middle=[],
        family=["Kim", "Lee", "Park", "Choi", "Jung", "Kang", "Cho", "Yoon", "Jang", "Lim", "Han", "Shin",
                "Seo", "Kwon", "Hwang"]),
    "vietnamese": dict(order="FG", given=[
        "An", "Bảo", "Châu", "Dũng", "Hạnh", "Hương", "Khánh", "Linh", "Long", "Mai", "Nam", "Phương",
        "Quân", "Thảo", "Trang", "Tuấn", "Vy", "Hiếu"],
        middle=["Văn", "Thị", "Đức", "Minh", "Ngọc", "Thanh"],
        family=["Nguyễn", "Trần", "Lê", "Phạm", "Hoàng", "Huỳnh", "Phan", "Vũ", "Võ", "Đặng", "Bùi", "Đỗ",
                "Hồ", "Ngô", "Dương"]),
    "nigerian": dict(order="GF", given=[
        "Adebayo", "Folake", "Oluwaseun", "Temitope", "Babatunde", "Yetunde", "Olumide", "Funmilayo",
        "Ayodele", "Kehinde", "Chinedu", "Ngozi", "Emeka", "Adaeze", "Obinna", "Chiamaka", "Ikechukwu",
        "Nkechi", "Uchenna", "Chukwuemeka"],
        middle=["Oluwadamilare", "Chinonso", "Adeola"],
        family=[
        "Adeyemi", "Okonkwo", "Olawale", "Balogun", "Adekunle", "Ogunleye", "Afolabi", "Eze", "Nwosu",
        "Okafor", "Obi", "Nnamdi", "Onyekachi", "Uzor", "Akinola", "Okoro", "Ibekwe", "Oyelaran"]),
    "kenyan": dict(order="GF", given=[
        "Wanjiru", "Otieno", "Achieng", "Kiprop", "Njeri", "Kamau", "Akinyi", "Chebet", "Wafula", "Nyambura",
        "Auma", "Baraka", "Zawadi", "Jepkosgei"],
        middle=[],
        family=["Mwangi", "Odhiambo", "Kariuki", "Kipchumba", "Wekesa", "Njoroge", "Omondi", "Kimani",
                "Ochieng", "Rotich", "Muthoni", "Kiplagat", "Wambua", "Nyaga"]),
    "ethiopian": dict(order="GF", given=[
        "Abebe", "Tigist", "Dawit", "Meron", "Yohannes", "Selamawit", "Bereket", "Hiwot", "Tesfaye",
        "Mekdes", "Girma", "Liya", "Henok", "Almaz"],
        middle=[],
        family=["Bekele", "Tadesse", "Haile", "Gebremedhin", "Alemu", "Wolde", "Mengistu", "Desta", "Kebede",
                "Assefa", "Tesfamariam", "Gebreyes"]),
    "brazilian": dict(order="GF", given=[
        "João", "Ana Clara", "Gabriel", "Beatriz", "Rafael", "Larissa", "Thiago", "Gustavo", "Letícia",
        "Leandro", "Jéssica", "Vinícius", "Mariana", "Caio", "Thaís", "Luíza", "Otávio"],
        middle=["Pedro", "Cristina"],
        family=["Silva", "Santos", "Oliveira", "Souza", "Rodrigues", "Ferreira", "Alves", "Pereira", "Lima",
                "Carvalho", "Ribeiro", "Araújo", "Cavalcanti", "Gonçalves", "da Silva", "dos Santos",
                "de Oliveira", "Magalhães", "Barbosa"]),
    "russian": dict(order="GF", given=[
        "Dmitri", "Anastasia", "Sergei", "Ekaterina", "Alexei", "Olga", "Nikolai", "Tatiana", "Mikhail",
        "Svetlana", "Ivan", "Natalia", "Yuri", "Irina", "Ksenia", "Pavel", "Yelena", "Artyom"],
        middle=["Sergeyevich", "Ivanovna", "Petrovich", "Alexandrovna"],
        family=["Ivanov", "Smirnova", "Kuznetsov", "Popova", "Sokolov", "Lebedeva", "Kozlov", "Novikova",
                "Morozov", "Petrova", "Volkov", "Fedorova", "Vasiliev", "Zaitseva", "Pavlov", "Semyonova",
                "Golubev", "Vinogradova"]),
    "greek": dict(order="GF", given=[
        "Giorgos", "Eleni", "Dimitris", "Konstantinos", "Katerina", "Nikos", "Despina", "Yannis",
        "Vasiliki", "Panagiotis", "Christos", "Ioanna", "Stavros", "Eleftheria", "Theodoros"],
        middle=[],
        family=["Papadopoulos", "Papadopoulou", "Georgiou", "Nikolaidis", "Konstantinou", "Oikonomou",
                "Karagiannis", "Vlachos", "Papageorgiou", "Dimitriou", "Alexiou", "Christodoulou",
                "Antonopoulos", "Makris", "Theodorou"]),
}

# Cultures favoured by texts in each language (the rest of the time any culture is drawn).
LOCAL = {"de": ["german"], "fr": ["french"], "es": ["spanish"], "it": ["italian"], "nl": ["dutch"],
         "en": ["anglo"]}


class Person:
    """A generated person and the ways a text can write them."""

    def __init__(self, culture: str, given: str, family: str, middle: str = "", initial: bool = False):
        self.culture, self.given, self.family, self.middle = culture, given, family, middle
        order = CULTURES[culture]["order"]
        if culture == "vietnamese":
            self.full = " ".join(x for x in (family, middle, given) if x)
        elif order == "FG" and R.random() < 0.5:
            self.full = f"{family} {given}"
        elif middle:
            self.full = f"{given} {middle[0] + '.' if initial else middle} {family}"
        else:
            self.full = f"{given} {family}"
        self.short = f"{given} {family}"  # always given-first, e.g. for a sign-off

    @property
    def last_first(self) -> str:
        return f"{self.family}, {self.given}"


def person(lang: str = "en") -> Person:
    if R.random() < (0.35 if lang == "en" else 0.6):
        culture = R.choice(LOCAL[lang])
    else:
        culture = R.choice(list(CULTURES))
    c = CULTURES[culture]
    given, family = R.choice(c["given"]), R.choice(c["family"])
    middle = ""
    if culture == "vietnamese" or (c["middle"] and R.random() < 0.22):
        middle = R.choice(c["middle"])
    if culture == "spanish" and R.random() < 0.5:
        other = R.choice(c["family"])
        if other != family and not other.startswith("de"):
            family = f"{family} {other}"
    return Person(culture, given, family, middle, initial=R.random() < 0.5)


def people(n: int, lang: str = "en") -> list[Person]:
    out: list[Person] = []
    while len(out) < n:
        p = person(lang)
        if all(p.given != q.given and p.family != q.family for q in out):
            out.append(p)
    return out


def low(name: str) -> str:
    return ("i" + name[1:] if name.startswith("İ") else name).lower()


# ----------------------------------------------------------------------------------------------
# Addresses. Each country function returns the address as a string (single-line or multi-line).
# ----------------------------------------------------------------------------------------------

def d(n: int) -> str:
    return "".join(R.choice(string.digits) for _ in range(n))


def fill(tpl: str) -> str:
    """'#' -> digit, '@' -> letter (postcode-safe), '%' -> digit 1-9."""
    out = []
    for ch in tpl:
        if ch == "#":
            out.append(R.choice(string.digits))
        elif ch == "%":
            out.append(R.choice("123456789"))
        elif ch == "@":
            out.append(R.choice("ABDEFGHJLNPRSTUWXYZ"))
        else:
            out.append(ch)
    return "".join(out)


def hn(lo: int = 1, hi: int = 240) -> int:
    return R.randint(lo, hi) if R.random() < 0.8 else R.randint(lo, 40)


def join(lines: list[str], multi: bool, sep: str = ", ") -> str:
    return ("\n" if multi else sep).join(lines)


US_STREETS = ["Maple Avenue", "Oak Street", "Elm St", "Cedar Lane", "Pine Ridge Road", "Sunset Blvd",
              "Lakeview Drive", "Willow Court", "Hickory Way", "Magnolia Pl", "Chestnut St", "Birch Road",
              "Washington Ave", "Jefferson Street", "Highland Ave", "Park Place", "Riverside Dr", "Prospect Street",
              "Ridgewood Terrace", "Mill Pond Rd", "Church St", "Spring Garden St", "Cherry Hill Lane",
              "N Main St", "W 34th Street", "E Colfax Ave", "S Congress Ave", "Peachtree Street NE",
              "Massachusetts Avenue", "Old Post Road", "Bluebonnet Trail", "Canyon View Dr", "Harbor Blvd"]
US_CITIES = [("Springfield", "IL", "627##"), ("Austin", "TX", "787##"), ("Portland", "OR", "972##"),
             ("Denver", "CO", "802##"), ("Columbus", "OH", "432##"), ("Madison", "WI", "537##"),
             ("Raleigh", "NC", "276##"), ("Tucson", "AZ", "857##"), ("Boise", "ID", "837##"),
             ("Albany", "NY", "122##"), ("Brooklyn", "NY", "112##"), ("Ann Arbor", "MI", "481##"),
             ("Savannah", "GA", "314##"), ("Burlington", "VT", "054##"), ("Omaha", "NE", "681##"),
             ("Sacramento", "CA", "958##"), ("Oakland", "CA", "946##"), ("Nashville", "TN", "372##"),
             ("Richmond", "VA", "232##"), ("Pittsburgh", "PA", "152##"), ("Minneapolis", "MN", "554##"),
             ("Salt Lake City", "UT", "841##"), ("Louisville", "KY", "402##"), ("Tulsa", "OK", "741##"),
             ("Des Moines", "IA", "503##"), ("Cambridge", "MA", "021##"), ("Providence", "RI", "029##"),
             ("Hartford", "CT", "061##"), ("Anchorage", "AK", "995##"), ("Honolulu", "HI", "968##"),
             ("Atlanta", "GA", "303##"), ("Lincoln", "NE", "685##"), ("Paris", "TX", "754##")]


def addr_us(multi: bool) -> str:
    city, st, zt = R.choice(US_CITIES)
    z = fill(zt) + (f"-{d(4)}" if R.random() < 0.2 else "")
    last = f"{city}, {st} {z}" if R.random() < 0.85 else f"{city} {st} {z}"
    if R.random() < 0.12:
        first = [R.choice(["PO Box", "P.O. Box", "P. O. Box"]) + f" {R.randint(10, 99999)}"]
    else:
        first = [f"{hn(1, 9899)} {R.choice(US_STREETS)}"]
        r = R.random()
        if r < 0.3:
            unit = R.choice([f"Apt {R.randint(1, 40)}{R.choice('ABCD')}", f"Suite {R.randint(100, 2400)}",
                             f"Unit {R.randint(1, 300)}", f"Apt. {R.randint(1, 99)}", f"#{R.randint(2, 900)}"])
            if multi and R.random() < 0.5:
                first.append(unit)
            else:
                first[0] += (" " if unit.startswith("#") else ", ") + unit
    lines = [*first, last]
    if R.random() < 0.2:
        lines.append(R.choice(["USA", "United States"]))
    return join(lines, multi)


UK_STREETS = ["Kingsley Road", "Albert Street", "Victoria Terrace", "Church Lane", "Mill Lane", "High Street",
              "Station Road", "Queen's Avenue", "Elmwood Close", "Hawthorn Crescent", "Beech Grove",
              "Ashby Gardens", "Marlborough Mews", "Gloucester Place", "Cranbrook Drive", "Fairfield Way",
              "Priory Walk", "Nelson Square", "Thistle Row", "Bramble Way", "Rectory Lane", "St Mary's Road",
              "Clarendon Park Road", "Windmill Hill", "Kelvin Drive", "Ferry Road", "Cathedral Road"]
UK_CITIES = [("London", ["SW1A", "E8", "N16", "SE15", "NW3", "W11", "EC1V"]), ("Manchester", ["M1", "M20", "M14"]),
             ("Leeds", ["LS6", "LS1"]), ("Bristol", ["BS8", "BS3"]), ("Edinburgh", ["EH3", "EH9"]),
             ("Glasgow", ["G12", "G3"]), ("Cardiff", ["CF10", "CF11"]), ("Belfast", ["BT9", "BT7"]),
             ("Oxford", ["OX2", "OX4"]), ("Cambridge", ["CB1", "CB4"]), ("Brighton", ["BN1", "BN2"]),
             ("York", ["YO1", "YO10"]), ("Norwich", ["NR2"]), ("Sheffield", ["S10", "S11"]),
             ("Nottingham", ["NG7"]), ("Liverpool", ["L8", "L17"]), ("Aberdeen", ["AB10"]), ("Bath", ["BA1"]),
             ("Exeter", ["EX4"]), ("Swansea", ["SA1"])]


def addr_uk(multi: bool) -> str:
    city, pcs = R.choice(UK_CITIES)
    pc = f"{R.choice(pcs)} {R.randint(1, 9)}{fill('@@')}"
    street = f"{hn()} {R.choice(UK_STREETS)}"
    lines = []
    r = R.random()
    if r < 0.25:
        flat = R.choice([f"Flat {R.randint(1, 30)}", f"Flat {R.randint(1, 9)}{R.choice('ABC')}",
                         f"Apartment {R.randint(1, 60)}"])
        if multi:
            lines += [flat, street]
        else:
            lines.append(f"{flat}, {street}")
    elif r < 0.35:
        lines.append(f"PO Box {R.randint(100, 9999)}")
    elif r < 0.45:
        lines.append(f"{R.choice(['Rose', 'Ivy', 'Orchard', 'Meadow', 'Brook'])} Cottage")
        lines.append(street)
    else:
        lines.append(street)
    if multi:
        lines += [city.upper() if R.random() < 0.3 else city, pc]
    else:
        lines.append(f"{city} {pc}" if R.random() < 0.7 else f"{city}, {pc}")
    if R.random() < 0.25:
        lines.append(R.choice(["United Kingdom", "UK", "England", "Great Britain"]))
    return join(lines, multi)


CA_STREETS = ["Rue Saint-Denis", "Bay Street", "Yonge Street", "Granville Street", "Jasper Avenue",
              "rue Sherbrooke Ouest", "Spadina Avenue", "Robson Street", "Portage Avenue", "Barrington Street",
              "Elgin Street", "Queen Street West", "boulevard René-Lévesque", "Whyte Avenue", "Commercial Drive"]
CA_CITIES = [("Toronto", "ON", "M5V"), ("Montréal", "QC", "H2X"), ("Vancouver", "BC", "V6B"), ("Calgary", "AB", "T2P"),
             ("Edmonton", "AB", "T5J"), ("Ottawa", "ON", "K1P"), ("Winnipeg", "MB", "R3C"), ("Halifax", "NS", "B3H"),
             ("Québec", "QC", "G1R"), ("Victoria", "BC", "V8W"), ("Regina", "SK", "S4P")]


def addr_ca(multi: bool) -> str:
    city, prov, fsa = R.choice(CA_CITIES)
    pc = f"{fsa} {R.randint(0, 9)}{fill('@')}{R.randint(0, 9)}"
    if R.random() < 0.1:
        first = [f"PO Box {R.randint(100, 9999)}, Station A"]
    else:
        num = f"{hn(1, 3999)}"
        if R.random() < 0.3:
            num = f"{R.randint(100, 2500)}-{num}"
        first = [f"{num} {R.choice(CA_STREETS)}"]
        if R.random() < 0.2:
            first[0] += f", Suite {R.randint(100, 1900)}"
    lines = [*first, f"{city} {prov}  {pc}" if multi and R.random() < 0.5 else f"{city}, {prov} {pc}"]
    if R.random() < 0.3:
        lines.append("Canada")
    return join(lines, multi)


IE_STREETS = ["Ormond Quay Upper", "Dame Street", "Grafton Street", "Patrick Street", "Shop Street",
              "O'Connell Street", "Harcourt Road", "Merrion Square", "Leeson Street Lower", "Main Street",
              "Castle Street", "Eyre Square", "Henry Street", "Oliver Plunkett Street", "Quay Street"]
IE_CITIES = [("Dublin 2", "D02"), ("Dublin 8", "D08"), ("Dublin 7", "D07"), ("Cork", "T12"), ("Galway", "H91"),
             ("Limerick", "V94"), ("Waterford", "X91"), ("Kilkenny", "R95"), ("Sligo", "F91")]


def addr_ie(multi: bool) -> str:
    city, rk = R.choice(IE_CITIES)
    code = f"{rk} {R.choice('ACDEFHKNPRTVWXY')}{R.choice('ACDEFHKNPRTVWXY0123456789')}{d(1)}{R.choice('ACDEFHKNPRTVWXY0123456789')}"
    lines = []
    if R.random() < 0.25:
        lines.append(f"Apartment {R.randint(1, 80)}")
    lines.append(f"{hn(1, 140)} {R.choice(IE_STREETS)}")
    lines.append(city)
    if not city.startswith("Dublin") and R.random() < 0.5:
        lines.append(f"Co. {city}")
    lines.append(code)
    if R.random() < 0.3:
        lines.append("Ireland")
    return join(lines, multi)


AU_STREETS = ["Smith Street", "George Street", "Chapel Street", "Brunswick Street", "King William Street",
              "Hay Street", "Oxford Street", "Lygon Street", "Sydney Road", "Beaufort Street", "Ann Street",
              "Glebe Point Road", "Macquarie Street", "Crown Street", "Wattle Grove", "Banksia Crescent"]
AU_SUBURBS = [("Fitzroy", "VIC", "3065"), ("Surry Hills", "NSW", "2010"), ("Brunswick", "VIC", "3056"),
              ("Fortitude Valley", "QLD", "4006"), ("Fremantle", "WA", "6160"), ("Glenelg", "SA", "5045"),
              ("Newtown", "NSW", "2042"), ("Hobart", "TAS", "7000"), ("Braddon", "ACT", "2612"),
              ("Darwin City", "NT", "0800"), ("Parramatta", "NSW", "2150"), ("South Yarra", "VIC", "3141"),
              ("Adelaide", "SA", "5000"), ("Toowong", "QLD", "4066")]


def addr_au(multi: bool) -> str:
    sub, st, pc = R.choice(AU_SUBURBS)
    street = f"{hn(1, 400)} {R.choice(AU_STREETS)}"
    r = R.random()
    if r < 0.25:
        first = [f"Unit {R.randint(1, 30)}, {street}"] if not multi else [f"Unit {R.randint(1, 30)}", street]
    elif r < 0.45:
        first = [f"{R.randint(1, 30)}/{street}"]
    elif r < 0.55:
        first = [f"PO Box {R.randint(10, 9999)}"]
    else:
        first = [street]
    lines = [*first, f"{sub.upper() if multi and R.random() < 0.4 else sub} {st} {pc}"]
    if R.random() < 0.25:
        lines.append("Australia")
    return join(lines, multi)


DE_STREETS = ["Hauptstraße", "Lindenstraße", "Bahnhofstr.", "Goethestraße", "Schillerstraße", "Am Marktplatz",
              "Kastanienallee", "Friedrichstraße", "Bergmannstr.", "Gartenweg", "Rosenheimer Straße", "Königsallee",
              "Ludwigstraße", "Mühlenweg", "Kirchgasse", "Schlossplatz", "Eichendorffstraße", "Brunnenstraße",
              "Ostertorsteinweg", "Hohenzollernring", "Weserstraße", "Zeppelinstr.", "Theodor-Heuss-Straße",
              "Sonnenstraße", "An der Alster", "Sandstrasse", "Kurfürstendamm", "Ringstraße", "Lessingstr.",
              "Uhlandstraße", "Im Winkel", "Auf dem Berg", "Heinrich-Heine-Allee", "Alte Gasse"]
DE_CITIES = [("Berlin", "10###"), ("München", "80###"), ("Hamburg", "20###"), ("Köln", "50###"),
             ("Frankfurt am Main", "603##"), ("Stuttgart", "701##"), ("Leipzig", "041##"), ("Dresden", "010##"),
             ("Bremen", "281##"), ("Hannover", "301##"), ("Nürnberg", "904##"), ("Düsseldorf", "402##"),
             ("Heidelberg", "691##"), ("Freiburg im Breisgau", "790##"), ("Kiel", "241##"), ("Münster", "481##"),
             ("Erfurt", "990##"), ("Rostock", "180##"), ("Bad Homburg v. d. Höhe", "613##"), ("Göttingen", "370##")]


def de_num() -> str:
    n = str(hn(1, 180))
    r = R.random()
    return n + R.choice("abc") if r < 0.15 else (f"{n}-{int(n) + 2}" if r < 0.2 else n)


def addr_de(multi: bool) -> str:
    city, pt = R.choice(DE_CITIES)
    pc = fill(pt)
    if R.random() < 0.12:
        first = [f"Postfach {d(2)} {d(2)} {d(2)}" if R.random() < 0.6 else f"Postfach {R.randint(100, 99999)}"]
    else:
        first = [f"{R.choice(DE_STREETS)} {de_num()}"]
        if R.random() < 0.12:
            extra = R.choice(["Hinterhaus", f"{R.randint(1, 5)}. OG", f"Wohnung {R.randint(1, 30)}"])
            if multi:
                first.append(extra)
            else:
                first[0] += f", {extra}"
    cl = f"{'D-' if R.random() < 0.12 else ''}{pc} {city}"
    lines = [*first, cl]
    if R.random() < 0.2:
        lines.append(R.choice(["Deutschland", "Germany", "DEUTSCHLAND"]))
    return join(lines, multi)


AT_STREETS = ["Mariahilfer Straße", "Landstraßer Hauptstraße", "Herrengasse", "Getreidegasse", "Praterstraße",
              "Wiedner Hauptstraße", "Schottenring", "Annenstraße", "Maria-Theresien-Straße", "Linzer Gasse",
              "Kärntner Straße", "Favoritenstraße", "Neubaugasse", "Hietzinger Hauptstraße", "Museumstraße"]
AT_CITIES = [("Wien", "10#0"), ("Salzburg", "5020"), ("Graz", "80#0"), ("Linz", "40#0"), ("Innsbruck", "6020"),
             ("Klagenfurt am Wörthersee", "9020"), ("Bregenz", "6900"), ("St. Pölten", "3100")]


def addr_at(multi: bool) -> str:
    city, pt = R.choice(AT_CITIES)
    pc = fill(pt)
    if R.random() < 0.1:
        first = [f"Postfach {R.randint(1, 999)}"]
    else:
        n = str(hn(1, 160))
        r = R.random()
        n = f"{n}/{R.randint(1, 9)}/{R.randint(1, 30)}" if r < 0.35 else (f"{n}/{R.randint(1, 25)}" if r < 0.6 else n)
        first = [f"{R.choice(AT_STREETS)} {n}"]
    lines = [*first, f"{R.choice(['', '', 'A-', 'AT-'])}{pc} {city}"]
    if R.random() < 0.3:
        lines.append(R.choice(["Österreich", "Austria"]))
    return join(lines, multi)


CH_STREETS = ["Bahnhofstrasse", "Limmatquai", "Rue du Rhône", "Marktgasse", "Spitalgasse", "Seefeldstrasse",
              "Avenue de la Gare", "Freie Strasse", "Via Nassa", "Kramgasse", "Badenerstrasse", "Rue de Lausanne",
              "Zähringerstrasse", "Hauptstrasse", "Chemin des Crêts", "Rämistrasse"]
CH_CITIES = [("Zürich", "80##"), ("Bern", "30##"), ("Basel", "40##"), ("Genève", "12##"), ("Lausanne", "100#"),
             ("Lugano", "6900"), ("Luzern", "600#"), ("St. Gallen", "9000"), ("Winterthur", "840#"),
             ("Fribourg", "1700")]


def addr_ch(multi: bool) -> str:
    city, pt = R.choice(CH_CITIES)
    pc = fill(pt)
    if R.random() < 0.12:
        first = [R.choice([f"Postfach {R.randint(100, 9999)}", f"Case postale {R.randint(1, 999)}", "Postfach"])]
    else:
        street = R.choice(CH_STREETS)
        n = str(hn(1, 120)) + (R.choice("ab") if R.random() < 0.1 else "")
        first = [f"{n} {street}" if street.startswith(("Rue", "Avenue", "Chemin")) and R.random() < 0.5
                 else f"{street} {n}"]
    lines = [*first, f"{'CH-' if R.random() < 0.25 else ''}{pc} {city}"]
    if R.random() < 0.3:
        lines.append(R.choice(["Schweiz", "Suisse", "Switzerland", "Svizzera"]))
    return join(lines, multi)


FR_STREETS = ["rue de la République", "avenue Jean Jaurès", "boulevard Voltaire", "rue Victor Hugo",
              "place Bellecour", "rue des Lilas", "impasse des Peupliers", "allée des Tilleuls",
              "rue du Faubourg Saint-Antoine", "quai des Chartrons", "cours Mirabeau", "rue Sainte-Catherine",
              "avenue de la Libération", "chemin des Vignes", "rue Pasteur", "boulevard Haussmann",
              "rue Nationale", "rue du Général Leclerc", "place du Capitole", "rue d'Alsace-Lorraine",
              "avenue des Champs-Élysées", "rue de la Paix", "route de Narbonne", "rue des Trois-Mages"]
FR_CITIES = [("Paris", "750#%"), ("Lyon", "6900%"), ("Marseille", "130%%"), ("Toulouse", "31000"),
             ("Bordeaux", "33000"), ("Lille", "59000"), ("Nantes", "44000"), ("Strasbourg", "67000"),
             ("Montpellier", "34000"), ("Rennes", "35000"), ("Nice", "06000"), ("Aix-en-Provence", "13100"),
             ("Dijon", "21000"), ("Tours", "37000"), ("Brest", "29200"), ("Saint-Étienne", "42000"),
             ("Clermont-Ferrand", "63000")]


def addr_fr(multi: bool) -> str:
    city, pt = R.choice(FR_CITIES)
    pc = fill(pt)
    if city == "Paris":
        pc = f"750{R.randint(1, 20):02d}"
    lines = []
    if R.random() < 0.1:
        lines.append(R.choice([f"Boîte postale {R.randint(1, 999)}", f"BP {R.randint(1, 9999)}"]))
        cl = f"{pc[:2]}{R.randint(0, 9)}{R.randint(0, 9)}{R.randint(1, 9)} {city} Cedex"
    else:
        if R.random() < 0.2:
            lines.append(R.choice([f"Appartement {R.randint(1, 60)}", f"Bât. {R.choice('ABCD')}, appt {R.randint(1, 40)}",
                                   f"Résidence Les {R.choice(['Pins', 'Acacias', 'Mimosas'])}"]))
        n = str(hn(1, 220)) + (R.choice([" bis", " ter", "B"]) if R.random() < 0.12 else "")
        lines.append(f"{n}{',' if R.random() < 0.2 else ''} {R.choice(FR_STREETS)}")
        cl = f"{pc} {city.upper() if multi and R.random() < 0.4 else city}"
    lines.append(cl)
    if R.random() < 0.2:
        lines.append("France")
    return join(lines, multi)


ES_STREETS = ["Calle Mayor", "Calle de Alcalá", "Gran Vía", "Avenida de la Constitución", "Paseo de Gracia",
              "Calle Real", "Plaza de España", "Calle del Carmen", "Rambla de Catalunya", "Avenida Diagonal",
              "Calle San Fernando", "Calle Larios", "Calle de Serrano", "Carrer de Provença", "Calle Sierpes",
              "Paseo de la Castellana", "Avenida del Puerto", "Calle de Fuencarral", "Calle Ancha",
              "Ronda de Toledo", "Travesía del Conde"]
ES_CITIES = [("Madrid", "280##", "Madrid"), ("Barcelona", "080##", "Barcelona"), ("Sevilla", "410##", "Sevilla"),
             ("Valencia", "460##", "Valencia"), ("Málaga", "290##", "Málaga"), ("Bilbao", "480##", "Bizkaia"),
             ("Zaragoza", "500##", "Zaragoza"), ("Granada", "180##", "Granada"), ("A Coruña", "150##", "A Coruña"),
             ("Oviedo", "330##", "Asturias"), ("Palma", "070##", "Illes Balears"), ("Salamanca", "370##", "Salamanca"),
             ("San Sebastián", "200##", "Gipuzkoa"), ("Valladolid", "470##", "Valladolid")]


def addr_es(multi: bool) -> str:
    city, pt, prov = R.choice(ES_CITIES)
    pc = fill(pt)
    if R.random() < 0.12:
        first = [f"Apartado de Correos {R.randint(1, 9999)}"]
    else:
        street = R.choice(ES_STREETS)
        if R.random() < 0.25 and street.startswith("Calle "):
            street = "C/ " + street[6:]
        n = str(hn(1, 200))
        floor = R.choice(["", "", f"{R.randint(1, 9)}º {R.choice('ABCD')}", f"{R.randint(1, 8)}º izda.",
                          f"{R.randint(1, 8)}.º dcha.", "bajo", f"{R.randint(1, 6)}º {R.randint(1, 4)}ª"])
        first = [f"{street}, {n}" if R.random() < 0.5 else f"{street} {n}"]
        if floor:
            first[0] += f", {floor}"
    cl = f"{pc} {city}"
    if R.random() < 0.2:
        cl += f" ({prov})"
    lines = [*first, cl]
    if R.random() < 0.2:
        lines.append(R.choice(["España", "Spain"]))
    return join(lines, multi)


IT_STREETS = ["Via Roma", "Via Garibaldi", "Corso Vittorio Emanuele II", "Piazza del Duomo", "Via dei Mille",
              "Viale Monza", "Via Toledo", "Via della Spiga", "Corso Buenos Aires", "Via San Vitale", "Piazza Navona",
              "Via Nazionale", "Lungarno Corsini", "Via XX Settembre", "Via Cavour", "Vicolo del Cinque", "Via Po",
              "Borgo San Frediano", "Piazza Maggiore", "Via Etnea", "Salita San Nicola da Tolentino", "Viale Europa"]
IT_CITIES = [("Milano", "MI", "201##"), ("Roma", "RM", "001##"), ("Napoli", "NA", "801##"), ("Torino", "TO", "101##"),
             ("Firenze", "FI", "501##"), ("Bologna", "BO", "401##"), ("Venezia", "VE", "301##"),
             ("Genova", "GE", "161##"), ("Palermo", "PA", "901##"), ("Verona", "VR", "371##"), ("Bari", "BA", "701##"),
             ("Cagliari", "CA", "091##"), ("Catania", "CT", "951##"), ("Padova", "PD", "351##")]


def addr_it(multi: bool) -> str:
    city, prov, pt = R.choice(IT_CITIES)
    pc = fill(pt)
    if R.random() < 0.1:
        first = [f"Casella Postale {R.randint(1, 999)}" if R.random() < 0.5 else f"C.P. {R.randint(1, 999)}"]
    else:
        n = str(hn(1, 180)) + (R.choice(["/A", "/B", " bis", "r"]) if R.random() < 0.12 else "")
        first = [f"{R.choice(IT_STREETS)}{R.choice([' ', ', '])}{n}"]
        if R.random() < 0.12:
            first.append(f"Scala {R.choice('ABC')}, int. {R.randint(1, 20)}")
    r = R.random()
    cl = f"{pc} {city} {prov}" if r < 0.35 else (f"{pc} {city} ({prov})" if r < 0.65 else f"{pc} {city}")
    lines = [", ".join(first) + " - " + cl] if not multi and R.random() < 0.3 else [*first, cl]
    if R.random() < 0.2:
        lines.append(R.choice(["Italia", "Italy"]))
    return join(lines, multi)


NL_STREETS = ["Keizersgracht", "Prinsengracht", "Herengracht", "Stationsstraat", "Kerkstraat", "Dorpsstraat",
              "Oudegracht", "Vondellaan", "Beethovenlaan", "Nieuwe Binnenweg", "Lange Voorhout", "Molenweg",
              "Wilhelminastraat", "Julianalaan", "Singel", "Bloemgracht", "Jan van Galenstraat",
              "Burgemeester de Withstraat", "Spui", "Overtoom", "Rijnkade", "Eikenlaan"]
NL_CITIES = [("Amsterdam", "10##"), ("Utrecht", "35##"), ("Rotterdam", "30##"), ("Den Haag", "25##"),
             ("'s-Gravenhage", "25##"), ("Groningen", "97##"), ("Eindhoven", "56##"), ("Leiden", "23##"),
             ("Arnhem", "68##"), ("Maastricht", "62##"), ("Zwolle", "80##"), ("Haarlem", "20##"), ("Breda", "48##"),
             ("Delft", "26##")]


def nl_pc(pt: str) -> str:
    letters = fill("@@")
    while letters in ("SS", "SD", "SA"):
        letters = fill("@@")
    return f"{fill(pt).replace('0', '1', 1) if pt.startswith('0') else fill(pt)} {letters}"


def addr_nl(multi: bool) -> str:
    city, pt = R.choice(NL_CITIES)
    pc = nl_pc(pt)
    if R.random() < 0.12:
        first = [f"Postbus {R.randint(1, 99999)}"]
    else:
        n = str(hn(1, 400)) + R.choice(["", "", "", "", "-II", "-III", "A", " hs", "-1", " bis"])
        first = [f"{R.choice(NL_STREETS)} {n}"]
    if not multi and R.random() < 0.3:
        pc = pc.replace(" ", "")
    lines = [*first, f"{pc} {city.upper() if multi and R.random() < 0.4 else city}"]
    if R.random() < 0.2:
        lines.append(R.choice(["Nederland", "The Netherlands", "NL"]))
    return join(lines, multi)


BE_STREETS = ["Rue Neuve", "Meir", "Avenue Louise", "Chaussée de Wavre", "Korenmarkt", "Veldstraat",
              "Rue du Marché aux Herbes", "Kortrijksesteenweg", "Boulevard d'Avroy", "Bondgenotenlaan",
              "Rue de la Loi", "Steenstraat", "Rue des Bouchers", "Frankrijklei", "Place Saint-Lambert"]
BE_CITIES = [("Bruxelles", "1000"), ("Brussel", "1000"), ("Ixelles", "1050"), ("Antwerpen", "20#0"), ("Gent", "9000"),
             ("Liège", "4000"), ("Leuven", "3000"), ("Brugge", "8000"), ("Namur", "5000"), ("Mons", "7000")]


def addr_be(multi: bool) -> str:
    city, pt = R.choice(BE_CITIES)
    n = str(hn(1, 300))
    r = R.random()
    if r < 0.3:
        n += R.choice([f" bus {R.randint(1, 30)}", f" boîte {R.randint(1, 30)}", f"/{R.randint(1, 12)}", f" bte {R.randint(1, 9)}"])
    first = [f"{R.choice(BE_STREETS)} {n}"]
    if R.random() < 0.08:
        first = [R.choice([f"Postbus {R.randint(1, 999)}", f"Boîte postale {R.randint(1, 999)}"])]
    lines = [*first, f"{'B-' if R.random() < 0.2 else ''}{fill(pt)} {city}"]
    if R.random() < 0.3:
        lines.append(R.choice(["Belgique", "België", "Belgium", "Belgien"]))
    return join(lines, multi)


PL_STREETS = ["ul. Marszałkowska", "ul. Floriańska", "al. Grunwaldzka", "ul. Piotrkowska", "ul. Świętojańska",
              "ul. Długa", "al. Jerozolimskie", "ul. Mickiewicza", "pl. Solny"]
PL_CITIES = [("Warszawa", "00-###"), ("Kraków", "31-###"), ("Gdańsk", "80-###"), ("Łódź", "90-###"),
             ("Wrocław", "50-###"), ("Gdynia", "81-###"), ("Poznań", "61-###")]


def addr_pl(multi: bool) -> str:
    city, pt = R.choice(PL_CITIES)
    n = f"{hn(1, 150)}" + (f"/{R.randint(1, 60)}" if R.random() < 0.5 else "")
    lines = [f"{R.choice(PL_STREETS)} {n}", f"{fill(pt)} {city}"]
    if R.random() < 0.3:
        lines.append(R.choice(["Polska", "Poland"]))
    return join(lines, multi)


SE_STREETS = ["Drottninggatan", "Storgatan", "Kungsgatan", "Götgatan", "Sveavägen", "Linnégatan", "Västra Hamngatan"]
SE_CITIES = [("Stockholm", "1## ##"), ("Göteborg", "41# ##"), ("Malmö", "21# ##"), ("Uppsala", "75# ##")]


def addr_se(multi: bool) -> str:
    city, pt = R.choice(SE_CITIES)
    lines = [f"{R.choice(SE_STREETS)} {hn(1, 120)}", f"{'SE-' if R.random() < 0.3 else ''}{fill(pt)} {city}"]
    if R.random() < 0.3:
        lines.append(R.choice(["Sverige", "Sweden"]))
    return join(lines, multi)


PT_STREETS = ["Rua Augusta", "Avenida da Liberdade", "Rua de Santa Catarina", "Rua do Ouro", "Travessa do Carmo",
              "Rua Garrett", "Avenida dos Aliados"]
PT_CITIES = [("Lisboa", "11##-###"), ("Porto", "40##-###"), ("Coimbra", "30##-###"), ("Braga", "47##-###")]


def addr_pt(multi: bool) -> str:
    city, pt = R.choice(PT_CITIES)
    n = f"{hn(1, 200)}" + (f", {R.randint(1, 6)}º {R.choice(['Esq.', 'Dto.'])}" if R.random() < 0.4 else "")
    lines = [f"{R.choice(PT_STREETS)}, {n}", f"{fill(pt)} {city}"]
    if R.random() < 0.3:
        lines.append("Portugal")
    return join(lines, multi)


ADDR = {"US": addr_us, "UK": addr_uk, "CA": addr_ca, "IE": addr_ie, "AU": addr_au, "DE": addr_de, "AT": addr_at,
        "CH": addr_ch, "FR": addr_fr, "ES": addr_es, "IT": addr_it, "NL": addr_nl, "BE": addr_be, "PL": addr_pl,
        "SE": addr_se, "PT": addr_pt}
LANG_COUNTRIES = {"en": ["US", "US", "US", "UK", "UK", "CA", "IE", "AU"], "de": ["DE", "DE", "DE", "AT", "CH"],
                  "fr": ["FR", "FR", "FR", "BE", "CH", "CA"], "es": ["ES"], "it": ["IT", "IT", "IT", "CH"],
                  "nl": ["NL", "NL", "NL", "BE"]}
COUNTRY_USE: Counter = Counter()


def address(lang: str = "en", multi: bool | None = None, country: str | None = None) -> str:
    if country is None:
        if R.random() < (0.65 if lang == "en" else 0.8):
            country = R.choice(LANG_COUNTRIES[lang])
        else:
            country = R.choice(list(ADDR))
    if multi is None:
        multi = R.random() < 0.3
    COUNTRY_USE[country] += 1
    return ADDR[country](multi)


def one_line(lang: str = "en", country: str | None = None) -> str:
    return address(lang, multi=False, country=country)


# ----------------------------------------------------------------------------------------------
# Small fillers (never labelled)
# ----------------------------------------------------------------------------------------------

def P(x: str) -> tuple[str, str]:
    return (x, "PERSON")


def A(x: str) -> tuple[str, str]:
    return (x, "POSTAL_ADDRESS")


DOMAINS = ["northwind.example", "bluefin-logistics.example", "acme-parts.example", "kite-insurance.example",
           "ostara-health.example", "verde-energia.example", "polder-data.example"]
ROLES = ["billing", "accounts", "support", "noreply", "orders", "info", "hr", "legal", "service"]
FIRMS = ["Northwind Supplies", "Bluefin Logistics", "Acme Parts Ltd", "Kite Insurance", "Ostara Health",
         "Verde Energía S.L.", "Polder Data B.V.", "Alpenblick GmbH", "Lumière SAS", "Quercia S.r.l."]
PRODUCTS = ["standing desk", "espresso machine", "router", "winter tyres", "replacement charger", "office chair",
            "monitor arm", "lab notebook", "hiking boots", "dishwasher"]


def mail() -> str:
    return f"{R.choice(ROLES)}@{R.choice(DOMAINS)}"


def num(lo: int = 10000, hi: int = 999999) -> int:
    return R.randint(lo, hi)


def hhmm() -> str:
    return f"{R.randint(7, 23):02d}:{R.randint(0, 59):02d}"


def ts() -> str:
    return f"2025-{R.randint(1, 12):02d}-{R.randint(1, 28):02d}T{R.randint(0, 23):02d}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}Z"


def date_en() -> str:
    return f"{R.randint(1, 28)} {R.choice(['January', 'March', 'April', 'June', 'September', 'October', 'November'])} 2025"


def date_num() -> str:
    return f"{R.randint(1, 28):02d}.{R.randint(1, 12):02d}.2025"


def phone() -> str:
    return R.choice([f"+44 20 7946 {d(4)}", f"+49 30 {d(7)}", f"({R.randint(201, 989)}) 555-{d(4)}",
                     f"+33 6 {d(2)} {d(2)} {d(2)} {d(2)}", f"+34 6{d(2)} {d(3)} {d(3)}", f"+39 3{d(2)} {d(7)}",
                     f"+31 6 {d(8)}"])


def amount() -> str:
    return f"{R.randint(5, 900)}.{R.randint(0, 99):02d}"


def cap(s: str) -> str:
    return s[:1].upper() + s[1:]


# ----------------------------------------------------------------------------------------------
# Positive templates. Each returns a list of parts: plain strings and (value, TYPE) tuples.
# ----------------------------------------------------------------------------------------------

TEMPLATES: list[tuple[str, str, object]] = []


def tpl(kind: str, lang: str):
    def deco(fn):
        TEMPLATES.append((kind, lang, fn))
        return fn
    return deco


# ---- English ----

@tpl("email", "en")
def _():
    p, s = people(2)
    return ["Hi ", P(p.given), ",\n\nthanks for sending the signed form. Could you confirm that your new address is ",
            A(one_line()), "?\n\nBest,\n", P(s.short)]


@tpl("email", "en")
def _():
    p, s = people(2)
    t = R.choice(["Dr.", "Dr", "Prof.", "Mr.", "Ms.", "Mrs."])
    return [f"Dear {t} ", P(p.full), ",\n\nfurther to our call, please send the original documents to:\n\n",
            A(address(multi=True)), "\n\nKind regards,\n", P(s.given)]


@tpl("email", "en")
def _():
    p, s = people(2)
    return [f"Dear {R.choice(['Ms.', 'Mr.', 'Dr.', 'Mx.'])} ", P(p.family), ",\n\nThank you for your letter. We have updated the record for ",
            P(p.full), "; all future correspondence will go to ", A(one_line()), ". If anything is still wrong, ",
            P(p.given), ", simply reply to this e-mail.\n\nYours sincerely,\n", P(s.full), "\nCustomer Care, ",
            R.choice(FIRMS)]


@tpl("email", "en")
def _():
    a, b = people(2)
    return ["---------- Forwarded message ---------\nFrom: ", P(a.full), f" <{mail()}>\nTo: ", P(b.full),
            "\nSubject: Change of address\n\nPlease update my billing address to ", A(one_line()), ". Thanks, ", P(a.given)]


@tpl("email", "en")
def _():
    a, b, c, s = people(4)
    return ["Hello ", P(a.given), " and ", P(b.given), ",\n\nthe dinner is still at the hotel, but the workshop has moved to ",
            A(one_line()), ". ", P(c.given), " from our office will meet you at the entrance.\n\nCheers,\n", P(s.short)]


@tpl("email", "en")
def _():
    p, acc, s = people(3)
    return [f"Subject: Re: invoice {num()}\n\n", P(p.given), ", the invoice went to the old address (", A(one_line()),
            "). Our accountant, ", P(acc.full), ", says it must be re-issued to ", A(one_line()), ".\n\n— ", P(s.short)]


@tpl("email", "en")
def _():
    prof, s = people(2)
    return ["Dear Prof. ", P(prof.family), ",\n\nmy name is ", P(s.full), " and I would like to apply for the PhD position "
            "advertised by your group. Dr. ", P(prof.full), "'s lecture series was what got me into the field. "
            "My postal address for the paperwork is:\n", A(address(multi=True)), "\n\nSincerely,\n", P(s.given)]


@tpl("email", "en")
def _():
    p, s = people(2)
    return ["Hi team,\n\n", P(p.full), "'s parcel was returned to sender. Could someone re-ship the ", R.choice(PRODUCTS),
            " to ", A(one_line()), " by Friday?\n\nThanks,\n", P(s.given)]


@tpl("email", "en")
def _():
    p, s = people(2)
    return ["Good morning ", P(p.given), ",\n\nas discussed, the keys can be collected from ", A(one_line()),
            f" any weekday after 10am. If that does not work, call me on {phone()} or write to {mail()}.\n\n", P(s.short)]


# chat
@tpl("chat", "en")
def _():
    a, b = people(2)
    return [f"[{hhmm()}] ", P(a.given), ": talked to ", P(low(b.given)), " yesterday, the new place is ", A(one_line()),
            " if you want to send a card"]


@tpl("chat", "en")
def _():
    a, b, c = people(3)
    return [P(a.given), ": can someone ask ", P(b.given), " about the deploy? ", P(c.given), " said it's blocked on review"]


@tpl("chat", "en")
def _():
    a, b = people(2)
    return [P(low(a.given)), ": lol ", P(low(b.given)), " sent the parcel to ", A(one_line()), " instead of the office"]


@tpl("chat", "en")
def _():
    a, b = people(2)
    return ["* ", P(a.full), " joined the channel\n", P(a.given), ": hi all! ", P(b.given), " told me to ask here about the onboarding docs"]


@tpl("chat", "en")
def _():
    a, b = people(2)
    return [P(a.given), ": ping ", P(b.given), " — the courier needs the pickup address: ", A(one_line())]


@tpl("chat", "en")
def _():
    a, b, c = people(3)
    return [P(a.given), ": does anyone have ", P(b.full), "'s postal address? need it for the contract\n", P(c.given),
            ": ", A(one_line()), " i think, double-check with hr"]


@tpl("chat", "en")
def _():
    a, b = people(2)
    return [P(low(a.given)), ": just had coffee with ", P(low(b.short)), ", they say hi. also ", P(low(b.given)),
            " wants the slides"]


@tpl("chat", "en")
def _():
    a, b = people(2)
    return [f"<{hhmm()}> ", P(a.given), ": where do i send the ", R.choice(PRODUCTS), "?\n<", hhmm(), "> ", P(b.given), ": ",
            A(address(multi=True)), "\n<", hhmm(), "> ", P(a.given), ": thx"]


# tickets
@tpl("ticket", "en")
def _():
    a, b = people(2)
    return [f"Ticket #{num()}\nCustomer: ", P(a.full), "\nShipping address: ", A(one_line()),
            "\nIssue: parcel marked delivered but not received.\nAssigned to: ", P(b.full)]


@tpl("ticket", "en")
def _():
    a, b = people(2)
    return ["Customer ", P(a.full), f" called about order {num()}; wants the invoice re-issued to ", A(one_line()),
            ". Escalated by ", P(b.given), "."]


@tpl("ticket", "en")
def _():
    a = person()
    return ["Reporter: ", P(a.full), "\nSummary: cannot update postal address\nDescription: I moved from ", A(one_line()),
            " to ", A(one_line()), " but the portal still shows the old one. Regards, ", P(a.given)]


@tpl("ticket", "en")
def _():
    a, b = people(2)
    return [f"[#{num()}] ", P(a.full), " (Premium) – return label requested. Pick-up from:\n", A(address(multi=True)),
            "\nAgent note: ", P(b.given), f" confirmed by phone ({phone()})."]


@tpl("ticket", "en")
def _():
    a, b = people(2)
    return [f"INC{num(1000000, 9999999)} | priority P3 | opened by ", P(a.full), " | assignee ", P(b.full),
            " | laptop will not boot after update, ship replacement to ", A(one_line())]


# csv
@tpl("csv", "en")
def _():
    parts: list = ["customer_id,name,shipping_address,total\n"]
    for _i in range(R.randint(2, 4)):
        p = person()
        nm = p.last_first if R.random() < 0.5 else p.full
        parts += [f"{num(1000, 9999)},\"", P(nm), "\",\"", A(one_line()), f"\",{amount()}\n"]
    return parts


@tpl("csv", "en")
def _():
    parts: list = ["first_name,last_name,email,city,signup_date\n"]
    for _i in range(R.randint(2, 4)):
        p = person()
        city = R.choice(US_CITIES)[0]
        parts += [P(p.given), ",", P(p.family), f",user{num(100, 999)}@example.com,{city},2025-0{R.randint(1, 9)}-{R.randint(10, 28)}\n"]
    return parts


@tpl("csv", "en")
def _():
    parts: list = ["employee;manager;office\n"]
    for _i in range(R.randint(2, 3)):
        a, b = people(2)
        parts += [P(a.full), ";", P(b.full), f";Building {R.randint(1, 9)}, Floor {R.randint(1, 12)}\n"]
    return parts


@tpl("csv", "en")
def _():
    parts: list = ["\"Recipient\",\"Address\",\"Parcels\"\n"]
    for _i in range(R.randint(2, 3)):
        p = person()
        parts += ["\"", P(p.full), "\",\"", A(one_line()), f"\",{R.randint(1, 5)}\n"]
    return parts


# logs
@tpl("log", "en")
def _():
    a = person()
    return [f"{ts()} INFO orders.ship order_id={num()} recipient=\"", P(a.full), "\" address=\"", A(one_line()),
            f"\" carrier={R.choice(['DHL', 'UPS', 'FedEx', 'Royal Mail', 'PostNL'])}"]


@tpl("log", "en")
def _():
    a = person()
    return [f"[WARN] {ts()} address validation failed for '", A(one_line()), "' (customer: ", P(a.full), ")"]


@tpl("log", "en")
def _():
    a = person()
    return [f"{ts()} audit: user ", P(a.full), " changed delivery address from \"", A(one_line()), "\" to \"",
            A(one_line()), "\""]


@tpl("log", "en")
def _():
    a, b = people(2)
    return [f"{ts()} DEBUG crm.sync contact=\"", P(a.full), "\" owner=\"", P(b.full), f"\" status=updated rev={num(1, 999)}"]


# contracts
@tpl("contract", "en")
def _():
    a, b = people(2)
    return [f"This Tenancy Agreement is made on {date_en()} between ", P(a.full), ", residing at ", A(one_line()),
            " (the \"Tenant\"), and ", P(b.full), ", of ", A(one_line()), " (the \"Landlord\")."]


@tpl("contract", "en")
def _():
    a = person()
    return ["12. Notices. Any notice under this Agreement shall be given in writing to the Consultant, ", P(a.full),
            ", at ", A(one_line()), ", or to such other address as ", P(a.family), " may notify in writing."]


@tpl("contract", "en")
def _():
    a, b = people(2)
    return ["IN WITNESS WHEREOF the parties have signed this Agreement.\n\nSigned: ______________\n", P(a.full),
            "\n\nWitness: ______________\n", P(b.full), "\n", A(address(multi=True))]


@tpl("contract", "en")
def _():
    a = person()
    return ["The Seller, ", P(a.full), " (\"Seller\"), shall deliver the goods to the Buyer's premises at ", A(one_line()),
            f" no later than {date_en()}, and ", P(a.family), " bears the risk until delivery."]


# meeting notes
@tpl("notes", "en")
def _():
    a, b, c = people(3)
    return [f"Meeting notes – {date_en()}\nAttendees: ", P(a.full), ", ", P(b.full), ", ", P(c.full), "\n- ", P(a.given),
            " to send the revised quote\n- ", P(b.family), " will check the warehouse at ", A(one_line()),
            "\n- next meeting on Thursday"]


@tpl("notes", "en")
def _():
    a, b, c = people(3)
    return ["Action items:\n* ", P(a.given), " – follow up with ", P(b.full), "\n* Ask ", P(c.given),
            " about the Q3 numbers\n* Send the samples to ", A(one_line())]


@tpl("notes", "en")
def _():
    a, b = people(2)
    return ["1:1 ", P(a.given), " / ", P(b.given), "\n", P(a.given), " is relocating to ", A(one_line()),
            "; payroll needs the new address by Friday. ", P(b.given), " to inform HR."]


@tpl("notes", "en")
def _():
    p, q = people(2)
    return ["Interview debrief: Dr. ", P(p.full), " presented the pilot results. ", P(p.family),
            " thinks the sample is too small; ", P(q.full), " disagreed. ", P(p.given), " will circulate the data."]


# code
@tpl("code", "en")
def _():
    a, b = people(2)
    return ["# Author: ", P(a.full), "\n# Reviewed by ", P(b.full),
            "\ndef normalise_address(raw: str) -> dict:\n    \"\"\"Parse a postal address, e.g. '", A(one_line()), "'.\"\"\""]


@tpl("code", "en")
def _():
    a = person()
    return ["# ask ", P(a.given), " about the retry logic before merging\nfor attempt in range(3):\n    send(batch)"]


@tpl("code", "en")
def _():
    a = person()
    return ["TEST_CUSTOMER = {\"name\": \"", P(a.full), "\", \"address\": \"", A(one_line()), "\", \"vip\": True}"]


@tpl("code", "en")
def _():
    a, b = people(2)
    return ["/**\n * Maintainer: ", P(a.full), "\n * Fixture for the label printer; ", P(b.given),
            " added the multi-line case.\n */\nconst SAMPLE = `", A(address(multi=True)), "`;"]


@tpl("code", "en")
def _():
    a = person()
    return ["def test_greeting():\n    assert greet(\"", P(a.given), "\") == \"Hello, ", P(a.given), "!\""]


# json
@tpl("json", "en")
def _():
    a = person()
    return ["{\"customer\": {\"name\": \"", P(a.full), "\", \"shipping_address\": \"", A(one_line()),
            f"\"}}, \"items\": {R.randint(1, 9)}}}"]


@tpl("json", "en")
def _():
    a = person()
    return ["{\"first_name\": \"", P(a.given), "\", \"last_name\": \"", P(a.family), "\", \"billing_address\": \"",
            A(one_line()), f"\", \"plan\": \"{R.choice(['pro', 'free', 'team'])}\"}}"]


@tpl("json", "en")
def _():
    a, b = people(2)
    return ["[{\"name\": \"", P(a.full), "\", \"role\": \"owner\"}, {\"name\": \"", P(b.full), "\", \"role\": \"reviewer\"}]"]


@tpl("json", "en")
def _():
    a = person()
    return ["{\n  \"id\": ", str(num()), ",\n  \"contact\": \"", P(a.full), "\",\n  \"address\": \"", A(one_line()),
            "\",\n  \"notes\": \"leave at door\"\n}"]


# shipping labels
@tpl("label", "en")
def _():
    a, b = people(2)
    up = R.random() < 0.5
    name, addr = (a.full.upper(), address(multi=True).upper()) if up else (a.full, address(multi=True))
    return ["SHIP TO:\n", P(name), "\n", A(addr), "\n\nFROM:\n", P(b.full), "\n", A(address(multi=True))]


@tpl("label", "en")
def _():
    a, b = people(2)
    return ["FROM: ", P(a.full), ", ", A(one_line()), "\nTO: ", P(b.full), ", ", A(one_line()),
            f"\nWeight: {R.randint(1, 20)}.{R.randint(0, 9)} kg  Service: Express"]


@tpl("label", "en")
def _():
    a, b = people(2)
    return [P(a.full), "\nc/o ", P(b.full), "\n", A(address(multi=True))]


@tpl("label", "en")
def _():
    a = person()
    return ["Deliver to: ", P(a.full), "\n", A(address(multi=True)), f"\nTel: {phone()}\nRef: {num()}"]


@tpl("label", "en")
def _():
    a = person()
    return ["RETURN ADDRESS\n", R.choice(FIRMS), "\nAttn: ", P(a.full), "\n", A(address(multi=True))]


# ---- German ----

@tpl("email", "de")
def _():
    p, s = people(2, "de")
    return ["Hallo ", P(p.given), ",\n\nbitte schick die Unterlagen an meine neue Adresse: ", A(one_line("de")),
            ".\n\nViele Grüße\n", P(s.short)]


@tpl("email", "de")
def _():
    p, s = people(2, "de")
    t = R.choice(["geehrte Frau", "geehrter Herr", "geehrte Frau Dr.", "geehrter Herr Prof. Dr."])
    return [f"Sehr {t} ", P(p.family), ",\n\nvielen Dank für Ihre Nachricht. Wir haben die Anschrift von ", P(p.full),
            " geändert; künftige Post geht an:\n", A(address("de", multi=True)), "\n\nMit freundlichen Grüßen\n", P(s.full)]


@tpl("chat", "de")
def _():
    a, b = people(2, "de")
    return [P(low(a.given)), ": hab gestern mit ", P(low(b.given)), " gesprochen, die neue Adresse ist ", A(one_line("de")),
            ", falls du was schicken willst"]


@tpl("ticket", "de")
def _():
    a, b = people(2, "de")
    return [f"Ticket {num()}\nKunde: ", P(a.full), "\nLieferadresse:\n", A(address("de", multi=True)),
            "\nProblem: Paket nicht angekommen.\nBearbeiter: ", P(b.full)]


@tpl("contract", "de")
def _():
    a, b = people(2, "de")
    return ["Mietvertrag\n\nzwischen ", P(a.full), ", wohnhaft in ", A(one_line("de")), " (Vermieter), und ", P(b.full),
            ", ", A(one_line("de")), " (Mieter), wird folgender Vertrag geschlossen:"]


@tpl("notes", "de")
def _():
    a, b, c = people(3, "de")
    return [f"Protokoll vom {date_num()}\nTeilnehmer: ", P(a.full), ", ", P(b.full), ", ", P(c.full), "\n- ", P(a.given),
            f" schickt das Angebot\n- {R.choice(['Frau', 'Herr'])} ", P(b.family), " prüft das Lager in ", A(one_line("de")),
            "\n- ", P(c.given), " fragt beim Steuerberater nach"]


@tpl("csv", "de")
def _():
    parts: list = ["Nachname;Vorname;Anschrift;Betrag\n"]
    for _i in range(R.randint(2, 3)):
        p = person("de")
        parts += [P(p.family), ";", P(p.given), ";\"", A(one_line("de")), f"\";{R.randint(5, 900)},{R.randint(0, 99):02d}\n"]
    return parts


@tpl("label", "de")
def _():
    a, b = people(2, "de")
    return ["Absender: ", P(a.full), ", ", A(one_line("de")), "\n\nEmpfänger:\n", P(b.full), "\n", A(address("de", multi=True))]


@tpl("json", "de")
def _():
    a = person("de")
    return ["{\"kunde\": \"", P(a.full), "\", \"adresse\": \"", A(one_line("de")), f"\", \"kundennummer\": {num()}}}"]


@tpl("code", "de")
def _():
    a, b = people(2, "de")
    return ["# Autor: ", P(a.full), "\n# Frag ", P(b.given), " wegen der Adressprüfung, bevor du das mergst\ndef pruefe(adresse):\n    ..."]


@tpl("log", "de")
def _():
    a = person("de")
    return [f"{ts()} INFO versand: Sendung {num()} an ", P(a.full), ", ", A(one_line("de")), " übergeben"]


# ---- French ----

@tpl("email", "fr")
def _():
    p, s = people(2, "fr")
    return ["Bonjour ", P(p.given), ",\n\npourriez-vous envoyer le colis à l'adresse suivante : ", A(one_line("fr")),
            " ?\n\nCordialement,\n", P(s.short)]


@tpl("email", "fr")
def _():
    p, s = people(2, "fr")
    t = R.choice(["Madame", "Monsieur", "Maître", "Docteur"])
    return [f"{t} ", P(p.family), ",\n\nNous accusons réception de votre courrier. Le dossier de ", P(p.full),
            " est désormais rattaché à l'adresse :\n", A(address("fr", multi=True)),
            "\n\nVeuillez agréer nos salutations distinguées.\n", P(s.full)]


@tpl("chat", "fr")
def _():
    a, b = people(2, "fr")
    return [P(low(a.given)), " : j'ai vu ", P(low(b.given)), " hier, sa nouvelle adresse c'est ", A(one_line("fr"))]


@tpl("ticket", "fr")
def _():
    a, b = people(2, "fr")
    return [f"Ticket n° {num()}\nClient : ", P(a.full), "\nAdresse de livraison : ", A(one_line("fr")),
            "\nProblème : colis non reçu.\nTraité par : ", P(b.full)]


@tpl("contract", "fr")
def _():
    a, b = people(2, "fr")
    return ["ENTRE LES SOUSSIGNÉS :\n", P(a.full), ", demeurant ", A(one_line("fr")), ", ci-après « le Bailleur »,\nET\n",
            f"{R.choice(['M.', 'Mme'])} ", P(b.full), ", demeurant ", A(one_line("fr")), ", ci-après « le Locataire »."]


@tpl("notes", "fr")
def _():
    a, b, c = people(3, "fr")
    return [f"Compte rendu du {date_num()}\nPrésents : ", P(a.full), ", ", P(b.full), ", ", P(c.full), "\n- ", P(a.given),
            " envoie le devis révisé\n- ", f"{R.choice(['M.', 'Mme'])} ", P(b.family), " vérifie l'entrepôt, adresse : ",
            A(one_line("fr"))]


@tpl("csv", "fr")
def _():
    parts: list = ["nom;prénom;adresse\n"]
    for _i in range(R.randint(2, 3)):
        p = person("fr")
        parts += [P(p.family), ";", P(p.given), ";\"", A(one_line("fr")), "\"\n"]
    return parts


@tpl("label", "fr")
def _():
    a, b = people(2, "fr")
    return ["Expéditeur : ", P(a.full), ", ", A(one_line("fr")), "\nDestinataire :\n", P(b.full.upper()), "\n",
            A(address("fr", multi=True).upper())]


@tpl("json", "fr")
def _():
    a = person("fr")
    return ["{\"client\": \"", P(a.full), "\", \"adresse_livraison\": \"", A(one_line("fr")), "\"}"]


@tpl("code", "fr")
def _():
    a, b = people(2, "fr")
    return ["# Auteur : ", P(a.full), "\n# demander à ", P(b.given), " pour le format des adresses belges\nADRESSE_TEST = \"",
            A(one_line("fr", country="BE")), "\""]


# ---- Spanish ----

@tpl("email", "es")
def _():
    p, s = people(2, "es")
    return ["Hola ", P(p.given), ":\n\n¿puedes enviar la documentación a mi nueva dirección? Es ", A(one_line("es")),
            ".\n\nUn saludo,\n", P(s.short)]


@tpl("email", "es")
def _():
    p, s = people(2, "es")
    t = R.choice(["Estimada Sra.", "Estimado Sr.", "Estimada Dra.", "Estimado Dr."])
    return [f"{t} ", P(p.family), ":\n\nLe confirmamos que hemos actualizado los datos de ", P(p.full),
            ". La correspondencia se enviará a:\n", A(address("es", multi=True)), "\n\nAtentamente,\n", P(s.full)]


@tpl("chat", "es")
def _():
    a, b = people(2, "es")
    return [P(low(a.given)), ": hablé con ", P(low(b.given)), " ayer, ahora vive en ", A(one_line("es"))]


@tpl("ticket", "es")
def _():
    a, b = people(2, "es")
    return [f"Incidencia {num()}\nCliente: ", P(a.full), "\nDirección de envío: ", A(one_line("es")),
            "\nProblema: el paquete no ha llegado.\nAgente: ", P(b.full)]


@tpl("contract", "es")
def _():
    a, b = people(2, "es")
    return ["REUNIDOS\nDe una parte, D. ", P(a.full), ", con domicilio en ", A(one_line("es")),
            ", en adelante el ARRENDADOR.\nY de otra, Dña. ", P(b.full), ", con domicilio en ", A(one_line("es")),
            ", en adelante la ARRENDATARIA."]


@tpl("notes", "es")
def _():
    a, b, c = people(3, "es")
    return [f"Acta de la reunión del {date_num()}\nAsistentes: ", P(a.full), ", ", P(b.full), ", ", P(c.full), "\n- ",
            P(a.given), " enviará el presupuesto\n- ", P(b.family), " revisará el almacén de ", A(one_line("es"))]


@tpl("csv", "es")
def _():
    parts: list = ["apellidos,nombre,direccion\n"]
    for _i in range(R.randint(2, 3)):
        p = person("es")
        parts += ["\"", P(p.family), "\",", P(p.given), ",\"", A(one_line("es")), "\"\n"]
    return parts


@tpl("label", "es")
def _():
    a, b = people(2, "es")
    return ["Remitente: ", P(a.full), ", ", A(one_line("es")), "\nDestinatario:\n", P(b.full), "\n", A(address("es", multi=True))]


@tpl("json", "es")
def _():
    a = person("es")
    return ["{\"nombre\": \"", P(a.full), "\", \"direccion\": \"", A(one_line("es")), "\", \"pedido\": ", str(num()), "}"]


@tpl("log", "es")
def _():
    a = person("es")
    return [f"{ts()} WARN envio: dirección incompleta para ", P(a.full), ": '", A(one_line("es")), "'"]


# ---- Italian ----

@tpl("email", "it")
def _():
    p, s = people(2, "it")
    return ["Ciao ", P(p.given), ",\n\npuoi spedire i documenti al mio nuovo indirizzo? È ", A(one_line("it")),
            ".\n\nGrazie,\n", P(s.short)]


@tpl("email", "it")
def _():
    p, s = people(2, "it")
    t = R.choice(["Gentile Dott.ssa", "Gentile Dott.", "Egregio Avv.", "Gentile Sig.ra", "Egregio Ing.", "Gentile Sig."])
    return [f"{t} ", P(p.family), ",\n\nLe confermiamo che i dati di ", P(p.full),
            " sono stati aggiornati. La corrispondenza sarà inviata a:\n", A(address("it", multi=True)),
            "\n\nCordiali saluti,\n", P(s.full)]


@tpl("chat", "it")
def _():
    a, b = people(2, "it")
    return [P(low(a.given)), ": ho sentito ", P(low(b.given)), " ieri, adesso abita in ", A(one_line("it"))]


@tpl("ticket", "it")
def _():
    a, b = people(2, "it")
    return [f"Ticket {num()}\nCliente: ", P(a.full), "\nIndirizzo di consegna: ", A(one_line("it")),
            "\nProblema: pacco non consegnato.\nOperatore: ", P(b.full)]


@tpl("contract", "it")
def _():
    a, b = people(2, "it")
    return ["TRA\n", P(a.full), ", residente in ", A(one_line("it")), ", di seguito «il Locatore»,\nE\n", P(b.full),
            ", residente in ", A(one_line("it")), ", di seguito «il Conduttore»."]


@tpl("notes", "it")
def _():
    a, b, c = people(3, "it")
    return [f"Verbale della riunione del {date_num()}\nPresenti: ", P(a.full), ", ", P(b.full), ", ", P(c.full), "\n- ",
            P(a.given), " invia il preventivo\n- ", P(b.family), " controlla il magazzino di ", A(one_line("it"))]


@tpl("csv", "it")
def _():
    parts: list = ["cognome;nome;indirizzo\n"]
    for _i in range(R.randint(2, 3)):
        p = person("it")
        parts += [P(p.family), ";", P(p.given), ";\"", A(one_line("it")), "\"\n"]
    return parts


@tpl("label", "it")
def _():
    a, b = people(2, "it")
    return ["Mittente: ", P(a.full), ", ", A(one_line("it")), "\nDestinatario:\n", P(b.full), "\n", A(address("it", multi=True))]


@tpl("json", "it")
def _():
    a = person("it")
    return ["{\"cliente\": \"", P(a.full), "\", \"indirizzo\": \"", A(one_line("it")), "\"}"]


@tpl("code", "it")
def _():
    a, b = people(2, "it")
    return ["# Autore: ", P(a.full), "\n# chiedere a ", P(b.given), " il formato dei CAP\nINDIRIZZO = \"", A(one_line("it")), "\""]


# ---- Dutch ----

@tpl("email", "nl")
def _():
    p, s = people(2, "nl")
    return ["Hoi ", P(p.given), ",\n\nkun je de papieren naar mijn nieuwe adres sturen? Dat is ", A(one_line("nl")),
            ".\n\nGroetjes,\n", P(s.short)]


@tpl("email", "nl")
def _():
    p, s = people(2, "nl")
    t = R.choice(["Geachte heer", "Geachte mevrouw", "Geachte mr.", "Beste dhr.", "Beste mevr."])
    fam = p.family
    return [f"{t} ", P(fam), ",\n\nWij hebben de gegevens van ", P(p.full), " aangepast. Post gaat voortaan naar:\n",
            A(address("nl", multi=True)), "\n\nMet vriendelijke groet,\n", P(s.full)]


@tpl("chat", "nl")
def _():
    a, b = people(2, "nl")
    return [P(low(a.given)), ": gisteren ", P(low(b.given)), " gesproken, die woont nu op ", A(one_line("nl"))]


@tpl("ticket", "nl")
def _():
    a, b = people(2, "nl")
    return [f"Melding {num()}\nKlant: ", P(a.full), "\nBezorgadres: ", A(one_line("nl")),
            "\nProbleem: pakket niet ontvangen.\nBehandelaar: ", P(b.full)]


@tpl("contract", "nl")
def _():
    a, b = people(2, "nl")
    return ["De ondergetekenden:\n1. ", P(a.full), ", wonende te ", A(one_line("nl")), ", hierna te noemen \"verhuurder\";\n2. ",
            P(b.full), ", wonende te ", A(one_line("nl")), ", hierna te noemen \"huurder\"."]


@tpl("notes", "nl")
def _():
    a, b, c = people(3, "nl")
    return [f"Notulen {date_num()}\nAanwezig: ", P(a.full), ", ", P(b.full), ", ", P(c.full), "\n- ", P(a.given),
            " stuurt de offerte\n- ", P(b.given), " controleert het magazijn, adres: ", A(one_line("nl"))]


@tpl("csv", "nl")
def _():
    parts: list = ["achternaam;voornaam;adres\n"]
    for _i in range(R.randint(2, 3)):
        p = person("nl")
        parts += [P(p.family), ";", P(p.given), ";\"", A(one_line("nl")), "\"\n"]
    return parts


@tpl("label", "nl")
def _():
    a, b = people(2, "nl")
    return ["Afzender: ", P(a.full), ", ", A(one_line("nl")), "\nGeadresseerde:\n", P(b.full), "\n", A(address("nl", multi=True))]


@tpl("json", "nl")
def _():
    a = person("nl")
    return ["{\"naam\": \"", P(a.full), "\", \"adres\": \"", A(one_line("nl")), "\", \"klantnummer\": ", str(num()), "}"]


@tpl("log", "nl")
def _():
    a = person("nl")
    return [f"{ts()} INFO bezorging: pakket {num()} afgeleverd bij ", P(a.full), ", ", A(one_line("nl"))]


# ----------------------------------------------------------------------------------------------
# Hard negatives: no person, no postal address. Each is a function returning the whole text.
# ----------------------------------------------------------------------------------------------

NEGATIVES: list[tuple[str, str, object, int]] = []  # (kind, lang, fn, group): one group per base text
_GROUP = [0]


def neg(kind: str, lang: str, group: int | None = None):
    def deco(fn):
        if group is None:
            _GROUP[0] += 1
        NEGATIVES.append((kind, lang, fn, _GROUP[0] if group is None else group))
        return fn
    return deco


PERSON_COMPANIES = ["Ford", "Morgan Stanley", "Johnson & Johnson", "Goldman Sachs", "Wells Fargo", "Ferrari",
                    "Philips", "Siemens", "Dell", "McDonald's", "Tesla", "Porsche", "Boeing", "Procter & Gamble",
                    "Kellogg's", "Heineken", "Lamborghini", "Bosch", "Peugeot", "Renault", "Michelin", "Chanel",
                    "Barilla", "Benetton", "Hewlett-Packard", "Mercedes-Benz", "Cadbury", "Disney", "Dyson",
                    "Lehman Brothers", "Charles Schwab", "Merrill Lynch", "Deloitte", "Ernst & Young", "Rolls-Royce"]
TOOLS = ["Jenkins", "Kafka", "Julia", "Ruby", "Ansible", "Hadoop", "Django", "Flask", "Pandas", "Selenium", "Grafana",
         "Prometheus", "Cassandra", "Hudson", "Jupyter", "Homebrew", "Terraform", "Kibana", "Jasmine", "Mocha",
         "Sphinx", "Hugo", "Ada", "Pascal", "Haskell", "Erlang", "Maven", "Gradle", "Jekyll", "Celery", "Airflow"]
PLACES = ["Paris", "Jordan", "Georgia", "Florence", "Victoria", "Lincoln", "Charlotte", "Austin", "Adelaide",
          "Madison", "Chelsea", "Sydney", "Regina", "Santiago", "São Paulo", "St. Louis", "Savannah", "Eugene",
          "Marseille", "Valencia", "Lyon", "Brooklyn"]
MONTHS = ["May", "August", "June", "April", "January", "March", "July"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def ver() -> str:
    return f"{R.randint(0, 12)}.{R.randint(0, 30)}.{R.randint(0, 20)}"


def pct() -> str:
    return f"{R.randint(1, 19)}.{R.randint(0, 9)}"


SIGNOFF = {"en": ("Hello all,", "Best regards,\nThe Operations Team"), "de": ("Hallo zusammen,", "Viele Grüße\nIhr Service-Team"),
           "fr": ("Bonjour à tous,", "Cordialement,\nL'équipe support"), "es": ("Hola a todos:", "Saludos,\nEl equipo de soporte"),
           "it": ("Ciao a tutti,", "Saluti,\nIl team di supporto"), "nl": ("Hallo allemaal,", "Met vriendelijke groet,\nHet supportteam")}


def framed(lang: str, sentence_fn, headline: bool = False) -> None:
    """Register a hard-negative sentence; each draw puts it in a randomly chosen frame (its kind)."""
    if headline:
        neg("headline", lang)(sentence_fn)
        return
    _GROUP[0] += 1
    for kind in ("chat", "log", "ticket", "email", "notes", "news"):
        def fn(kind=kind):
            sen = sentence_fn()
            if kind == "chat":
                return f"[{hhmm()}] {sen}"
            if kind == "log":
                return f"{ts()} INFO note: {sen}"
            if kind == "ticket":
                return f"Ticket #{num()}: {sen}"
            if kind == "email":
                hi, bye = SIGNOFF[lang]
                return f"{hi}\n\n{sen}\n\n{bye}"
            if kind == "notes":
                return f"- {sen}"
            return sen
        neg(kind, lang, _GROUP[0])(fn)


def is_headline(f) -> bool:
    sen = f()
    words = sen.split()
    return len(words) >= 5 and sum(w[:1].isupper() for w in words) >= len(words) - 1 and not sen.endswith(".")


N_EN = [
    lambda: f"{R.choice(PERSON_COMPANIES)} shares rose {pct()}% on {R.choice(DAYS)} after the earnings call.",
    lambda: f"{R.choice(PERSON_COMPANIES)} and {R.choice(PERSON_COMPANIES)} both cut their {R.choice(MONTHS)} guidance.",
    lambda: f"Analysts at Morgan Stanley raised their price target for Tesla to ${R.randint(150, 450)}.",
    lambda: f"Johnson & Johnson reported Q{R.randint(1, 4)} revenue of ${R.randint(18, 26)}.{R.randint(0, 9)}bn, beating estimates.",
    lambda: f"Goldman Sachs and Wells Fargo led the ${R.randint(1, 9)}bn bond issue for Ford Motor Credit.",
    lambda: f"Ferrari delivered {R.randint(2000, 4000):,} cars in Q{R.randint(1, 4)}; Lamborghini and Porsche also grew.",
    lambda: f"Philips recalled {R.randint(1, 9)},{R.randint(100, 999)} ventilators, and Siemens Healthineers kept its outlook.",
    lambda: f"Order {R.randint(10000, 99999)}: {R.randint(2, 40)} x Dell Latitude {R.randint(5000, 7999)}, {R.randint(2, 40)} x Dell P2423 monitors.",
    lambda: f"The McDonald's on the corner now opens at {R.randint(5, 8)}am; Starbucks next door still opens at 6.",
    lambda: f"Jenkins pipeline #{R.randint(100, 9999)} failed at stage 'integration'; Kafka consumer lag is {R.randint(2, 90)}k messages.",
    lambda: f"We benchmarked Julia {R.randint(1, 1)}.{R.randint(6, 11)} against Python {R.choice(['3.11', '3.12', '3.13'])} and Ruby {R.randint(2, 3)}.{R.randint(0, 4)}.",
    lambda: f"Run the Ansible playbook against the Hadoop cluster before upgrading Django to {ver()}.",
    lambda: f"Flask {ver()} and Pandas {ver()} are pinned in requirements.txt; Selenium tests are flaky again.",
    lambda: f"Grafana shows the Prometheus scrape interval at {R.randint(5, 60)}s; alertmanager fired {R.randint(2, 30)} times.",
    lambda: f"Cassandra compaction stalled on node {R.randint(1, 12)}; restart Airflow workers after the patch.",
    lambda: "Switched the docs from Sphinx to Hugo and the blog from Jekyll to Astro.",
    lambda: "The course covers Ada, Pascal and Haskell in term one, Erlang in term two.",
    lambda: f"Maven build took {R.randint(2, 14)} min, Gradle {R.randint(1, 9)} min; Celery queue drained by {hhmm()}.",
    lambda: f"Flights to {R.choice(PLACES)} are cheaper in {R.choice(MONTHS)} than in {R.choice(MONTHS)}.",
    lambda: f"The conference moves from {R.choice(PLACES)} to {R.choice(PLACES)} next year.",
    lambda: f"Our {R.choice(PLACES)} office is closed on {R.choice(DAYS)} for maintenance.",
    lambda: f"Weather: {R.choice(PLACES)} {R.randint(10, 35)}°C, {R.choice(PLACES)} {R.randint(-5, 20)}°C, light rain.",
    lambda: "Jordan and Georgia both signed the trade agreement, according to the ministry.",
    lambda: "We spent a week in Florence and two days in Victoria, British Columbia.",
    lambda: f"The Lincoln, Nebraska data centre goes live in {R.choice(MONTHS)}.",
    lambda: f"The {R.choice(MONTHS)} release ships on {R.choice(DAYS)}; June's numbers are in the appendix.",
    lambda: "In August we froze the schema; May and June were spent on migrations.",
    lambda: f"{R.choice(DAYS)} standup cancelled. {R.choice(DAYS)} retro at {hhmm()} instead.",
    lambda: f"Next steps: Review the draft. Approve the budget. Send the final version by {R.choice(MONTHS)} {R.randint(1, 28)}.",
    lambda: "Quarterly Revenue Beats Expectations As Cloud Demand Grows",
    lambda: "Local Bakery Wins Regional Award For Sourdough",
    lambda: "How To Configure Nginx As A Reverse Proxy In Five Minutes",
    lambda: "Breaking: Central Bank Holds Rates Steady Amid Inflation Fears",
    lambda: f"Main Street Capital declared a monthly dividend of ${R.randint(0, 0)}.{R.randint(20, 30)} per share.",
    lambda: f"The meeting is in room {R.randint(1, 40)}{R.choice('ABC')}, Building {R.randint(1, 9)}, Floor {R.randint(1, 9)}.",
    lambda: f"Please use Gate B{R.randint(1, 60)} at Terminal {R.randint(1, 5)}; Platform {R.randint(1, 14)} is closed.",
    lambda: f"Traders on Wall Street sold off tech stocks on {R.choice(DAYS)}.",
    lambda: "The Champs-Élysées is busy every Saturday before Christmas.",
    lambda: "Downing Street said the bill would return to Parliament in the autumn.",
    lambda: "Fleet Street papers ran the story on the front page.",
    lambda: "Abbey Road was recorded in 1969 and remains their best-selling album.",
    lambda: f"Take the Jubilee line to Baker Street station, then walk {R.randint(3, 12)} minutes.",
    lambda: "Silicon Valley investors are cautious; Harley Street clinics report long waits.",
    lambda: f"Route 66 and Highway {R.randint(1, 101)} are closed for roadworks until {R.choice(MONTHS)}.",
    lambda: f"Upgrade to v{ver()} (build {R.randint(1000, 9999)}); {ver()} is end-of-life.",
    lambda: f"Kernel {R.randint(5, 6)}.{R.randint(1, 15)}.0-{R.randint(10, 80)}-generic, Ubuntu 24.04 LTS (Noble Numbat), Python {R.choice(['3.11.9', '3.12.4'])}.",
    lambda: f"Dose: {R.randint(5, 500)} mg twice daily; glucose {R.randint(70, 200)} mg/dL; pressure {R.randint(90, 160)}/{R.randint(60, 100)} mmHg.",
    lambda: f"The force is {R.randint(2, 90)} newtons, the pressure {R.randint(1, 300)} pascals, the frequency {R.randint(1, 900)} hertz.",
    lambda: f"Set the oven to {R.randint(150, 250)} degrees Celsius ({R.randint(300, 480)} Fahrenheit); {R.randint(200, 400)} kelvin for the sensor.",
    lambda: "Patients with Parkinson's disease or Alzheimer's disease were excluded from the trial.",
    lambda: "Differential diagnosis: Crohn's disease, Hodgkin lymphoma, Cushing's syndrome.",
    lambda: "Gram-negative bacteria were cultured in a Petri dish and heated with a Bunsen burner.",
    lambda: f"Pour {R.randint(50, 500)} ml into the Erlenmeyer flask and check the Geiger counter.",
    lambda: "Doppler ultrasound and a Holter monitor were ordered; the Glasgow Coma Scale score was 15.",
    lambda: f"Unit {R.randint(1, 12)} of the course covers regression; Box {R.randint(1, 40)} of the archive holds the originals.",
    lambda: f"There is a flat {R.randint(2, 9)}% fee on orders above {R.randint(50, 500)} EUR.",
    lambda: f"Section {R.randint(1, 30)}, paragraph {R.randint(1, 9)} of the GDPR (Article {R.randint(5, 99)}) applies.",
    lambda: f"Postcode and street fields are required; the city field is optional (form v{ver()}).",
    lambda: "Thank you for your order! It will be dispatched within two working days.",
    lambda: f"Total: {amount()} EUR incl. VAT. Payment due in {R.randint(7, 30)} days.",
    lambda: "Apple, Amazon and Alphabet reported results after the bell.",
    lambda: f"Mercedes-Benz and Rolls-Royce share a supplier in {R.choice(['Stuttgart', 'Derby', 'Sindelfingen'])}.",
    lambda: f"Deloitte and Ernst & Young audited {R.randint(3, 40)} of the index companies.",
    lambda: "Charles Schwab and Merrill Lynch cut trading fees; Lehman Brothers collapsed in 2008.",
    lambda: f"Kellogg's, Cadbury and Heineken raised prices by {pct()}% this year.",
    lambda: "Ask Alexa to set a timer, or tell Siri to call the office.",
    lambda: "IBM Watson and Amazon Lex were evaluated for the chatbot.",
    lambda: "The Hubble telescope and the Chandra X-ray Observatory observed the same galaxy.",
    lambda: f"Restart the Hudson agent, then rerun Jasmine and Mocha tests (suite {R.randint(1, 9)} of {R.randint(10, 12)}).",
    lambda: f"Error 0x{R.randint(0, 2**32):08X} at Hauptmodul.dll; see KB{R.randint(100000, 999999)}.",
    lambda: "Grace period ends on Friday; the Victoria Cross exhibition opens on Monday.",
    lambda: "Georgia Tech and Penn State met in the final.",
    lambda: f"Temperature in Paris, France: {R.randint(10, 30)}°C; in Paris, Texas: {R.randint(15, 40)}°C.",
    lambda: "Christmas Eve falls on a Wednesday; Easter Monday is a bank holiday.",
    lambda: "The Dow Jones and the Nasdaq closed higher; the FTSE fell slightly.",
    lambda: f"Bought a Tesla Model {R.choice('3SYX')} and a Dyson V{R.randint(8, 15)} on the same day.",
    lambda: f"Disney+ lost {R.randint(1, 9)} million subscribers, Netflix gained {R.randint(1, 9)} million.",
    lambda: f"Sprint {R.randint(10, 99)} goals: Migrate Billing. Retire Legacy API. Improve Search Latency.",
]
for _f in N_EN:
    framed("en", _f, is_headline(_f))


@neg("csv", "en")
def _():
    return "company,ticker,sector\n" + "".join(f"{c},{c[:3].upper()},{R.choice(['auto', 'finance', 'consumer', 'tech'])}\n"
                                              for c in R.sample(PERSON_COMPANIES, 3))


@neg("csv", "en")
def _():
    return "tool,version,status\n" + "".join(f"{t},{ver()},{R.choice(['ok', 'degraded', 'down'])}\n" for t in R.sample(TOOLS, 4))


@neg("json", "en")
def _():
    return json.dumps({"city": R.choice(PLACES), "month": R.choice(MONTHS), "day": R.choice(DAYS),
                       "room": f"{R.randint(1, 40)}B", "building": R.randint(1, 9)})


@neg("json", "en")
def _():
    return json.dumps({"vendor": R.choice(PERSON_COMPANIES), "product": f"{R.choice(['Latitude', 'Model Y', 'Hue'])}",
                       "version": ver(), "qty": R.randint(1, 99)})


@neg("code", "en")
def _():
    return f"import pandas as pd\nfrom flask import Flask\n# Django admin is disabled in prod (see ADR-{R.randint(1, 99)})\ndf = pd.read_csv('rows.csv')"


@neg("code", "en")
def _():
    return f"# TODO: bump Selenium to {ver()} and Jenkins plugin to {ver()}\nJULIA_NUM_THREADS = {R.randint(2, 64)}\nRUBY_VERSION = '{R.randint(2, 3)}.{R.randint(0, 4)}'"


@neg("label", "en")
def _():
    return f"FRAGILE – THIS SIDE UP\nContents: {R.choice(PRODUCTS)}\nWeight: {R.randint(1, 30)} kg\nDimensions: {R.randint(10, 90)} x {R.randint(10, 90)} x {R.randint(5, 60)} cm"


@neg("contract", "en")
def _():
    return ("5. Governing Law. This Agreement is governed by the laws of the State of Georgia. The Parties submit to "
            "the exclusive jurisdiction of the courts sitting in Madison County.")


@neg("contract", "en")
def _():
    return (f"7. Term. This Agreement commences on 1 {R.choice(MONTHS)} 2025 and continues for {R.randint(12, 36)} "
            "months unless terminated by either Party with ninety days' notice.")


N_DE = [
    lambda: f"Siemens und Bosch melden für {R.choice(['Mai', 'August', 'Juni'])} höhere Umsätze; Porsche senkt die Prognose.",
    lambda: f"Der Jenkins-Build ist am {R.choice(['Montag', 'Dienstag', 'Freitag'])} fehlgeschlagen, Kafka läuft wieder.",
    lambda: "Die Straße ist wegen Bauarbeiten bis Ende des Monats gesperrt.",
    lambda: f"Wir treffen uns in Raum {R.randint(1, 40)}B, Gebäude {R.randint(1, 9)}, {R.randint(1, 6)}. OG.",
    lambda: f"Das Update {ver()} kommt am Montag, Version {ver()} wird nicht mehr unterstützt.",
    lambda: f"Mercedes-Benz und Dr. Oetker sponsern das Stadtfest im {R.choice(['Mai', 'Juli', 'August'])}.",
    lambda: "Die Mannschaft landete auf Platz 3 der Tabelle, knapp hinter Hannover.",
    lambda: "Bitte Straße, Hausnummer, Postleitzahl und Ort im Formular eintragen.",
    lambda: "Neue Studie: Mehr Menschen Fahren Mit Dem Rad Zur Arbeit",
    lambda: f"Miele und Braun erhöhen die Preise um {pct()} Prozent.",
    lambda: f"Die Dosis beträgt {R.randint(5, 500)} mg; Patienten mit Morbus Crohn wurden ausgeschlossen.",
    lambda: "Wir fahren im August nach Florenz und im Juni nach Wien.",
]
for _f in N_DE:
    framed("de", _f, is_headline(_f))

N_FR = [
    lambda: f"Renault et Peugeot annoncent des ventes en hausse de {pct()} % en mai.",
    lambda: "Les Champs-Élysées sont bondés ce samedi avant Noël.",
    lambda: "La rue est fermée à la circulation jusqu'à vendredi.",
    lambda: f"Réunion en salle {R.randint(1, 40)}B, bâtiment {R.randint(1, 9)}, 2e étage.",
    lambda: "Michelin et Chanel recrutent à Clermont-Ferrand et à Paris.",
    lambda: f"Le pipeline Jenkins a échoué ; relancer Ansible après la mise à jour {ver()}.",
    lambda: "Les Prix De L'Énergie Baissent Pour La Première Fois Depuis Deux Ans",
    lambda: f"En août, la boutique ferme le lundi ; en juin, elle ouvre à {R.randint(8, 10)} h.",
    lambda: "Patients atteints de la maladie de Parkinson exclus de l'étude.",
    lambda: "Veuillez renseigner la rue, le code postal et la ville dans le formulaire.",
    lambda: "Le Louvre et le musée d'Orsay sont fermés le mardi.",
    lambda: f"Chez Carrefour, le lot de {R.randint(2, 12)} bouteilles d'Evian coûte {amount()} €.",
]
for _f in N_FR:
    framed("fr", _f, is_headline(_f))

N_ES = [
    lambda: f"Zara y Mango abren nuevas tiendas en agosto; Inditex sube un {pct()} %.",
    lambda: "La calle estaba cortada por las obras del metro.",
    lambda: f"Reunión en la sala {R.randint(1, 40)}B, edificio {R.randint(1, 9)}, planta {R.randint(1, 9)}.",
    lambda: f"Santander y BBVA publican resultados el {R.choice(['lunes', 'martes', 'jueves'])}.",
    lambda: f"Actualizar Django a {ver()} y Pandas a {ver()} antes de mayo.",
    lambda: "El Gobierno Aprueba Nuevas Ayudas Para El Alquiler Joven",
    lambda: "Volamos a Valencia en junio y a Santiago en julio.",
    lambda: "Rellene calle, número, código postal y ciudad en el formulario.",
    lambda: f"La dosis es de {R.randint(5, 500)} mg cada 12 horas; se excluyó la enfermedad de Crohn.",
    lambda: f"El Corte Inglés y Telefónica patrocinan el maratón de {R.choice(['Madrid', 'Sevilla'])}.",
    lambda: "Mercadona amplía su horario los sábados de agosto.",
]
for _f in N_ES:
    framed("es", _f, is_headline(_f))

N_IT = [
    lambda: f"Ferrari e Lamborghini consegnano più auto a maggio; Barilla cresce del {pct()}%.",
    lambda: "Prendi la via più breve, la strada principale è chiusa.",
    lambda: f"Riunione in aula {R.randint(1, 40)}B, edificio {R.randint(1, 9)}, secondo piano.",
    lambda: "Ad agosto andiamo a Firenze, a giugno a Verona.",
    lambda: f"La pipeline di Jenkins è fallita; riavviare Kafka e Grafana dopo la versione {ver()}.",
    lambda: "Il Governo Approva La Nuova Legge Sul Clima",
    lambda: f"Benetton e Lavazza sponsorizzano il Giro d'Italia {R.randint(2024, 2026)}.",
    lambda: "Inserire via, numero civico, CAP e città nel modulo.",
    lambda: f"Dose di {R.randint(5, 500)} mg; esclusi i pazienti con morbo di Parkinson.",
    lambda: "Il Colosseo e la Galleria degli Uffizi sono aperti il lunedì di Pasqua.",
    lambda: "Piazza Affari chiude in rialzo, bene Stellantis e Pirelli.",
]
for _f in N_IT:
    framed("it", _f, is_headline(_f))

N_NL = [
    lambda: f"Philips en Heineken melden hogere omzet in mei; ASML daalt {pct()}%.",
    lambda: "De straat is tot vrijdag afgesloten wegens werkzaamheden.",
    lambda: f"Vergadering in lokaal {R.randint(1, 40)}B, gebouw {R.randint(1, 9)}, tweede verdieping.",
    lambda: f"Albert Heijn en Douwe Egberts verhogen de prijzen met {pct()}%.",
    lambda: f"De Jenkins-build faalt weer; Ansible-playbook draait op versie {ver()}.",
    lambda: "Kabinet Presenteert Nieuwe Plannen Voor Woningbouw",
    lambda: "In augustus gaan we naar Florence, in juni naar Parijs.",
    lambda: "Vul straat, huisnummer, postcode en woonplaats in op het formulier.",
    lambda: f"Dosering {R.randint(5, 500)} mg; patiënten met de ziekte van Crohn zijn uitgesloten.",
    lambda: "Het Rijksmuseum en het Stedelijk Museum zijn op maandag open.",
    lambda: "De Keizersgracht is vanavond erg druk met rondvaartboten.",
]
for _f in N_NL:
    framed("nl", _f, is_headline(_f))


# ----------------------------------------------------------------------------------------------
# Build, check, write
# ----------------------------------------------------------------------------------------------

POS_TARGET = {"en": 530, "de": 36, "fr": 36, "es": 36, "it": 36, "nl": 36}
NEG_TARGET = {"en": 130, "de": 12, "fr": 12, "es": 11, "it": 11, "nl": 11}


def build(parts: list) -> tuple[str, list]:
    text, spans = "", []
    for p in parts:
        if isinstance(p, tuple):
            val, typ = p
            assert typ in ("PERSON", "POSTAL_ADDRESS"), typ
            assert val and val == val.strip(), repr(val)
            spans.append([len(text), len(text) + len(val), typ])
            text += val
            assert text[spans[-1][0]:spans[-1][1]] == val
        else:
            text += p
    return text, spans


NAME_WORDS = {w for c in CULTURES.values() for w in c["given"] + c["family"] if len(w) >= 4}


def stray_names(text: str, spans: list) -> list[str]:
    """Pool names that occur outside every span (a template that forgot a label, or a hard negative)."""
    mask = list(text)
    for s, e, _t in spans:
        mask[s:e] = " " * (e - s)
    rest = "".join(mask)
    return sorted({w for w in re.findall(r"[^\W\d_][\w'-]*", rest) if w in NAME_WORDS})


def main() -> None:
    rows: list[dict] = []
    for lang, target in POS_TARGET.items():
        ts_ = [t for t in TEMPLATES if t[1] == lang]
        for i in range(target):
            kind, _l, fn = ts_[i % len(ts_)]
            text, spans = build(fn())
            rows.append({"id": f"names-pos-{lang}-{i:03d}", "kind": kind, "lang": lang, "negative": False,
                         "text": text, "spans": spans})
    for lang, target in NEG_TARGET.items():
        groups: dict[int, list] = {}
        for t in NEGATIVES:
            if t[1] == lang:
                groups.setdefault(t[3], []).append(t)
        gids = sorted(groups)
        seen: set[str] = set()
        i = tries = 0
        while i < target and tries < 50 * target:
            kind, _l, fn, _g = R.choice(groups[R.choice(gids)])
            tries += 1
            text = fn()
            if text in seen:
                continue
            seen.add(text)
            rows.append({"id": f"names-neg-{lang}-{i:03d}", "kind": kind, "lang": lang, "negative": True,
                         "text": text, "spans": []})
            i += 1
        assert i == target, (lang, i, target)

    stray = Counter()
    for r in rows:
        prev = 0
        for s, e, _t in sorted(r["spans"]):
            assert 0 <= prev <= s < e <= len(r["text"]), r
            assert r["text"][s:e] == r["text"][s:e].strip(), r
            prev = e
        if not r["negative"]:
            assert r["spans"], r["id"]
        for w in stray_names(r["text"], r["spans"]):
            stray[(r["negative"], w)] += 1
    if "-v" in sys.argv:
        print("pool names outside spans (negative?, word): ", dict(stray))

    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    pos = [r for r in rows if not r["negative"]]
    neg_ = [r for r in rows if r["negative"]]
    print(f"wrote {len(rows)} rows to {OUT.name}: {len(pos)} positive texts, {len(neg_)} hard negatives")
    spans = Counter(t for r in pos for _s, _e, t in r["spans"])
    print("spans by type:", dict(spans))
    multi = sum(1 for r in pos for s, e, t in r["spans"] if t == "POSTAL_ADDRESS" and "\n" in r["text"][s:e])
    print(f"multi-line addresses: {multi}")
    print("texts by lang (pos/neg):", {lg: (sum(1 for r in pos if r["lang"] == lg), sum(1 for r in neg_ if r["lang"] == lg))
                                       for lg in POS_TARGET})
    print("texts by kind (pos):", dict(sorted(Counter(r["kind"] for r in pos).items())))
    print("texts by kind (neg):", dict(sorted(Counter(r["kind"] for r in neg_).items())))
    print("spans by lang and type:", {lg: dict(Counter(t for r in pos if r["lang"] == lg for _s, _e, t in r["spans"]))
                                      for lg in POS_TARGET})
    print("addresses by country format:", dict(COUNTRY_USE.most_common()))
    assert len(pos) >= 600 and len(neg_) >= 150 and len(COUNTRY_USE) >= 11


if __name__ == "__main__":
    main()
