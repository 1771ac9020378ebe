"""Read a policy YAML file, validate it once, and report each problem with its line and field.

Problems are collected, not stopped at: one :class:`~kvfence.errors.ConfigError` lists them all as
``FILE:LINE: field.path: what is wrong``. Three layers are checked: YAML syntax (and duplicate keys,
which PyYAML would silently merge), the typed schema (pydantic), and cross-references.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kvfence.errors import ConfigError
from kvfence.gateway.policy.schema import Policy

__all__ = ["PolicyProblem", "load_policy", "parse_policy"]

Loc = tuple[str | int, ...]


class PolicyProblem:
    """One problem: where (file, line, field path) and what."""

    def __init__(self, loc: Loc, message: str, line: int | None = None, source: str | None = None) -> None:
        self.loc = loc
        self.message = message
        self.line = line
        self.source = source

    @property
    def field(self) -> str:
        out = ""
        for part in self.loc:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        return out or "(top level)"

    def render(self, source: str) -> str:
        source = self.source or source
        where = f"{source}:{self.line}" if self.line is not None else source
        return f"{where}: {self.field}: {self.message}"


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Load and validate the policy at ``path``; raise ConfigError naming every problem."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read policy file {file}: {exc.strerror or exc}") from exc
    return parse_policy(text, source=str(file), base_dir=file.parent)


def _compose(text: str, source: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}{line}: invalid YAML: {problem}") from None


class _Locator:
    """Where a field of the merged policy was written: the policy file or its tenants file."""

    def __init__(self, source: str, root: yaml.Node) -> None:
        self.source, self.root = source, root
        self.tenants_source: str | None = None
        self.tenants_root: yaml.Node | None = None
        self.inline_tenants = 0

    def problem(self, loc: Loc, message: str) -> PolicyProblem:
        if (self.tenants_root is not None and len(loc) >= 2 and loc[0] == "tenants"
                and isinstance(loc[1], int) and loc[1] >= self.inline_tenants):
            inner = (loc[1] - self.inline_tenants, *loc[2:])
            return PolicyProblem(loc, message, _line_of(self.tenants_root, inner), self.tenants_source)
        return PolicyProblem(loc, message, _line_of(self.root, loc))


def _load_tenants_file(data: dict[str, Any], locator: _Locator, base_dir: Path | None) -> list[PolicyProblem]:
    """Append the tenants of ``tenants_file`` (a list, or a mapping with ``tenants:``) to ``data``."""
    name = data.get("tenants_file")
    if name is None:
        return []
    if not isinstance(name, str) or not name:
        return [locator.problem(("tenants_file",), "must be a path to a YAML file of tenants")]
    path = Path(name)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return [locator.problem(("tenants_file",), f"cannot read {path}: {exc.strerror or exc}")]
    node = _compose(text, str(path))
    loaded = yaml.safe_load(text)
    if isinstance(node, yaml.MappingNode):
        node = next((v for k, v in node.value if getattr(k, "value", None) == "tenants"), None)
        loaded = loaded.get("tenants") if isinstance(loaded, dict) else None
    if not isinstance(loaded, list) or node is None:
        return [PolicyProblem(("tenants_file",), "expected a list of tenants (or a mapping with `tenants:`)",
                              1, str(path))]
    inline = data.get("tenants") or []
    if not isinstance(inline, list):
        return []  # the schema check reports it
    locator.tenants_source, locator.tenants_root, locator.inline_tenants = str(path), node, len(inline)
    data["tenants"] = [*inline, *loaded]
    return [PolicyProblem(p.loc, p.message, p.line, str(path)) for p in _duplicate_keys(node, ())]


def parse_policy(text: str, *, source: str = "<policy>", base_dir: Path | None = None) -> Policy:
    """Validate policy text; relative paths in it are resolved against ``base_dir``."""
    root = _compose(text, source)
    if root is None:
        raise ConfigError(f"{source}: the policy file is empty")
    problems = _duplicate_keys(root, ())
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}:1: the policy must be a mapping with data_classes, backends, tenants")
    locator = _Locator(source, root)
    problems += _load_tenants_file(data, locator, base_dir)
    policy: Policy | None = None
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            problems.append(locator.problem(tuple(error["loc"]), _pydantic_message(error)))
    if policy is not None:
        for loc, message in _cross_checks(policy, base_dir):
            problems.append(locator.problem(loc, message))
    if problems or policy is None:
        rendered = "\n  ".join(p.render(source) for p in problems)
        raise ConfigError(f"invalid gateway policy ({len(problems)} problem(s)):\n  {rendered}")
    return policy


def _pydantic_message(error: Any) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return "unknown field (check the spelling)"
    if kind == "missing":
        return "required field is missing"
    message = str(error.get("msg", "invalid value"))
    if "input" in error and kind not in ("model_type", "dict_type", "list_type"):
        shown = repr(error["input"])
        if len(shown) <= 60:
            message += f" (got {shown})"
    return message


def _line_of(root: yaml.Node, loc: Loc) -> int | None:
    """1-based line of the deepest YAML node the location reaches."""
    node = root
    for depth, part in enumerate(loc):
        child = None
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key, value in node.value:
                if getattr(key, "value", None) == part:
                    # the field itself is named on its key's line
                    child = key if depth == len(loc) - 1 else value
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            child = node.value[part]
        if child is None:
            break
        node = child
    return int(node.start_mark.line) + 1


def _duplicate_keys(node: yaml.Node, loc: Loc) -> list[PolicyProblem]:
    problems: list[PolicyProblem] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = str(getattr(key, "value", ""))
            if name in seen:
                problems.append(PolicyProblem((*loc, name), "duplicate key (YAML would keep only the last one)",
                                              int(key.start_mark.line) + 1))
            seen.add(name)
            problems += _duplicate_keys(value, (*loc, name))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            problems += _duplicate_keys(item, (*loc, i))
    return problems


_VERSION = re.compile(r"^\d+(\.\d+)*([.+-].*)?$")


def _duplicates(names: Sequence[str]) -> list[int]:
    seen: set[str] = set()
    dups = []
    for i, name in enumerate(names):
        if name in seen:
            dups.append(i)
        seen.add(name)
    return dups


def _cross_checks(policy: Policy, base_dir: Path | None) -> list[tuple[Loc, str]]:
    """References between sections; each problem says what to change."""
    out: list[tuple[Loc, str]] = []
    classes = policy.class_names()
    for i in _duplicates(classes):
        out.append((("data_classes", i, "name"), f"data class {classes[i]!r} is defined twice"))
    backend_names = [b.name for b in policy.backends]
    for i in _duplicates(backend_names):
        out.append((("backends", i, "name"), f"backend {backend_names[i]!r} is defined twice"))
    tenant_names = [t.name for t in policy.tenants]
    for i in _duplicates(tenant_names):
        out.append((("tenants", i, "name"), f"tenant {tenant_names[i]!r} is defined twice"))
    hashes = [t.key_sha256 for t in policy.tenants]
    for i in _duplicates(hashes):
        out.append((("tenants", i, "key_sha256"), "two tenants share this API key hash; give each its own key"))

    audit = policy.gateway.audit_log
    if not (audit.startswith("sqlite:///") or audit.startswith(("postgresql://", "postgres://"))):
        out.append((("gateway", "audit_log"), "use sqlite:///PATH or postgresql://USER@HOST:PORT/DB"))
    for i, spec in enumerate(policy.gateway.hooks):
        if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", spec):
            out.append((("gateway", "hooks", i), f"{spec!r} is not `package.module:factory`"))

    for i, advisory in enumerate(policy.advisories):
        if not _VERSION.match(advisory.fixed_in):
            out.append((("advisories", i, "fixed_in"), f"{advisory.fixed_in!r} is not a version like 0.9.0"))

    for i, tenant in enumerate(policy.tenants):
        if tenant.default_class not in classes:
            out.append((("tenants", i, "default_class"),
                        f"unknown data class {tenant.default_class!r}; defined: {', '.join(classes)}"))

    for i, backend in enumerate(policy.backends):
        where: Loc = ("backends", i)
        if backend.url.path in (None, "", "/"):
            # Requests go to url + /chat/completions; every OpenAI-compatible server we know of (vLLM,
            # SGLang, kvfence, OpenAI itself) serves them under /v1, so a bare host is a 404 on each call.
            out.append(((*where, "url"), f"{backend.base_url!r} has no path, so requests would go to "
                                         f"{backend.base_url}/chat/completions: use {backend.base_url}/v1 "
                                         "(or the API's own base path)"))
        if backend.facts.engine_version and not _VERSION.match(backend.facts.engine_version):
            out.append(((*where, "facts", "engine_version"),
                        f"{backend.facts.engine_version!r} is not a version like 0.8.5"))
        for j, owner in enumerate(backend.dedicated_to):
            if owner.count("/") > 1 or owner.startswith("/") or owner.endswith("/"):
                out.append(((*where, "dedicated_to", j), f"{owner!r}: use `org` or `org/workspace`"))
        if backend.tokenizer is not None:
            path = Path(backend.tokenizer)
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            if not (path.is_file() or (path / "tokenizer.json").is_file()):
                out.append(((*where, "tokenizer"), f"no tokenizer.json at {path}"))
        for tenant_name in backend.auth.per_tenant:
            if tenant_name not in tenant_names:
                out.append(((*where, "auth", "per_tenant", tenant_name), f"no tenant named {tenant_name!r}"))
        for model in backend.model_map:
            if backend.models and model not in backend.models:
                out.append(((*where, "model_map", model), f"model {model!r} is mapped but not in `models`"))

    out += _protection_checks(policy)
    for i, data_class in enumerate(policy.data_classes):
        where = ("data_classes", i)
        if not any(b.tier in data_class.allowed_tiers for b in policy.backends):
            tiers = ", ".join(t.value for t in data_class.allowed_tiers)
            out.append(((*where, "allowed_tiers"),
                        f"no backend has an allowed tier ({tiers}): every request of class "
                        f"{data_class.name!r} would be refused"))
        for j, pattern in enumerate(data_class.over_cap.retrieved_names):
            if not pattern or fnmatch.translate(pattern) == fnmatch.translate(""):
                out.append(((*where, "over_cap", "retrieved_names", j), "empty pattern"))
    return out


def _protection_checks(policy: Policy) -> list[tuple[Loc, str]]:
    """The protection blocks' own schema, when that part is installed, so its errors get lines too."""
    try:
        from kvfence.gateway.protection.config import ClassProtection, ProtectionConfig
    except ImportError:
        return []
    out: list[tuple[Loc, str]] = []
    blocks: list[tuple[Loc, Any, dict[str, Any]]] = [(("gateway", "protection"), ProtectionConfig,
                                                      policy.gateway.protection)]
    blocks += [(("data_classes", i, "protection"), ClassProtection, c.protection)
               for i, c in enumerate(policy.data_classes)]
    for where, model, raw in blocks:
        try:
            model.model_validate(raw)
        except ValidationError as exc:
            out += [((*where, *error["loc"]), _pydantic_message(error)) for error in exc.errors()]
    # names that must refer to something (entity types, rules, classes, canaries): the same
    # checks the gateway makes when it builds the hook, so `check` passes only what will start
    from kvfence.gateway.protection.policy_checks import protection_policy_problems

    return out + protection_policy_problems(policy)
