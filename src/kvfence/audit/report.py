"""Write the audit report: ``results.json``, ``report.md`` and a self-contained ``report.html``.

The report covers every check result saved in the output directory, so running checks one at a
time into the same ``--out`` builds one report. Plots are PNG files next to the Markdown and are
embedded in the HTML as base64, so the HTML file can be mailed on its own.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import jinja2

from kvfence.audit.verdict import CheckResult, combined_exit_code
from kvfence.extras import missing_extra

__all__ = ["GLOSSARY", "SEVERITY_MEANING", "Table", "result_tables", "write_report"]

# Each statistics term the report uses, explained once for a reader who is not a statistician.
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("TTFT", "time to first token: how long the endpoint took to start answering; a cached prompt starts sooner."),
    ("ECDF", "empirical cumulative distribution: for each time t, the share of requests that answered within t. "
             "The plots draw one curve for 'hit' probes and one for 'miss' probes."),
    ("KS D", "the Kolmogorov-Smirnov distance: the largest vertical gap between the hit and miss ECDF curves, "
             "from 0 (the same timings) to 1 (every hit faster than every miss)."),
    ("p-value", "the chance of a gap at least this large if the cache were NOT shared; a tiny p-value (below "
                "alpha) means the timings differ because of a shared cache, not by luck."),
    ("alpha", "the accepted chance of a false alarm: calling a cache shared when it is not."),
    ("beta", "the accepted chance of missing a shared cache; a level is only called 'not shared' when its "
             "hit probes are measurably slower than real cache hits (same key) at this error rate, else it is "
             "inconclusive."),
    ("false-alarm bound", "for the leak check: the most the chance can be that a run of another tenant's random "
                          "prompt words appeared in an answer by coincidence."),
)
SEVERITY_MEANING = {
    "critical": "another tenant's data came back",
    "high": "a defect that lets data leak or be inferred",
    "medium": "a side channel or a defect that needs a specific setup",
    "low": "hygiene",
}


class Table:
    """A titled table for both renderers."""

    def __init__(self, title: str, header: list[str], rows: list[list[Any]]) -> None:
        self.title, self.header, self.rows = title, header, rows


def write_report(results: list[CheckResult], out_dir: Path, exit_code: int | None = None) -> dict[str, Path]:
    """Render all three files into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if exit_code is None:
        exit_code = combined_exit_code([r.verdict for r in results])
    generated_at = datetime.now(UTC).isoformat(timespec="seconds")
    plots = _plots(results, out_dir)
    tables = {r.check: result_tables(r) for r in results}
    summary = {
        "generated_at": generated_at,
        "exit_code": exit_code,
        "checks": [r.to_json() for r in results],
    }
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "report.md", "html": out_dir / "report.html"}
    paths["json"].write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    paths["markdown"].write_text(_markdown(results, plots, tables, generated_at, exit_code), encoding="utf-8")
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kvfence.audit", "templates"),
        autoescape=jinja2.select_autoescape(["html.j2"]),
        undefined=jinja2.StrictUndefined,
    )
    images = {
        check: [(title, base64.b64encode((out_dir / name).read_bytes()).decode("ascii")) for title, name in p.items()]
        for check, p in plots.items()
    }
    raw = {r.check: json.dumps(_trim(r.to_json()), indent=2, default=str) for r in results}
    html = env.get_template("report.html.j2").render(
        results=results, tables=tables, images=images, raw=raw, generated_at=generated_at,
        exit_code=exit_code, version=_version(), glossary=GLOSSARY, severity_meaning=SEVERITY_MEANING,
    )
    paths["html"].write_text(html, encoding="utf-8")
    return paths


def _plots(results: list[CheckResult], out_dir: Path) -> dict[str, dict[str, str]]:
    """Each check's plots (title -> file name); none without Matplotlib (the audit extra): the report's
    tables and verdicts are complete without them."""
    try:
        from kvfence.audit.plots import plot_result
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc, "the report's plots")
        if missing is None:
            raise
        return {r.check: {} for r in results}
    return {r.check: plot_result(r, out_dir) for r in results}


def result_tables(result: CheckResult) -> list[Table]:
    """The tables that summarise a check's measurements (pure); a check that measured nothing
    (it could not run) gets none, and an empty table is left out rather than drawn blank."""
    if not result.measurements:
        return []
    return [t for t in _tables(result) if t.rows]


