"""Every secret rule: a true positive it must catch and a look-alike it must leave alone."""

from __future__ import annotations

import pytest

from kvfence.gateway.protection.detect.findings import Category
from kvfence.gateway.protection.detect.recognizers.secrets import SECRET_RULES, is_placeholder_value
from kvfence.gateway.protection.detect.scanner import RuleSet

RULES = {rule.name: rule for rule in SECRET_RULES}

# rule name -> (text with the secret, the secret itself, look-alike text that is no secret)
CASES: dict[str, tuple[str, str, str]] = {
    "private_key_block": (
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM\n-----END RSA PRIVATE KEY-----\n",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM\n-----END RSA PRIVATE KEY-----",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----"),
    "anthropic_key": (
        "ANTHROPIC_API_KEY=sk-ant-api03-Zq8Xr2LmT4vNp7Kd9Wb3Yc6Hf1Js5Ga0Ue8Ri2Ox4Pw7Mn-QtAA",
        "sk-ant-api03-Zq8Xr2LmT4vNp7Kd9Wb3Yc6Hf1Js5Ga0Ue8Ri2Ox4Pw7Mn-QtAA",
        "the prefix is sk-ant-api03-... followed by your key"),
    "openai_key": (
        'client = OpenAI(api_key="sk-proj-4fT9xQ2mZ7LbR1cV8nW3kJ6hY0pD5sGa")',
        "sk-proj-4fT9xQ2mZ7LbR1cV8nW3kJ6hY0pD5sGa",
        "the css class sk-button-primary-large-rounded-corners is styled"),
    "aws_access_key_id": (
        "aws_access_key_id = AKIA4QZ7XWJ2LTRN5KDM", "AKIA4QZ7XWJ2LTRN5KDM",
        "arn:aws:iam::123456789012:role/AKIA-importer is a role, not a key"),
    "aws_secret_key": (
        "aws_secret_access_key = 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",
        "Wk3pR8vT2nQ9xZ5mL7bC4yH1dF6gJ0sA2eU8iO3t",
        "aws_secret_access_key = ${AWS_SECRET_ACCESS_KEY}"),
    "github_token": (
        "git clone https://ghp_R2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u@github.com/acme/app",
        "ghp_R2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u",
        "the branch ghp_fix_login was merged"),
    "gitlab_token": (
        "CI_TOKEN: glpat-Hx7Q2kLm9RvT4bNw1ZcY", "glpat-Hx7Q2kLm9RvT4bNw1ZcY",
        "see glpat-token docs for scopes"),
    "slack_token": (
        "SLACK_BOT_TOKEN=xoxb-2419736580-5867312094-Qm7Rt2Xv9Lk4Np8Wb1Zc6Hd3",
        "xoxb-2419736580-5867312094-Qm7Rt2Xv9Lk4Np8Wb1Zc6Hd3",
        "install the xoxb- bot scope first"),
    "slack_webhook": (
        "POST https://hooks.slack.com/services/T04ABCD12/B05EFGH34/Xk8Lm2Qp9Rv4Tw7Zb1Nc5Hy",
        "https://hooks.slack.com/services/T04ABCD12/B05EFGH34/Xk8Lm2Qp9Rv4Tw7Zb1Nc5Hy",
        "see https://hooks.slack.com/ for setup"),
    "stripe_key": (
        "STRIPE_SECRET_KEY=sk_live_51Hq8Zr2LmXv4Tb9Nc1Wy6Kd3Pf", "sk_live_51Hq8Zr2LmXv4Tb9Nc1Wy6Kd3Pf",
        "publishable key pk_live_51Hq8Zr2LmXv4Tb9Nc1Wy6Kd3Pf is public"),
    "azure_key": (
        "DefaultEndpointsProtocol=https;AccountName=acmelogs;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFs"
        "uFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net",
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
        "DefaultEndpointsProtocol=https;AccountName=acmelogs;AccountKey=<storage-account-key>;"),
    "telegram_bot_token": (
        "bot = Bot('5432109876:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw7')", "5432109876:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw7",
        "at 12:30:45 the job 1234567890:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA finished"),
    "google_api_key": (
        "maps?key=AIzaSyD4x9Q2mZ7LbR1cV8nW3kJ6hY0pD5sGaQe", "AIzaSyD4x9Q2mZ7LbR1cV8nW3kJ6hY0pD5sGaQe",
        "AIza is the prefix of Google keys"),
    "huggingface_token": (
        "HF_TOKEN=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", "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",
        "the hf_transfer package speeds downloads"),
    "sendgrid_key": (
        "SENDGRID_API_KEY=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",
        "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",
        "SG.firewall.rule allows port 443"),
    "npm_token": (
        "//registry.npmjs.org/:_authToken=npm_Qm7Rt2Xv9Lk4Np8Wb1Zc6Hd3Fj5Gs0Ae2Ui4",
        "npm_Qm7Rt2Xv9Lk4Np8Wb1Zc6Hd3Fj5Gs0Ae2Ui4", "run npm_config_cache cleanup"),
    "jwt": (
        "Cookie: session=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NSIsIm5hbWUiOiJKYW5lIn0."
        "Qm7Rt2Xv9Lk4Np8Wb1Zc6Hd3Fj5Gs0Ae",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NSIsIm5hbWUiOiJKYW5lIn0.Qm7Rt2Xv9Lk4Np8Wb1Zc6Hd3Fj5Gs0Ae",
        "eyJzb21lIjoianNvbiJ9.eyJub3QiOiJhIGp3dCJ9.abcdefghijk is base64 json, no header"),
    "url_password": (
        "DATABASE_URL=postgres://app_user:Tr0ub4dor&3x@db.internal:5432/orders", "Tr0ub4dor&3x",
        "DATABASE_URL=postgres://app_user:${DB_PASSWORD}@db.internal:5432/orders"),
    "dsn_password": (
        "Server=sql01;Database=crm;User Id=svc_crm;Password=Wint3r-Is-C0ming;", "Wint3r-Is-C0ming",
        "Server=sql01;Database=crm;User Id=svc_crm;Password=<your password>;"),
    "dsn_password_first": (
        "Password=Wint3r-Is-C0ming;Server=sql01;Database=crm", "Wint3r-Is-C0ming",
        "Password=;Server=sql01 (empty in the template)"),
    "cli_password": (
        "mysqldump -u backup -pN0tSoS3cret! shop > shop.sql", "N0tSoS3cret!",
        "mysql -u root -p shop  # prompts for the password"),
    "password_assignment_bare": (
        "DB_PASS=Tr0ub4dor&3x\nDB_HOST=db1", "Tr0ub4dor&3x",
        "Record the forward pass: advance the step. The password is incorrect, try again.\n"
        "password = click.prompt('Password')\nself.ssl_password = ssl_keyfile_password\n"
        "url = 'https://user:pass@host:8080'"),
    "sshpass_password": (
        "sshpass -p 'Gr33n-Tea!42' ssh deploy@app1 uptime", "Gr33n-Tea!42",
        "sshpass -p \"$SSHPASS\" ssh deploy@app1  # from the environment"),
    "password_assignment": (
        "smtp:\n  user: alerts\n  password: 'purple monkey dishwasher'\n", "purple monkey dishwasher",
        "password: ********\npassword_policy: min 12 chars"),
    "secret_assignment": (
        'WEBHOOK_SECRET = "a8Fj3kLq9Zx2Wm7Rt4Vb6Nc1Hd5Gs0Pe"', "a8Fj3kLq9Zx2Wm7Rt4Vb6Nc1Hd5Gs0Pe",
        'max_tokens = 4096\ntoken_type = "bearer"\nsecret_name = "prod-db-creds"\n'
        '"tokenizers": "tokenizers>=0.23.1,<0.24.0"'),
    "bearer_header": (
        "curl -H 'Authorization: Bearer x7Kq2LmZ9vT4bNw1RcY8pH3sJ6gF0aE5'", "x7Kq2LmZ9vT4bNw1RcY8pH3sJ6gF0aE5",
        "Authorization: Bearer <token>"),
}


def test_every_rule_has_cases() -> None:
    assert set(CASES) == set(RULES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_true_positive(name: str) -> None:
    text, secret, _ = CASES[name]
    findings = RuleSet(SECRET_RULES).scan(text)
    spans = {text[f.start:f.end] for f in findings if f.category is Category.SECRET}
    assert secret in spans, f"{name} missed {secret!r}; found {spans}"
    own = RuleSet([RULES[name]]).scan(text)
    assert any(text[f.start:f.end] == secret for f in own), f"rule {name} itself did not fire"


@pytest.mark.parametrize("name", sorted(CASES))
def test_false_positive(name: str) -> None:
    _, _, lookalike = CASES[name]
    findings = RuleSet(SECRET_RULES).scan(lookalike)
    assert not findings, f"{name}: look-alike flagged: {[lookalike[f.start:f.end] for f in findings]}"


@pytest.mark.parametrize("value", ["<your-key>", "${TOKEN}", "xxxxxxxx", "********", "changeme", "None",
                                   "os.environ['X']", "YOUR_API_KEY", "your-secret-here", "password"])
def test_placeholders_are_not_secrets(value: str) -> None:
    assert is_placeholder_value(value)


@pytest.mark.parametrize("value", ["Tr0ub4dor&3x", "a8Fj3kLq9Zx2Wm7Rt4Vb6Nc1Hd5Gs0Pe", "hunter22", "secret123",
                                   "MyS3cretPass", "password1!", "AKIAIOSFODNN7EXAMPLE"])
def test_real_values_are_not_placeholders(value: str) -> None:
    assert not is_placeholder_value(value)


@pytest.mark.parametrize(("text", "secret"), [
    ("app.config['SECRET_KEY'] = 'q8Lm2Xv7Rt4Kd9Wb3Yc6Hf1Js5Ga0Ue8RiPw'", "q8Lm2Xv7Rt4Kd9Wb3Yc6Hf1Js5Ga0Ue8RiPw"),
    ("Kennwort: Sommer2024!x", "Sommer2024!x"),
    ("contraseña = 'Rojo#9182kq'", "Rojo#9182kq"),
])
def test_subscripted_and_non_english_names(text: str, secret: str) -> None:
    found = {text[f.start:f.end] for f in RuleSet(SECRET_RULES).scan(text) if f.category is Category.SECRET}
    assert secret in found, f"missed {secret!r}; found {found}"


def test_quoted_values_keep_their_spaces() -> None:
    text = "password = 'correct horse battery staple'\napi_key: \"Qm7Rt2 Xv9Lk4 Np8Wb1 Zc6Hd3\""
    spans = {text[f.start:f.end] for f in RuleSet(SECRET_RULES).scan(text)}
    assert "correct horse battery staple" in spans


@pytest.mark.parametrize("filler", ["glpat-xxxxxxxxxxxxxxxxxxxx", "ghp_000000000000000000000000000000000000",
                                    "sk_live_xxxxxxxxxxxxxxxxxxxxxxxx"])
def test_filler_tokens_from_documentation_are_not_secrets(filler: str) -> None:
    assert RuleSet(SECRET_RULES).scan(f"token: {filler}") == []


@pytest.mark.parametrize(("text", "secret"), [
    ("REDIS_URL=redis://:s3cretRedisPw@10.1.2.3:6379/0", "s3cretRedisPw"),  # a password without a user name
    ("STRIPE_WEBHOOK_SECRET=whsec_9fT2xQ7mZ4LbR1cV8nW3kJ6hY0pD5sGa", "whsec_9fT2xQ7mZ4LbR1cV8nW3kJ6hY0pD5sGa"),
])
def test_more_secret_shapes(text: str, secret: str) -> None:
    assert secret in {text[f.start:f.end] for f in RuleSet(SECRET_RULES).scan(text)}
