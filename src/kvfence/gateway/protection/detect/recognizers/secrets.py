"""Rules for credentials: provider keys and tokens, private keys, passwords in URLs and assignments.

Written for kvfence after studying the public detect-secrets plugins and the gitleaks rule set for
which token formats exist; patterns and tests are our own. Provider tokens with a fixed, documented
prefix are matched on the prefix; values without one (an AWS secret key, a password) only inside an
assignment whose name says what they are, and generic values only when their entropy is high.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.findings import Category
from kvfence.gateway.protection.detect.recognizers import validators as v
from kvfence.gateway.protection.detect.scanner import Rule

__all__ = ["SECRET_ENTITIES", "SECRET_RULES", "is_placeholder_value"]

_SECRET = Category.SECRET

_PLACEHOLDER = re.compile(
    r"""^(?:
        [<{\[(].*[>}\])]                 # <your-key>, {{ token }}, [REDACTED]
      | \$\{?[A-Za-z_][\w.]*\}?          # $TOKEN, ${SECRET}
      | %\(?[\w]+\)?s?%?                 # %(password)s
      | (?:x+|\*+|\.+|-+|_+|0+|\#+)       # xxxx, ****, ...
      | (?:process\.env|os\.environ|os\.getenv|env|getenv|config|settings|secrets|vault)\b.*
      | (?:none|null|nil|true|false|undefined|empty|string|str|bytes|int|required|optional)
      | (?:your|my|the|some|example|sample|dummy|fake|test|insert|enter|replace)[_-][\w.-]*  # your-api-key
      | (?:placeholder|redacted|changeme|change_me|todo|tbd|xxx)[\w.-]*
      | (?:secret|password|passwd|pass|pwd|pw|token|api[_-]?key|test|example|sample|dummy|fake)  # bare word
    )$""",
    re.IGNORECASE | re.VERBOSE,
)


def is_placeholder_value(value: str) -> bool:
    """True for values that only stand for a secret: templates, env lookups, masks, keywords."""
    stripped = value.strip().strip("'\"`")
    return not stripped or bool(_PLACEHOLDER.match(stripped))


def _real_password(value: str) -> bool:
    return len(value) >= 6 and not is_placeholder_value(value) and len(set(value)) >= 4


_CODE_REFERENCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$|^[A-Za-z0-9]*_[A-Za-z0-9_]*$")


def _real_bare_password(value: str) -> bool:
    # Unquoted, in prose ("the password is incorrect"), a plain word is far likelier than a
    # password; real ones nearly always carry a digit or a symbol. In code, the right-hand side is
    # often a variable or attribute (ssl_password, self.password, click.prompt): not a secret.
    if not _real_password(value) or all(ch.isalpha() for ch in value):
        return False
    return not _CODE_REFERENCE.match(value)


def _high_entropy(value: str) -> bool:
    if is_placeholder_value(value) or len(value) < 16:
        return False
    has_digit = any(ch.isdigit() for ch in value)
    has_alpha = any(ch.isalpha() for ch in value)
    if not (has_digit and has_alpha):
        return False
    # Hex digests of 32/40/64 characters are usually checksums and ids, not credentials, unless an
    # assignment names them a secret; the assignment rule below already required such a name.
    return v.shannon_entropy(value) >= (3.0 if re.fullmatch(r"[0-9a-fA-F]+", value) else 3.5)


def _aws_secret_ok(value: str) -> bool:
    return len(value) == 40 and v.shannon_entropy(value) >= 4.0 and any(c.isdigit() for c in value)


# Every repetition below is bounded: a prompt of one keyword repeated must not make a regex quadratic.
# Names under which a credential is assigned in code, config, env files, JSON, YAML and logs. These
# rules run on the lowercased text (``on_lowered``), so the literals are lowercase.
_SECRET_NAME = (
    r"(?:secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|auth[_-]?key|credential"
    r"|signing[_-]?key|encryption[_-]?key|bearer|session[_-]?key)s?(?:[_.-][a-z0-9_]{1,40})?"
)
# "pass" alone is an English word ("the forward pass: ..."); only as a suffix (DB_PASS, smtp_pass).
_PASSWORD_NAME = (r"(?:(?<![a-z])(?:password|passwd|passphrase|pwd|passwort|kennwort|wachtwoord|contrase(?:ñ|n)a|senha"
                  r"|mot de passe)|(?<=[a-z0-9][_.-])pass\b)(?:_[a-z0-9]{1,20}){0,3}")
_PASSWORD_HINTS = ("pass", "pwd", "kennwort", "wachtwoord", "contrase", "senha")
_ASSIGN = r"""["']?\s*(?:=|:=|:|=>|\s+is\s+)\s*(?:[a-z]*["'`])?"""
# After the assignment: a quoted value (spaces allowed, up to the closing quote) or a bare one.
# `["']?\]?`: a subscripted name, as in app.config['SECRET_KEY'] = '...'.
_ASSIGN_TO = r"""["']?\]?\s*(?:=|:=|:|=>|\s+is\s+)\s*(?:[rbuf]{1,2}(?=["'`]))?"""
_VALUE = (r"""(?:"(?P<dq>[^"\n]{%(n)d,200})"|'(?P<sq>[^'\n]{%(n)d,200})'|`(?P<bq>[^`\n]{%(n)d,200})`"""
          r"""|(?P<value>[^\s"'`,;<>(){}\[\]]{%(n)d,200}))""")
_VALUE_GROUPS = ("dq", "sq", "bq", "value")
_QUOTED = r"""(?:"(?P<dq>[^"\n]{%(n)d,200})"|'(?P<sq>[^'\n]{%(n)d,200})'|`(?P<bq>[^`\n]{%(n)d,200})`)"""
_BARE = r"""(?P<value>[^\s"'`,;<>(){}\[\]]{%(n)d,200})"""


_TOKEN_PREFIX = re.compile(r"^(?:[A-Za-z]{2,8}[_-]){1,3}")


def _varied(value: str) -> bool:
    """Not filler: a token body of xxxx or 0000 is a placeholder in documentation."""
    body = _TOKEN_PREFIX.sub("", value)
    return len(set(body.lower())) >= 5


SECRET_RULES: list[Rule] = [
    Rule("private_key_block", "PRIVATE_KEY", _SECRET,
         re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|$)"),
         score=1.0, hints=("private key",)),
    Rule("anthropic_key", "ANTHROPIC_API_KEY", _SECRET,
         re.compile(r"(?<![\w-])sk-ant-(?:api|admin|sid|oat)\d{2}-[A-Za-z0-9_-]{32,}(?![\w-])"),
         score=1.0, hints=("sk-ant-",), validate=_varied),
    Rule("openai_key", "OPENAI_API_KEY", _SECRET,
         re.compile(r"(?<![\w-])sk-(?!ant-)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}(?![\w-])"),
         score=1.0, hints=("sk-",), validate=lambda s: v.shannon_entropy(s) >= 3.5 and any(c.isdigit() for c in s)),
    Rule("aws_access_key_id", "AWS_ACCESS_KEY", _SECRET,
         re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z2-7]{16}(?![A-Za-z0-9])"),
         score=1.0),
    Rule("aws_secret_key", "AWS_SECRET_KEY", _SECRET,
         re.compile(r"aws[\w.-]{0,24}?(?:secret|sk)[\w.-]{0,24}?" + _ASSIGN + r"(?P<value>[a-z0-9/+]{40})(?![a-z0-9/+=])"),
         score=1.0, group="value", hints=("aws",), validate=_aws_secret_ok, on_lowered=True),
    Rule("github_token", "GITHUB_TOKEN", _SECRET,
         re.compile(r"(?<![\w])(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59})(?![\w])"),
         score=1.0, hints=("gh", "github_pat_"), validate=_varied),
    Rule("gitlab_token", "GITLAB_TOKEN", _SECRET,
         re.compile(r"(?<![\w-])gl(?:pat|ptt|dt|rt|cbt|soat|ffct|imt|agent)-[A-Za-z0-9_-]{20,}(?![\w-])"),
         score=1.0, hints=("gl",), validate=_varied),
    Rule("slack_token", "SLACK_TOKEN", _SECRET,
         re.compile(r"(?<![\w-])xox[abposre]-(?:\d+-)+[A-Za-z0-9-]{8,}(?![\w-])|(?<![\w-])xapp-\d-[A-Z0-9]+-\d+-[a-f0-9]{32,}"),
         score=1.0, hints=("xox", "xapp-"), validate=_varied),
    Rule("slack_webhook", "SLACK_TOKEN", _SECRET,
         re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]{20,}"),
         score=1.0, hints=("hooks.slack.com",)),
    Rule("stripe_key", "STRIPE_KEY", _SECRET,
         # secret and restricted keys, and webhook signing secrets (whsec_)
         re.compile(r"(?<![\w])(?:(?:sk|rk)_(?:live|test)_|whsec_)[A-Za-z0-9]{20,247}(?![\w])"),
         score=1.0, hints=("_live_", "_test_", "whsec_"), validate=_varied),
    Rule("azure_key", "AZURE_KEY", _SECRET,
         # storage / service bus / event hub connection strings: "...;AccountKey=<base64>;..."
         re.compile(r"(?<![a-z])(?:accountkey|sharedaccesskey)\s*=\s*(?P<value>[a-z0-9+/]{20,}={0,2})"),
         score=1.0, group="value", hints=("accountkey", "sharedaccesskey"), validate=_varied, on_lowered=True),
    Rule("telegram_bot_token", "TELEGRAM_BOT_TOKEN", _SECRET,
         re.compile(r"(?<![\w:])\d{8,10}:AA[A-Za-z0-9_-]{32,33}(?![\w-])"),
         score=1.0, hints=(":aa",), validate=lambda s: _varied(s.partition(":")[2][2:])),
    Rule("google_api_key", "GOOGLE_API_KEY", _SECRET,
         re.compile(r"(?<![\w-])AIza[0-9A-Za-z_-]{35}(?![\w-])"),
         score=1.0, hints=("aiza",), validate=_varied),
    Rule("huggingface_token", "HUGGINGFACE_TOKEN", _SECRET,
         re.compile(r"(?<![\w])hf_[A-Za-z0-9]{34}(?![\w])"),
         score=1.0, hints=("hf_",), validate=lambda s: v.shannon_entropy(s) >= 3.5),
    Rule("sendgrid_key", "SENDGRID_KEY", _SECRET,
         re.compile(r"(?<![\w])SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![\w-])"),
         score=1.0, hints=("sg.",)),
    Rule("npm_token", "NPM_TOKEN", _SECRET,
         re.compile(r"(?<![\w])npm_[A-Za-z0-9]{36}(?![\w])"),
         score=1.0, hints=("npm_",), validate=_varied),
    Rule("jwt", "JWT", _SECRET,
         re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?![\w-])"),
         score=1.0, hints=("eyj",), validate=v.jwt_ok),
    Rule("url_password", "CONNECTION_PASSWORD", _SECRET,
         re.compile(r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/'\"]{0,64}:(?P<value>[^\s@/'\"]{1,128})@[\w.-]+"),
         score=1.0, group="value", hints=("://",), validate=lambda s: not is_placeholder_value(s) and len(s) >= 3),
    Rule("dsn_password", "CONNECTION_PASSWORD", _SECRET,
         # ADO/ODBC/JDBC key=value strings: "...;Password=xyz;" - a ';' before or after marks the style.
         re.compile(r";\s*(?:password|pwd)\s*=\s*(?P<value>[^;\"'\n]{1,128}?)\s*(?=;|\"|'|\n|$)"
),
         score=1.0, group="value", hints=("password", "pwd"), validate=lambda s: not is_placeholder_value(s),
         on_lowered=True),
    Rule("dsn_password_first", "CONNECTION_PASSWORD", _SECRET,
         re.compile(r"(?<![a-z_])(?:password|pwd)\s*=\s*(?P<value>[^;\"'\n]{1,128}?)\s*;"),
         score=1.0, group="value", hints=("password", "pwd"), validate=lambda s: not is_placeholder_value(s),
         on_lowered=True),
    Rule("cli_password", "PASSWORD", _SECRET,
         # mysql / mysqldump / mysqladmin take the password glued to -p
         re.compile(r"\bmysql(?:dump|admin|sh)?\b[^\n]{0,200}?\s-p(?P<value>[^\s'\"]{4,128})"),
         score=0.9, group="value", hints=("mysql",), validate=lambda s: not is_placeholder_value(s)),
    Rule("sshpass_password", "PASSWORD", _SECRET,
         re.compile(r"\bsshpass\s+-p\s*(?:'(?P<sq>[^'\n]{4,128})'|\"(?P<dq>[^\"\n]{4,128})\"|(?P<value>[^\s'\"]{4,128}))"),
         score=0.9, group=("sq", "dq", "value"), hints=("sshpass",), validate=lambda s: not is_placeholder_value(s)),
    Rule("password_assignment", "PASSWORD", _SECRET,
         re.compile(_PASSWORD_NAME + _ASSIGN_TO + (_QUOTED % {"n": 4})),
         score=0.9, group=_VALUE_GROUPS, hints=_PASSWORD_HINTS, validate=_real_password, on_lowered=True),
    Rule("password_assignment_bare", "PASSWORD", _SECRET,
         re.compile(_PASSWORD_NAME + _ASSIGN_TO + (_BARE % {"n": 6})),
         score=0.85, group="value", hints=_PASSWORD_HINTS, validate=_real_bare_password, on_lowered=True),
    Rule("secret_assignment", "GENERIC_SECRET", _SECRET,
         re.compile(_SECRET_NAME + _ASSIGN_TO + (_VALUE % {"n": 16})),
         score=0.8, group=_VALUE_GROUPS, hints=("secret", "token", "key", "credential", "bearer"),
         validate=_high_entropy, on_lowered=True),
    Rule("bearer_header", "GENERIC_SECRET", _SECRET,
         re.compile(r"authorization\s*[:=]\s*[\"']?(?:bearer|token|basic)\s+(?P<value>[a-z0-9._~+/=-]{16,})"),
         score=0.9, group="value", hints=("authorization",), validate=_high_entropy, on_lowered=True),
]

SECRET_ENTITIES: frozenset[str] = frozenset(rule.entity for rule in SECRET_RULES)
