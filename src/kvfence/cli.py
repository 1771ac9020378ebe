"""The ``kvfence`` command line: one entry point, one sub-command group per part.

Sub-commands are imported lazily so that ``kvfence gateway`` or ``kvfence audit`` never pay for
importing torch.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from kvfence.errors import KvfenceError
from kvfence.extras import missing_extra

__all__ = ["main"]

# command name -> (module, attribute, short help)
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "generate": ("kvfence.engine.cli", "generate", "Generate text offline with the engine."),
    "serve": ("kvfence.server.cli", "serve", "Run the OpenAI-compatible inference server."),
    "keys": ("kvfence.server.cli", "keys", "Manage the server's tenant API keys."),
    "gateway": ("kvfence.gateway.cli", "gateway", "Run or query the tenant-aware gateway."),
    "audit": ("kvfence.audit.cli", "audit", "Black-box isolation tests of an endpoint."),
    "disagg": ("kvfence.disagg.cli", "disagg", "Disaggregated prefill/decode with a verified KV handoff."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return None
        module_name, attr, _ = _COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}.{attr} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, _COMMANDS[name][2]) for name in sorted(_COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup)
@click.version_option(package_name="kvfence")
def cli() -> None:
    """kvfence: serve, proxy and audit LLMs so that no tenant's prompt reaches another's answer."""


def _command_name(argv: list[str] | None) -> str:
    args = sys.argv[1:] if argv is None else argv
    words = [arg for arg in args if not arg.startswith("-")][:1]
    return "`" + " ".join(["kvfence", *words]) + "`"


def main(argv: list[str] | None = None) -> Any:
    """Run the CLI; a :class:`KvfenceError` becomes a one-line message and its exit code, and so does a
    module that only an extra installs (which extra, see :mod:`kvfence.extras`)."""
    try:
        try:
            return cli.main(args=argv, standalone_mode=False)
        except ModuleNotFoundError as exc:
            missing = missing_extra(exc, _command_name(argv))
            if missing is None:
                raise
            raise missing from exc
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KvfenceError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