def _tables(result: CheckResult) -> list[Table]:
    m = result.measurements
    if result.check == "cache-sharing":
        rows = []
        for name, data in m.get("levels", {}).items():
            if not data.get("measured"):
                rows.append([name, "not measured", data.get("reason", ""), "", "", "", "", "", ""])
                continue
            s = data["stats"]
            shares = {True: "yes", False: "no"}.get(data["shares_cache"], "undecided")
            samples = data.get("samples_per_procedure", s.get("n_hit"))
            stopped = f"{samples} ({data['stopped']}, {data.get('seconds', 0):.0f} s)" if data.get("stopped") else samples
            rows.append([name, shares, f"{s['p_value']:.3g}",
                         f"{s['ks_statistic']:.3f}", f"{s['median_hit_ms']:.2f}", f"{s['median_miss_ms']:.2f}",
                         f"{s['median_diff_ms']:.2f}", f"{s['prob_hit_faster']:.3f}", stopped])
        return [Table("Sharing levels", ["level", "shares cache", "p-value (KS, one-sided)", "KS D",
                                          "median hit ms", "median miss ms", "median diff ms",
                                          "P(hit faster)", "samples per procedure"], rows)]
    if result.check == "admission":
        rows = [[a["probe"], "stream" if a["stream"] else "plain", a["prompt_tokens_sent"], a["max_tokens"],
                 a["expect"], a["status"], a["prompt_tokens_reported"], a["outcome"], (a["error"] or "")[:120]]
                for a in m.get("answers", [])]
        limits = Table("Limits", ["advertised context", "source", "KV capacity", "source", "exact sizes"],
                       [[m.get("max_context"), m.get("max_context_source"), m.get("kv_capacity"),
                         m.get("kv_capacity_source"), m.get("exact_sizes")]])
        return [limits, Table("Answers", ["probe", "mode", "prompt tokens", "max_tokens", "expected", "status",
                                          "usage.prompt_tokens", "outcome", "error message"], rows)]
    if result.check == "leak":
        rows = [[phase, c["sent"], c["answered_200"], c["rejected_4xx"], c["other"]]
                for phase, c in m.get("attacker_requests", {}).items()]
        return [Table("Tenant B's requests", ["phase", "sent", "200", "4xx", "other"], rows)]
    if result.check == "eviction":
        rows = []
        for name, c in m.get("conditions", {}).items():
            fractions = [f for f in c.get("cached_fraction", []) if f is not None]
            ttft = c.get("ttft_ms", [])
            rows.append([name, c.get("probes"), f"{sorted(fractions)[len(fractions) // 2]:.0%}" if fractions else "",
                         f"{sorted(ttft)[len(ttft) // 2]:.2f}" if ttft else ""])
        return [Table(f"Tenant A's probes (signal: {m.get('signal', '?')})",
                      ["condition", "probes", "median cached share", "median TTFT ms"], rows)]
    if result.check == "engine":
        tables = [Table("Fingerprint", ["engine", "version", "features"],
                        [[m.get("engine") or "unknown", m.get("version") or "unknown",
                          ", ".join(m.get("features", [])) or "none seen"]]),
                  Table("Clues", ["source", "value"], [[c["source"], c["value"]] for c in m.get("clues", [])][:30])]
        advisories = m.get("advisories", [])
        if advisories:
            tables.append(Table("Matching advisories", ["id", "severity", "state", "why", "sources"],
                                [[a["id"], a["severity"], a["state"], a["reason"], " ".join(a["sources"])]
                                 for a in advisories]))
        return tables
    return []


def _markdown(results: list[CheckResult], plots: dict[str, dict[str, str]], tables: dict[str, list[Table]],
              generated_at: str, exit_code: int) -> str:
    lines = ["# kvfence audit report", "",
             f"Generated {generated_at} by kvfence {_version()}. Exit code: `{exit_code}` "
             "(0 pass, 1 finding, 2 could not run / inconclusive).", "",
             "| check | verdict | endpoint | summary |", "|---|---|---|---|"]
    lines += [f"| {r.check} | **{r.verdict.value}** | {r.endpoint} | {_cell(r.summary)} |" for r in results]
    for r in results:
        lines += ["", f"## {r.check}: {r.verdict.value}", "", r.summary, ""]
        if r.evidence:
            lines += ["### Findings", ""]
            for i, e in enumerate(r.evidence, 1):
                lines.append(f"{i}. **[{e.severity.value.upper()}] {e.title}**: {e.detail}")
                if e.impact:
                    lines.append(f"   *Impact:* {e.impact}")
            lines.append("")
        if r.notes:
            lines += ["### Notes (observations, not defects)", ""] + [f"- {n}" for n in r.notes] + [""]
        for table in tables[r.check]:
            lines += [f"### {table.title}", "", "| " + " | ".join(table.header) + " |",
                      "|" + "---|" * len(table.header)]
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
            lines.append("")
        for title, name in plots[r.check].items():
            lines += [f"![{title}]({name})", ""]
        if r.parameters:
            lines += ["### Parameters", ""] + [f"- `{k}`: {'unknown' if v is None else v}" for k, v in r.parameters.items()]
    lines += ["", "## How to read this report", "",
              "Severity: " + "; ".join(f"**{k}**: {v}" for k, v in SEVERITY_MEANING.items()) + ". "
              "Notes are observations that are allowed (for example a server that stops generation at its "
              "context instead of refusing); they never change the exit code.", ""]
    lines += [f"- **{term}**: {meaning}" for term, meaning in GLOSSARY]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def _trim(data: dict[str, Any]) -> dict[str, Any]:
    """The raw JSON shown in the HTML, without the long sample lists (they are in results.json)."""
    levels = data.get("measurements", {}).get("levels")
    if isinstance(levels, dict):
        data = json.loads(json.dumps(data, default=str))
        for level in data["measurements"]["levels"].values():
            for key in ("hit_ttft_ms", "miss_ttft_ms"):
                if key in level:
                    level[key] = f"{len(level[key])} samples (see results.json)"
    return data


def _version() -> str:
    try:
        return package_version("kvfence")
    except PackageNotFoundError:
        return "unknown"
