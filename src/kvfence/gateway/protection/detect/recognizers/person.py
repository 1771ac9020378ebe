"""Personal names (``PERSON``): a gazetteer of given names and surnames, with context rules.

No model and no download (``gazetteer.py``; the words around a name in ``person_words.py``, the
firms, places and products that look like names in ``not_names.py``). A run of name-shaped words is
a name when

- it is a given name followed by a surname (middle names, initials, particles such as "van der",
  "de la", "bin", "al-" and hyphenated parts between them): "Priya Raman", "Anne-Marie van der Berg";
  a given name that is also a word or a place ("May", "Will", "Paris") needs a surname that is not,
  or a common surname that is a word ("Mark Brown"); a surname the lists do not know is taken after
  a safe given name when it is no dictionary word; Chinese surname + pinyin given name ("Xu Mingzhe");
- a title is before it ("Dr. Raman", "Frau Keller", "Mme Dubois", "Sr. García", "dhr. de Vries");
- a greeting, a sign-off, a role word or a person cue is before it ("Hi Priya,", "Dear Tom", "his
  sister Mariatu", "ask Lena", "cc: Raman"), or a verb of saying after it ("Priya said");
- it is the value of a name field or follows a list label (``person_labels.py``), a cell of a name
  column in CSV text (``csv_names``), or a "Surname, Given" pair ("Raman, Priya");
- it is one known given name that is no word, month, place, brand or product, in running text
  ("let me know if Ioana needs a copy"): not at a sentence start unless a lower-case word follows,
  not after "in"/"at" or an article, not in a list of non-names ("Paris, France");
- lower-case in chat after a cue ("hey priya"), as a speaker ("[09:14] kofi: ...") or before a verb
  ("jorge already merged it"), or a lower-case given name + surname that are both known names.

Runs that hold or are followed by a firm, place or thing word ("Morgan Stanley", "Kennedy Space
Center", "Parkinson's disease"), that follow a street word or an article ("Via Giuseppe Garibaldi",
"the Louis Vuitton store"), or whose sentence speaks of a firm ("shares of ...", "... cut its
forecast"), and known person-named firms and brands are not names. The span is the name as
written: titles and a possessive 's stay outside.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.findings import Category, Finding
from kvfence.gateway.protection.detect.recognizers.gazetteer import Gazetteer, gazetteer
from kvfence.gateway.protection.detect.recognizers.not_names import (
    COMMON_WORD_SURNAMES as _COMMON_WORD_SURNAMES,
)
from kvfence.gateway.protection.detect.recognizers.not_names import FIRMS as _NOT_PEOPLE
from kvfence.gateway.protection.detect.recognizers.not_names import NOT_ALONE as _NOT_ALONE
from kvfence.gateway.protection.detect.recognizers.not_names import ORG_WORDS as _ORG_AFTER
from kvfence.gateway.protection.detect.recognizers.not_names import PLACES as _PLACES
from kvfence.gateway.protection.detect.recognizers.person_labels import (
    action_owners,
    field_values,
    list_values,
    starts_list,
    ticket_names,
)
from kvfence.gateway.protection.detect.recognizers.person_mentions import link_mentions
from kvfence.gateway.protection.detect.recognizers.person_things import drop_things, noun_after
from kvfence.gateway.protection.detect.recognizers.person_words import (
    _ADDRESSED_AFTER,
    _AFTER_NAME,
    _AND_I_AFTER,
    _ARTICLES,
    _ASK_CUES,
    _AUX_BEFORE,
    _BRAND_TITLES,
    _BUSINESS_AFTER,
    _BUSINESS_BEFORE,
    _CHAT_CUES,
    _CHINESE_SURNAMES,
    _CLAUSE_BEFORE,
    _CLEFT_AFTER,
    _CLEFT_BEFORE,
    _CUES,
    _END_VOCATIVE_AFTER,
    _END_VOCATIVE_BEFORE,
    _FROM_TEAM,
    _FUNCTION_WORDS,
    _GREETINGS,
    _GROUP_WORDS,
    _HANDLE,
    _HERE_AFTER,
    _INTRO_CUES,
    _ITS_AFTER,
    _LABEL_CUES,
    _LINE_START,
    _LIST_GAP,
    _LIST_GAP_OF,
    _LOWER_AFTER,
    _LOWER_SHORT_AFTER,
    _LOWER_VERB_AFTER,
    _MAIL_AFTER,
    _MARKER_AFTER,
    _NOUN_AFTER,
    _ORG_SHAPE,
    _PARTICLES,
    _PEOPLE_FIRST,
    _PINYIN,
    _PINYIN_GIVEN,
    _PLACE_BEFORE,
    _REQUEST_AFTER,
    _RISKY_CUES,
    _ROMANCE_VERBS_AFTER,
    _SAY_AFTER,
    _SAYS_AS_A_PLACE,
    _SENTENCE_END,
    _SIGN_OFFS,
    _SPEAKER_AFTER,
    _SPOKE_AFTER,
    _STAMPED_LINE,
    _STREET_WORDS,
    _STRONG_CUES,
    _SUFFIX_THEN,
    _TITLES,
    _TRANSCRIPT_SPEAKER,
    _VOCATIVE_AFTER,
    _VOCATIVES,
    _WEAK_CUES,
    _WITH_I_BEFORE,
    _WORD,
    _WORD_NAME_SAYS,
    _after_title,
    _cue_before,
    _known,
    _not_a_person,
    _parts,
    _title_parts,
    _word_right_before,
)

__all__ = ["find_persons", "link_mentions"]


_VOUCHING_CUES = _ASK_CUES | _LABEL_CUES
_BULLET_BEFORE = re.compile(r"(?:^|\n)[ \t]*[-*•][ \t]+$")
# the label of a field right before a value: "To: ", "cc: ", "Attendees: "
_LABEL_BEFORE = re.compile(r"(?:^|\n|\s)([A-Za-zÀ-ÿ-]{1,14})\s?:[ \t]*$")
_MAIL_HEADERS = frozenset(["from", "to", "sent", "reply-to", "de", "à", "a", "an", "von", "para", "da", "van", "aan", "envoyé"])
_OF_PLACE = frozenset(["de", "del", "da", "do", "di", "du"])  # "Ville de Lyon", "Santiago de Chile": a town's
_LIST_WORDS = frozenset(["and", "und", "et", "y", "e", "en", "or", "oder", "ou", "o", "of"])
_KOREAN_GIVEN = re.compile(r" [A-Z][a-z]{1,3}-[a-z]{2,4}\b")  # "In Ji-won", "Um Tae-ho": a surname before it
_ARABIC_PARTICLE = re.compile(r"^(?:al|el|ul|bin|ibn|abu|abd)-[A-Z][a-z]")


def _initial(text: str, t: _Tok) -> bool:
    """"J." in "J. P. Oyelaran-Smith"."""
    return len(t.text) == 1 and t.text.isupper() and text.startswith(".", t.end)


def _name_shaped(word: str) -> bool:
    """Capitalised, the rest lower case, hyphenated parts allowed ("Parata", "Bo-ra", "Oyelaran-Smith")."""
    return word[:1].isupper() and all(p[1:].islower() or len(p) == 1 for p in word.split("-") if p) \
        and word.replace("-", "").isalpha()


class _Tok:
    """A word that can be part of a name: capitalised, all-caps, a particle, or a known name."""

    __slots__ = ("cap", "end", "low", "start", "text", "upper")

    def __init__(self, start: int, end: int, text: str, low: str) -> None:
        self.start, self.end, self.text, self.low = start, end, text, low
        self.upper = len(text) > 1 and text.isupper()
        self.cap = (text[0].isupper() and (not self.upper or (len(text) <= 3 and text.istitle()))) \
            or ("-" in text and _ARABIC_PARTICLE.match(text) is not None)  # "al-Zahra", "el-Sayed"


def _tokens(text: str, g: Gazetteer) -> list[_Tok]:
    """The words that can be part of a name: capitalised or all-caps words (no function words),
    particles, known names.
    Other lower-case words are left out; the gaps between kept words then hold them, so a run never
    jumps over one (and most words of a long prompt cost one set lookup)."""
    toks = []
    given, surnames = g.given, g.surnames
    for m in _WORD.finditer(text):
        word = m.group()
        if word[0] in "dl" and word[1:2] in ("'", "’") and word[2:3].isupper():
            # an elided "d'" / "l'" is no part of the name after it ("le dossier d'Amélie", "M. Louis
            # d'Aubigné", "l'Arnau"): the name is a word of its own, and a run goes on over " d'"
            word = word[2:]
            toks.append(_Tok(m.start() + 2, m.end(), word, word.lower().replace("’", "'")))
            continue
        if word[0].isupper():
            if word.lower() in _FUNCTION_WORDS and _KOREAN_GIVEN.match(text, m.end()) is None:
                continue  # "In Amman", "Goods In": a run holds no function word (but "In Ji-won")
            toks.append(_Tok(m.start(), m.end(), word, word.lower().replace("’", "'")))
        elif word in _PARTICLES or word in given or word in surnames \
                or ("-" in word and _ARABIC_PARTICLE.match(word) is not None):
            toks.append(_Tok(m.start(), m.end(), word, word.replace("’", "'")))
    return toks


def _title_case(text: str, g: Gazetteer) -> bool:
    """A headline: most words (four or more) are capitalised, and two or more of them, past the
    first, are ordinary words ("Summer Grant Program Opens Across Europe"); a list of names is not one."""
    if _SENTENCE_END.search(text.strip()):
        return False  # prose: a headline is one phrase
    words = [w for w in _WORD.findall(text) if len(w) > 3]
    capitalised = [w for w in words if w[0].isupper()]
    if len(words) < 4 or len(capitalised) < 0.8 * len(words):
        return False
    # words-not-names are ordinary only for the name rules (German capitalises "Einkauf", "Danke"), and a
    # word that is also a name ("Bakker", "Vogel", "Iris") is no evidence of a headline
    return sum(1 for w in capitalised[1:] if g.is_ordinary(low := w.lower()) and not g.is_not_name(low)
               and (not g.is_name(low) or g.month_or_day(low))) >= 2


class _Finder:
    def __init__(self, text: str) -> None:
        self.text = text
        self.g = gazetteer()
        self.toks = _tokens(text, self.g)
        self.found: list[Finding] = []
        self.taken: set[int] = set()  # token indexes inside an accepted name
        self.things: set[str] = set()  # words of runs that a noun after them shows to be things
        self._headlines: dict[tuple[int, int], bool] = {}

    def headline(self, pos: int) -> bool:
        """Whether the line around ``pos`` is a headline: its first 100 characters for a word in them,
        else the 100 characters each side of the word; the same answer whichever word asks first."""
        text = self.text
        start = max(text.rfind("\n", max(0, pos - 100), pos) + 1, pos - 100)
        at = start if text[start - 1:start] in ("", "\n") else pos  # the line's start, or the word
        end = text.find("\n", at, at + 100)
        key = (start, min(len(text), at + 100) if end < 0 else end)
        if key not in self._headlines:
            self._headlines[key] = _title_case(text[key[0]:key[1]], self.g)
        return self._headlines[key]

    def gap_ok(self, a: _Tok, b: _Tok) -> bool:
        gap = self.text[a.end:b.start]
        return gap == " " or (len(a.text) == 1 and gap in (". ", ".")) or (a.low in ("d", "l") and gap in ("'", "’")) \
            or (gap in (" d'", " d’") and self.g.is_given(a.low)  # "Louis d'Aubigné", "M. Bertrand d'Estienne"
                and (self.g.is_name(b.low) or _after_title(self.text[max(0, a.start - 40):a.start])))  # not "Val d'Isère"

    def run(self, i: int, upper: bool = False) -> int:
        """Index past the run of name-shaped tokens starting at ``i`` (capitalised or all-caps)."""
        j = i
        toks = self.toks
        while j < len(toks) and j - i < 6:
            t = toks[j]
            shaped = t.upper or (len(t.text) == 1 and t.text.isupper()) if upper else (t.cap or (len(t.text) == 1 and t.text.isupper()))
            if not shaped:
                if j > i and t.low in _PARTICLES and j + 1 < len(toks) and self.gap_ok(toks[j - 1], t) \
                        and self.gap_ok(t, toks[j + 1]) \
                        and (toks[j + 1].cap or toks[j + 1].upper or toks[j + 1].low in _PARTICLES) \
                        and (t.low != "do" or not self.g.is_ordinary(toks[j + 1].low)):  # "Marcos do Nascimento", not "Tom do Yoga"
                    j += 1
                    continue
                break
            if j > i and not self.gap_ok(toks[j - 1], t):
                break
            j += 1
        while j > i and toks[j - 1].low in _PARTICLES:
            j -= 1
        return j

    def add(self, i: int, j: int, rule: str, score: float) -> None:
        start, end = self.toks[i].start, self.toks[j - 1].end
        self.found.append(Finding(start, end, "PERSON", Category.PII, score, rule))
        self.taken.update(range(i, j))

    def org_after(self, j: int) -> bool:
        if j >= len(self.toks):
            return False
        nxt = self.toks[j]
        if nxt.text.islower() and (len(nxt.text) <= 3 or nxt.low in ("day", "night")):
            return False  # "se", "sa" in lower case are words ("chiedi a Mariapia se ..."), not "SE", "SA"; "Day" counts, "day" not
        gap = self.text[self.toks[j - 1].end:nxt.start]
        if gap.strip() in ("&", "+") or (gap.startswith(("'s ", "’s ")) and nxt.low in _ORG_AFTER):
            return True
        return gap in (" ", "'s ", "’s ") and nxt.low in _ORG_AFTER

    def before(self, i: int, width: int = 40) -> str:
        start = self.toks[i].start
        return self.text[max(0, start - width):start]

    def not_people(self, i: int, j: int) -> bool:
        words = " ".join(t.low.replace("'", "") for t in self.toks[i:j])
        return words in _NOT_PEOPLE or any(" ".join(t.low for t in self.toks[a:b]) in _NOT_PEOPLE
                                           for a in range(i, j) for b in range(a + 2, j + 1))

    # --- a run of two or more name-shaped words ---
    def full_name(self, i: int, j: int, upper: bool) -> bool:
        toks = self.toks[i:j]
        first_index = i
        words = [t for t in toks if len(t.text) > 1 and t.low not in _PARTICLES]
        initials = [t for t in toks if len(t.text) == 1]
        if len(words) < 1 or len(words) + len(initials) < 2:
            return False
        g = self.g
        first, last = words[0], words[-1]
        if g.month_or_day(last.low):
            return False
        if len(words) == 1:  # "J. Smith", "J. R. R. Tolkien": initials before a known surname
            if toks[0] is first or g.is_ordinary(last.low):
                return False
            # two initials or more before a surname the lists lack: "J. P. Habimana", "A. K. Obuya"
            return g.is_surname(last.low) or (len(initials) >= 2 and len(last.text) >= 4 and _title_parts(last.text)
                                              and last.low not in _PLACES and not _not_a_person(last.low)
                                              and not self.headline(first.start))
        if toks[0] is not first:
            return False
        if _not_a_person(first.low) or _not_a_person(last.low):
            # "Apache Kafka", "Kafka Connect" are software; "Julia Roberts", "Pascal Dupont" are people
            other = last if _not_a_person(first.low) else first
            if _not_a_person(other.low) or g.is_ordinary(other.low) or not _known(g, other.low, given=other is first):
                return False
        headline = self.headline(first.start)
        surname_known = _known(g, last.low, given=False)
        surname_ordinary = g.is_ordinary(last.low) or any(g.is_ordinary(p) for p in _parts(last.low)[-1:])
        middles_ok = all(_known(g, w.low, given=False) or not g.is_ordinary(w.low) for w in words[1:-1])
        if not middles_ok:
            return False
        if first.low in _ORG_AFTER and g.is_ordinary(first.low) and g.is_ordinary(last.low):
            return False  # "Hall Green", "Park Royal", "Lake Shore": a place word, then a word ("Park Ji-sung" is a name)
        if not _known(g, first.low, given=True):
            # a Chinese surname that is also a word ("Wang", "Sun", "Ma") before a pinyin given name
            chinese = first.low in _CHINESE_SURNAMES and first.low != "he" and len(words) == 2 \
                and _PINYIN.match(last.low) is not None and g.is_given(last.low) and not g.risky_alone(last.low)
            if (g.is_ordinary(first.low) and not chinese) or headline or first.low in _PLACES:
                return False  # "Kyoto Gion", "Osaka Namba": a city, then its district
            # surname first (Chinese, Japanese, Korean, Vietnamese, Hungarian): "Tanaka Hiroshi", "Zhang Wei"
            if g.is_surname(first.low) and _known(g, last.low, given=True) and not g.risky_given(last.low):
                return True
            if len(words) == 2 and first.low in _CHINESE_SURNAMES and _PINYIN_GIVEN.match(last.low) \
                    and not g.is_ordinary(last.low) and last.text[1:].islower():
                return True  # "Xu Mingzhe", "Wang Zihan"
            if _ORG_SHAPE.search(first.low):
                return False  # "Volksbank Bonn", "Sparkasse Köln": a compound firm word first
            # two known names after a person cue or a name label: "Witness: Bartosz Nowak"
            if g.is_name(first.low) and surname_known and not surname_ordinary \
                    and _cue_before(self.before(first_index)) not in (None, *_WEAK_CUES):
                return True
            # a given name the lists lack before a known surname: "Tesfaye Bekele", "Oluwadamilare Okafor";
            # not a noun before "von"/"de" and a given name ("die Unterlagen von Ayşe Yılmaz": the name starts there)
            if len(toks) > 2 and toks[1].low in _PARTICLES and _known(g, toks[2].low, given=True) \
                    and not g.is_surname(toks[2].low):
                return False
            return (not g.is_name(first.low) and surname_known and not surname_ordinary and first.text[1:].islower()
                    and len(first.text) >= 3 and (not self.sentence_start(first)
                                                  or _SPOKE_AFTER.match(self.text[last.end:last.end + 20]) is not None
                                                  or self.text.startswith((" said", " says"), last.end)))
        if g.risky_given(first.low) or headline:
            if surname_known and not surname_ordinary and not (headline and (first.low in _PLACES or last.low in _PLACES)):
                return True  # in a headline a place is a place: "France Edge Germany"
            # "Mark Brown", "Grace Hopper invented", "and Will Smith are": a common surname that is
            # also a word, after a given name that is too, then a lower-case word or punctuation
            # ("Grant Access to", "Rose Garden" hold no such surname)
            return (not headline and len(words) == 2 and last.low in _COMMON_WORD_SURNAMES
                    and last.text[1:].islower() and not g.month_or_day(first.low)
                    and _AFTER_NAME.match(self.text[last.end:last.end + 3]) is not None)
        if surname_known:
            return True
        if upper:
            return False
        # an unknown surname: capitalised, no dictionary word, after a safe given name
        return not surname_ordinary and len(last.text) >= 2 and _title_parts(last.text)

    def thing_run(self, i: int, j: int) -> bool:
        """A capitalised run that names a firm, a place or a thing: it holds a firm or place word
        ("Kennedy Space Center", "Carnegie Hall", "Brooks Brothers"), a street word is before it ("Via
        Giuseppe Garibaldi", "Avenue Victor Hugo") or starts it, "Jr." and such a word follow ("Martin Luther King
        Jr. Day"), an article is before it ("the Louis Vuitton store"), or "its" follows ("Ford Smith
        cut its forecast": a firm, not a person)."""
        toks = self.toks
        if any(toks[k].low in _ORG_AFTER for k in range(i + 1, j)) and not self.org_word_surname(i, j):
            return True
        if j - i >= 3 and toks[j - 1].low in _PLACES and (toks[i].low in _PLACES or toks[j - 2].low in _OF_PLACE):
            return True  # "France Edge Germany": a place at each end; "Ville de Lyon", "Santiago de Chile"
        prev = _word_right_before(self.before(i, 16))
        if prev in _STREET_WORDS or prev in _ARTICLES:
            return True
        if toks[i].low in _STREET_WORDS:
            return True  # the street word capitalised, first: "Carrer Antoni Gaudí", "Avenida Getúlio Vargas", "Rua Nova"
        after = self.text[toks[j - 1].end:toks[j - 1].end + 40]
        m = _SUFFIX_THEN.match(after)
        if m is not None and m.group(1).lower() in _ORG_AFTER:
            return True
        if _ITS_AFTER.match(after) is not None:
            return True
        if _BUSINESS_AFTER.search(self.text[toks[j - 1].end:toks[j - 1].end + 60].split(".")[0]) is not None:
            return True
        return _BUSINESS_BEFORE.search(self.before(i, 30)) is not None and not after.startswith(("'s", "’s"))

    def org_word_surname(self, i: int, j: int) -> bool:
        """A safe given name and a surname that is also a place or firm word, where the words around
        say it is a person: a person cue before it ("call Jessica Hall", "with Tom Bank", "Thanks,\nOliver
        Street"), a person listed right before it ("Michael Stone, Linda Park") or a verb of saying after
        it. "Victoria Park", "Grace Church" (a given name that is also a place or word), "Main Street
        Capital", "Royal Albert Hall" (more words) and "the Albert Hall" (an article) stay places."""
        if j - i != 2:
            return False
        g = self.g
        first, last = self.toks[i], self.toks[i + 1]
        if not (_name_shaped(first.text) and _name_shaped(last.text) and "-" not in last.text) \
                or not g.is_given(first.low) or g.risky_given(first.low) \
                or first.low in _PLACES or first.low in _ORG_AFTER or _not_a_person(first.low) \
                or not g.is_surname(last.low) or noun_after(self.text, last.end):
            return False
        after = self.text[last.end:last.end + 24]
        if after.startswith(("'s", "’s")):
            return False  # "Albert Hall's roof"
        before = self.before(i)
        if _after_title(before):
            return True  # "Dr. Helen Park"
        cue = _cue_before(before)
        if g.is_ordinary(first.low):
            return cue is not None and cue not in _WEAK_CUES and cue != "-"  # "forward this to Ben Church"
        if cue is not None and cue not in ("to", "for", "by", "from", "via", "per", "and", "und", "-"):
            return True
        k = self.listed_after(i)
        if k is not None and k in self.taken:
            return True  # "Contact: Michael Stone, Linda Park", "with Tom Bank and Sarah Church"
        return _SPOKE_AFTER.match(after) is not None or after.startswith((" said", " says"))

    def listed_before(self, i: int) -> int | None:
        """The token that follows token ``i`` in a list ("Rania, Omar and Yasmin"), if any."""
        k = i + 1
        if k < len(self.toks) and self.toks[k].text in _LIST_WORDS:
            k += 1
        if k < len(self.toks) and _LIST_GAP.match(self.text[self.toks[i].end:self.toks[k].start]):
            return k
        return None

    def listed_after(self, i: int) -> int | None:
        """The token that token ``i`` follows in a list ("Hannah, Rafael and Mei"), if any; "and" is
        itself a token when a name list holds it."""
        k = i - 1
        if k >= 0 and self.toks[k].text in _LIST_WORDS:
            k -= 1
        if k >= 0 and _LIST_GAP.match(self.text[self.toks[k].end:self.toks[i].start]):
            return k
        return None

    def introduced(self, i: int, j: int, asked: bool = False) -> bool:
        """A run after a greeting or sign-off, or right before its own e-mail address, is a name even
        when the lists lack it: "Hi Tesfaye,", "Regards,\nOluwadamilare Okafor", "Ifeoma Nwosu <i.n@x.org>"."""
        toks = self.toks[i:j][:4]
        g = self.g
        if toks[0].low in _ARTICLES or (toks[0].low[:2] == "l'" and g.is_ordinary(toks[0].low[2:])):
            return False  # "Cordialement,\nLes Achats", "L'équipe commerciale": a department, not a person
        words = [t for t in toks if t.low not in _PARTICLES and not _initial(self.text, t)]
        # "Bien à vous,\nFlorence Petit": a given name that is also a place starts a signed full name
        signed = len(words) == 2 and "\n" in self.before(i, 3) and self.ends_line(i + len(toks)) \
            and g.is_given(words[0].low) and _known(g, words[1].low, given=False) and words[1].low not in _PLACES \
            and _NOUN_AFTER.match(" " + words[1].text) is None \
            and _cue_before(self.before(i)) in _SIGN_OFFS
        if not words or any(len(t.text) < 2 or _not_a_person(t.low) or t.low in _GROUP_WORDS or g.month_or_day(t.low)
                            or ((t.low in _PLACES or t.low in _NOT_ALONE) and not (signed and t is words[0]))
                            or (g.is_ordinary(t.low) and not g.is_name(t.low)) or t.low in _ORG_AFTER for t in words):
            return False
        end = toks[-1].end
        after = self.text[end:end + 80]
        by_mail = _MAIL_AFTER.match(after) is not None
        cue = _cue_before(self.before(i))
        if cue == "-" and not self.ends_line(i + len(toks)):
            cue = None  # "Q3 - Victoria Park" goes on; a signature ends its line
        # an ask verb ("ask Soizic", "chiedi a Mariapia") or a role label before two title-shaped words
        # ("Assigned to Rangi Parata", "Reviewer: Bo-ra Jeong") vouch for names the lists lack too
        # (tried last, when no other rule took the run: known names keep their own rules)
        vouched = cue in _STRONG_CUES or (asked and cue in _ASK_CUES and all(t.text[1:].islower() for t in words)) \
            or (asked and cue in _LABEL_CUES and len(words) >= 2 and all(_name_shaped(t.text) for t in words))
        if not by_mail and (not vouched or self.org_after(i + len(toks))):
            return False
        if not by_mail and len(words) == 1 and after[:1] not in ("", ",", "!", "\n", ".", ":", ";", " ", ")"):
            return False
        if len(words) == 1 and words[0].upper and len(words[0].text) <= 3:
            return False  # "signed NDA", "regards, HR": an acronym
        if len(words) == 1 and g.is_ordinary(words[0].low) and not g.is_given(words[0].low) and not by_mail:
            return False  # "Attention Span", "Cheers Mate": a word that is only a surname needs more
        self.add(i, i + len(toks), "person_introduced", 0.75)
        return True

    def ends_line(self, j: int) -> bool:
        """Whether the line ends after token ``j - 1`` (spaces, or a "!" / "." at most, before it)."""
        rest = self.text[self.toks[j - 1].end:self.toks[j - 1].end + 4].lstrip(" \t.!")
        return not rest or rest[0] in "\r\n"

    def sentence_start(self, t: _Tok) -> bool:
        before = self.text[max(0, t.start - 3):t.start].rstrip(" \t\"'“(")
        return not before or before[-1] in ".!?\n:"

    def scan_runs(self) -> None:
        toks = self.toks
        i = 0
        while i < len(toks):
            t = toks[i]
            if i in self.taken or not (t.cap or t.upper or (len(t.text) == 1 and t.text.isupper())) \
                    or t.low in _CUES or t.low in _TITLES:
                if t.low in _PARTICLES and i not in self.taken and _after_title(self.before(i)):
                    self.title_particle(i)  # "dhr. van den Broek"
                i += 1
                continue
            upper = t.upper
            j = self.run(i, upper=upper)
            if j <= i:
                i += 1
                continue
            # shrink from the right until the run is a name (a sentence may go on capitalised)
            if j - i >= 2 and (self.org_after(j) or self.not_people(i, j) or self.thing_run(i, j)):
                if noun_after(self.text, toks[j - 1].end):  # "the Douglas Peucker simplification"
                    self.things.update(t.low for t in toks[i:j])
                i = j  # "Morgan Stanley", "Victoria Station": none of its words is a name here
                continue
            if self.introduced(i, j):
                i = j
                continue
            k = j
            while k - i >= 2:
                if self.full_name(i, k, upper):
                    self.add(i, k, "person_full_name", 0.85)
                    break
                k -= 1
            else:
                k = i
            if k > i and k - i >= 2 and i in self.taken:
                i = k
                continue
            if upper and j == i + 1 and (k := self.upper_surname_first(i)):
                i = k
                continue
            if self.single(i, upper):
                i += 1
                continue
            if i not in self.taken and _cue_before(self.before(i)) in _VOUCHING_CUES and self.introduced(i, j, asked=True):
                i = j
                continue
            i += 1

    def upper_surname_first(self, i: int) -> int:
        """A surname in capitals before the given names, as forms, labels and lists write it ("DUPONT
        Marie", "NGUYEN Thi Hoa", "WANG Xiaoling"): the index past the name, or 0."""
        toks, g = self.toks, self.g
        t = toks[i]
        if i + 1 >= len(toks) or not toks[i + 1].cap or not self.gap_ok(t, toks[i + 1]) or len(t.text) < 2 \
                or not g.is_surname(t.low) or (g.is_ordinary(t.low) and t.low not in _CHINESE_SURNAMES) \
                or t.low in _PLACES or _not_a_person(t.low) or t.low in _NOT_ALONE:
            return 0
        k = i + 1
        while k < len(toks) and k - i <= 3 and toks[k].cap and not toks[k].upper and self.gap_ok(toks[k - 1], toks[k]) \
                and _known(g, toks[k].low, given=True) and not g.risky_given(toks[k].low) \
                and not _not_a_person(toks[k].low) and toks[k].low not in _PLACES:
            k += 1
        if k == i + 1 or self.org_after(k) or self.thing_run(i, k):
            return 0
        self.add(i, k, "person_full_name", 0.8)
        return k

    def title_particle(self, i: int) -> None:
        j = i
        while j < len(self.toks) and self.toks[j].low in _PARTICLES and j - i < 3:
            j += 1
        if j == i + 1 and self.toks[i].low in ("der", "des"):
            return  # a German genitive after "Herr" / "Frau": "Herr der Ringe", "Frau des Hauses"
        if j < len(self.toks) and self.toks[j].cap and self.toks[j].low not in _BRAND_TITLES \
                and all(self.gap_ok(self.toks[k], self.toks[k + 1]) for k in range(i, j)):  # "Monsieur le Président"
            self.add(i, j + 1, "person_title", 0.85)

    # --- one word: a title, a cue before it or a verb of saying after it ---
    def single(self, i: int, upper: bool) -> bool:
        t = self.toks[i]
        g = self.g
        if len(t.text) < 2 or g.month_or_day(t.low) or (upper and (not g.is_name(t.low) or len(t.text) <= 3)):
            return False  # "NDA", "CEO", "HR": acronyms
        before = self.before(i)
        j = self.run(i, upper=upper)
        if _after_title(before):
            k = max(j, i + 1)
            while k > i + 1 and ((g.is_ordinary(self.toks[k - 1].low) and not g.is_name(self.toks[k - 1].low))
                                 or self.org_after(k)):
                k -= 1
            if (g.is_ordinary(t.low) and not g.is_name(t.low)) or self.org_after(k) or t.low in _BRAND_TITLES:
                return False
            self.add(i, k, "person_title", 0.85)
            return True
        if not _known(g, t.low, given=False) or j - i >= 2 or (_not_a_person(t.low) and t.low not in _PEOPLE_FIRST) \
                or t.low in _PLACES or (g.is_ordinary(t.low) and not g.is_given(t.low)):
            return False  # "Hello Berlin!"
        cue = _cue_before(before)
        if self.org_after(i + 1) and not self.greeted_pair(i, cue):
            return False
        after = self.text[t.end:t.end + 24]
        if _not_a_person(t.low) and (cue is None or cue in _WEAK_CUES) and not _WORD_NAME_SAYS.match(after):
            return False  # "Hugo" alone, "Pascal and Ada are taught": the software
        if j == i + 1 and g.is_given(t.low) and not g.risky_given(t.low) and not g.is_ordinary(t.low) \
                and _LINE_START.search(before) and _SPEAKER_AFTER.match(after) \
                and (t.low not in _NOT_ALONE or _STAMPED_LINE.search(before) is not None):
            # a chat speaker ("Priya: on it", "[10:32] Priya: ok") or a vocative ("Priya, can you ..."); a
            # god's, place's or brand's name only in a stamped chat line ("- Apollo: load tests" is a project)
            self.add(i, i + 1, "person_speaker", 0.65)
            return True
        if j == i + 1 and self.word_name(t) and not g.is_ordinary(t.low) and not g.risky_given(t.low) \
                and _CLEFT_AFTER.match(after) and _CLEFT_BEFORE.search(before):
            self.add(i, i + 1, "person_cue", 0.65)  # "C'est Baptiste qui gère les accès" (not "C'est Paris qui")
            return True
        if j == i + 1 and self.signature(i):
            self.add(i, i + 1, "person_cue", 0.6)  # "Bonjour Sophie,\n...\nAmandine": signed without a closing
            return True
        if self.word_name(t) and (_MARKER_AFTER.match(after) or _AND_I_AFTER.match(after)
                                  or _WITH_I_BEFORE.search(before)
                                  or (_LINE_START.search(before) and _REQUEST_AFTER.match(after))
                                  or (cue in _INTRO_CUES and after.startswith((" from ", " de ", " von ")))
                                  or (_FROM_TEAM.match(after) and (self.sentence_start(t) or cue is not None))):
            # "Sarah (cc'd)", "Hunter and I", "Grace, can you ...", "This is Hope from accounts", "Dawn from payroll"
            self.add(i, i + 1, "person_cue", 0.65)
            return True
        if cue is not None and (before.rstrip().endswith("&") or (cue in ("via", "per") and before.rstrip()[-3:-2].isupper()
                                                                  and not after.startswith(","))
                                or (cue == "-" and not self.ends_line(i + 1))):
            cue = None  # "Via Roma", "Per Olsen"; but "Per Jenna, the client wants ..."
        if _word_right_before(before) in _STREET_WORDS:
            return False
        if cue is not None and (cue not in _WEAK_CUES or (g.is_given(t.low) and not (g.is_ordinary(t.low)
                                                                               or g.risky_given(t.low))
                                                         and t.low not in _NOT_ALONE)) \
                and (not g.risky_given(t.low) or cue in _RISKY_CUES):
            self.add(i, i + 1, "person_cue", 0.7)
            return True
        if len(t.text) >= 3 and _SAY_AFTER.match(after) and not g.risky_given(t.low) and g.is_given(t.low) \
                and not before.rstrip().endswith("&") and _word_right_before(before) not in _ARTICLES \
                and not self.headline(t.start):  # "the Fed said", "die Bahn sagte": a body, not a person
            self.add(i, i + 1, "person_said", 0.6)
            return True
        if g.risky_given(t.low) and g.is_ordinary(t.low) and g.is_given(t.low) and t.text[1:].islower() \
                and not g.month_or_day(t.low) and t.low not in _SAYS_AS_A_PLACE and t.low not in _PLACES \
                and t.low not in _NOT_ALONE and not _not_a_person(t.low) and _WORD_NAME_SAYS.match(after) \
                and not before.rstrip().endswith(("&", "the", "The")) and not self.headline(t.start):
            self.add(i, i + 1, "person_said", 0.55)  # "Will said he'd be late", "Frank wants the numbers"
            return True
        if len(t.text) >= 4 and _SPOKE_AFTER.match(after) and g.is_surname(t.low) and not g.is_ordinary(t.low) \
                and t.text[1:].islower() and t.low not in _PLACES and t.low not in _NOT_ALONE \
                and not before.rstrip().endswith("&") and not self.headline(t.start):
            self.add(i, i + 1, "person_said", 0.55)  # "Okafor said", "Nakamura wrote back"
            return True
        if self.given_alone(i, before, after):
            self.add(i, i + 1, "person_given", 0.55)
            return True
        return False

    def signature(self, i: int) -> bool:
        """A known given name alone on the last line of a text that opens with a greeting: a message
        signed without a closing ("Hola Marta,\nte mando el contrato.\nValentín")."""
        t, g, text = self.toks[i], self.g, self.text
        # the text's last word, alone on its line (checked on a few characters: most words stop here)
        if len(text) - t.end > 4 or text[t.end:].strip(" \t\r\n.!") \
                or text[max(0, t.start - 8):t.start].rstrip(" \t")[-1:] != "\n" \
                or not self.word_name(t) or g.is_ordinary(t.low) or g.risky_given(t.low):
            return False
        end = text.find("\n", 0, 60)
        words = _WORD.findall(text[:end if end >= 0 else 0].lower())[:2]
        return bool(words) and (words[0] in _GREETINGS or " ".join(words) in _GREETINGS) and len(words) > 1

    def word_name(self, t: _Tok) -> bool:
        """A known given name, also a word or one that the lists find risky ("Grace", "Will", "Hope",
        "Hunter"), or any safe one; not a month, a place, a brand or a product."""
        g, low = self.g, t.low
        return g.is_given(low) and t.text[1:].islower() and not g.month_or_day(low) and low not in _SAYS_AS_A_PLACE \
            and low not in _PLACES and low not in _NOT_ALONE and (not _not_a_person(low) or low in _PEOPLE_FIRST)

    def greeted_pair(self, i: int, cue: str | None) -> bool:
        """"Hi Jess & Tom,": two known given names joined by "&" after a greeting are people, not a firm."""
        if cue not in _GREETINGS or i + 1 >= len(self.toks):
            return False
        nxt = self.toks[i + 1]
        return self.text[self.toks[i].end:nxt.start] == " & " and self.g.is_given(nxt.low) and self.g.is_given(self.toks[i].low)

    def given_alone(self, i: int, before: str, after: str) -> bool:
        """A lone given name without a cue, in running text: a known given name that is no word, no
        place, brand or product, not at a sentence start unless a lower-case word follows it ("Ioana
        needs a copy", "according to Ingrid", "Sigrid wants"), not after "in"/"at", not in a headline."""
        t = self.toks[i]
        g = self.g
        if len(t.text) < 3 or not (t.text[1:].islower() or ("-" in t.text and g.is_given(t.low) and _title_parts(t.text))) \
                or not _known(g, t.low, given=True) or g.is_ordinary(t.low) \
                or g.risky_given(t.low) or t.low in _NOT_ALONE or t.low in _PLACES or _not_a_person(t.low):
            return False
        if not g.is_given(t.low) and any(g.is_ordinary(p) or g.risky_given(p) for p in _parts(t.low)):
            return False  # "Jean-Marc" is a listed name as a whole, though "marc" is a word
        p = self.toks[i - 1] if i > 0 else None
        if p is not None and (p.cap or p.upper) and self.gap_ok(p, t) \
                and not (g.is_ordinary(p.low) and not g.is_name(p.low) and self.sentence_start(p)):
            return False  # the end of a capitalised run that is no name ("JP Morgan", "Goldman Sachs Morgan")
        # in a list whose neighbours are no names, it is none either ("Paris, France", "Morgan, Stanley
        # and Chase are towns"); "Hannah Lindqvist, Rafael and Oskar" is a list of people
        k = i - 1
        while k >= 0 and not self.toks[k].cap and self.toks[k].low in _PARTICLES and i - k <= 2:
            k -= 1  # "Enel e di Leonardo": look past the preposition
        if k >= 0 and k not in self.taken and self.toks[k].cap \
                and _LIST_GAP_OF.match(self.text[self.toks[k].end:t.start]):
            return False
        if i + 1 < len(self.toks):
            nxt = self.toks[i + 1]
            if nxt.cap and _LIST_GAP.match(self.text[t.end:nxt.start]) \
                    and (not g.is_name(nxt.low) or (g.is_ordinary(nxt.low) and not g.is_given(nxt.low))
                         or nxt.low in _PLACES or g.month_or_day(nxt.low) or _not_a_person(nxt.low)):
                return False
        prev = _word_right_before(before)
        if prev in _PLACE_BEFORE or prev in _ARTICLES or prev in ("our", "this"):
            return False  # "in Kingston", "the Kennedy room", "a Mercedes" (not "a las 9:14, Lucía")
        # a bullet at the line start, then the name and a verb: "- Kenji has the keys", "* Ingrid will call"
        bullet = _BULLET_BEFORE.search(before) is not None and _LOWER_VERB_AFTER.match(after) is not None
        if before.rstrip().endswith(("&", "#", "/", "\\", "-", "_", ".")) and not before.endswith((". ", ".\n")) \
                and not bullet:
            return False
        if self.sentence_start(t) and _LOWER_AFTER.match(after) is None:
            return False
        if _NOUN_AFTER.match(after) is not None:
            return False
        return not self.headline(t.start)

    # --- "Hannah, Rafael and Mei": a known given name listed right after a name ---
    def continue_lists(self) -> None:
        ends = {f.end: f for f in self.found}
        for i, t in enumerate(self.toks):
            if i in self.taken or i == 0 or not t.cap or len(t.text) < 2:
                continue
            k = self.listed_after(i)
            if k is None or k not in self.taken or self.toks[k].end not in ends:
                continue
            if self.listed(i):
                self.add(i, i + 1, "person_listed", 0.6)
                ends[t.end] = self.found[-1]
        # and before one: "Rania, Omar and Yasmin are the hosts" (a sentence start takes no lone name)
        starts = {f.start for f in self.found}
        for i in range(len(self.toks) - 2, -1, -1):
            t = self.toks[i]
            k = self.listed_before(i)
            if i in self.taken or not t.cap or len(t.text) < 2 or k is None or k not in self.taken \
                    or self.toks[k].start not in starts \
                    or (i > 0 and self.toks[i - 1].cap and self.gap_ok(self.toks[i - 1], t)):
                continue
            if self.listed(i):
                self.add(i, i + 1, "person_listed", 0.6)
                starts.add(t.start)

    def listed(self, i: int) -> bool:
        """A known given name that is no word, place, product or closing ("Ta,\nGemma"), alone, next to a
        name in a list."""
        t, g = self.toks[i], self.g
        return g.is_given(t.low) and not g.risky_given(t.low) and not _not_a_person(t.low) and t.low not in _PLACES \
            and t.low not in _SIGN_OFFS and not self.org_after(i + 1) and not (i + 1 < len(self.toks) and self.toks[i + 1].cap
                                                   and self.gap_ok(t, self.toks[i + 1]))

    def list_line(self, pos: int) -> str | None:
        """The line of ``pos`` (200 characters each side at most) when it starts with a list label ("cc:",
        "Attendees:", "Participants :", "Panel:")."""
        start = self.text.rfind("\n", max(0, pos - 200), pos) + 1
        if (start == 0 and pos > 200) or not starts_list(self.text, start):
            return None
        end = self.text.find("\n", pos, pos + 200)
        return self.text[start:end if end >= 0 else pos + 200]

    # --- "Raman, Priya" ---
    def surname_comma_given(self) -> None:
        toks = self.toks
        g = self.g
        for i in range(len(toks) - 1):
            a, b = toks[i], toks[i + 1]
            if i in self.taken or i + 1 in self.taken or self.text[a.end:b.start] != ", ":
                continue
            if not (a.cap or a.upper) or not (b.cap or b.upper):
                continue
            first = i  # "van der Merwe, Pieter", "du Plessis, Anri": the surname's particles first
            while first > 0 and i - first < 3 and toks[first - 1].low in _PARTICLES and not toks[first - 1].cap \
                    and self.gap_ok(toks[first - 1], toks[first]):
                first -= 1
            lead = self.text[max(0, toks[first].start - 2):toks[first].start]
            if not (toks[first].start == 0 or lead.endswith(("\n", '"', "'", ",", ";", "\t", "|", ": ", "; "))
                    or lead.endswith(", ")):
                continue
            # a surname the lists lack before a known given name, in a quoted cell: '"Oyelowo, Adaeze",'
            quoted_cell = lead.endswith('"') and a.text[1:].islower() and not g.is_ordinary(a.low) and len(a.text) >= 3
            label = _LABEL_BEFORE.search(self.text, max(0, toks[first].start - 24), toks[first].start)
            # "To: Smith, Will": a mail header's "Surname, Given" takes a given name that is also a word
            risky_ok = label is not None and label.group(1).lower() in _MAIL_HEADERS and not g.month_or_day(b.low)
            if not ((_known(g, a.low, False) or quoted_cell) and g.is_given(b.low)) or (g.is_ordinary(b.low) and not risky_ok) \
                    or (g.is_ordinary(a.low) and not risky_ok) \
                    or (g.risky_given(b.low) and not risky_ok) or g.risky_given(a.low):
                continue
            if g.is_given(a.low) and not g.is_surname(a.low):
                continue  # "To: Arash, Leyla": two people, the first no surname
            line = self.list_line(toks[first].start)
            if line is not None and (g.is_given(a.low) or (";" not in line and line.count(",") >= 2)):
                # "cc: Emma, Liam", "Attendees: Chloé, Mamadou, Thi Lan", "Panel: Ravi, Chen, Ingrid": a list of
                # people, not one (but "cc: Smith, John", "To: Okafor, Chidi; Raman, Priya")
                continue
            end = i + 2
            if end < len(toks) and toks[end].cap and self.gap_ok(b, toks[end]) and g.is_given(toks[end].low):
                end += 1
            if end < len(toks) and _initial(self.text, toks[end]) and self.text[toks[end - 1].end:toks[end].start] == " ":
                end += 1  # a middle initial: "Okafor, Chidi A."
            tail_at = toks[end - 1].end + (1 if _initial(self.text, toks[end - 1]) else 0)
            tail = self.text[tail_at:tail_at + 2]
            if tail and tail[0] not in "\n\",;\t|)" and not tail.startswith(" ("):
                continue
            self.add(first, end, "person_surname_given", 0.8)

    # --- lower-case names in chat ---
    def lowercase(self) -> None:
        toks = self.toks
        g = self.g
        for i, t in enumerate(toks):
            if i in self.taken or not t.text.islower() or len(t.text) < 3:
                continue
            if g.is_given(t.low) and not g.month_or_day(t.low) and not _not_a_person(t.low) \
                    and _STAMPED_LINE.search(self.before(i)) and self.text.startswith(": ", t.end):
                self.add(i, i + 1, "person_lowercase_acts", 0.6)  # "[10:22] maxime: ok": a chat log's speaker
                continue
            if t.start > 0 and self.text[t.start - 1] == "@" and g.is_given(t.low) and not g.month_or_day(t.low) \
                    and not _not_a_person(t.low) and t.low not in _GROUP_WORDS and not g.is_not_name(t.low) \
                    and t.low not in ("here", "channel", "room", "bot") \
                    and (t.start < 2 or not (self.text[t.start - 2].isalnum() or self.text[t.start - 2] in "._-")) \
                    and not self.text.startswith((".", "@"), t.end) and not self.text[t.end:t.end + 1].isalnum():
                self.add(i, i + 1, "person_lowercase_cue", 0.6)  # "@marine t'as le lien ?": a mention is a person
                continue
            if g.is_ordinary(t.low) or g.risky_given(t.low):
                if g.is_given(t.low) and not g.month_or_day(t.low) and not _not_a_person(t.low) \
                        and t.low not in _PLACES and t.low not in _SAYS_AS_A_PLACE and t.low not in _VOCATIVES \
                        and t.low not in _GROUP_WORDS and not g.is_not_name(t.low) \
                        and _cue_before(self.before(i)) in _CHAT_CUES and _ADDRESSED_AFTER.match(self.text[t.end:t.end + 3]):
                    self.add(i, i + 1, "person_lowercase_cue", 0.55)  # "hey grace,", "thx mark!", "cc will"
                continue
            if not g.is_given(t.low):
                # "hey nguyen", "thanks okafor": a surname that is no word, right after a greeting or thanks
                if len(t.text) >= 4 and g.is_surname(t.low) and t.low not in _PLACES and not _not_a_person(t.low) \
                        and _cue_before(self.before(i)) in _RISKY_CUES and not self.text.startswith(("-", "."), t.end):
                    self.add(i, i + 1, "person_lowercase_cue", 0.55)
                continue
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            pair = (nxt is not None and nxt.text.islower() and self.gap_ok(t, nxt) and len(nxt.text) >= 3
                    and _known(g, nxt.low, given=False) and not g.is_ordinary(nxt.low) and not g.is_given(nxt.low))
            cue = _cue_before(self.before(i))
            if pair:
                self.add(i, i + 2, "person_lowercase", 0.6)
            elif cue is not None and (cue not in _WEAK_CUES or len(t.text) >= 4) and not _not_a_person(t.low):
                self.add(i, i + 1, "person_lowercase_cue", 0.6)
            elif not _not_a_person(t.low) and t.low not in _PLACES and self.lower_acts(i):
                self.add(i, i + 1, "person_lowercase_acts", 0.55)

    def transcript(self) -> None:
        """In a chat transcript, two speakers or more of which one is already a person, the other
        speakers are people too, a known given name that is also a word included ("liz: ...\nbob: on it",
        "Yaw: done\nAbena: thx!"); not a label, a place, a month or a group ("Note:", "Paris:", "Team:")."""
        if self.text.count(":") < 2:
            return
        spans = [m.span(1) for m in _TRANSCRIPT_SPEAKER.finditer(self.text)]
        if len(spans) < 2:
            return
        found = {(f.start, f.end) for f in self.found}
        if not any(span in found for span in spans):
            return
        g = self.g
        at = {t.start: k for k, t in enumerate(self.toks)}
        for start, end in spans:
            k = at.get(start)
            if k is None or k in self.taken or self.toks[k].end != end:
                continue
            t = self.toks[k]
            if t.upper or not g.is_given(t.low) or g.month_or_day(t.low) or _not_a_person(t.low) or t.low in _PLACES \
                    or t.low in _GROUP_WORDS or g.is_not_name(t.low) or t.low in _NOT_ALONE:
                continue
            self.add(k, k + 1, "person_speaker", 0.6)

    def lower_acts(self, i: int) -> bool:
        """A lower-case given name as a chat speaker ("[09:14] kofi: ...") or before a verb ("jorge
        already merged it", "tomasz is on it", "sven and ingrid are out")."""
        t = self.toks[i]
        after = self.text[t.end:t.end + 30]
        before = self.before(i)
        if _LINE_START.search(before) and (after.startswith((": ", ":\n")) or _VOCATIVE_AFTER.match(after)
                                           or (before.endswith("<") and after.startswith("> "))):
            return True  # "kofi: on it", "kofi, can you ...", "kofi pls check", "<kofi> lol"
        if _HERE_AFTER.match(after) and (_LINE_START.search(before) or before.endswith(", ")):
            return True  # "hey guys, nisha here"
        if len(t.text) >= 4 and _END_VOCATIVE_AFTER.match(after) and _END_VOCATIVE_BEFORE.search(before):
            return True  # "is tomorrow ok for you nikhil?"
        if _AUX_BEFORE.search(self.before(i, 12)) and re.match(r"\s[a-z]{3,}\b", after) \
                and not re.match(r"\s(?:and|or|the|a|an|to|of|in|on|at|for|you|it)\b", after):
            return True  # "can tunde review this", "did maria send the deck"
        m = _LOWER_VERB_AFTER.match(after)
        if m is None or (m.group(1) in _ROMANCE_VERBS_AFTER and _CLAUSE_BEFORE.search(self.before(i, 12)) is None):
            return False  # "y jaime está ...", but "el vestido rosa está agotado" is a colour
        if len(t.text) < 4 and (m.group(1) in _LOWER_SHORT_AFTER or not m.group(1)):
            return False  # "sam needs me", "mia takes the train", but not "mia a", "ana e"
        if m.group(1) in ("and", "&", "or", "und", "et", "y", "e", "en"):
            # "sven and ingrid are": the other one must be a name that acts too
            k = next((k for k in range(i + 1, min(i + 3, len(self.toks))) if self.toks[k].start >= t.end + m.end()),
                     len(self.toks))
            return k < len(self.toks) and self.toks[k].text.islower() and self.g.is_given(self.toks[k].low) \
                and not self.g.is_ordinary(self.toks[k].low) and _LOWER_VERB_AFTER.match(
                    self.text[self.toks[k].end:self.toks[k].end + 30]) is not None
        return True


def _handles(text: str, g: Gazetteer) -> list[Finding]:
    """User handles written as given.surname ("lucia.moreno", "kwame_asante"), outside e-mail
    addresses, paths and host names."""
    found = []
    for m in _HANDLE.finditer(text):
        given, surname = m.group(1), m.group(2)
        if g.is_given(given) and not g.is_ordinary(given) and not g.risky_given(given) and not _not_a_person(given) \
                and g.is_surname(surname) and not g.is_ordinary(surname) and not _not_a_person(surname) \
                and given not in _PLACES and surname not in _PLACES:
            found.append(Finding(m.start(), m.end(), "PERSON", Category.PII, 0.6, "person_handle"))
    return found


# "cc jmüller", "@kfischer", "ping amehta": an initial and a known surname as one lower-case handle,
# after "@" or a cue (without one, "kfischer" stays a word: precision first)
_INITIAL_HANDLE = re.compile(r"([a-z])([a-zà-ÿ]{4,20})(?![\w@-]|\.\w)")
_AT_HANDLE = re.compile(r"(?<![\w.@])@(?=[a-z][a-zà-ÿ]{4,20}(?![\w@-]|\.\w))")
_HANDLE_CUES = ("cc", "ping", "thanks", "thx", "ask", "tell", "assigned to", "owner", "reviewer")
_AFTER_HANDLE_CUE = re.compile(r":?[ \t]+@?(?=[a-z][a-zà-ÿ]{4})")


def _handle_cue_ends(text: str) -> list[int]:
    """Where a handle may start after a cue word ("cc jmüller", "owner: tgarcia"); plain ``str.find``
    per cue, which costs less than one regex over the text."""
    ends = []
    for cue in _HANDLE_CUES:
        pos = text.find(cue)
        while pos >= 0:
            if pos == 0 or not text[pos - 1].isalnum():
                m = _AFTER_HANDLE_CUE.match(text, pos + len(cue))
                if m is not None:
                    ends.append(m.end())
            pos = text.find(cue, pos + len(cue))
    return ends


def _initial_handles(text: str, g: Gazetteer) -> list[Finding]:
    found = []
    starts = [m.end() for m in _AT_HANDLE.finditer(text)] if "@" in text else []
    starts += _handle_cue_ends(text)
    for start in starts:
        m = _INITIAL_HANDLE.match(text, start)
        if m is None:
            continue
        surname = m.group(2)
        if g.is_ordinary(m.group()) or g.is_given(m.group()):
            continue  # "@channel", "ping marcus": a word or a given name, not c. Hannel, m. Arcus
        if g.is_surname(surname) and not g.is_ordinary(surname) and not g.is_not_name(surname) \
                and not _not_a_person(surname) and surname not in _PLACES:
            found.append(Finding(m.start(1), m.end(2), "PERSON", Category.PII, 0.6, "person_handle"))
    return found


def find_persons(text: str, *, cells: bool = True) -> list[Finding]:
    """PERSON findings in ``text`` (may overlap each other; the caller resolves overlaps)."""
    if not text:
        return []
    f = _Finder(text)
    f.surname_comma_given()
    f.scan_runs()
    f.continue_lists()
    f.lowercase()
    f.transcript()
    f.found.extend(field_values(text, f.g))
    if "." in text or "_" in text:
        f.found.extend(_handles(text, f.g))
    f.found.extend(_initial_handles(text, f.g))
    if ":" in text:
        f.found.extend(list_values(text, f.g))
    if " to " in text or " will " in text:
        f.found.extend(action_owners(text, f.g))
    if "/" in text:
        f.found.extend(ticket_names(text, f.g))
    from kvfence.gateway.protection.detect.recognizers.csv_names import csv_name_cells

    if cells:
        f.found.extend(csv_name_cells(text))
    return drop_things(text, f.found, f.g, f.things)
