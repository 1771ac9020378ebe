"""Plots of check results as PNG files (matplotlib's Agg canvas, no display, no pyplot state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kvfence.audit.verdict import CheckResult

__all__ = ["plot_result"]

_HIT, _MISS = "#d62728", "#1f77b4"


def plot_result(result: CheckResult, out_dir: Path) -> dict[str, str]:
    """Draw the plots a result supports into ``out_dir``; returns title -> file name."""
    draw = {"cache-sharing": _cache_sharing, "admission": _admission, "leak": _leak}.get(result.check)
    if draw is None:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    return draw(result, out_dir)


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=100)


def _cache_sharing(result: CheckResult, out_dir: Path) -> dict[str, str]:
    levels = {name: data for name, data in result.measurements.get("levels", {}).items() if data.get("measured")}
    if not levels:
        return {}
    plots: dict[str, str] = {}
    fig = Figure(figsize=(5 * len(levels), 3.8), layout="constrained")
    for i, (name, data) in enumerate(levels.items()):
        ax = fig.add_subplot(1, len(levels), i + 1)
        hit, miss = np.asarray(data["hit_ttft_ms"]), np.asarray(data["miss_ttft_ms"])
        both = np.concatenate([hit, miss])
        hi = float(np.quantile(both, 0.99)) if both.size else 1.0
        bins = np.linspace(float(both.min()), max(hi, float(both.min()) + 1e-3), 40).tolist()
        ax.hist(np.clip(miss, None, hi), bins=bins, alpha=0.6, color=_MISS, label=f"miss (n={miss.size})")
        ax.hist(np.clip(hit, None, hi), bins=bins, alpha=0.6, color=_HIT, label=f"hit (n={hit.size})")
        stats = data["stats"]
        verdict = "shares cache" if data["shares_cache"] else "no sharing detected"
        ax.set_title(f"{name}: {verdict}\nKS D={stats['ks_statistic']:.2f}, p={stats['p_value']:.2g}", fontsize=10)
        ax.set_xlabel("time to first token (ms)")
        ax.set_ylabel("requests")
        # a fixed corner: loc="best" searches every drawn point, which took over a second (and warned)
        # for a few thousand TTFTs on a loaded machine
        ax.legend(fontsize=8, loc="upper right")
    _save(fig, out_dir / "cache-sharing-histograms.png")
    plots["TTFT histograms, cache-hit vs cache-miss procedure"] = "cache-sharing-histograms.png"

    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    for name, data in levels.items():
        for kind, style in (("hit", "-"), ("miss", "--")):
            values = np.sort(np.asarray(data[f"{kind}_ttft_ms"]))
            ax.step(values, np.arange(1, values.size + 1) / values.size, style, where="post", label=f"{name} {kind}")
    ax.set_xlabel("time to first token (ms)")
    ax.set_ylabel("empirical CDF")
    ax.set_title("TTFT distributions (the KS statistic is the largest vertical gap)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")  # below the curves, which rise to 1 on the right
    _save(fig, out_dir / "cache-sharing-ecdf.png")
    plots["TTFT empirical CDFs"] = "cache-sharing-ecdf.png"
    return plots


def _admission(result: CheckResult, out_dir: Path) -> dict[str, str]:
    answers: list[dict[str, Any]] = result.measurements.get("answers", [])
    if not answers:
        return {}
    fig = Figure(figsize=(7, 3.8), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    colours = {"ok": "#2ca02c", "rejected": "#2ca02c"}
    for i, row in enumerate(answers):
        total = row["prompt_tokens_sent"] + row["max_tokens"]
        outcome = str(row["outcome"])
        colour = "#d62728" if outcome.startswith("finding") or row.get("leak") else colours.get(outcome, "#ff7f0e")
        marker = "o" if row["status"] == 200 else "x"
        ax.scatter([total], [i], color=colour, marker=marker, s=50)
        ax.annotate(f"{row['status']} {outcome}", (total, i), fontsize=7, xytext=(6, -3), textcoords="offset points")
    context = result.measurements.get("max_context")
    if context:
        ax.axvline(context, color="black", linestyle="--", label=f"advertised context {context}")
    capacity = result.measurements.get("kv_capacity")
    if capacity:
        ax.axvline(capacity, color="purple", linestyle=":", label=f"KV capacity {capacity}")
    xs = [r["prompt_tokens_sent"] + r["max_tokens"] for r in answers] + [v for v in (context, capacity) if v]
    ax.set_xlim(min(xs) * 0.95, max(xs) * 1.2)  # room for the labels right of each point
    ax.set_yticks(range(len(answers)))
    ax.set_yticklabels([f"{r['probe']}{' (s)' if r['stream'] else ''}" for r in answers], fontsize=7)
    ax.set_xlabel("prompt + max_tokens (tokens)")
    ax.set_title("admission: o = HTTP 200, x = rejected; red = finding", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    _save(fig, out_dir / "admission.png")
    return {"Prompt sizes and the endpoint's answers": "admission.png"}


def _leak(result: CheckResult, out_dir: Path) -> dict[str, str]:
    phases: dict[str, dict[str, int]] = result.measurements.get("attacker_requests", {})
    if not phases:
        return {}
    leaks: dict[str, int] = {}
    for item in result.evidence:
        for phase in phases:
            if f"'s {phase} request" in item.title:
                leaks[phase] = leaks.get(phase, 0) + 1
    names = list(phases)
    x = np.arange(len(names))
    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    width = 0.2
    for offset, (key, colour) in enumerate((("answered_200", "#2ca02c"), ("rejected_4xx", "#ff7f0e"),
                                            ("other", "#7f7f7f"))):
        ax.bar(x + (offset - 1.5) * width, [phases[n].get(key, 0) for n in names], width, label=key, color=colour)
    ax.bar(x + 1.5 * width, [leaks.get(n, 0) for n in names], width, label="carried A's text", color="#d62728")
    ax.set_xticks(x)
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylabel("tenant B requests")
    ax.set_title("leak: tenant B's requests by phase and outcome", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    _save(fig, out_dir / "leak.png")
    return {"Tenant B's requests and what came back": "leak.png"}
