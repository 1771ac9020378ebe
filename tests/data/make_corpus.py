"""Build ``pii_corpus.jsonl``: short labelled texts (emails, chats, tickets, code, logs, configs).

Written for kvfence: the templates below are hand-written, the values are synthetic (random but
valid where the format has a checksum: Luhn cards, mod-97 IBANs, mod-11 NHS numbers, base58check
and bech32 wallets), and a fixed seed makes the file reproducible. Each line is
``{"id", "kind", "text", "spans": [[start, end, TYPE], ...]}``; texts without spans are there on
purpose, full of look-alikes (UUIDs, hashes, versions, order numbers, dates, prices).

    python tests/data/make_corpus.py > tests/data/pii_corpus.jsonl
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import string
import sys

R = random.Random(20261129)
ALNUM = string.ascii_letters + string.digits
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

FIRST = ["maria", "john", "aiko", "li", "omar", "sofia", "lukas", "priya", "diego", "anna", "kwame", "elena",
         "noah", "fatima", "jonas", "chloe", "ravi", "ines", "tom", "mei"]
LAST = ["lopez", "smith", "tanaka", "wei", "haddad", "rossi", "becker", "sharma", "garcia", "novak", "mensah",
        "petrova", "brown", "khan", "berg", "martin", "iyer", "silva", "okafor", "chen"]
DOMAINS = ["northwind.com", "contoso.io", "fabrikam.co.uk", "acme-corp.de", "example-mail.org", "tailspin.net",
           "wingtiptoys.com", "gmail.com", "outlook.fr", "proton.me", "uni-heidelberg.de", "health.gov.au"]


def rs(n: int, chars: str = ALNUM) -> str:
    return "".join(R.choice(chars) for _ in range(n))


# -- personal data ---------------------------------------------------------------------------------

def email() -> str:
    first, last = R.choice(FIRST), R.choice(LAST)
    local = R.choice([f"{first}.{last}", f"{first[0]}{last}", f"{first}_{last}{R.randint(1, 99)}",
                      f"{first}+{R.choice(['billing', 'news', 'hr'])}", f"{last}.{first}",
                      f"{first}{R.randint(1970, 2005)}"])
    value = f"{local}@{R.choice(DOMAINS)}"
    return value.upper() if R.random() < 0.05 else value


def phone() -> str:
    area = R.choice(["212", "415", "646", "312", "617", "206", "303", "512", "718", "404"])
    ex, line = f"{R.randint(2, 9)}{R.randint(0, 99):02d}", f"{R.randint(0, 9999):04d}"
    return R.choice([
        f"({area}) {ex}-{line}", f"{area}-{ex}-{line}", f"{area}.{ex}.{line}", f"+1 {area} {ex} {line}",
        f"+1-{area}-{ex}-{line}", f"1-{area}-{ex}-{line}", f"+1 ({area}) {ex}-{line}",
        f"+44 20 {R.randint(7000, 8999)} {R.randint(1000, 9999)}", f"+44 7{R.randint(100, 999)} {R.randint(100000, 999999)}",
        f"+49 30 {R.randint(1000000, 99999999)}", f"+49 151 {R.randint(1000000, 9999999)}",
        f"+33 6 {R.randint(10, 99)} {R.randint(10, 99)} {R.randint(10, 99)} {R.randint(10, 99)}",
        f"+91 9{R.randint(1000, 9999)} {R.randint(10000, 99999)}", f"+61 2 {R.randint(8000, 9999)} {R.randint(1000, 9999)}",
        f"+81 3-{R.randint(1000, 9999)}-{R.randint(1000, 9999)}", f"+34 6{R.randint(10, 99)} {R.randint(100, 999)} {R.randint(100, 999)}",
    ])


def national_phone() -> str:
    """Phones without a country code: only recognisable next to a word like 'call' or 'phone'."""
    return R.choice([
        f"07{R.randint(100, 999)} {R.randint(100000, 999999)}", f"020 {R.randint(7000, 8999)} {R.randint(1000, 9999)}",
        f"06 {R.randint(10, 99)} {R.randint(10, 99)} {R.randint(10, 99)} {R.randint(10, 99)}",
        f"030 {R.randint(1000000, 9999999)}", f"{R.choice(['415', '212', '617'])}{R.randint(200, 999)}{R.randint(1000, 9999)}",
    ])


def luhn_complete(prefix: str, length: int) -> str:
    body = prefix + "".join(R.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for d in string.digits:
        digits = body + d
        total = 0
        for i, ch in enumerate(reversed(digits)):
            v = int(ch)
            if i % 2:
                v = v * 2 - 9 if v > 4 else v * 2
            total += v
        if total % 10 == 0:
            return digits
    raise AssertionError


def card() -> str:
    kind = R.choice(["visa", "visa", "mc", "mc2", "amex", "disc"])
    if kind == "amex":
        n = luhn_complete(R.choice(["34", "37"]), 15)
        return R.choice([f"{n[:4]} {n[4:10]} {n[10:]}", f"{n[:4]}-{n[4:10]}-{n[10:]}", n])
    prefix = {"visa": "4", "mc": R.choice(["51", "52", "53", "54", "55"]), "mc2": "2221", "disc": "6011"}[kind]
    n = luhn_complete(prefix, 16)
    sep = R.choice([" ", "-", ""])
    return sep.join(n[i:i + 4] for i in range(0, 16, 4))


IBAN_FORMATS = {"DE": "8n10n", "GB": "4a6n8n", "FR": "5n5n11c2n", "NL": "4a10n", "ES": "4n4n2n10n",
                "IT": "1a5n5n12c", "BE": "3n7n2n", "CH": "5n12c", "AT": "5n11n", "PL": "8n16n"}


def iban() -> str:
    country = R.choice(list(IBAN_FORMATS))
    bban = ""
    for count, kind in re.findall(r"(\d+)([nac])", IBAN_FORMATS[country]):
        chars = {"n": string.digits, "a": string.ascii_uppercase, "c": string.ascii_uppercase + string.digits}[kind]
        bban += rs(int(count), chars)
    check = 98 - int("".join(str(int(c, 36)) for c in bban + country + "00")) % 97
    value = f"{country}{check:02d}{bban}"
    if R.random() < 0.6:
        value = " ".join(value[i:i + 4] for i in range(0, len(value), 4))
    return value


def ipv4() -> str:
    return R.choice([f"10.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}",
                     f"192.168.{R.randint(0, 255)}.{R.randint(1, 254)}",
                     f"{R.choice([23, 34, 52, 81, 104, 151, 185, 203])}.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}"])


def ipv6() -> str:
    groups = [f"{R.randint(0, 65535):x}" for _ in range(8)]
    if R.random() < 0.5:
        return "2001:db8:" + ":".join(groups[2:4]) + "::" + groups[7]
    return ":".join(groups)


def ssn() -> str:
    while True:
        area = R.randint(1, 899)
        if area != 666:
            break
    sep = R.choice(["-", "-", " "])
    return f"{area:03d}{sep}{R.randint(1, 99):02d}{sep}{R.randint(1, 9999):04d}"


def nino() -> str:
    first = R.choice("ABCEGHJKLMNPRSTWXYZ")
    second = R.choice("ABCEGHJKLMNPRSTWXYZ")
    while first + second in ("BG", "GB", "NK", "KN", "TN", "NT", "ZZ"):
        second = R.choice("ABCEGHJKLMNPRSTWXYZ")
    digits = f"{R.randint(0, 999999):06d}"
    value = f"{first}{second}{digits}{R.choice('ABCD')}"
    return R.choice([value, f"{value[:2]} {digits[:2]} {digits[2:4]} {digits[4:]} {value[-1]}"])


def nhs() -> str:
    while True:
        digits = [R.randint(0, 9) for _ in range(9)]
        check = 11 - sum(d * (10 - i) for i, d in enumerate(digits)) % 11
        check = 0 if check == 11 else check
        if check != 10:
            s = "".join(map(str, digits)) + str(check)
            return R.choice([f"{s[:3]} {s[3:6]} {s[6:]}", s])


def b58encode(raw: bytes) -> str:
    n = int.from_bytes(raw, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = B58[r] + out
    return "1" * (len(raw) - len(raw.lstrip(b"\0"))) + out


def bech32_address() -> str:
    charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
    program = [R.randint(0, 255) for _ in range(20)]
    acc, bits, data = 0, 0, [0]
    for value in program:
        acc = (acc << 8) | value
        bits += 8
        while bits >= 5:
            bits -= 5
            data.append((acc >> bits) & 31)
    if bits:
        data.append((acc << (5 - bits)) & 31)
    gen = [0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3]
    values = [ord(c) >> 5 for c in "bc"] + [0] + [ord(c) & 31 for c in "bc"] + data + [0] * 6
    chk = 1
    for v in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ v
        for i in range(5):
            chk ^= gen[i] if (top >> i) & 1 else 0
    polymod = chk ^ 1
    checksum = [(polymod >> 5 * (5 - i)) & 31 for i in range(6)]
    return "bc1" + "".join(charset[d] for d in data + checksum)


def wallet() -> str:
    kind = R.choice(["legacy", "p2sh", "bech32", "eth"])
    if kind == "eth":
        return "0x" + rs(40, "0123456789abcdef")
    if kind == "bech32":
        return bech32_address()
    payload = bytes([0 if kind == "legacy" else 5]) + bytes(R.randint(0, 255) for _ in range(20))
    return b58encode(payload + hashlib.sha256(hashlib.sha256(payload).digest()).digest()[:4])


# -- secrets ---------------------------------------------------------------------------------------

def jwt() -> str:
    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return (part({"alg": R.choice(["HS256", "RS256"]), "typ": "JWT"}) + "."
            + part({"sub": str(R.randint(1000, 99999)), "iat": R.randint(1700000000, 1790000000)}) + "."
            + rs(43, ALNUM + "-_"))


def pem() -> str:
    kind = R.choice(["RSA ", "EC ", "OPENSSH ", ""])
    body = "\n".join(rs(64, ALNUM + "+/") for _ in range(R.randint(2, 4)))
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


def password() -> str:
    return R.choice([rs(R.randint(10, 16), ALNUM + "!#%&*"), f"{R.choice(['Summer', 'Blue', 'Tiger', 'Falcon'])}"
                     f"{R.randint(2019, 2026)}{R.choice('!#$%')}", rs(12, ALNUM)])


SECRETS = {
    "OPENAI_API_KEY": lambda: R.choice(["sk-proj-", "sk-", "sk-svcacct-"]) + rs(R.choice([40, 48, 56]), ALNUM + "_-"),
    "ANTHROPIC_API_KEY": lambda: "sk-ant-api03-" + rs(86, ALNUM + "_-") + "AA",
    "AWS_ACCESS_KEY": lambda: R.choice(["AKIA", "ASIA"]) + rs(16, string.ascii_uppercase + "234567"),
    "GITHUB_TOKEN": lambda: R.choice(["ghp_", "gho_", "ghs_"]) + rs(36),
    "GITLAB_TOKEN": lambda: "glpat-" + rs(20, ALNUM + "_-"),
    "SLACK_TOKEN": lambda: f"xoxb-{R.randint(10**9, 10**10)}-{R.randint(10**11, 10**12)}-{rs(24)}",
    "STRIPE_KEY": lambda: R.choice(["sk_live_", "sk_test_", "rk_live_"]) + rs(R.choice([24, 34, 99])),
    "GOOGLE_API_KEY": lambda: "AIza" + rs(35, ALNUM + "_-"),
    "JWT": jwt,
}


# -- look-alikes that are no personal data or secrets ----------------------------------------------

def uuid() -> str:
    h = rs(32, "0123456789abcdef")
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{h[16:20]}-{h[20:]}"


BAIT = {
    "UUID": uuid,
    "SHA": lambda: rs(64, "0123456789abcdef"),
    "GITSHA": lambda: rs(40, "0123456789abcdef"),
    "VERSION": lambda: R.choice([f"{R.randint(1, 12)}.{R.randint(0, 30)}.{R.randint(0, 9)}",
                                 f"v{R.randint(1, 5)}.{R.randint(0, 20)}.{R.randint(0, 9)}.{R.randint(0, 300)}"]),
    "ORDER": lambda: R.choice([f"ORD-{R.randint(2019, 2026)}-{R.randint(0, 999999):06d}",
                               f"#{R.randint(10**7, 10**8)}", f"INV{R.randint(10**5, 10**6)}"]),
    "DATE": lambda: R.choice([f"{R.randint(2019, 2026)}-{R.randint(1, 12):02d}-{R.randint(1, 28):02d}",
                              f"{R.randint(1, 28):02d}/{R.randint(1, 12):02d}/{R.randint(2019, 2026)}"]),
    "TIME": lambda: f"{R.randint(0, 23):02d}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}.{R.randint(0, 999):03d}",
    "PRICE": lambda: f"{R.randint(1, 99)},{R.randint(100, 999)}.{R.randint(0, 99):02d}",
    "NUM16": lambda: str(R.randint(10**15, 10**16 - 1)),
    "TRACK": lambda: f"1Z{rs(6, string.ascii_uppercase + string.digits)}{R.randint(10**9, 10**10)}",
    "PORT": lambda: str(R.choice([5432, 6379, 8080, 443, 9092, 27017])),
    "MAC": lambda: ":".join(f"{R.randint(0, 255):02x}" for _ in range(6)),
    "ZIP": lambda: f"{R.randint(10000, 99999)}",
}


TEMPLATES: list[tuple[str, str]] = [
    # emails
    ("email", "Hi {FNAME},\n\nplease send the signed contract to {EMAIL} before {DATE}. If anything is unclear, "
              "call me on {PHONE}.\n\nBest,\n{FNAME}"),
    ("email", "Dear team, the refund for order {ORDER} ({PRICE} EUR) goes to IBAN {IBAN}. Reference: {UUID}."),
    ("email", "From: {EMAIL}\nTo: {EMAIL}\nSubject: Re: invoice {ORDER}\n\nThanks, paid on {DATE} with card ending in "
              "the last four digits only. Regards"),
    ("email", "Hello,\nmy new address for statements is {EMAIL}; my mobile changed to {PHONE}. My SSN for the tax "
              "form is {SSN}.\nThanks"),
    ("email", "Hi {FNAME}, your National Insurance number {NINO} is now linked to payroll ID {ORDER}."),
    ("email", "Payment details for the supplier: {IBAN} (BIC on file). Amount {PRICE} due {DATE}."),
    ("email", "Reminder: standup moved to {TIME}. Agenda in doc {UUID}. No action needed."),
    ("email", "Hi all, release {VERSION} is out. Changelog at commit {GITSHA}. Thanks to everyone who tested!"),
    ("email", "Forwarding the candidate's details: {FNAME} {LNAME}, {EMAIL}, phone {PHONE}."),
    ("email", "The patient's NHS number is {NHS}; appointment on {DATE} at {TIME}. Please call {PHONE} to confirm."),
    # chats
    ("chat", "user: hey can you reach me at {EMAIL}?\nassistant: Sure, noted."),
    ("chat", "user: my card {CARD} got declined twice at checkout, order {ORDER}\nagent: let me check"),
    ("chat", "me: text me at {PHONE} when you land\nthem: ok! flight lands {TIME}"),
    ("chat", "customer: please call me back, my number is {NPHONE}\nsupport: will do today"),
    ("chat", "user: send the BTC to {WALLET} and ping me\nuser2: done, tx id {SHA}"),
    ("chat", "user: what's the weather in Lisbon on {DATE}?\nassistant: Sunny, 24 degrees."),
    ("chat", "user: my ssn is {SSN} and dob {DOB}, can you fill the form?"),
    ("chat", "user: the VPN gives me {IP} but the office range is different, is that ok?"),
    ("chat", "user: summarise ticket {ORDER} for me please, version {VERSION} regression"),
    ("chat", "bob: whats ur email again\nalice: {EMAIL} or work {EMAIL}"),
    ("chat", "user: I moved, new phone {PHONE}, and my old one {PHONE} is disconnected"),
    ("chat", "user: can you explain why 0.1 + 0.2 != 0.3 in python {VERSION}?"),
    # tickets
    ("ticket", "Ticket {ORDER}: Customer {FNAME} {LNAME} ({EMAIL}) reports double charge on card {CARD}. "
               "Priority: high. Created {DATE}."),
    ("ticket", "Incident {UUID}: login failures from {IP} and {IP} between {TIME} and {TIME}."),
    ("ticket", "Bug: app crashes on iOS build {VERSION} when tapping Save. Device id {UUID}. Steps attached."),
    ("ticket", "Support case: user cannot update bank details, current IBAN {IBAN}. Asked to confirm by phone {PHONE}."),
    ("ticket", "KYC check failed for applicant; SSN {SSN} does not match the name on the ID. Ref {ORDER}."),
    ("ticket", "Shipping issue: parcel {TRACK} stuck in customs since {DATE}. Contact {EMAIL}."),
    ("ticket", "Access request: please grant {EMAIL} read access to repo checkout-service (commit {GITSHA})."),
    ("ticket", "Fraud alert: transfers to wallet {WALLET} from account of {FNAME} {LNAME}. Case {ORDER}."),
    ("ticket", "Payroll: employee NI {NINO}, salary {PRICE}, bank IBAN {IBAN}."),
    ("ticket", "Outage report {ORDER}: p99 latency 2.3s on {DATE}, node MAC {MAC}, zip {ZIP} datacenter."),
    # code
    ("code", 'import openai\nclient = openai.OpenAI(api_key="{OPENAI_API_KEY}")\nprint(client.models.list())'),
    ("code", "import anthropic\nclient = anthropic.Anthropic(api_key='{ANTHROPIC_API_KEY}')"),
    ("code", "AWS_ACCESS_KEY_ID={AWS_ACCESS_KEY}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\nAWS_REGION=eu-west-1"),
    ("code", "s3 = boto3.client('s3', aws_access_key_id='{AWS_ACCESS_KEY}', aws_secret_access_key='{AWS_SECRET}')"),
    ("code", "git remote set-url origin https://{GITHUB_TOKEN}@github.com/acme/billing.git"),
    ("code", "export GITHUB_TOKEN={GITHUB_TOKEN}\ngh release create {VERSION}"),
    ("code", "variables:\n  GITLAB_TOKEN: {GITLAB_TOKEN}\n  IMAGE_TAG: {GITSHA}"),
    ("code", "slack = WebClient(token=\"{SLACK_TOKEN}\")\nslack.chat_postMessage(channel='#ops', text='deployed')"),
    ("code", "stripe.api_key = \"{STRIPE_KEY}\"\ncharge = stripe.Charge.create(amount=2000, currency='eur')"),
    ("code", "const map = new google.maps.Map(el, {{ key: '{GOOGLE_API_KEY}', zoom: 8 }});"),
    ("code", "curl -H 'Authorization: Bearer {JWT}' https://api.internal/v2/users/{UUID}"),
    ("code", "DATABASE_URL=postgresql://app:{DBPASS}@db.prod.internal:{PORT}/orders"),
    ("code", "engine = create_engine('mysql+pymysql://report_user:{DBPASS}@{IP}/reports')"),
    ("code", "REDIS_URL = \"redis://default:{DBPASS}@cache-01:6379/0\""),
    ("code", "private_key = \"\"\"\n{PEM}\n\"\"\""),
    ("code", "db:\n  host: db.internal\n  user: svc_orders\n  password: {PASSWORD}\n  port: {PORT}"),
    ("code", "settings.SECRET_KEY = '{GENERIC}'\nsettings.DEBUG = False"),
    ("code", "def checksum(data):\n    return hashlib.sha256(data).hexdigest()  # e.g. {SHA}\n"),
    ("code", "API_KEY = os.environ['API_KEY']\nTOKEN = os.getenv('TOKEN')\npassword = None  # set at runtime"),
    ("code", "const id = '{UUID}';\nconst version = '{VERSION}';\nconsole.log(`build ${{id}}`);"),
    ("code", "# fill these in from the vault, never commit them\naws_access_key_id = ${{AWS_KEY_ID}}\npassword: ********"),
    ("code", "OPENAI_API_KEY=sk-...your-key-here...\nANTHROPIC_API_KEY=<your key>\nSTRIPE_KEY=${{STRIPE_KEY}}"),
    ("code", "headers = {{'X-Api-Key': '{GENERIC}', 'Accept': 'application/json'}}"),
    ("code", "webhook_secret: {GENERIC}\nretry_count: 5\ntimeout_s: 30"),
    ("code", "jwt = \"{JWT}\"\nclaims = decode(jwt, verify=False)"),
    # logs
    ("log", "{DATE}T{TIME}Z INFO auth user={EMAIL} ip={IP} status=200 latency_ms=41"),
    ("log", "{DATE} {TIME} WARN payment declined card={CARD} order={ORDER}"),
    ("log", "[{DATE} {TIME}] sshd: Accepted publickey for deploy from {IP} port 52113"),
    ("log", "{DATE}T{TIME}Z DEBUG request_id={UUID} span={GITSHA} duration=12ms"),
    ("log", "{DATE}T{TIME}Z ERROR upstream {IP6} connection reset; retrying (attempt 3/5)"),
    ("log", "{DATE} kernel: eth0: link up, MAC {MAC}, firmware {VERSION}"),
    ("log", "{DATE}T{TIME}Z INFO exported config OPENAI_API_KEY={OPENAI_API_KEY}"),
    ("log", "{DATE}T{TIME}Z WARN login failed for {EMAIL} from {IP6}"),
    ("log", "{DATE} {TIME} INFO job=nightly-export rows=48213 sha256={SHA}"),
    ("log", "{DATE}T{TIME}Z INFO sms sent to {PHONE} template=otp"),
    # formats in other wrappings, and more look-alikes
    ("email", "From: {FNAME} {LNAME} <{EMAIL}>\nReply-To: <mailto:{EMAIL}>\nMessage-ID: <{UUID}@mail.example>"),
    ("email", "Call the office on {PHONE}, ext. 204, or my mobile {PHONE} after {TIME}."),
    ("code", '{{"customer": {{"email": "{EMAIL}", "card": "{CARD}", "ip": "{IP}"}}, "order": "{ORDER}"}}'),
    ("code", "requests.get(f'https://api.partner.example/v1/export?access_token={GENERIC}&format=csv')"),
    ("code", '{{"type": "service_account", "private_key": "{PEM}", "client_email": "{EMAIL}"}}'),
    ("code", "mysql -h db01 -u root -p{PASSWORD} inventory < dump.sql"),
    ("code", "resolved \"lodash@4.17.21\" integrity sha512-{SHA}\nimage: registry.local/api@sha256:{SHA}"),
    ("code", "env:\n  - name: OPENAI_API_KEY\n    valueFrom:\n      secretKeyRef: {{name: openai, key: api-key}}"),
    ("log", "{DATE} {TIME} GET /health 200 ua=\"Mozilla/5.0 Chrome/120.0.6099.109 Safari/537.36\" rid={UUID}"),
    ("ticket", "Per section 4.2.1.3 of the runbook, restart the worker; see step 2.1.0.4 for rollback. Ticket {ORDER}."),
    ("chat", "user: my IP is {IP}:{PORT} and the second box is {IP6}, can you whitelist both?"),
    ("chat", "user: please don't store it, but my SSN: {SSN}, my wife's is {SSN}"),
]

FNAME = lambda: R.choice(FIRST).capitalize()  # noqa: E731 - names are not labelled (no NER model in CI)
LNAME = lambda: R.choice(LAST).capitalize()  # noqa: E731

FILLERS = {
    "EMAIL": (email, "EMAIL_ADDRESS"), "PHONE": (phone, "PHONE_NUMBER"), "NPHONE": (national_phone, "PHONE_NUMBER"),
    "CARD": (card, "CREDIT_CARD"), "IBAN": (iban, "IBAN_CODE"), "IP": (ipv4, "IP_ADDRESS"), "IP6": (ipv6, "IP_ADDRESS"),
    "SSN": (ssn, "US_SSN"), "NINO": (nino, "UK_NINO"), "NHS": (nhs, "UK_NHS"), "WALLET": (wallet, "CRYPTO_WALLET"),
    "PEM": (pem, "PRIVATE_KEY"), "DBPASS": (password, "CONNECTION_PASSWORD"), "PASSWORD": (password, "PASSWORD"),
    "GENERIC": (lambda: rs(R.choice([24, 32, 40]), ALNUM), "GENERIC_SECRET"),
    "AWS_SECRET": (lambda: rs(40, ALNUM + "/+"), "AWS_SECRET_KEY"),
    **{name: (gen, name) for name, gen in SECRETS.items()},
    **{name: (gen, None) for name, gen in BAIT.items()},
    "FNAME": (FNAME, None), "LNAME": (LNAME, None),
    # a date is personal data where the text says it is a birth date (same generator as the bait DATE)
    "DOB": (BAIT["DATE"], "DATE_OF_BIRTH"),
}


def fill(template: str) -> tuple[str, list[list[object]]]:
    out, spans, pos = [], [], 0
    for match in re.finditer(r"\{\{|\}\}|\{([A-Z0-9_]+)\}", template):
        out.append(template[pos:match.start()])
        pos = match.end()
        if match.group(0) in ("{{", "}}"):
            out.append(match.group(0)[0])
            continue
        generate, label = FILLERS[match.group(1)]
        value = generate()
        start = sum(len(p) for p in out)
        out.append(value)
        if label is not None:
            spans.append([start, start + len(value), label])
    out.append(template[pos:])
    return "".join(out), spans


def main() -> None:
    rows = []
    for _ in range(6):
        for kind, template in TEMPLATES:
            text, spans = fill(template)
            rows.append({"id": f"{kind}-{len(rows):04d}", "kind": kind, "text": text, "spans": spans})
    for row in rows:
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
