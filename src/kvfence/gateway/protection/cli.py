"""``kvfence gateway incidents``: list suspected leaks and draft the customer notice for one.

Registered into ``kvfence gateway`` by :func:`register` (the gateway CLI looks for it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from kvfence.gateway.protection.leak.notice import draft_notice, incident_summary

__all__ = ["incidents", "register"]


def _open_log(config: Path | None, audit_log: str | None) -> Any:
    from kvfence.gateway.cli import _audit_url
    from kvfence.gateway.records.audit_log import open_audit_log

    return open_audit_log(_audit_url(config, audit_log))


_config_option = click.option("--config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                              default=None, help="Gateway policy file (its gateway.audit_log is read).")
_audit_option = click.option("--audit-log", default=None, help="sqlite:///PATH or postgresql://... (instead of --config).")


@click.group("incidents")
def incidents() -> None:
    """Suspected cross-tenant leaks the gateway stopped (from the audit log; no prompt text)."""


@incidents.command("list")
@_config_option
@_audit_option
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_incidents(config: Path | None, audit_log: str | None, limit: int, as_json: bool) -> None:
    """List incidents, newest first."""
    log = _open_log(config, audit_log)
    try:
        rows = log.list_incidents(limit=limit)
    finally:
        log.close()
    if not rows and not as_json:
        click.echo("no incidents")
    for row in rows:
        click.echo(json.dumps(row, sort_keys=True, default=str) if as_json else incident_summary(row))


@incidents.command("show")
@click.argument("incident_id")
@_config_option
@_audit_option
@click.option("--notice", is_flag=True, help="Draft the notice to send to the affected customers.")
@click.option("--next-update-hours", default=24, show_default=True, type=click.IntRange(1, 24 * 30))
def show_incident(incident_id: str, config: Path | None, audit_log: str | None, notice: bool,
                  next_update_hours: int) -> None:
    """Show one incident (evidence fingerprints, tenants, time), or draft its customer notice."""
    log = _open_log(config, audit_log)
    try:
        row = log.get_incident(incident_id)
    finally:
        log.close()
    if row is None:
        raise click.ClickException(f"no incident {incident_id!r} in the audit log")
    if notice:
        click.echo(draft_notice(row, next_update_hours=next_update_hours), nl=False)
    else:
        click.echo(json.dumps(row, indent=2, sort_keys=True, default=str))


def register(group: click.Group) -> None:
    """Add ``incidents`` to the ``kvfence gateway`` group."""
    group.add_command(incidents)
