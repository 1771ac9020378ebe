"""Postal addresses of Japan, India and Brazil: a street or block line, then the town and the
postcode of its country's shape, which is what makes the text an address.

- Japan: romanised, block numbers and wards before the prefecture and the 〒 postcode
  (``1-1-1 Marunouchi, Chiyoda-ku, Tokyo 100-0005``), or written in Japanese from the postcode on
  (``〒100-0005 東京都千代田区丸の内1-1-1``: a prefecture, 都/道/府/県, must follow);
- India: a house, flat or plot number, the street and locality parts ("MG Road", "14th Cross",
  "Sector 17"), the town, and the six-digit PIN (``Bengaluru, Karnataka 560038``,
  ``New Delhi - 110057``); a state, a large city or a "PIN" label must be in it;
- Brazil: a street word (Rua, Avenida, Alameda, Travessa, Praça, Rodovia ...), the name, the number
  after a comma, a complement (apto, sala, bloco, casa), the district, the town, the state's two
  letters (``São Paulo - SP``) and the CEP (``01452-000``).

A number of the right shape alone ("order 560038", "ref 100-0005") is no address: the town and
the street or block line are required.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.findings import Category
from kvfence.gateway.protection.detect.recognizers.address_parts import CAPW as _CAPW
from kvfence.gateway.protection.detect.recognizers.address_parts import IN_STATES as _IN_STATES
from kvfence.gateway.protection.detect.recognizers.address_parts import LINE_BREAK as _SEP
from kvfence.gateway.protection.detect.recognizers.address_parts import S as _S
from kvfence.gateway.protection.detect.scanner import Anchor, Rule

__all__ = ["BR_TAIL", "JP_IN_BR_ADDRESS_RULES"]

_PII = Category.PII
_WORDS = rf"{_CAPW}(?:{_S}(?:de|da|do|das|dos|e)?[ \t]?{_CAPW}){{0,4}}"

# --- Japan ---
_JP_BLOCK = r"\d{1,4}(?:-\d{1,4}){1,2}"
_JP_AREA = r"[A-Z][a-zōū]{1,20}(?:-[A-Z][a-zōū]{1,20})?(?:-(?:cho|chō|machi|dori|dōri))?"  # Nishi-Shinjuku
_JP_WARD = r"[A-Z][a-zōū]{1,20}-(?:ku|shi|gun|cho|chō|machi|mura)"
_JP_PREF = r"[A-Z][a-zōū]{1,20}(?:-(?:to|fu|ken))?"
_JP_ROMAN = re.compile(
    rf"(?:{_JP_BLOCK},?{_S}{_JP_AREA}|{_JP_AREA}{_S}{_JP_BLOCK})(?:{_SEP}{_JP_WARD}){{1,3}}{_SEP}{_JP_PREF},?[ \t]{{1,3}}"
    r"(?:〒[ \t]?)?\d{3}-\d{4}\b")
_JP_KANA = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
_JP_SCRIPT = re.compile(
    rf"〒?[ \t]?\d{{3}}[-−－]\d{{4}}[ \t\u3000]{{0,2}}[{_JP_KANA}]{{1,4}}?(?:都|道|府|県)"
    rf"[{_JP_KANA}0-9０-９\-−－ー丁目番地号の]{{2,40}}")

# --- India ---
_IN_CITIES = (r"(?:Mumbai|Bombay|New Delhi|Delhi|Bengaluru|Bangalore|Chennai|Madras|Hyderabad|Kolkata|Calcutta|Pune"
              r"|Ahmedabad|Jaipur|Lucknow|Chandigarh|Kochi|Cochin|Gurugram|Gurgaon|Noida|Indore|Bhopal|Nagpur|Surat"
              r"|Vadodara|Coimbatore|Mysuru|Mysore|Visakhapatnam|Thiruvananthapuram|Patna|Bhubaneswar|Guwahati"
              r"|Dehradun|Kanpur|Varanasi|Agra|Amritsar|Ludhiana|Nashik|Thane|Navi Mumbai|Madurai|Mangaluru)")
# a house token with its word ("Flat 302", "No. 12", "#45"), a block letter ("B-12"), or a number
# that starts the line
_IN_HOUSE = (r"(?:(?:(?:(?:Flat|House|Plot|Door|Shop|Office|Villa|Apt\.?)[ \t]?(?:No\.?[ \t]?)?|No\.?[ \t]?|#[ \t]?)"
             r"(?:[A-Z]{1,2}[ \t]?-[ \t]?)?|[A-Z]{1,2}[ \t]?-[ \t]?|(?m:^)[ \t]*|(?<=:[ \t]))\d{1,5}[A-Z]?(?:[/-]\d{1,4})?"
             # a first line without a number: "Station Road, Jaipur 302006"
             r"|(?:[A-Z][a-z]{1,20}[ \t]){1,2}(?:Road|Marg|Street|Lane|Nagar|Chowk|Bazaar|Bazar))")
_IN_PART = rf"(?:{_CAPW}|\d{{1,3}}(?:st|nd|rd|th)|Road[ \t]No\.?[ \t]?\d{{1,3}}|Sector[ \t]\d{{1,3}}[A-Z]?|Phase[ \t][IVX\d]{{1,4}})"
_IN_LINE = rf"{_IN_PART}(?:[ \t]{{1,2}}(?:{_IN_PART}|\d{{1,3}}))*"
_IN_PIN = r"(?:PIN(?:[ \t]?Code)?[ \t]?:?[ \t]?)?[1-8]\d{2}[ \t]?\d{3}\b"
_IN_ADDRESS = re.compile(
    rf"\b{_IN_HOUSE}{_SEP}(?:{_IN_LINE}{_SEP}){{0,5}}{_IN_LINE}(?:{_SEP}{_IN_STATES})?"
    rf"(?:,?[ \t]{{1,3}}[-–][ \t]{{1,3}}|,[ \t]{{0,3}}|[ \t]{{1,3}}|[ \t]{{0,3}}\n[ \t]{{0,3}}){_IN_PIN}")
_IN_NEEDS = re.compile(rf"{_IN_STATES}|{_IN_CITIES}|PIN")
# a street or locality word: what makes the parts a street line, not "Chapter 3, Section 12"
_IN_LOCALITY = re.compile(r"(?i)(?:road|marg|nagar|colony|sector|layout|cross|main|vihar|enclave|bagh|chowk|lane"
                          r"|street|apartments?|society|phase|block|hills|park|extension|puram|pet|palya|halli|wadi"
                          r"|gali|mohalla|tower|residency|heights|complex|estate)\b")

# --- Brazil ---
_BR_TYPE = r"(?:Rua|R\.|Avenida|Av\.|Alameda|Al\.|Travessa|Tv\.|Praça|Pça\.|Rodovia|Estrada|Largo|Viela|Servidão)"
_BR_UF = r"(?:AC|AL|AP|AM|BA|CE|DF|ES|GO|MA|MT|MS|MG|PA|PB|PR|PE|PI|RJ|RN|RS|RO|RR|SC|SP|SE|TO)"
_BR_NAME = rf"(?:(?:de|da|do|das|dos)[ \t])?{_WORDS}"
_BR_COMPLEMENT = (r"(?:(?:,[ \t]{0,3}|[ \t]{1,3}[-–][ \t]{1,3}|[ \t]{1,3})(?i:apto\.?|apartamento|ap\.?|sala|bloco|bl\.?|casa"
                  r"|conjunto|cj\.?|andar|loja|fundos)[ \t]?[\w-]{1,6}){0,3}")
_BR_CEP = r"(?:CEP:?[ \t]?)?\d{5}-?\d{3}\b"
# the district and town, the state's letters and the CEP (also after a "Caixa Postal": address_intl.py)
BR_TAIL = (rf"(?:(?:,[ \t]{{0,3}}|[ \t]{{1,3}}[-–][ \t]{{1,3}}|[ \t]{{0,3}}\n[ \t]{{0,3}}){_BR_NAME}){{1,2}}"
           rf"(?:[ \t]{{0,3}}[-/–,][ \t]{{0,3}}){_BR_UF}\b(?:[,;][ \t]{{0,3}}|[ \t]{{1,3}}[-–]?[ \t]{{0,3}}|[ \t]{{0,3}}\n[ \t]{{0,3}})"
           rf"{_BR_CEP}")
_BR_ADDRESS = re.compile(
    rf"\b{_BR_TYPE}{_S}{_BR_NAME},?[ \t]{{1,3}}(?:n[º°o]\.?[ \t]?)?\d{{1,5}}[A-Z]?{_BR_COMPLEMENT}{BR_TAIL}")


def _indian(candidate: str) -> bool:
    return _IN_NEEDS.search(candidate) is not None and _IN_LOCALITY.search(candidate) is not None


# the rules run only around a postcode of one of the three shapes
# (the first digit, then the lookbehind: sre skips ahead to digits, as in address_intl.py's anchor)
_POSTCODES = Anchor(re.compile(r"\d(?<![\w-]\d)(?:\d{2}[-−－]\d{4}|\d{4}-\d{3}|(?<=[1-8])\d{2} ?\d{3})(?![\w-])"),
                    before=220, after=80)

JP_IN_BR_ADDRESS_RULES: list[Rule] = [
    Rule("address_jp", "POSTAL_ADDRESS", _PII, _JP_ROMAN, score=0.8, anchor=_POSTCODES),
    Rule("address_jp_script", "POSTAL_ADDRESS", _PII, _JP_SCRIPT, score=0.8, anchor=_POSTCODES),
    Rule("address_in", "POSTAL_ADDRESS", _PII, _IN_ADDRESS, score=0.8, validate=_indian, anchor=_POSTCODES),
    Rule("address_br", "POSTAL_ADDRESS", _PII, _BR_ADDRESS, score=0.8, anchor=_POSTCODES),
]
