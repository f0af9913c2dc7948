"""The league, exploitability and gains parts of the evaluation report: markdown tables and ``league.png``
(definitions: ``training.eval.league``, ``training.eval.exploitability``, ``training.eval.gains``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from training.eval.league import MEAN_RATING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: How each role is named in tables and plots.
ROLE_TITLES = {"scientist": "Scientist", "lab_manager": "Lab Manager"}
LEAGUE_COLUMNS = ("seat", "rating", "95% interval", "comparisons", "win share")
EXPLOITABILITY_COLUMNS = ("role", "seat", "best scripted response", "its reward", "seat's reward", "reference",
                          "margin over reference")
GAINS_COLUMNS = ("role", "seat", "opponent", "seat's reward", "baseline's reward", "gain (95% CI)", "apart",
                 "episodes")
#: Resolution of the report's PNG plots.
FIGURE_DPI = 120
#: The x-axis label of every panel of ``league.png``.
RATING_LABEL = "rating (Elo scale, 95% CI)"
#: The x-axis label of every panel of ``gains.png``.
GAIN_LABEL = "own reward minus the baseline's, same episodes (95% CI)"


def _interval(ci: list[float], digits: int) -> str:
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _mean_ci(block: dict[str, Any] | None) -> str:
    return "n/a" if block is None else f"{block['mean']:.2f} {_interval(block['ci95'], 2)}"


def league_lines(report: dict[str, Any]) -> list[str]:
    """One table per role of the league (none without a league)."""
    tables = report.get("league")
    if not tables:
        return []
    lines = ["", f"## League: Bradley-Terry ratings on the Elo scale (mean {MEAN_RATING:.0f}), seats compared on the "
             "same episode against the same opponent by their own reward; 95% bootstrap intervals over episodes"]
    for role, rows in tables.items():
        lines += ["", f"### {ROLE_TITLES[role]}", "", "| " + " | ".join(LEAGUE_COLUMNS) + " |",
                  "|---" * len(LEAGUE_COLUMNS) + "|"]
        for r in rows:
            share = "n/a" if r["win_share"] is None else f"{r['win_share']:.3f}"
            lines.append(f"| {r['seat']} | {r['rating']:.0f} | {_interval(r['ci95'], 0)} | {r['comparisons']} | "
                         f"{share} |")
    return lines


def exploitability_lines(report: dict[str, Any]) -> list[str]:
    """The exploitability table: one row per non-scripted seat that faced a scripted opponent (none without)."""
    tables = report.get("exploitability")
    if not tables:
        return []
    lines = ["", "## Exploitability: the scripted opponent that earns most against each non-scripted seat, and its "
             "margin over the same opponent against the role's scripted default (95% bootstrap intervals, paired "
             "by episode)", "", "| " + " | ".join(EXPLOITABILITY_COLUMNS) + " |",
             "|---" * len(EXPLOITABILITY_COLUMNS) + "|"]
    for role, rows in tables.items():
        for r in rows:
            lines.append(f"| {ROLE_TITLES[role]} | {r['seat']} | {r['best_response']} | "
                         f"{_mean_ci(r['opponent_reward'])} | {_mean_ci(r['seat_reward'])} | "
                         f"{r['reference'] or 'n/a'} | {_mean_ci(r['margin'])} |")
    return lines


def gains_lines(report: dict[str, Any]) -> list[str]:
    """The gains table: one row per (non-scripted seat, opponent) with the baseline's pairing (none without)."""
    tables = report.get("gains")
    if not tables:
        return []
    lines = ["", f"## Gains over {report['baseline']}: each seat's own reward minus the baseline's against the same "
             "opponent on the same episodes (95% bootstrap intervals, paired by episode; apart: the interval is wholly "
             "above or below zero)", "", "| " + " | ".join(GAINS_COLUMNS) + " |", "|---" * len(GAINS_COLUMNS) + "|"]
    for role, rows in tables.items():
        for r in rows:
            lines.append(f"| {ROLE_TITLES[role]} | {r['seat']} | {r['opponent']} | {r['seat_reward']:.2f} | "
                         f"{r['baseline_reward']:.2f} | {_mean_ci(r['gain'])} | {r['apart']} | {r['episodes']} |")
    return lines


