"""The evaluation report as markdown tables and PNG plots: each plot is built by a ``*_figure`` function (a
matplotlib ``Figure``, no pyplot state) and saved by ``plot_report``.  The league and exploitability tables and
``league.png`` are in ``report_league.py``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.eval.report_league import (exploitability_lines, gains_lines, league_lines, plot_gains, plot_league,
                                         save_figure)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The judge components (and the agreement rate) of ``components.png``, all cells together.
COMPONENT_PARTS = ("rigor", "feasibility", "fidelity", "agreement_rate", "oracle_fraction")

COLUMNS = ("mean_reward", "ci95", "lab_manager_reward", "lab_manager_ci95", "agreement_rate", "mean_rounds", "invalid_action_rate", "parse_failure_rate",
           "timeout_rate", "rigor", "feasibility", "fidelity", "oracle_fraction", "episodes")


def _fmt(value: Any) -> str:
    if isinstance(value, list):
        return f"[{value[0]:.2f}, {value[1]:.2f}]"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _decoding(d: dict[str, Any] | None) -> str:
    if not d or not d.get("do_sample"):
        return "greedy"
    return f"sampled at temperature {d['temperature']}"


def report_markdown(report: dict[str, Any]) -> str:
    seeds = report["seeds"]
    lines = [f"# Evaluation on the {report['split']} split",
             f"Seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} per cell), Lab Manager of the per-cell tables: "
             f"{report['lab_manager']}, "
             f"model decoding: {_decoding(report.get('decoding'))}. Intervals: 95% percentile bootstrap of the "
             "mean, resampling seeds within each cell. mean_reward is the Scientist's (the judge's total), "
             "lab_manager_reward the Lab Manager's own.", "",
             "## Overall", "", "| agent | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for spec, a in report["agents"].items():
        lines.append(f"| {spec} | " + " | ".join(_fmt(a["overall"][c]) for c in COLUMNS) + " |")
    lines += ["", "## Mean reward by cell (95% bootstrap interval)", "",
              "| cell | " + " | ".join(report["agents"]) + " |", "|---" * (len(report["agents"]) + 1) + "|"]
    for cell in report["cells"]:
        row = [f"{a['by_cell'][cell]['mean_reward']:.2f} {_fmt(a['by_cell'][cell]['ci95'])}"
               for a in report["agents"].values()]
        lines.append(f"| {cell} | " + " | ".join(row) + " |")
    return "\n".join(lines + _skill_lines(report) + _cross_play_lines(report) + league_lines(report)
                     + exploitability_lines(report) + gains_lines(report)) + "\n"


def _skill_lines(report: dict[str, Any]) -> list[str]:
    """Each agent's use of each Scientist skill where its trigger showed (``replicalab.skill_use``)."""
    agents = {spec: a["overall"]["skill_use"] for spec, a in report["agents"].items() if "skill_use" in a["overall"]}
    if not agents:
        return []
    skills = list(next(iter(agents.values())))
    lines = ["", "## Skill use: the share of each skill's chances the agent used (chances)", "",
             "| agent | " + " | ".join(skills) + " |", "|---" * (len(skills) + 1) + "|"]
    for spec, use in agents.items():
        lines.append(f"| {spec} | " + " | ".join(f"{use[s]['use_rate']:.3f} ({use[s]['chances']})" for s in skills)
                     + " |")
    return lines


def _cross_play_lines(report: dict[str, Any]) -> list[str]:
    """The cross-play matrix as a table: one row per (agent, Lab Manager) pairing (none without a matrix)."""
    matrix = report.get("cross_play")
    if not matrix:
        return []
    lines = ["", "## Cross-play: every agent against every Lab Manager (95% bootstrap intervals)", "",
             "| agent | Lab Manager | Scientist reward | Lab Manager reward | agreement | invalid turns: Scientist, "
             "Lab Manager | episodes |", "|---|---|---|---|---|---|---|"]
    for spec in next(iter(matrix.values())):
        for lab, row in matrix.items():
            p = row[spec]
            lines.append(f"| {spec} | {lab} | {p['scientist']['mean']:.2f} {_fmt(p['scientist']['ci95'])} | "
                         f"{p['lab_manager']['mean']:.2f} {_fmt(p['lab_manager']['ci95'])} | "
                         f"{p['agreement_rate']:.3f} | {p['scientist']['invalid_action_rate']:.3f}, "
                         f"{p['lab_manager']['invalid_action_rate']:.3f} | {p['episodes']} |")
    return lines


