"""``kvfence gateway keys add|revoke|list``: the policy's tenant keys, edited in place and safely.

- Only the key's SHA-256 is written; the key itself is printed once and stored nowhere.
- The file is edited as text, at the lines PyYAML's parser says a tenant occupies, so the rest of the file
  (comments, order, layout) stays as the operator wrote it. Tenants come from the policy file's
  ``tenants:`` list, or from its ``tenants_file`` when it has one (a new tenant goes there).
- Read, edit and write happen under an exclusive lock (``flock`` on ``.<file>.lock`` beside it), so two
  edits never lose each other's change; the whole policy is validated with the edit before anything is
  written; the file is replaced atomically (temporary file, ``fsync``, ``rename``), keeping its mode, so a
  gateway reloading at that moment reads the old file or the new one, never half of one.

The running gateway takes the change on its next reload (``kvfence gateway reload``, or SIGHUP).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kvfence.errors import ConfigError
from kvfence.gateway.policy.loader import parse_policy
from kvfence.gateway.policy.schema import Policy
from kvfence.gateway.policy.tenants import generate_api_key, hash_api_key

__all__ = ["AddedKey", "add_key", "list_keys", "revoke_key"]


@dataclass(frozen=True)
class AddedKey:
    """A key just added: the secret (shown once), its tenant and the file that now holds its hash."""

    api_key: str
    tenant: str
    file: Path


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock = path.with_name(f".{path.name}.lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot lock {path} (through {lock}): {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _write_atomically(path: Path, text: str) -> None:
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o600
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


# --- where the tenants are written -----------------------------------------------------------------

@dataclass
class _TenantList:
    """The ``tenants`` list of one file: its node (None: no list yet) and the text around it."""

    file: Path
    text: str
    node: yaml.SequenceNode | None
    in_tenants_file: bool


def _tenant_list(file: Path, text: str, in_tenants_file: bool) -> _TenantList:
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    node: yaml.Node | None = root
    if isinstance(root, yaml.MappingNode):
        node = next((v for k, v in root.value if getattr(k, "value", None) == "tenants"), None)
        if isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null"):
            node = None
    if node is not None and not isinstance(node, yaml.SequenceNode):
        raise ConfigError(f"{file}: `tenants` is not a list")
    return _TenantList(file, text, node, in_tenants_file)


def _lists(policy_file: Path) -> tuple[str, list[_TenantList]]:
    """The policy text, and its tenant lists: the policy file's own, then the tenants file's."""
    text = _read(policy_file)
    lists = [_tenant_list(policy_file, text, False)]
    data = yaml.safe_load(text)
    name = data.get("tenants_file") if isinstance(data, dict) else None
    if isinstance(name, str) and name:
        path = Path(name) if Path(name).is_absolute() else policy_file.parent / name
        lists.append(_tenant_list(path, _read(path), True))
    return text, lists


def _validated(policy_file: Path, policy_text: str, edited: _TenantList, new_text: str) -> Policy:
    """The policy with ``edited`` holding ``new_text``, validated whole (nothing is written if not)."""
    if not edited.in_tenants_file:
        return parse_policy(new_text, source=str(policy_file), base_dir=policy_file.parent)
    data = yaml.safe_load(policy_text)
    loaded = yaml.safe_load(new_text)
    extra = loaded.get("tenants") if isinstance(loaded, dict) else loaded
    data.pop("tenants_file", None)
    data["tenants"] = [*(data.get("tenants") or []), *(extra or [])]
    return parse_policy(yaml.safe_dump(data, sort_keys=False), source=f"{policy_file} (with {edited.file})",
                        base_dir=policy_file.parent)


def _items(tenants: _TenantList) -> list[tuple[str | None, int, int]]:
    """(tenant name, first line, end line) of each item of a block list, lines 0-based, end exclusive."""
    node = tenants.node
    if node is None:
        return []
    if node.flow_style and node.value:
        raise ConfigError(f"{tenants.file}:{node.start_mark.line + 1}: `tenants` is a flow list ([...]); write it "
                          "as a block list (one `- name: ...` per tenant) to edit it with `kvfence gateway keys`")
    lines = tenants.text.splitlines(keepends=True)
    starts = [item.start_mark.line for item in node.value]
    end = node.end_mark.line + (1 if node.end_mark.column > 0 else 0)
    out = []
    for index, item in enumerate(node.value):
        stop = starts[index + 1] if index + 1 < len(starts) else min(end, len(lines))
        dash = len(lines[starts[index]]) - len(lines[starts[index]].lstrip())
        while stop > starts[index] + 1 and _outside_item(lines[stop - 1], dash):
            stop -= 1  # blank lines, and comments no deeper than the dash, belong to what follows
        name = None
        if isinstance(item, yaml.MappingNode):
            name = next((v.value for k, v in item.value if getattr(k, "value", None) == "name"), None)
        out.append((name, starts[index], stop))
    return out


def _outside_item(line: str, dash: int) -> bool:
    stripped = line.strip()
    return not stripped or (stripped.startswith("#") and len(line) - len(line.lstrip()) <= dash)


def _with_item(tenants: _TenantList, entry: dict[str, Any]) -> str:
    """``tenants.text`` with ``entry`` appended to the list (which is created if there is none)."""
    text = tenants.text if tenants.text.endswith("\n") or not tenants.text else tenants.text + "\n"
    node = tenants.node
    rendered = yaml.safe_dump([entry], sort_keys=False, default_flow_style=False)
    if node is None or not node.value:
        indent = "" if tenants.in_tenants_file and node is None and not text.strip() else "  "
        block = "".join(indent + line for line in rendered.splitlines(keepends=True))
        if node is not None:  # `tenants: []`: the empty flow list becomes the block
            start, stop = node.start_mark.index, node.end_mark.index
            return text[:start].rstrip(" ") + "\n" + block + text[stop:].lstrip("\n")
        if tenants.in_tenants_file and not text.strip():
            return block
        lead = "" if text.endswith("\n\n") or not text else "\n"
        return f"{text}{lead}tenants:\n{block}"
    lines = text.splitlines(keepends=True)
    items = _items(tenants)
    first_line = lines[items[0][1]]
    dash = first_line.index("-") if "-" in first_line else node.value[0].start_mark.column - 2
    block = "".join(" " * dash + line for line in rendered.splitlines(keepends=True))
    stop = items[-1][2]
    return "".join(lines[:stop]) + block + "".join(lines[stop:])


# --- the commands ------------------------------------------------------------------------------------

def add_key(policy_file: Path, *, name: str, organization: str, workspace: str = "default",
            data_class: str | None = None, limits: dict[str, int] | None = None) -> AddedKey:
    """Add a tenant with a fresh key; the key is returned once, only its hash is written."""
    with _locked(policy_file):
        policy_text, lists = _lists(policy_file)
        current = parse_policy(policy_text, source=str(policy_file), base_dir=policy_file.parent)
        if any(t.name == name for t in current.tenants):
            raise ConfigError(f"tenant {name!r} already exists in {policy_file}: revoke it first, or pick another name")
        target = lists[-1]  # the tenants file when there is one
        api_key = generate_api_key()
        entry: dict[str, Any] = {"name": name, "key_sha256": hash_api_key(api_key), "organization": organization,
                                 "workspace": workspace,
                                 "default_class": data_class or current.data_classes[0].name}
        if limits:
            entry["limits"] = dict(limits)
        new_text = _with_item(target, entry)
        _validated(policy_file, policy_text, target, new_text)
        _write_atomically(target.file, new_text)
        return AddedKey(api_key, name, target.file)


def revoke_key(policy_file: Path, name: str) -> Path:
    """Remove tenant ``name`` (its key stops working at the gateway's next reload); the file edited."""
    with _locked(policy_file):
        policy_text, lists = _lists(policy_file)
        for tenants in lists:
            for tenant, first, stop in _items(tenants):
                if tenant != name:
                    continue
                lines = tenants.text.splitlines(keepends=True)
                new_text = "".join(lines[:first] + lines[stop:])
                if tenants.node is not None and len(tenants.node.value) == 1 and not tenants.in_tenants_file:
                    # the last tenant: keep `tenants:` a list
                    key_line = tenants.node.start_mark.line - 1
                    if 0 <= key_line < len(lines) and lines[key_line].rstrip().endswith("tenants:"):
                        lines[key_line] = lines[key_line].rstrip("\n").rstrip() + " []\n"
                        new_text = "".join(lines[:first] + lines[stop:])
                _validated(policy_file, policy_text, tenants, new_text)
                _write_atomically(tenants.file, new_text)
                return tenants.file
        raise ConfigError(f"no tenant {name!r} in {policy_file}" +
                          (f" or {lists[-1].file}" if len(lists) > 1 else ""))


def list_keys(policy_file: Path) -> list[dict[str, str]]:
    """Each tenant: name, organization, workspace, class and the first 12 hex digits of its key's hash."""
    with _locked(policy_file):
        policy = parse_policy(_read(policy_file), source=str(policy_file), base_dir=policy_file.parent)
    return [{"name": t.name, "organization": t.organization, "workspace": t.workspace, "class": t.default_class,
             "sha256": t.key_sha256[:12]} for t in policy.tenants]
