"""mkdocs hooks: the reference pages that are generated from the code, at build time.

A page holds a marker comment; the build replaces it with text made from the code it documents, so the
reference cannot drift from the code:

- ``<!-- kvfence:policy-schema -->``: every model of the gateway policy (``gateway/policy/schema.py``),
  field by field, from the pydantic schema;
- ``<!-- kvfence:cli -->``: every ``kvfence`` command and option, from the click commands;
- ``<!-- kvfence:metrics -->``: the Prometheus series of the server, the gateway and data protection,
  from the registries the code builds.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

__all__ = ["on_page_markdown", "render_cli", "render_metrics", "render_policy_schema"]


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for marker, render in (("<!-- kvfence:policy-schema -->", render_policy_schema),
                           ("<!-- kvfence:cli -->", render_cli),
                           ("<!-- kvfence:metrics -->", render_metrics)):
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


# --- policy -------------------------------------------------------------------------------------------

def _type_name(annotation: Any, models: list[type]) -> str:
    from pydantic import BaseModel

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0], models)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a, models) for a in args)
    if origin is typing.Literal:
        return " or ".join(f"`{a!r}`" for a in args)
    if origin in (list, tuple, set):
        return f"list of {_type_name(args[0], models)}" if args else "list"
    if origin is dict:
        return f"map {_type_name(args[0], models)} → {_type_name(args[1], models)}" if args else "map"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation not in models:
            models.append(annotation)
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " or ".join(f"`{m.value}`" for m in annotation)
    name = getattr(annotation, "__name__", str(annotation))
    return {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "Any": "any",
            "HttpUrl": "URL"}.get(name, name)


def _default(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return ""
    else:
        value = field.default
    if isinstance(value, enum.Enum):
        value = value.value
    if hasattr(type(value), "model_fields"):  # a nested model: its own defaults are in its table
        return "its defaults"
    if value in ({}, []):
        return "empty"
    return f"`{value!r}`" if not isinstance(value, str) else f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_policy_schema() -> str:
    from kvfence.gateway.policy.schema import Policy

    models: list[type] = [Policy]
    out: list[str] = []
    index = 0
    while index < len(models):
        model = models[index]
        index += 1
        fields = model.model_fields  # type: ignore[attr-defined]
        rows = [(name, _type_name(field.annotation, models), _default(field), field.description or "")
                for name, field in fields.items()]
        out += [f"### {model.__name__}", ""]
        if model.__doc__:
            out += [_cell(model.__doc__), ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        out += [f"| `{name}` | {kind} | {default} | {_cell(desc)} |" for name, kind, default, desc in rows]
        out.append("")
    return "\n".join(out)


# --- CLI ----------------------------------------------------------------------------------------------

def _walk(command: Any, path: list[str], ctx: Any, out: list[str]) -> None:
    import click

    name = " ".join(path)
    level = "#" * min(2 + len(path) - 1, 4)
    out += [f"{level} `{name}`", ""]
    sub_ctx = click.Context(command, info_name=path[-1], parent=ctx)
    out += ["```text", command.get_help(sub_ctx).replace(sub_ctx.command_path, name, 1).rstrip(), "```", ""]
    if isinstance(command, click.Group):
        for sub in command.list_commands(sub_ctx):
            child = command.get_command(sub_ctx, sub)
            if child is not None and not getattr(child, "hidden", False):
                _walk(child, [*path, sub], sub_ctx, out)


def render_cli() -> str:
    import click

    from kvfence.cli import cli

    out: list[str] = []
    with click.Context(cli, info_name="kvfence", terminal_width=100, max_content_width=100) as ctx:
        _walk(cli, ["kvfence"], None, out)
        del ctx
    return "\n".join(out)


# --- metrics ------------------------------------------------------------------------------------------

def _families(registry: Any) -> list[tuple[str, str, str, tuple[str, ...]]]:
    rows = []
    for collector in list(registry._collector_to_names):  # the declared series, labelled or not
        name = getattr(collector, "_name", None)
        if name is None:
            continue
        kind = getattr(collector, "_type", "")
        shown = f"{name}_total" if kind == "counter" and not name.endswith("_total") else name
        rows.append((shown, kind, getattr(collector, "_documentation", ""), tuple(collector._labelnames)))
    return sorted(rows)


def _table(rows: list[tuple[str, str, str, tuple[str, ...]]]) -> list[str]:
    out = ["| series | type | labels | meaning |", "|---|---|---|---|"]
    for name, kind, doc, labels in rows:
        out.append(f"| `{name}` | {kind} | {', '.join(f'`{label}`' for label in labels)} | {_cell(doc)} |")
    return [*out, ""]


def render_metrics() -> str:
    from kvfence.gateway.protection.metrics import ProtectionMetrics
    from kvfence.gateway.records.metrics import GatewayMetrics
    from kvfence.server.metrics import ServerMetrics

    gateway = GatewayMetrics()
    ProtectionMetrics(gateway.registry)
    out = ["### `kvfence serve`", "", *_table(_families(ServerMetrics().registry))]
    out += ["The engine's own gauges (KV pages used / free / total, queue length, running requests, prefix-cache "
            "hit tokens per scope, isolation incidents, preemptions) are read from the engine at each scrape "
            "(`server/metrics.py`, `_EngineCollector`).", ""]
    out += ["### `kvfence gateway` (with data protection)", "", *_table(_families(gateway.registry))]
    return "\n".join(out)
