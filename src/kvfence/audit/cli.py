"""``kvfence audit``: black-box isolation checks of an OpenAI-compatible endpoint.

Exit codes, for CI: 0 every check passed, 1 at least one finding, 2 a check could not run or could
not decide (never read "could not decide" as "safe").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click

from kvfence.audit.admission import AdmissionConfig, run_admission
from kvfence.audit.cache_sharing import CacheSharingConfig, run_cache_sharing
from kvfence.audit.client import EndpointClient
from kvfence.audit.errors import AuditCannotRun
from kvfence.audit.eviction import EvictionConfig, run_eviction
from kvfence.audit.fingerprint import run_engine
from kvfence.audit.leak import LeakConfig, run_leak
from kvfence.audit.questionnaire import render_questionnaire
from kvfence.audit.report import write_report
from kvfence.audit.sharing_policy import AllowedSharing
from kvfence.audit.target import Api, AuditTarget
from kvfence.audit.verdict import CheckResult, Verdict, combined_exit_code, load_results
from kvfence.errors import ConfigError, KvfenceError

__all__ = ["audit"]

log = logging.getLogger(__name__)

_Check = Callable[[EndpointClient], Awaitable[CheckResult]]


class AuditUsageError(click.ClickException):
    """Bad options or an audit that could not run: exit code 2, one line, no traceback."""

    exit_code = 2


def _target_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--endpoint", required=True, envvar="KVFENCE_AUDIT_ENDPOINT",
                     help="Base URL of the OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000."),
        click.option("--key", envvar="KVFENCE_AUDIT_KEY", help="API key of tenant A (the victim) [env KVFENCE_AUDIT_KEY]."),
        click.option("--key-b", envvar="KVFENCE_AUDIT_KEY_B",
                     help="API key of tenant B, in ANOTHER organisation than --key [env KVFENCE_AUDIT_KEY_B]."),
        click.option("--same-org-key", envvar="KVFENCE_AUDIT_SAME_ORG_KEY",
                     help="Another API key of the SAME organisation as --key [env KVFENCE_AUDIT_SAME_ORG_KEY]."),
        click.option("--model", help="Model to audit (default: the first one /v1/models lists)."),
        click.option("--api", type=click.Choice([a.value for a in Api]), default="auto", show_default=True,
                     help="Chat or completions API; auto tries chat first."),
        click.option("--header", "headers", multiple=True, help="Extra request header 'Name: value' (repeatable)."),
        click.option("--timeout", "timeout_s", type=float, default=120.0, show_default=True,
                     help="Seconds to wait for one request."),
        click.option("--max-context", type=int, help="Maximum context in tokens, if /v1/models does not say."),
        click.option("--kv-capacity", type=int, help="KV cache capacity in tokens, if the endpoint does not say."),
        click.option("--seed", type=int, help="Seed for prompts and trial order (default: random)."),
        click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default="audit-report",
                     show_default=True, help="Directory for results JSON, report.md and report.html."),
        click.option("-v", "--verbose", is_flag=True, help="Log progress and internal errors with tracebacks."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _sharing_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--samples", type=int, default=250, show_default=True,
                     help="Most TTFT samples per procedure (hit and miss) and per level; a level stops "
                          "earlier as soon as its verdict is decided."),
        click.option("--beta", type=float, default=0.01, show_default=True,
                     help="Accepted chance of missing a shared cache at a level (the power check's error rate)."),
        click.option("--time-budget", "time_budget_s", type=float,
                     help="Seconds the cache-sharing audit may take; levels still undecided then are "
                          "inconclusive, never a pass."),
        click.option("--fixed-samples", is_flag=True,
                     help="Take all --samples at every level before deciding (the classic fixed-sample test)."),
        click.option("--progress/--no-progress", default=True, show_default=True,
                     help="Show a progress bar with an estimate of the time left on stderr."),
        click.option("--prompt-tokens", type=int,
                     help="Prompt length in tokens (default: half the advertised context, at most 5000)."),
        click.option("--prefix-fraction", type=float, default=0.95, show_default=True,
                     help="Share of the victim's prompt that the hit procedure's prompt repeats."),
        click.option("--victim-requests", type=int, default=1, show_default=True,
                     help="How many times the victim sends its prompt before the probe."),
        click.option("--alpha", type=float, default=1e-4, show_default=True,
                     help="Significance level of the KS test at each level."),
        click.option("--allow-sharing", type=click.Choice([a.value for a in AllowedSharing]), default="org",
                     show_default=True, help="Widest cache sharing that is NOT a finding."),
        click.option("--pause", "pause_s", type=float, default=0.0, show_default=True,
                     help="Seconds to wait between trials (rate-limited APIs)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _build_target(opts: dict[str, Any]) -> AuditTarget:
    return AuditTarget.build(
        endpoint=opts["endpoint"], key=opts["key"], key_b=opts["key_b"], same_org_key=opts["same_org_key"],
        model=opts["model"], api=opts["api"], timeout_s=opts["timeout_s"], headers=opts["headers"],
        max_context=opts["max_context"], kv_capacity=opts["kv_capacity"],
    )


def _sharing_config(opts: dict[str, Any]) -> CacheSharingConfig:
    return CacheSharingConfig(
        samples=opts["samples"], prompt_tokens=opts["prompt_tokens"], prefix_fraction=opts["prefix_fraction"],
        victim_requests=opts["victim_requests"], alpha=opts["alpha"],
        allow_sharing=AllowedSharing(opts["allow_sharing"]), seed=opts["seed"], pause_s=opts["pause_s"],
        beta=opts["beta"], time_budget_s=opts["time_budget_s"], fixed_samples=opts["fixed_samples"],
        progress=opts["progress"],
    )


def _execute(opts: dict[str, Any], checks: list[tuple[str, _Check]]) -> None:
    """Run ``checks`` in order, save and report them, and exit with the combined code."""
    logging.basicConfig(level=logging.INFO if opts["verbose"] else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        target = _build_target(opts)
    except KvfenceError as exc:
        raise AuditUsageError(str(exc)) from exc
    out_dir: Path = opts["out_dir"]
    results = asyncio.run(_run_all(target, checks, opts["verbose"]))
    for result in results:
        result.save(out_dir)
    code = combined_exit_code([r.verdict for r in results])
    # Earlier results in the same directory join the report only if they audited the same endpoint.
    report_results = [r for r in load_results(out_dir) if r.endpoint == target.base_url]
    paths = write_report(report_results, out_dir, exit_code=code)
    for result in results:
        click.echo(f"{result.check}: {result.verdict.value.upper()}: {result.summary}")
    click.echo(f"report: {paths['html']} (also {paths['markdown'].name}, {paths['json'].name})")
    raise click.exceptions.Exit(code)


async def _run_all(target: AuditTarget, checks: list[tuple[str, _Check]], verbose: bool) -> list[CheckResult]:
    results: list[CheckResult] = []
    async with EndpointClient(target) as client:
        for name, check in checks:
            log.info("running check %s against %s", name, target.base_url)
            try:
                results.append(await check(client))
            except ConfigError as exc:
                raise AuditUsageError(str(exc)) from exc
            except AuditCannotRun as exc:
                results.append(CheckResult(check=name, verdict=Verdict.ERROR, summary=f"could not run: {exc}",
                                           endpoint=target.base_url, model=client.model))
            except Exception as exc:  # an internal fault: reported as "could not run", never as a pass
                log.error("internal error in check %s: %s", name, exc, exc_info=verbose)
                results.append(CheckResult(
                    check=name, verdict=Verdict.ERROR, endpoint=target.base_url, model=client.model,
                    summary=f"internal error: {type(exc).__name__}: {exc} (rerun with -v for details)",
                ))
    return results


@click.group()
def audit() -> None:
    """Black-box isolation tests of any OpenAI-compatible endpoint.

    Exit code 0: pass; 1: finding; 2: could not run or inconclusive.
    """


@audit.command("cache-sharing")
@_target_options
@_sharing_options
def cache_sharing_command(**opts: Any) -> None:
    """Does the prompt cache cross keys or organisations? (TTFT + KS test, Gu et al. ICML 2025)"""
    config = _sharing_config(opts)
    _guard(config.validate)
    _execute(opts, [("cache-sharing", lambda c: run_cache_sharing(c, config))])


@audit.command("admission")
@_target_options
@click.option("--max-tokens", type=int, default=16, show_default=True, help="max_tokens of each probe.")
def admission_command(max_tokens: int, **opts: Any) -> None:
    """Are prompts that cannot fit the context or KV pool rejected with a clear 4xx?"""
    config = AdmissionConfig(max_tokens=max_tokens, seed=opts["seed"])
    _guard(config.validate)
    _execute(opts, [("admission", lambda c: run_admission(c, config))])


@audit.command("leak")
@_target_options
@click.option("--victim-requests", type=int, default=8, show_default=True, help="Tenant A's canary requests.")
@click.option("--concurrency", type=int, default=8, show_default=True, help="Requests per tenant in the burst.")
@click.option("--max-tokens", type=int, default=32, show_default=True, help="max_tokens of every request.")
@click.option("--prompt-tokens", type=int, help="Length of tenant A's prompts (default: half the context, <= 4096).")
def leak_command(victim_requests: int, concurrency: int, max_tokens: int, prompt_tokens: int | None,
                 **opts: Any) -> None:
    """Does tenant A's text reach tenant B through over-length, aborted or concurrent requests?"""
    config = LeakConfig(victim_requests=victim_requests, concurrency=concurrency, max_tokens=max_tokens,
                        prompt_tokens=prompt_tokens, seed=opts["seed"])
    _guard(config.validate)
    _execute(opts, [("leak", lambda c: run_leak(c, config))])


