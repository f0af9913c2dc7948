"""Readable text of an episode: the transcript and the judge's breakdown."""

from __future__ import annotations

from replicalab.models import EpisodeLog

ROLE_NAMES = {"scientist": "Scientist", "lab_manager": "Lab Manager", "system": "System"}


def format_breakdown(log: EpisodeLog) -> str:
    b = log.reward_breakdown
    rows = [
        ("rigor", f"{b.rigor:.3f}"), ("feasibility", f"{b.feasibility:.3f}"), ("fidelity", f"{b.fidelity:.3f}"),
        ("core (10 x r x f x fid)", f"{10 * b.rigor * b.feasibility * b.fidelity:.3f}"),
        ("efficiency bonus", f"{b.efficiency_bonus:.3f}"), ("communication bonus", f"{b.communication_bonus:.3f}"),
    ] + [(f"penalty: {k}", f"-{v:.3f}") for k, v in b.penalties.items()] + [("total", f"{log.total_reward:.3f}")]
    if "lab_manager" in log.role_rewards:
        rows.append(("Lab Manager's own reward", f"{log.role_rewards['lab_manager']:.3f}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v:>8}" for k, v in rows)


def format_episode(log: EpisodeLog) -> str:
    s = log.final_state
    lines = [
        f"Episode {log.episode_id}  (reward spec {log.reward_spec_version})",
        f"Paper: {s.paper_title}",
        f"Method: {s.paper_method}",
        f"Goal: {s.experiment_goal}",
        "",
    ]
    for e in log.transcript:
        kind = f" ({e.action_type})" if e.action_type else ""
        lines.append(f"[round {e.round_number + 1}] {ROLE_NAMES[e.role]}{kind}: {e.message}")
    lines += [
        "",
        f"Verdict: {log.verdict}; agreement: {log.agreement_reached}; rounds used: {log.rounds_used}/{log.max_rounds}",
        format_breakdown(log),
        f"Judge: {log.judge_notes}",
    ]
    return "\n".join(lines)
