"""Generate tests/data/pii_holdout.jsonl: an independent, held-out corpus for the detectors.

Written without reading the detector rules. Seeded, so the output is reproducible:

    .venv/bin/python tests/data/make_holdout.py
"""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

R = random.Random(20261130)
OUT = Path(__file__).with_name("pii_holdout.jsonl")
ALNUM = string.ascii_letters + string.digits
UP = string.ascii_uppercase + string.digits


def rs(n: int, alphabet: str = ALNUM) -> str:
    return "".join(R.choice(alphabet) for _ in range(n))


def luhn_complete(prefix: str, length: int) -> str:
    body = prefix + "".join(R.choice(string.digits) for _ in range(length - len(prefix) - 1))
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return body + str((10 - total % 10) % 10)


def card(sep: str = " ") -> str:
    prefix, length = R.choice([("4", 16), ("51", 16), ("55", 16), ("37", 15), ("6011", 16)])
    num = luhn_complete(prefix, length)
    if not sep:
        return num
    if length == 15:
        return sep.join([num[:4], num[4:10], num[10:]])
    return sep.join(num[i:i + 4] for i in range(0, 16, 4))


def iban(country: str, bban_len: int, grouped: bool = False) -> str:
    bban = "".join(R.choice(string.digits) for _ in range(bban_len))
    if country == "GB":
        bban = "NWBK" + bban[4:]
    moved = bban + country + "00"
    num = int("".join(str(int(c, 36)) for c in moved))
    value = f"{country}{98 - num % 97:02d}{bban}"
    if grouped:
        return " ".join(value[i:i + 4] for i in range(0, len(value), 4))
    return value


def ssn() -> str:
    return f"{R.randint(100, 665):03d}-{R.randint(10, 99):02d}-{R.randint(1000, 9999):04d}"


def nino(spaced: bool = False) -> str:
    a = R.choice("ABCEHJKLMNPRSTWXYZ") + R.choice("ABCEHJKLMNPRSTWXYZ")
    d = f"{R.randint(0, 999999):06d}"
    s = R.choice("ABCD")
    return f"{a} {d[:2]} {d[2:4]} {d[4:]} {s}" if spaced else f"{a}{d}{s}"


def phone() -> str:
    return R.choice([
        f"+44 20 7946 {R.randint(0, 9999):04d}",
        f"+49 30 {R.randint(1000000, 9999999)}",
        f"({R.randint(201, 989)}) {R.randint(200, 999)}-{R.randint(0, 9999):04d}",
        f"+33 6 {R.randint(10, 99)} {R.randint(10, 99)} {R.randint(10, 99)} {R.randint(10, 99)}",
        f"+91 98{R.randint(100, 999)} {R.randint(10000, 99999)}",
        f"07{R.randint(700, 999)} {R.randint(100000, 999999)}",
        f"+1-{R.randint(201, 989)}-{R.randint(200, 999)}-{R.randint(0, 9999):04d}",
        f"+34 6{R.randint(10, 99)} {R.randint(100, 999)} {R.randint(100, 999)}",
    ])


def ipv4() -> str:
    return R.choice([f"10.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}",
                     f"192.168.{R.randint(0, 255)}.{R.randint(1, 254)}",
                     f"{R.randint(23, 220)}.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}"])


def ipv6() -> str:
    return "2001:db8:" + ":".join(f"{R.randint(0, 65535):x}" for _ in range(4)) + "::" + f"{R.randint(1, 999):x}"


def btc() -> str:
    return R.choice(["bc1q" + rs(38, "023456789acdefghjklmnpqrstuvwxyz"),
                     "1" + rs(33, "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz")])


def eth() -> str:
    return "0x" + rs(40, "0123456789abcdef")


def openai() -> str:
    return R.choice(["sk-proj-" + rs(48, ALNUM + "-_") + "T3BlbkFJ" + rs(48, ALNUM + "-_"),
                     "sk-" + rs(20) + "T3BlbkFJ" + rs(20)])


def anthropic() -> str:
    return "sk-ant-api03-" + rs(93, ALNUM + "-_") + "AA"