def interval_panels(tables: dict[str, list[dict[str, Any]]], series: str, point: Callable[[dict[str, Any]], float],
                    interval: Callable[[dict[str, Any]], list[float]], label: Callable[[dict[str, Any]], str],
                    reference: float, panel_width: float, fontsize: int) -> tuple[Figure, list[Any]]:
    """One panel per role of ``tables``: each row's ``point`` with whiskers spanning its ``interval`` (one errorbar
    series named ``series``), labelled by ``label``, the first row at the top, and a dashed line at ``reference``;
    the figure and its axes (one per role, in the tables' order)."""
    from matplotlib.figure import Figure

    tallest = max(len(rows) for rows in tables.values())
    fig = Figure(figsize=(panel_width * len(tables), 1.5 + 0.45 * tallest))
    axes = list(fig.subplots(1, len(tables), squeeze=False)[0])
    for ax, rows in zip(axes, tables.values()):
        points = [point(r) for r in rows]
        whiskers = [[x - interval(r)[0] for x, r in zip(points, rows)],
                    [interval(r)[1] - x for x, r in zip(points, rows)]]
        ax.errorbar(points, range(len(rows)), xerr=whiskers, fmt="o", capsize=3, label=series)
        ax.axvline(reference, color="grey", linewidth=0.5, linestyle="--")
        ax.set_yticks(range(len(rows)), [label(r) for r in rows], fontsize=fontsize)
        ax.invert_yaxis()
    return fig, axes


def save_figure(fig: Figure, out: Path, name: str) -> Path:
    """``fig`` saved as ``out/name`` at the reports' resolution."""
    path = out / name
    fig.savefig(path, dpi=FIGURE_DPI)
    return path


def league_figure(report: dict[str, Any]) -> Figure:
    """One panel per role: each seat's rating as a point with its interval's whiskers, the best at the top, and a
    line at the mean rating."""
    tables = report["league"]
    fig, axes = interval_panels(tables, "rating", lambda r: r["rating"], lambda r: r["ci95"], lambda r: r["seat"],
                                MEAN_RATING, panel_width=5.5, fontsize=7)
    for ax, role in zip(axes, tables):
        ax.set_xlabel(RATING_LABEL)
        ax.set_title(f"{ROLE_TITLES[role]} league")
    fig.suptitle(f"League on {report['split']} seeds ({report['seed_range']})", fontsize=9)
    fig.tight_layout()
    return fig


def plot_league(report: dict[str, Any], out: Path) -> Path:
    """``league.png``: ``league_figure`` saved under ``out``."""
    return save_figure(league_figure(report), out, "league.png")


def gains_figure(report: dict[str, Any]) -> Figure:
    """One panel per role: each (seat, opponent) gain over the baseline as a point with its interval's whiskers, in
    the table's order from the top, and a line at zero."""
    tables = report["gains"]
    fig, axes = interval_panels(tables, "gain", lambda r: r["gain"]["mean"], lambda r: r["gain"]["ci95"],
                                lambda r: f"{r['seat']}\nvs {r['opponent']}", 0.0, panel_width=6.5, fontsize=6)
    for ax, role in zip(axes, tables):
        ax.set_xlabel(GAIN_LABEL)
        ax.set_title(f"{ROLE_TITLES[role]}: gain over {report['baseline']}", fontsize=8)
    fig.tight_layout()
    return fig


def plot_gains(report: dict[str, Any], out: Path) -> Path:
    """``gains.png``: ``gains_figure`` saved under ``out``."""
    return save_figure(gains_figure(report), out, "gains.png")