def cross_play_figure(report: dict[str, Any]) -> Figure:
    """One heatmap per role (rows: agents, columns: Lab Managers), each cell written with its mean reward."""
    from matplotlib.figure import Figure

    matrix = report["cross_play"]
    labs = list(matrix)
    agents = list(next(iter(matrix.values())))
    fig = Figure(figsize=(4 + 2.2 * len(labs), 1.5 + 0.5 * len(agents)))
    axes = fig.subplots(1, 2, squeeze=False)
    for ax, role, title in zip(axes[0], ("scientist", "lab_manager"), ("Scientist reward", "Lab Manager reward")):
        values = [[matrix[lab][spec][role]["mean"] for lab in labs] for spec in agents]
        image = ax.imshow(values, cmap="viridis", aspect="auto")
        middle = (min(map(min, values)) + max(map(max, values))) / 2
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="black" if v > middle else "white",
                        fontsize=8)
        ax.set_xticks(range(len(labs)), labs, fontsize=7, rotation=20)
        ax.set_yticks(range(len(agents)), agents, fontsize=7)
        ax.set_title(title)
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.suptitle(f"Cross-play on {report['split']} seeds ({report['seed_range']})", fontsize=9)
    fig.tight_layout()
    return fig


def plot_cross_play(report: dict[str, Any], out: Path) -> Path:
    """``cross_play.png``: ``cross_play_figure`` saved under ``out``."""
    return save_figure(cross_play_figure(report), out, "cross_play.png")


def reward_by_cell_figure(report: dict[str, Any]) -> Figure:
    """The Scientist's mean reward per cell: one bar per agent in each cell, 95% interval whiskers."""
    from matplotlib.figure import Figure

    agents, cells = list(report["agents"]), report["cells"]
    width = 0.8 / len(agents)
    fig = Figure(figsize=(max(8, 1.3 * len(cells)), 4.5))
    ax = fig.subplots()
    for i, spec in enumerate(agents):
        blocks = [report["agents"][spec]["by_cell"][c] for c in cells]
        means = [b["mean_reward"] for b in blocks]
        errs = [[m - b["ci95"][0] for m, b in zip(means, blocks)], [b["ci95"][1] - m for m, b in zip(means, blocks)]]
        ax.bar([x + i * width for x in range(len(cells))], means, width, yerr=errs, capsize=2, label=spec)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(cells))], [c.replace("/", "\n") for c in cells], fontsize=7)
    ax.set_ylabel("mean reward (95% CI)")
    ax.set_title(f"Scientist reward by cell ({report['split']} seeds)")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def components_figure(report: dict[str, Any]) -> Figure:
    """Each agent's judge components and agreement rate over all cells (``COMPONENT_PARTS``), one bar per agent."""
    from matplotlib.figure import Figure

    agents = list(report["agents"])
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    width = 0.8 / len(agents)
    for i, spec in enumerate(agents):
        o = report["agents"][spec]["overall"]
        ax.bar([x + i * width for x in range(len(COMPONENT_PARTS))], [o[p] for p in COMPONENT_PARTS], width,
               label=spec)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(COMPONENT_PARTS))], COMPONENT_PARTS)
    ax.set_title("Judge components and agreement, all cells")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_report(report: dict[str, Any], out: Path) -> list[Path]:
    """``reward_by_cell.png``, ``components.png``, ``cross_play.png``, (with a league) ``league.png`` and (with
    gains) ``gains.png`` under ``out``."""
    paths = [save_figure(reward_by_cell_figure(report), out, "reward_by_cell.png"),
             save_figure(components_figure(report), out, "components.png"), plot_cross_play(report, out)]
    paths += [plot_league(report, out)] if report.get("league") else []
    return paths + ([plot_gains(report, out)] if report.get("gains") else [])