@audit.command("eviction")
@_target_options
@click.option("--trials", type=int, default=16, show_default=True, help="Trials per condition (quiet, pressure, cold).")
@click.option("--alpha", type=float, default=1e-3, show_default=True, help="Significance level of a finding.")
@click.option("--max-requests", type=int, default=64, show_default=True,
              help="Most requests tenant B may send per trial to fill the KV pool.")
def eviction_command(trials: int, alpha: float, max_requests: int, **opts: Any) -> None:
    """Does tenant B's traffic evict tenant A's cached prompt (a shared-LRU side channel)?"""
    config = EvictionConfig(trials=trials, alpha=alpha, max_requests=max_requests, seed=opts["seed"])
    _guard(config.validate)
    _execute(opts, [("eviction", lambda c: run_eviction(c, config))])


@audit.command("engine")
@_target_options
def engine_command(**opts: Any) -> None:
    """Which engine and version serve the endpoint, and do known isolation advisories apply?"""
    _execute(opts, [("engine", run_engine)])


@audit.command("all")
@_target_options
@_sharing_options
@click.option("--skip", multiple=True, type=click.Choice(["engine", "admission", "leak", "cache-sharing"]),
              help="Check to leave out (repeatable).")
@click.option("--with-eviction", is_flag=True,
              help="Also run the eviction check (it fills the KV pool with tenant B's traffic, per trial).")
