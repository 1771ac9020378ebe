"""The words around a personal name, for the PERSON rules (``person.py``): particles, titles,
cue words (greetings, sign-offs, role words, verbs of saying) in six languages, the context
patterns before and after a name, and the word-shape helpers (``_known``, ``_title_parts``).
Internal to the PERSON rules; the firm, place and product lists are in ``not_names.py``.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.recognizers.gazetteer import Gazetteer
from kvfence.gateway.protection.detect.recognizers.not_names import PRODUCTS as _SOFTWARE


def _not_a_person(low: str) -> bool:
    return low in _SOFTWARE


# products named like people that are given names first in the six languages: a cue or a verb of
# saying makes them a person ("Merci Hugo !", "Hugo m'a dit"); alone they stay products
_PEOPLE_FIRST = frozenset(["hugo", "pascal", "julia", "ada", "luigi"])


_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]{2,}|-[^\W\d_]+)*")
_PARTICLES = frozenset(["van", "von", "der", "den", "de", "del", "della", "dello", "degli", "di", "da", "das", "do", "dos", "du", "le", "la", "bin", "binti", "bint", "binte", "ibn", "los", "las", "dela", "delos", "af", "ap", "al", "el", "ter", "ten", "zu", "zur", "vom", "d'", "st"])
# Function words of the six languages (prepositions, conjunctions, articles, determiners), capitalised
# at a sentence start or in a Title Case headline: never part of a name ("In Amman", "Goods In", "Laut
# Jonas Weber", "Jordan And Georgia"). Not here: particles ("De", "Van", "La", "Ten"), words that start or
# join surnames ("de los Santos", "de las Heras", "Op de Beeck", "Uit den Bogaard", "Bij de Vaate", "zum
# Winkel", "Aus der Fünten", "von dem Bussche", "van het Groenewoud"), and function words that are also
# given names or surnames of some culture ("My", "Do", "An", "Ma", "Per", "Una", "Esa", "Les", "Alla",
# "Nel", "Om", "Con", "Im", "Um", "Au", "Dat", "Or"; "Y" is an initial).
_FUNCTION_WORDS = frozenset("""
in on at the and of for with from by into onto upon about within without than but nor if when while after
before during since until because this that these those our your their its his her
laut für mit nach über unter und oder aber auch seit durch gegen ohne wegen trotz während bis beim ins die ein
eine einen einem eines unser unsere ihr ihre diese dieser dieses wir sie
selon pour avec sans chez sous dans et mais par en aux une notre votre leur ce cette ces nous vous ils elles
según para sobre entre hacia desde hasta por unos unas nuestro nuestra este estos
secondo senza sulla anche il gli questo questa nostro nostra ogni presso verso dopo circa
volgens voor zonder naar onder door tegen maar ook met tot sinds tijdens een onze ons jullie deze dit
""".split())  # noqa: SIM905
_TITLES = frozenset(["mr", "mrs", "ms", "mx", "miss", "dr", "prof", "sir", "dame", "lord", "lady", "herr", "frau", "fr", "hr", "m", "mme", "mlle", "madame", "monsieur", "mademoiselle", "sr", "sra", "srta", "señor", "señora", "señorita", "don", "doña", "dña", "d", "dott", "dottssa", "dott.ssa", "sig", "sigra", "sig.ra", "signor", "signora", "signore", "dhr", "mevr", "mw", "mej", "heer", "mevrouw", "meneer", "mijnheer", "herrn", "docteur", "professeur", "maître", "maitre", "doctor", "doctora", "professor", "professora", "dra", "lic", "avv", "arch", "drs", "ir", "me", "ing", "rev", "capt", "col", "gen", "sgt", "insp", "det", "judge"])
# Only with a cue word: "M." is also an initial, "Fr." also Friday/Father; "D." is the Spanish and
# Portuguese Don / Dom / Dona ("D. Antonio Ruiz", "Sr. D. Manuel Ortiz"), and an initial too.
_TITLE_RE = re.compile(
    r"(?<![\w.])(?:(?i:Mr|Mrs|Ms|Mx|Miss|Dr|Prof|Sir|Dame|Herr|Frau|Hr|Mme|Mlle|Madame|Monsieur|Mademoiselle"
    r"|Sr|Sra|Srta|Señor|Señora|Señorita|Doña|Dña|Dott|Dott\.ssa|Dottssa|Sig|Sig\.ra|Signor|Signora|Dhr|Mevr|Heer|Mevrouw"
    r"|Meneer|Mijnheer|Herrn|Docteur|Professeur|Ma[iî]tre|Doctora?|Professora?|Dra|Lic|Avv|Arch|Drs"
    r"|Mw|Ing|Rev|Capt|Insp|Judge|Prof\.\s?Dr)|M|Me|Ir|Fr|Don|D(?=\.))\.?\s{1,2}$")
_TITLE_LAST = frozenset(w.split(".")[-1] for w in _TITLES) | {"m", "fr", "don", "ssa", "ra", "dr"}


def _after_title(before: str) -> bool:
    tail = before[-14:].rstrip()
    if not tail or len(before) - len(before.rstrip()) > 2 or "\n" in before[len(before.rstrip()):]:
        return False  # a title ends its line: "Scribe: HR\nFacilitator" (HR is no "Hr.")
    last = tail.rsplit(None, 1)[-1].rstrip(".").rsplit(".", 1)[-1].lower()
    last = last.rsplit("'", 1)[-1].rsplit("’", 1)[-1]  # an elided article: "l'avv. Benedetti", "dall'Ing. Moretti"
    return last in _TITLE_LAST and _TITLE_RE.search(before) is not None


# after a title, a brand or character ("Dr. Pepper", "Mr. Clean"), or an office addressed by its title in
# six languages ("Herr Ober", "Frau Doktor", "Mr. President", "Madam Chair", "Señor Alcalde", "Signor
# Sindaco"): no name
_BRAND_TITLES = frozenset("""pepper dre seuss clean bean robot
ober doktor professor professorin pfarrer kollege kollegin nachbar nachbarin direktor direktorin präsident
präsidentin minister ministerin bürgermeister bürgermeisterin kommissar wachtmeister vorsitzender vorsitzende
president chair chairman chairwoman speaker mayor secretary ambassador governor senator
directeur directrice président présidente ministre maire docteur professeur
alcalde presidente presidenta ministro ministra director directora juez jueza doctor doctora profesor profesora
sindaco giudice dottore dottoressa direttore direttrice professore professoressa
burgemeester voorzitter minister directeur dokter professor""".split())  # noqa: SIM905
# Words before a capitalised word that make it a street, not a person ("Via Roma", "Calle Mayor").
_STREET_WORDS = frozenset("via viale piazza corso calle avenida plaza paseo rue avenue boulevard place rua "  # noqa: SIM905
                          "street road lane straße strasse platz weg "
                          # the other street words of French, Italian, Spanish, Catalan, German and Dutch
                          # addresses ("allée Marie Curie", "quai Jean Moulin", "Vicolo Giuseppe Verdi")
                          "allée quai impasse chemin square esplanade parvis vicolo largo lungomare travessa "
                          "carrer rambla avinguda allee gasse ufer damm straat laan plein gracht kade "
                          # and of Spanish, Catalan and Portuguese ones ("Plaça Francesc Macià", "Praça Marquês de Pombal")
                          "plaça praça passeig travesía travessera glorieta carretera estrada calçada ladeira bulevar".split())
# Greetings of other languages: before a name, never a closing ("Merhaba Mehmet", "Shalom Yael", "Xin chào Lan")
_OTHER_GREETINGS = frozenset(c.strip() for c in """
merhaba, selam, salaam, shalom, namaste, namaskar, vanakkam, marhaba, ahlan, jambo, habari, sawubona, kumusta,
kamusta, xin chào, chào, annyeong, konnichiwa, ni hao, nǐ hǎo, hei, moi, terve, hallå, hejsan, goddag, dzień dobry,
cześć, czesc, ahoj, dobrý den, szia, szervusz, jó napot, geia sou, yassou, yia sou, kalimera, zdravo, privet,
selamat pagi, selamat siang, selamat sore, selamat malam, halo, bom dia, boa tarde, boa noite, oi
""".replace("\n", " ").split(","))
# Words before a name that make a single known name a person: greetings, sign-offs, asking someone.
_CUES = _OTHER_GREETINGS | frozenset(c.strip() for c in """
hi, hey, hello, hallo, hola, ciao, salut, bonjour, bonsoir, buongiorno, buenos días, moin, servus, dear, hoi, hej, olá, salve,
dearest, liebe, lieber, sehr geehrte, sehr geehrter, cher, chère, estimado, estimada, querido, querida, caro,
cara, gentile, beste, geachte, thanks, thank you, thx, cheers, regards, danke, merci, gracias, grazie, bedankt,
ask, asked, tell, told, ping, pinged, cc, bcc, call, called, email, emailed, message, contact, contacted, with,
attn, attention, signed, sincerely, assigned to, owner, reviewer, reporter, approver, approved by, reported by,
requested by, created by, signed by, witness, tenant, landlord, patient, customer, client, employee,
applicant, candidate, colleague, manager, my name is, i am, i'm, this is, it's, ich bin, ich heiße, je suis,
je m'appelle, me llamo, soy, mi chiamo, sono, ik ben, mijn naam is, ik heet, frag, demande à, pregunta a,
chiedi a, vraag, witness, attendees, attendee, participants, present, speaker, author, authors, owner,
assignee, signatory, guarantor, seller, buyer, lessor, lessee, tenant, employer, contractor, zeuge, zeugin,
teilnehmer, témoin, participants, testigo, asistentes, testimone, partecipanti, getuige, aanwezig, @, met, mit, avec, con, per, via, from, by, and, to, for, und,
amb, com, assistents, testimoni, testemunha, viu a, viste a, dicho a, prévenu, préviens, prévenez, relancé, relance,
sentito, visto, vu, croisé, chiamato, appelé,
loop in, looping in, looped in, looping, according to, thanks to, merci à, grazie a, gracias a, danke an, dank aan,
shoutout to, shout out to, kudos to, congrats, congratulations, félicitations, bravo, glückwunsch, felicidades,
enhorabuena, complimenti, auguri, gefeliciteerd, proficiat, welcome, welcome aboard, welcome back, bienvenue,
willkommen, bienvenido, bienvenida, benvenuto, benvenuta, welkom, sorry, apologies, désolé, désolée, scusa,
perdona, happy birthday, joyeux anniversaire, feliz cumpleaños, buon compleanno, backup, back-up, reach out to,
talk to, speak to, spoke to, rappelle, rappelez, appelle, appelez, contacte, contactez, écris à, dis à, dites à,
llama a, chiama, frag mal, ruf, vraag even, vraag aan, vraag even aan, adding, add, added, ty, tysm, thnx, tnx, np,
forward to, forward this to, forward it to, send to, send this to, send it to, sent to, sent it to, write to,
reply to, pass it to, hand it to, bises à, bisous à, sag, dile a, digli, morning, afternoon, evening,
lol, lmao, haha, hahaha, omg, yes, yeah, yep, nope, ok, okay, tks, thks, thnks, yo, dm, dm'd, dmed, dming
""".replace("\n", " ").split(","))
# Of these, the weak ones ("to", "and") only with a name that is no word or place.
# "hai sentito davide", "t'as vu mathilde": chat verbs of meeting someone, weak as well
# "according to" names a firm, an analyst or a paper as often as a person ("according to Gartner")
_WEAK_CUES = frozenset(["with", "met", "mit", "avec", "con", "amb", "com", "per", "via", "from", "by", "and", "to", "for", "und",
                        "sentito", "visto", "vu", "croisé", "chiamato", "appelé", "according to", "viu a", "viste a",
                        "dicho a", "prévenu", "préviens", "prévenez", "relancé", "relance",
                        # "Morning Tendai,": a greeting, but "Sunday morning" is a time too
                        "morning", "afternoon", "evening",
                        # chat interjections and "dm": before a name that is no word ("lol raj", "yes Shreya", "dm fatou")
                        "lol", "lmao", "haha", "hahaha", "omg", "yes", "yeah", "yep", "nope", "ok", "okay", "tks", "thks",
                        "thnks", "yo", "dm", "dm'd", "dmed", "dming"])
_CUE_WORDS = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?|@|(?<=c)/(?=o)")


# Greetings and sign-offs: after these a capitalised word the lists lack is a name too ("Hi Tesfaye,",
# "Best regards,\nOluwadamilare Okafor"), unless it is a word for a group ("Hi Team", "Liebe Kollegen").
# Greetings: before a given name that is also a word ("Hi Will,", "Salut Rose", "Good morning Heather")
_GREETINGS = _OTHER_GREETINGS | frozenset(c.strip() for c in """
hi, hey, hello, hallo, hola, ciao, salut, bonjour, bonsoir, buongiorno, moin, servus, dear, dearest, liebe, hoi, hej, olá, salve,
lieber, sehr geehrte, sehr geehrter, cher, chère, estimado, estimada, querido, querida, caro, cara, gentile,
beste, geachte, coucou, hiya, howdy, good morning, good afternoon, good evening, guten morgen, guten tag,
buenos días, buenas tardes, buenas, goedemorgen, goedemiddag,
bon dia, bona tarda, bona nit, benvolgut, benvolguda, estimat, prezado, prezada, oye
""".replace("\n", " ").split(","))
_STRONG_CUES = _GREETINGS | frozenset(c.strip() for c in """
thanks, thank you, cheers, regards, best, best regards, kind regards, warm regards,
sincerely, yours, grüße, gruß, viele grüße, beste grüße, freundliche grüße, mit freundlichen grüßen,
cordialement, bien à vous, amitiés, saludos, un saludo, atentamente, saluti, cordiali saluti, distinti saluti,
bonne journée, bonne soirée, bonne fin de journée, bises, bisous, amicalement, à bientôt, un saluto, un abbraccio,
un caro saluto, a presto, buona giornata, buona serata, baci, saluti cordiali,
groeten, met vriendelijke groet, hartelijke groet, groetjes, signed, witness, attendees,
talk soon, speak soon, take care, all the best, best wishes, warm wishes, warmly, love, lots of love, xoxo, xo, hugs,
many thanks, thanks again, thanks in advance, with thanks, thx, tks, thnx, tnx, rgds, thanks all, thanks everyone, thank you all, ta, br, à plus, à demain, bonne semaine, bon week-end,
bon weekend, belle journée, bonne fin de semaine, je t'embrasse, grosses bises, bisou, bien cordialement,
très cordialement, sincères salutations, salutations, liebe grüße, lg, schöne grüße, herzliche grüße, bis bald,
bis dann, besos, un beso, abrazos, un abrazo, saludos cordiales, hasta pronto, un bacio, bacioni, a dopo, a domani,
liefs, tot snel, tot morgen, hartelijke groeten, vriendelijke groeten, -, journée à vous, journée à toi,
soirée à vous, soirée à toi, semaine à vous, semaine à toi,
sister, brother, wife, husband, son, daughter, mother, father, mum, mom, dad, aunt, uncle, cousin, niece, nephew,
grandson, granddaughter, grandmother, grandfather, fiancé, fiancée, girlfriend, boyfriend, friend, neighbour,
neighbor, colleague, coworker, co-worker, boss, schwester, bruder, ehefrau, ehemann, sohn, tochter, mutter, vater,
tante, onkel, cousine, kollege, kollegin, nachbar, nachbarin, freundin, freund, sœur, frère, épouse, mari, fils,
fille, mère, père, oncle, cousin, collègue, voisin, voisine, amie, ami, hermana, hermano, esposa, marido, hijo, hija,
madre, padre, tía, tío, prima, primo, compañero, compañera, vecino, vecina, amiga, amigo, sorella, fratello, moglie,
marito, figlio, figlia, zia, zio, cugino, cugina, collega, vicino, vicina, amica, amico, zus, broer, echtgenote,
zoon, dochter, moeder, vader, oom, neef, nicht, buurman, buurvrouw, vriendin, vriend,
ship to, deliver to, bill to, sold to, attn, attention, recipient, c/o, co, empfänger, destinataire,
destinatario, ontvanger, z. hd, zhd,
pozdrawiam, z poważaniem, s pozdravem, üdvözlettel, saygılarımla, selamlar, hälsningar, med vänlig hälsning,
vänliga hälsningar, mvh, vennlig hilsen, hilsen, med venlig hilsen, terveisin, ystävällisin terveisin, atenciosamente,
abraço, abraços, cumprimentos, salam hangat, hormat saya, salam, shukran, shukriya, dhanyavaad, dziękuję, děkuji,
köszönöm, teşekkürler, tack, takk, kiitos, spasibo, hvala, toda, toda raba,
beijos, beijo, beijinhos, bjs, um abraço, grande abraço, até logo, até breve, até amanhã, cordialment, atentament,
salutacions, salutacions cordials, una abraçada, abraçades, petons, fins aviat, fins demà
""".replace("\n", " ").split(","))
_ROLE_WORDS = frozenset(c.strip() for c in """
sister, brother, wife, husband, son, daughter, mother, father, mum, mom, dad, aunt, uncle, cousin, niece, nephew,
grandson, granddaughter, grandmother, grandfather, fiancé, fiancée, girlfriend, boyfriend, friend, neighbour,
neighbor, colleague, coworker, co-worker, boss, schwester, bruder, ehefrau, ehemann, sohn, tochter, mutter, vater,
tante, onkel, cousine, kollege, kollegin, nachbar, nachbarin, freundin, freund, sœur, frère, épouse, mari, fils,
fille, mère, père, oncle, collègue, voisin, voisine, amie, ami, hermana, hermano, esposa, marido, hijo, hija,
madre, padre, tía, tío, prima, primo, compañero, compañera, vecino, vecina, amiga, amigo, sorella, fratello, moglie,
marito, figlio, figlia, zia, zio, cugino, cugina, collega, vicino, vicina, amica, amico, zus, broer, echtgenote,
zoon, dochter, moeder, vader, oom, neef, nicht, buurman, buurvrouw, vriendin, vriend""".replace("\n", " ").split(","))
_SIGN_OFFS = frozenset(c for c in _STRONG_CUES if c not in _GREETINGS and c not in ("witness", "attendees")
                       and c not in _ROLE_WORDS)
# Before a given name that is also a word, a month or a place, only these make it a person: a
# greeting, thanks, a copy or a mention ("Hi Will,", "Thanks again Summer!", "cc Grace", "@Jordan")
_RISKY_CUES = _GREETINGS | frozenset(["thanks", "thank you", "thx", "thanks again", "many thanks", "merci", "danke",
                                      "gracias", "grazie", "bedankt", "gràcies", "obrigado", "obrigada", "cc", "@"])
_MAIL_AFTER = re.compile(r"[ \t]{0,2}[<(\[][ \t]?(?:mailto:)?[\w.+'-]{1,64}@[\w-]+\.[\w.-]+")
_GROUP_WORDS = frozenset(["team", "all", "everyone", "everybody", "folks", "guys", "there", "world", "customer", "customers", "colleagues", "equipo", "squadra", "ploeg", "kollegen", "kolleginnen", "kunden", "kundinnen", "freunde", "damen", "herren", "mitglieder", "leute", "alle", "zusammen", "équipe", "equipe", "tous", "todos", "todas", "tutti", "amici", "amigos", "compañeros", "colleghi", "collègues", "collega's", "allemaal", "iedereen", "support", "sales", "admin", "admins", "user", "users", "sir", "madam", "management", "dirección", "direction", "direzione", "directie", "geschäftsleitung", "geschäftsführung", "secretariaat", "secretaría", "segreteria", "secrétariat", "sekretariat", "redaktion", "rédaction", "redacción", "redazione", "redactie", "administration", "verwaltung", "administración", "amministrazione", "administratie", "buchhaltung", "contabilidad", "contabilità", "boekhouding", "comptabilité", "personal", "personalabteilung", "facturación", "fatturazione", "facturation", "kundenservice", "klantenservice", "servicio", "servizio", "service", "grüße", "gruß", "grüsse", "groeten", "groet", "saluti", "saludos", "salutations", "regards", "wishes", "greetings"])


# Asking someone: after these a capitalised word the lists lack is a name too ("ask Soizic",
# "chiedi a Mariapia", "vraag Jorien"), when it is no word, group, department or product.
_ASK_CUES = frozenset(c.strip() for c in """
ask, tell, ping, frag, fragen sie, demande à, demandez à, pregunta a, pregúntale a, chiedi a, chiedete a, vraag,
merci, merci beaucoup, danke, gracias, grazie, grazie mille, mille grazie, bedankt, dank je, dank u, obrigado, obrigada,
gràcies, moltes gràcies, muito obrigado, muito obrigada, pergunta a, pergunte a, pregunta-li a
""".replace("\n", " ").split(","))
# Role labels: before two name-shaped words the lists lack ("Assigned to Rangi Parata")
_LABEL_CUES = frozenset(c.strip() for c in """
assigned to, assigned, assignee, reviewer, reporter, approver, approved by, reported by, requested by, signed by, author,
signatory, witness, tenant, landlord, patient, applicant, candidate, guarantor, lessor, lessee, zeuge, zeugin,
témoin, testigo, testimone, getuige, owner, contact, attn, attention, locataire, propriétaire, bailleur,
signataire, mieter, mieterin, vermieter, vermieterin, inquilino, inquilina, arrendador, arrendatario,
conduttore, locatore, huurder, verhuurder, patiënt, patiente, paciente, paziente, patientin, empfänger,
destinataire, destinatario, ontvanger, firmado, firmato, signé, unterschrieben, getekend,
led by, chaired by, hosted by, presented by, organised by, organized by, moderated by, facilitated by,
sponsored by, minutes by, prepared by, reviewed by, submitted by
""".replace("\n", " ").split(","))
# the last word of a closing ("Best,", "Kind regards,", "Yours,", "Saludos,")
_CLOSING_LAST = frozenset("""best regards yours sincerely grüße gruß cordialement saludos atentamente saluti groeten
groet groetjes journée soirée bises bisous amicalement bientôt saluto abbraccio presto giornata serata baci
cordiali soon care wishes warmly love salutations semaine weekend week-end embrasse demain bald dann pronto
dopo domani snel morgen liefs vous toi beijos beijo beijinhos bjs abraço cordialment atentament salutacions
abraçada abraçades petons aviat demà breve logo amanhã ta br all everyone rgds""".split())  # noqa: SIM905
_CUE_LAST = frozenset(p.split()[-1] for p in _CUES | _STRONG_CUES | _ASK_CUES | _LABEL_CUES)


_ALL_CUES = _CUES | _STRONG_CUES | _ASK_CUES | _LABEL_CUES


def _cue_before(before: str) -> str | None:
    """The cue phrase (one to three words) that ends just before a name, if any; a sign-off may end
    the line before ("Best regards,\n")."""
    tail = before.rstrip(" ,:\t\r\n")
    if tail.endswith("!") and "\n" in before[len(tail):]:
        tail = tail.rstrip("!")  # "Thank you!\nAriana"
    if not tail:
        return None
    gap = before[len(tail):]
    newline = "\n" in gap
    # a closing, then the name on the next line or after one blank line ("Many thanks,\n\nHiroko")
    if (len(gap) > 3 and not newline) or gap.count("\n") > 2 or (gap.count("\n") == 2 and "\n\n" not in gap.replace(" ", "")):
        return None
    if tail[-1] in "-–—":
        # a signature after "-- " on its own line, or after a sentence: "Happy to help! - Tony"
        rest = tail.rstrip("-–—")
        dashes = len(tail) - len(rest)
        if (newline and dashes == 2 and rest.endswith("\n")) or (not newline and dashes == 2 and rest[-1:] in ("", "\n")) \
                or (not newline and dashes == 1 and rest.endswith(("! ", ". ", "? ", ") "))):
            return "-"
        return None
    if tail[-2:].lower() == "w/" and not tail[-3:-2].isalnum():
        return "with"  # "lunch w/ Ahmed"
    last = tail[-12:].rsplit(None, 1)[-1].lower().lstrip("\"'“‘«(„[")
    if last != "@" and last.replace("’", "'") not in _CUE_LAST:
        return None  # the common case, decided without a regex
    words = _CUE_WORDS.findall(tail[-30:].lower().replace("’", "'"))
    if not words or not tail.lower().endswith(words[-1]):
        return None
    for n in (3, 2, 1):
        phrase = " ".join(words[-n:])
        if len(words) >= n and phrase in (_SIGN_OFFS if newline else _ALL_CUES):
            if not newline and "," not in gap and phrase.split()[-1] in _CLOSING_LAST:
                return None  # a closing ends with a comma or a line: "Best Buy", "Yours Truly" are none
            return phrase
    return None


# verbs of saying that a firm uses rarely (no "said": "Siemens said" is common)
_SPOKE_AFTER = re.compile(r"^\s(?:wrote|replied|asked|emailed|told me|told us|phoned|texted|messaged|"
                          r"schrieb|fragte|a écrit|a répondu|escribió|respondió|ha scritto|ha risposto|schreef|vroeg)\b")
_SAY_AFTER = re.compile(
    r"^(?:'s\b|’s\b|\s(?:said|says|wrote|writes|asked|asks|replied|told|mentioned|confirmed|agreed|suggested"
    r"|approved|signed|joined|called|emailed|noted|thinks|reported|requested|explained|added|will|can|has|had"
    r"|is|was|sagt|sagte|schrieb|meinte|hat|ist|dit|a dit|écrit|dijo|escribió|ha detto|ha scritto|zei|schreef"
    r"|heeft|m'a dit|m’a dit|m'a écrit|nous a dit|m'a appelé|mi ha detto|me dijo|hat mir gesagt)\b)")
# after a name, a copy note or pronouns say it is a person: "Sarah (cc'd)", "Tom Ellis (he/him)"
_MARKER_AFTER = re.compile(r"^\s?\((?:cc'?d|cc|in cc|en copie|en cc|in copia|in kopie|she/her|he/him|they/them"
                           r"|elle|il|sie/ihr|er/ihm)\)", re.I)
# "Hunter and I", "Camille et moi": a person with the writer
_AND_I_AFTER = re.compile(r"^\s(?:and I|and me|et moi|und ich|y yo|e io|en ik)\b")
_WITH_I_BEFORE = re.compile(r"(?:\b(?:[Mm]e and|I and|[Mm]oi et|[Ii]ch und|[Yy]o y|[Ii]o e|[Ii]k en))\s$")
# "Grace, can you ...", "Will, could you ...": a vocative, then a request
_REQUEST_AFTER = re.compile(r"^,\s(?:can|could|would|will|do|did|are|have) you\b|^,\s(?:please|pls|peux-tu|tu peux"
                            r"|pouvez-vous|kannst du|können sie|puedes|puoi|kun je|kunt u)\b", re.I)
# a lower-case given name that is also a word, addressed in chat: after a greeting, thanks, "cc", "ping",
# "ask" or "tell", and before punctuation, a line end or an emoji ("hey grace,", "thx mark!", "cc will");
# "thanks, will do", "hey man!", "thanks love" stay words
_CHAT_CUES = _RISKY_CUES | frozenset(["ping", "ask", "tell", "ty"])
_ADDRESSED_AFTER = re.compile(r"^(?:$|[,!?.:;)]|[ \t]*\n|[ \t]+[\U0001F300-\U0001FAFF\u2600-\u27BF])")
_VOCATIVES = frozenset("""man boss doc love babe baby honey hon darling champ lady friend sunshine bud gang soon guy
fella son king queen prince star dude bro sis pal mate buddy chief sweetie kiddo""".split())  # noqa: SIM905
# after "this is" / "it's" / "ich bin" ...: "This is Hope from accounts", "it's Amber from the dental practice"
_INTRO_CUES = frozenset(["this is", "it's", "i am", "i'm", "my name is", "je suis", "c'est", "ich bin", "soy",
                         "sono", "ik ben"])
# a team and a verb of contact after a name: "Dawn from payroll called", "Bill from IT rang"
_FROM_TEAM = re.compile(r"^\s(?:from|de|du|von|aus|da|van|del)\s(?:the\s|la\s|l'|der\s|dem\s|el\s|il\s|de\s)?"
                        r"(?:accounts|accounting|finance|payroll|hr|it|legal|sales|marketing|support|procurement|ops"
                        r"|operations|reception|facilities|security|engineering|billing|compliance|office|team|desk"
                        r"|compta|comptabilité|rh|buchhaltung|personal|vertrieb|einkauf|contabilidad|ventas|rrhh"
                        r"|contabilità|vendite|boekhouding|verkoop|inkoop)\s(?:called|emailed|phoned|rang|wrote|asked|said"
                        r"|says|sent|stopped by|came by|dropped by|replied|mentioned|confirmed|is on the line|a appelé|a dit"
                        r"|hat angerufen|ha chiamato|llamó|belde)\b", re.I)


# after a given name that is also a word ("Will", "Grace", "Frank", "Rose"): only a verb of saying
# or wanting makes it a person ("Will said he'd be late", "Frank wants the numbers", "Rose a appelé")
_WORD_NAME_SAYS = re.compile(
    r"^\s(?:said|says|wrote|writes|replied|asked|asks|told|mentioned|agreed|suggested|thinks|wants|texted|emailed"
    r"|messaged|a dit|a écrit|a appelé|a demandé|a répondu|sagt|sagte|schrieb|fragte|meinte|dijo|escribió|preguntó"
    r"|ha detto|ha scritto|ha chiamato|zei|schreef|vroeg|zegt|m'a dit|m’a dit|m'a écrit|nous a dit|m'a appelé)\b")
# given names that are also words but name a place, a firm or a team when they "say" something
_SAYS_AS_A_PLACE = frozenset("""boston china chase madison phoenix kent wellington nelson lorraine savannah siena
sierra troy aurora sterling rust star sky spring storm king prince duke""".split())  # noqa: SIM905


_LAST_WORD = re.compile(r"(?<![\w'’])([^\W\d_]+(?:['’][^\W\d_]+)?) $")


def _word_right_before(before: str) -> str | None:
    """The word that ends one space before a name ("in", "the", "via"), lower-cased; none when a
    number or punctuation stands between ("a las 9:14, Lucía")."""
    if before.endswith(("d'", "l'", "d’", "l’")) and before[-3:-2].isspace():
        before = before[:-2]  # "rue d'Alésia", "à l'Olivier": the word before the elision
    m = _LAST_WORD.search(before[-24:])
    # an elided article is no word of its own: "l'Avinguda Josep Tarradellas" reads "avinguda"
    return m.group(1).lower().replace("’", "'").rsplit("'", 1)[-1] if m is not None else None


def _title_parts(word: str) -> bool:
    """Each part is capitalised and the rest lower case ("Farsi", "Al-Farsi", "O'Connell", "al-Amin")."""
    parts = [p for p in re.split(r"[-'’]", word) if p]
    return bool(parts) and all(p[1:].islower() and (p[0].isupper() or p.lower() in _PARTICLES or len(p) <= 3)
                               for p in parts) and parts[-1][0].isupper()


def _parts(low: str) -> list[str]:
    return [p for p in re.split(r"[-']", low) if p]


def _known(g: Gazetteer, low: str, given: bool) -> bool:
    """A known given name (or surname) itself, or every part of a hyphenated/apostrophe form."""
    check = g.is_given if given else g.is_name
    if check(low):
        return True
    parts = _parts(low)
    if len(parts) > 1:
        if given:
            # "Da-eun", "Su-bin": a Korean given name of two syllables, one of them a known name part
            return all(g.is_given(p) for p in parts) or (len(parts) == 2 and "-" in low and any(
                g.is_given(p) for p in parts) and all(_KOREAN_SYLLABLE.match(p) for p in parts))
        # O'Brien, D'Angelo, al-Sayed, Smith-Jones, Kierkegaard-Holm: a known part carries the name
        if g.is_name(parts[-1]) and all(len(p) <= 3 or g.is_name(p) for p in parts[:-1]):
            return True
        # a double-barrelled surname with one known surname, the other part a name or no word
        # ("Oyelowo-Smith", "Kierkegaard-Holm"; not "Rolls-Royce": "rolls" is a word)
        return len(parts) == 2 and any(g.is_surname(p) for p in parts) \
            and not any(g.is_ordinary(p) and not g.is_name(p) for p in parts) \
            and any(not g.is_ordinary(p) for p in parts)
    return False


# after a name: punctuation, the end, or a lower-case word ("Mark Brown and", "Grace Hopper invented")
_AFTER_NAME = re.compile(r"^(?:$|[,;:!?)\n]|\.(?:\s|$)|\s+[a-zà-ÿ]|\s*[-–—(])")
_LOWER_AFTER = re.compile(r"^(?:['’]s\b|\s+[a-zà-ÿ])")
# "Sofia office", "Lena build": a lone given name before a noun that makes it a thing (a few)
_NOUN_AFTER = re.compile(r"^\s(?:office|offices|branch|site|campus|region|server|cluster|release|version|build|"
                         r"model|engine|api|sdk|app|plugin|library|package|project|brand|store|shop|series|"
                         r"line|class|edition|hotel|restaurant|street|road|avenue|airport|station)\b", re.I)
# a firm's words in the sentence after a "Given Surname" ("... reported higher quarterly profits",
# "... shares fell"), unless a pronoun says it is a person ("... sold her shares")
_BUSINESS_AFTER = re.compile(
    r"^(?!.*\b(?:he|she|his|her|him|they|their|er|sie|ihr|sein|il|elle|son|sa|él|ella|lui|lei|hij|zij|zijn|haar)\b)"
    r".*\b(?:serums|fragrances|perfumes|cosmetics|collections|on offer|sold out|in stock|out of stock|shares|stock|stocks|earnings|profits?|revenues?|dividends?|ipo|quarterly|fiscal|subsidiary|"
    r"headquartered|shareholders|merger|acquisition|acquired|stores|outlets|franchise|recalled|layoffs|"
    r"valuation|stake|aktien|umsatz|gewinn|dividende|actions|bénéfices?|chiffre d'affaires|acciones|"
    r"beneficios|ventas|azioni|utili|fatturato|aandelen|winst|omzet)\b", re.I)
_BUSINESS_BEFORE = re.compile(
    r"\b(?:shares of|stock of|analysts at|works at|worked at|working at|account at|job at|acquired by|"
    r"subsidiary of|bought by|owned by|clients of|customers of|brand|brands|label|firm|bank|company|retailer|"
    r"carmaker|insurer|lender|broker|chain|maker)\s$", re.I)
_ITS_AFTER = re.compile(r"^(?:\s+[a-z]+){1,2}\s+(?:its|ihre[mnrs]?|seine[mnrs]?)\s", re.I)
_SUFFIX_THEN = re.compile(r"^,?\s(?:Jr|Sr|Jnr|Snr|II|III|IV)\.?\s([A-Z][a-z]+)")
_ARTICLES = frozenset("the het een ein eine einen einem einer eines une gli los las les".split())  # noqa: SIM905
# "naar" and "en" are left out: Dutch "stuur naar Niels", "Sem en Fleur"
_PLACE_BEFORE = frozenset("in at near im nach à au aux nel nella".split())  # noqa: SIM905
_LOWER_VERB_AFTER = re.compile(
    r"^(?:['’]s\s|\s(is|was|has|had|will|would|can|could|should|said|says|already|just|are|were|did|does|"
    r"wrote|merged|reviewed|fixed|pushed|thinks|wants|wanted|needs|needed|asked|told|agreed|approved|sent|knows|"
    r"ist|hat|war|sagt|est|a|dit|es|ha|dice|heeft|zegt|and|&|or|und|et|y|e|en|"
    r"takes|took|gets|got|goes|went|left|joined|called|texted|messaged|replied|booked|paid|arrived|arrives|comes|"
    r"came|starts|started|finished|brought|mentioned|might|must|can't|won't|doesn't|didn't|isn't|wasn't|hasn't|"
    # Spanish, Portuguese and Catalan chat ("y jaime está con lo del servidor"): only after a line start,
    # punctuation or a conjunction (_CLAUSE_BEFORE), since many of their words are given names ("rosa", "clara")
    r"está|estaba|tiene|viene|dijo|quiere|puede|sabe|ya|tem|vai|foi|disse|quer|pode|chegou|mandou|falou|já|"
    r"diu|té|vol|pot|ja)(?!\w))")
_ROMANCE_VERBS_AFTER = frozenset("""está estaba tiene viene dijo quiere puede sabe ya tem vai foi disse quer pode chegou
mandou falou já diu té vol pot ja""".split())  # noqa: SIM905
# a lower-case vocative ending a question or an exclamation: "is tomorrow ok for you, nikhil?", "thanks a lot ruslan!"
_END_VOCATIVE_BEFORE = re.compile(r"(?:,|\b(?:you|ok|okay|right|yet|lot|then))[ \t]$")
_END_VOCATIVE_AFTER = re.compile(r"^[?!]+[ \t]*(?:\n|$)")
# a writer names themself: "hey guys, nisha here", "Morning all, Ritu here." (after a line start or a comma)
_HERE_AFTER = re.compile(r"^ here(?:[,.!:;]|[ \t]*(?:\n|$)| (?:from|with|again|too)\b)")
_CLAUSE_BEFORE = re.compile(r"(?:^|[\n,.;:!?¿¡]\s*|\s(?:y|e|i|que|pero|mas|però|porque|perquè)\s)$")
# the short verbs and the words of a list: after a three-letter name they say too little ("mia a", "ana e")
_LOWER_SHORT_AFTER = frozenset(["a", "es", "ha", "e", "y", "en", "et", "and", "&", "or", "und", "est"])
# "can tunde review this", "did maria send it": a question's auxiliary right before a lower-case name
_AUX_BEFORE = re.compile(r"(?:^|[\n.!?,;]\s*|\s)(?:can|could|did|does|has|have|is|was|will|would|should)\s$")
# a chat export's date and time before the speaker: "12/03/2026, 09:14 - ", "3/12/26, 9:14 PM - "
_EXPORT_STAMP = r"\d{1,2}[/.]\d{1,2}[/.]\d{2,4},?[ \t]+\d{1,2}:\d{2}(?::\d{2})?(?:[ \t]?[AaPp][Mm])?[ \t]+[-–][ \t]+"
_STAMPED_LINE = re.compile(r"(?:^|\n)[ \t]*(?:\[[^\]\n]{1,24}\]|\d{1,2}:\d{2}(?::\d{2})?)[ \t]*(?:<)?$"
                           rf"|(?:^|\n)[ \t]*{_EXPORT_STAMP}$")
_VOCATIVE_AFTER = re.compile(r"^(?:,\s|\s(?:can|could|would|pls|plz|please|are|r|u|do|did|have)\s"
                             # "maëlys tu peux ...", "corentin t'as fini ?", "lorena tú sabes", "adrián ¿me pasas"
                             r"|\s(?:tu|tú|você|vc)\s|\st['’][a-zé]|\s¿)")
# a cleft names who does it: "C'est Baptiste qui gère", "Es Rubén quien lleva", "Foi o Leandro que abriu"
_CLEFT_BEFORE = re.compile(r"(?:^|[\s,.;:!?¿¡])(?i:c['’]est|es|fue|era|foi|é|és|è|it's|it is|it was)(?:\s(?:o|a|la|el|en))?\s$")
_CLEFT_AFTER = re.compile(r"^\s(?:qui|quien|que|quem|who|che)\s")
_CHINESE_SURNAMES = frozenset("""wang li zhang liu chen yang huang zhao wu zhou xu sun ma zhu hu guo he gao lin luo
zheng liang xie song tang han feng deng cao peng zeng xiao tian dong yuan pan cai jiang yu du ye cheng wei su lü
ding ren shen yao lu cui zhong tan fan jin shi liao jia xia fu fang bai zou meng xiong qin qiu yin xue yan duan
lei hou long tao gu mao hao gong shao wan qian dai mo kong xiang""".split())  # noqa: SIM905
# two or three pinyin syllables, four letters or more ("Mingzhe", "Zihan", "Xiaoyu")
_PINYIN_GIVEN = re.compile(
    r"^(?=.{4,})(?:(?:zh|ch|sh|[bpmfdtnlgkhjqxrzcsyw])?(?:iang|iong|uang|ang|eng|ing|ong|ian|iao|uai|uan|ai|ei|ao"
    r"|ou|an|en|in|un|ia|ie|iu|ua|uo|ui|ue|er|a|o|e|i|u|ü)){2,3}$")
# one romanised Korean syllable (revised romanisation and the usual spellings: "Da", "eun", "yeon", "Hoon", "woo")
_KOREAN_SYLLABLE = re.compile(r"^(?:kk|tt|pp|ss|jj|ch|[gkndrmbsjtphyw])?(?:yae|yeo|wae|ae|ya|eo|ye|wa|oe|yo|wo|we|wi|yu|eu|ui|oo|ee"
                              r"|a|e|o|u|i)(?:ng|[kntlmp])?$")
# one to three pinyin syllables ("Fang", "Li", "Meiling"): a given name after a Chinese surname
_PINYIN = re.compile(
    r"^(?:(?:zh|ch|sh|[bpmfdtnlgkhjqxrzcsyw])?(?:iang|iong|uang|ang|eng|ing|ong|ian|iao|uai|uan|ai|ei|ao"
    r"|ou|an|en|in|un|ia|ie|iu|ua|uo|ui|ue|er|a|o|e|i|u|ü)){1,3}$")
_ORG_SHAPE = re.compile(r"(?:bank|kasse|versicherung|werke?|gruppe|markt|logistik|verlag|holding|bahn|stadtwerke"
                        r"|galerie|galeries|tech|soft|ware|systems|media|labs|works)$")
# a user handle "lucia.moreno", "kwame_asante": a known given name and a known surname, no word
_HANDLE = re.compile(r"(?<![\w.@/:+-])([a-z]{3,20})[._]([a-z]{3,20})(?![\w@]|\.[a-z]|-)")
_LINE_START = re.compile(r"(?:^|\n)[ \t]*(?:\[[^\]\n]{1,24}\][ \t]*|\d{1,2}:\d{2}(?::\d{2})?[ \t]+|[-*•>][ \t]*"
                         rf"|{_EXPORT_STAMP}|<)?$")  # "<" of an IRC log's "<kofi> lol"
# "Priya: ok", "Priya, can you", "<Priya> ok", French spacing before a lower-case message ("Yanis : je suis en
# retard"; "Signé : Dominique Lebrun" is a label and its value), a dash before one ("Lucia - done", "Mateus — in 10")
_SPEAKER_AFTER = re.compile(r"^(?::(?:[ \t]|$)|[ \t]:[ \t][a-zà-ÿ]|,[ \t][a-zà-ÿ]|>[ \t]|[ \t][-–—][ \t][a-zà-ÿ])")
# a transcript's speaker: one word at a line start (after a chat stamp) or after a sentence of the line
# before it, then ": " ("bob: on it", "[10:03] Obi: fixed", "Kate: merged. Sasha: nice")
_TRANSCRIPT_SPEAKER = re.compile(r"(?:^|\n|[.!?][ \t])[ \t]{0,8}(?:\[[^\]\n]{1,24}\][ \t]{0,4}|\d{1,2}:\d{2}(?::\d{2})?[ \t]{1,4})?"
                                 r"([^\W\d_][\w'-]{1,24})[ \t]?:[ \t]")
_LIST_GAP = re.compile(r"^(?:,[ \t]?| (?:and|und|et|y|e|en|&|or|oder|ou|o|of) |, (?:and|und|et|y|e|en) |/ ?)$")
# the same, a preposition allowed after it: "Enel e di Leonardo", "Airbus et de Dassault"
_LIST_GAP_OF = re.compile(r"^(?:,[ \t]?| (?:and|und|et|y|e|en|&|or|oder|ou|o) |, (?:and|und|et|y|e|en) |/ ?)"
                          r"(?:(?:of|de|di|von|van|da|del|du|des|der|the) )?$")
_SENTENCE_END = re.compile(r"[.!?;]\s")


def _at_sentence_start(text: str, pos: int) -> bool:
    k = pos - 1
    while k >= 0 and text[k] in " \t":
        k -= 1
    return k < 0 or text[k] in '.!?:\n"“(-–—*•>'