def aws_id() -> str:
    return R.choice(["AKIA", "ASIA"]) + rs(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")


def aws_secret() -> str:
    return rs(40, ALNUM + "+/")


def github() -> str:
    return R.choice(["ghp_" + rs(36), "gho_" + rs(36), "github_pat_11" + rs(20, UP) + "_" + rs(59)])


def gitlab() -> str:
    return "glpat-" + rs(20, ALNUM + "-_")


def slack() -> str:
    return R.choice([f"xoxb-{R.randint(10**10, 10**12)}-{R.randint(10**10, 10**12)}-{rs(24)}",
                     f"xoxp-{R.randint(10**10, 10**12)}-{R.randint(10**10, 10**12)}-{R.randint(10**10, 10**12)}-{rs(32, '0123456789abcdef')}"])


def stripe() -> str:
    return R.choice(["sk_live_", "rk_live_", "sk_test_"]) + rs(R.choice([24, 99]))


def google() -> str:
    return "AIza" + rs(35, ALNUM + "-_")


def b64u(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jwt() -> str:
    head = b64u(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64u(json.dumps({"sub": str(R.randint(10**6, 10**7)), "name": "A. User",
                            "iat": R.randint(1.6e9, 1.8e9)}).encode())
    return f"{head}.{body}.{b64u(R.randbytes(32))}"


def pem(kind: str = "RSA PRIVATE KEY") -> str:
    lines = [base64.b64encode(R.randbytes(48)).decode() for _ in range(5)]
    return f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----"


def pw() -> str:
    return R.choice(["Winter", "Harbour", "Kestrel", "Mango", "Orion", "Tulip"]) + str(R.randint(10, 2030)) \
        + R.choice("!#$%*?") + rs(R.randint(0, 4))


def secret() -> str:
    return rs(R.choice([32, 40, 48]))


def hexs(n: int) -> str:
    return rs(n, "0123456789abcdef")


NAMES = ["Ingrid", "Tomasz", "Aiyana", "Kwame", "Lucía", "Hiroshi", "Noor", "Pieter", "Chidi", "Sofia"]
DOMAINS = ["posteo.de", "gmail.com", "wanadoo.fr", "bt-internet.co.uk", "uni-wien.ac.at", "rediffmail.com",
           "corp.acme-logistics.io", "outlook.es", "fastmail.fm", "nhs.net"]


def email() -> str:
    n = R.choice(NAMES).lower().replace("í", "i")
    return R.choice([f"{n}.{rs(5, string.ascii_lowercase)}", f"{n}{R.randint(1, 99)}", f"{n[0]}_{rs(6, string.ascii_lowercase)}",
                     f"{n}+billing"]) + "@" + R.choice(DOMAINS)


def build(parts: list) -> tuple[str, list]:
    text, spans = "", []
    for p in parts:
        if isinstance(p, tuple):
            val, typ = p
            spans.append([len(text), len(text) + len(val), typ])
            text += val
        else:
            text += p
    return text, spans


def N() -> str:
    return R.choice(NAMES)


def positives() -> list[tuple[str, list]]:
    T = []
    for _ in range(5):
        T.append(("email", [f"Hi {N()},\n\ncould you reply to ", (email(), "EMAIL_ADDRESS"), " or ring me at ",
                            (phone(), "PHONE_NUMBER"), " tomorrow morning?\n\nCheers"]))
    for _ in range(4):
        T.append(("chat", [f"[{R.randint(8, 22):02d}:{R.randint(0, 59):02d}] {N()}: my new number is ",
                           (phone(), "PHONE_NUMBER"), ", old one is dead"]))
    for _ in range(5):
        T.append(("ticket", [f"Ticket #{R.randint(10000, 99999)}: customer says card ", (card(R.choice([" ", "-", ""])), "CREDIT_CARD"),
                             f" was charged twice on {R.randint(1, 28)}.{R.randint(1, 12)}.2025. Please refund."]))
    for c, n in [("DE", 18), ("GB", 18), ("FR", 23), ("NL", 14), ("ES", 20), ("AT", 16), ("BE", 12)]:
        if c == "NL":
            T.append(("email", ["Bitte überweisen Sie den Betrag auf IBAN ", (iban("DE", 18, grouped=True), "IBAN_CODE"),
                                ", Verwendungszweck RE-2025-0412."]))
            continue
        val = iban(c, n)
        T.append(("email", [f"Dear {N()}, please pay invoice 2025/{R.randint(100, 999)} to ", (val, "IBAN_CODE"), " within 14 days."]))
    for _ in range(4):
        T.append(("form", ["Applicant SSN: ", (ssn(), "US_SSN"), "  DOB: ",
                           (f"{R.randint(1, 12)}/{R.randint(1, 28)}/19{R.randint(50, 99)}", "DATE_OF_BIRTH")]))
    T.append(("chat", ["my social is ", (ssn().replace("-", " "), "US_SSN"), " if hr needs it"]))
    for sp in (False, True, False):
        T.append(("email", ["Hello, my NI number is ", (nino(sp), "UK_NINO"), " for the P45, thanks."]))
    for _ in range(4):
        T.append(("log", [f"2025-06-{R.randint(10, 30)}T{R.randint(10, 23)}:14:02Z WARN auth failed for user=admin from ",
                          (ipv4(), "IP_ADDRESS"), f" port {R.randint(1024, 65535)}"]))
    T.append(("log", ["sshd[2211]: Accepted publickey for deploy from ", (ipv6(), "IP_ADDRESS"), " port 52110 ssh2"]))
    T.append(("config", ["upstream backend {\n  server ", (ipv4(), "IP_ADDRESS"), ":8080;\n  server ",
                         (ipv4(), "IP_ADDRESS"), ":8080;\n}"]))
    for _ in range(2):
        T.append(("chat", ["pls send the 0.05 BTC to ", (btc(), "CRYPTO_WALLET"), " asap"]))
    T.append(("email", ["Donations (ETH): ", (eth(), "CRYPTO_WALLET"), "\nThank you!"]))
    for _ in range(3):
        T.append(("code", ["client = OpenAI(api_key=\"", (openai(), "OPENAI_API_KEY"), "\")"]))
    T.append(("chat", ["hey can you try with my key ", (openai(), "OPENAI_API_KEY"), " the other one expired"]))
    for _ in range(2):
        T.append(("config", ["ANTHROPIC_API_KEY=", (anthropic(), "ANTHROPIC_API_KEY"), "\nMODEL=claude-sonnet"]))
    T.append(("code", ["headers = {\"x-api-key\": \"", (anthropic(), "ANTHROPIC_API_KEY"), "\", \"anthropic-version\": \"2023-06-01\"}"]))
    for _ in range(3):
        T.append(("config", ["[default]\naws_access_key_id = ", (aws_id(), "AWS_ACCESS_KEY"), "\naws_secret_access_key = ",
                             (aws_secret(), "AWS_SECRET_KEY"), "\nregion = eu-west-1"]))
    T.append(("chat", ["the access key is ", (aws_id(), "AWS_ACCESS_KEY"), " and secret ", (aws_secret(), "AWS_SECRET_KEY"),
                       " — rotate after"]))
    T.append(("shell", ["export AWS_ACCESS_KEY_ID=", (aws_id(), "AWS_ACCESS_KEY"), "\nexport AWS_SECRET_ACCESS_KEY=",
                        (aws_secret(), "AWS_SECRET_KEY")]))
    for _ in range(3):
        T.append(("shell", ["git clone https://", (github(), "GITHUB_TOKEN"), "@github.com/acme/infra.git"]))
    T.append(("config", ["GITHUB_TOKEN: ", (github(), "GITHUB_TOKEN"), "\nGH_REPO: acme/web"]))
    for _ in range(3):
        T.append(("shell", ["curl --header \"PRIVATE-TOKEN: ", (gitlab(), "GITLAB_TOKEN"),
                            "\" https://gitlab.example.com/api/v4/projects"]))
    for _ in range(3):
        T.append(("config", ["SLACK_BOT_TOKEN=", (slack(), "SLACK_TOKEN"), "\nSLACK_CHANNEL=#alerts"]))
    for _ in range(3):
        T.append(("code", ["stripe.api_key = '", (stripe(), "STRIPE_KEY"), "'"]))
    for _ in range(3):
        T.append(("code", ["<script src=\"https://maps.googleapis.com/maps/api/js?key=", (google(), "GOOGLE_API_KEY"),
                           "&callback=initMap\"></script>"]))
    for _ in range(3):
        T.append(("log", ["GET /api/me 401 Authorization: Bearer ", (jwt(), "JWT"), " ua=Mozilla/5.0"]))
    for k in ("RSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "PRIVATE KEY"):
        T.append(("config", ["key: |\n", (pem(k), "PRIVATE_KEY"), "\n"]))
    for scheme, host in [("postgres", "db.internal"), ("mongodb+srv", "cluster0.ab1cd.mongodb.net"),
                         ("redis", "cache-01:6379"), ("mysql", "10.0.4.12:3306"), ("amqp", "mq.prod.local")]:
        p = pw() + rs(4)
        hostpart = [("10.0.4.12", "IP_ADDRESS"), ":3306"] if host.startswith("10.") else [host]
        T.append(("config", [f"DATABASE_URL={scheme}://svc_app:", (p, "CONNECTION_PASSWORD"), "@", *hostpart, "/orders"]))
    T.append(("log", ["ERROR could not connect: postgresql://reporter:", (pw(), "CONNECTION_PASSWORD"),
                      "@pg-replica.eu/analytics (timeout)"]))
    T.append(("config", ["spring:\n  datasource:\n    username: app\n    password: ", (pw(), "PASSWORD"), "\n"]))
    T.append(("chat", [f"{N()}: wifi password is ", (pw(), "PASSWORD"), " btw"]))
    T.append(("email", ["Your temporary password: ", (pw(), "PASSWORD"), "\nPlease change it on first login."]))
    T.append(("code", ["DB_PASSWORD = \"", (pw(), "PASSWORD"), "\""]))
    T.append(("config", ["<add key=\"SmtpPassword\" value=\"", (pw(), "PASSWORD"), "\" />"]))
    T.append(("chat", ["Passwort für den Server: ", (pw(), "PASSWORD"), " (nicht weitergeben)"]))
    T.append(("shell", ["sshpass -p '", (pw(), "PASSWORD"), "' ssh root@bastion"]))
    T.append(("config", ["JWT_SECRET=", (secret(), "GENERIC_SECRET"), "\nJWT_TTL=3600"]))
    T.append(("code", ["app.config['SECRET_KEY'] = '", (secret(), "GENERIC_SECRET"), "'"]))
    T.append(("config", ["webhook_signing_secret: \"", (secret(), "GENERIC_SECRET"), "\""]))
    T.append(("code", ["const client = new Api({ clientSecret: \"", (secret(), "GENERIC_SECRET"), "\" });"]))
    T.append(("shell", ["curl -H 'X-Auth-Token: ", (secret(), "GENERIC_SECRET"), "' https://api.internal/v1/jobs"]))
    # mixed
    T.append(("ticket", [f"Name: {N()} Okoye\nEmail: ", (email(), "EMAIL_ADDRESS"), "\nPhone: ", (phone(), "PHONE_NUMBER"),
                         "\nCard: ", (card(), "CREDIT_CARD"), "\nIssue: double charge"]))
    T.append(("email", ["Von: ", (email(), "EMAIL_ADDRESS"), "\nAn: ", (email(), "EMAIL_ADDRESS"),
                        "\nBetreff: Rückruf\n\nBitte rufen Sie mich unter ", (phone(), "PHONE_NUMBER"), " an."]))
    T.append(("log", ["user ", (email(), "EMAIL_ADDRESS"), " logged in from ", (ipv4(), "IP_ADDRESS"), " via SSO"]))
    T.append(("chat", ["ok here's everything: ", (email(), "EMAIL_ADDRESS"), " / ", (pw(), "PASSWORD"),
                       " — don't share"]))
    T.append(("email", [f"Bonjour {N()}, merci d'écrire à ", (email(), "EMAIL_ADDRESS"), " ou d'appeler le ",
                        (phone(), "PHONE_NUMBER"), "."]))
    T.append(("ticket", ["Refund to ", (iban("GB", 18, grouped=True), "IBAN_CODE"), ", contact ", (email(), "EMAIL_ADDRESS")]))
    return T


def negatives() -> list[tuple[str, list]]:
    import uuid
    N_ = []
    u = lambda: str(uuid.UUID(int=R.getrandbits(128), version=4))  # noqa: E731
    N_ += [("log", [f"request_id={u()} status=200 duration_ms={R.randint(3, 900)}"]) for _ in range(3)]
    N_ += [("shell", [f"commit {hexs(40)}\nAuthor: build-bot\nDate: Mon Jun 2 10:1{R.randint(0, 9)}:00 2025"]) for _ in range(2)]
    N_.append(("chat", [f"cherry-pick {hexs(7)} and {hexs(7)} onto release/2.{R.randint(1, 9)}"]))
    N_ += [("chat", [f"upgraded numpy from 1.{R.randint(20, 26)}.{R.randint(0, 9)} to 2.{R.randint(0, 2)}.{R.randint(0, 9)}, kernel 6.8.0-{R.randint(10, 60)}-generic"]) for _ in range(2)]
    N_.append(("log", ["Chrome/126.0.6478.127 Safari/537.36 build 10.0.19045.4529"]))
    N_ += [("email", [f"Your order #{R.randint(10**9, 10**10)} has shipped. Tracking: 1Z{rs(16, UP)}"]) for _ in range(2)]
    N_.append(("email", [f"Invoice INV-2025-{R.randint(10000, 99999)} dated 2025-03-14, amount 1.249,00 EUR, due 14.04.2025."]))
    N_.append(("ticket", [f"Parcel {R.randint(10**11, 10**12)} (DHL) stuck in hub since 03/05/2025."]))
    N_ += [("log", [f"sha256:{hexs(64)}  image/app:latest"]) for _ in range(2)]
    N_.append(("log", [f"md5 {hexs(32)}  backup.tar.gz"]))
    N_.append(("docs", ["Send a test mail to user@example.com; the API key looks like YOUR_API_KEY_HERE."]))
    N_.append(("docs", ["Set password: <your-password> and token: ${GITHUB_TOKEN} in the CI settings."]))
    N_.append(("config", ["DATABASE_URL=postgres://localhost:5432/dev\nREDIS_URL=redis://cache:6379/0"]))
    N_.append(("chat", [f"meeting moved to {R.randint(1, 28)}.{R.randint(1, 12)}.2025 at 14:30, room 3.{R.randint(10, 40)}"]))
    N_.append(("log", [f"processed {R.randint(10**6, 10**8)} rows in {R.randint(1, 99)}.{R.randint(10, 99)}s, peak rss 1 843 212 KB"]))
    N_.append(("code", [f"const COLORS = ['#{hexs(6)}', '#{hexs(6)}']; // theme v3.2.1"]))
    N_.append(("ticket", [f"Error code 0x{hexs(8).upper()} at offset 0x{hexs(6)} in module ntdll.dll"]))
    N_.append(("code", ["password = os.environ['DB_PASSWORD']  # never hard-code"]))
    N_.append(("chat", ["reset link sent, ask them to check their spam folder, the password field was empty"]))
    N_.append(("log", [f"GET /products/{R.randint(10**5, 10**6)}?page=2&sort=price HTTP/1.1 200 {R.randint(100, 9999)}"]))
    N_.append(("email", [f"ISBN 978-3-16-148410-0, catalogue no. {R.randint(10**7, 10**8)}, edition 2024"]))
    N_.append(("code", [f"model = AutoModel.from_pretrained('org/model', revision='{hexs(40)}')"]))
    N_.append(("ticket", [f"Serial number SN-{rs(12, UP)} firmware 4.12.0 under warranty until 2027-01-31"]))
    N_.append(("log", [f"trace_id={hexs(32)} span_id={hexs(16)} service=checkout"]))
    N_.append(("chat", ["see RFC 5737 section 3 for the documentation ranges, page 4 of 7"]))
    return N_


def main() -> None:
    rows = []
    for prefix, items in (("pos", positives()), ("neg", negatives())):
        for i, (kind, parts) in enumerate(items):
            text, spans = build(parts)
            rows.append({"id": f"holdout-{prefix}-{i:03d}", "kind": kind, "text": text, "spans": spans})
    for r in rows:  # validate offsets
        for s, e, _t in r["spans"]:
            assert 0 <= s < e <= len(r["text"])
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    main()