def all_command(skip: tuple[str, ...], with_eviction: bool, **opts: Any) -> None:
    """Run engine, admission, leak and cache-sharing (and eviction), in that order, into one report."""
    sharing = _sharing_config(opts)
    admission = AdmissionConfig(seed=opts["seed"])
    leak = LeakConfig(seed=opts["seed"])
    for config in (sharing, admission, leak):
        _guard(config.validate)
    checks: list[tuple[str, _Check]] = [
        ("engine", run_engine),
        ("admission", lambda c: run_admission(c, admission)),
        ("leak", lambda c: run_leak(c, leak)),
        ("cache-sharing", lambda c: run_cache_sharing(c, sharing)),
    ]
    if with_eviction:
        eviction = EvictionConfig(seed=opts["seed"])
        checks.append(("eviction", lambda c: run_eviction(c, eviction)))
    _execute(opts, [(name, check) for name, check in checks if name not in skip])


@audit.command("report")
@click.option("--results", "results_dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              required=True, help="Directory of an earlier audit.")
def report_command(results_dir: Path) -> None:
    """Re-render report.md / report.html from the results saved in a directory."""
    results = load_results(results_dir)
    if not results:
        raise AuditUsageError(f"no check results (*.json) in {results_dir}")
    paths = write_report(results, results_dir)
    click.echo(f"report: {paths['html']}")


@audit.command("questionnaire")
@click.option("--results", "results_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Directory of an earlier audit whose measurements pre-fill the answers.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Markdown file to write (default: RESULTS/questionnaire.md, or stdout without --results).")
def questionnaire_command(results_dir: Path | None, out_file: Path | None) -> None:
    """The isolation questions to ask a provider, filled from measurements where possible."""
    if results_dir is not None and not results_dir.is_dir():
        raise AuditUsageError(f"--results {results_dir} is not a directory")
    results = load_results(results_dir) if results_dir else []
    text = render_questionnaire(results)
    target = out_file or (results_dir / "questionnaire.md" if results_dir else None)
    if target is None:
        click.echo(text, nl=False)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    click.echo(f"questionnaire: {target} ({len(results)} check result(s) used)")


def _guard(validate: Callable[[], None]) -> None:
    try:
        validate()
    except KvfenceError as exc:
        raise AuditUsageError(str(exc)) from exc

