"""``replicalab eval``: agents as the Scientist against each of several fixed Lab Manager seats on one seed split.

The only code that plays ``TEST_SEEDS`` (split ``test``, the default).  Writes ``report.json`` (per agent
an ``overall`` block and a ``by_cell`` block keyed ``template/difficulty`` against the first Lab Manager;
``cross_play``, every (Lab Manager, agent) pairing's rewards of both roles with 95% intervals and its agreement
rate; ``league``, each role's Bradley-Terry ratings when it has two seats or more (``training.eval.league``);
``exploitability``, each non-scripted seat's best scripted response and margin over the role's scripted default
(``training.eval.exploitability``); ``gains`` (with ``baseline``), each non-scripted seat's paired gain over
the baseline seat of its role against each opponent (``training.eval.gains``); the split, its seed range and the
seeds; logged metrics are keyed ``PREFIX/AGENT/...`` with the split's ``METRIC_PREFIXES`` entry: ``test/``,
``val/``, ``train/``), ``report.md`` (the same as tables) and PNG plots (``cross_play.png``: the matrix as
heatmaps; ``league.png``: the ratings; ``gains.png``: the gains), and logs the report to W&B.  Every pairing
plays the same seeds, so comparisons are paired.  Each pairing is kept under ``pairings/`` as it finishes
(``training.eval.kept``): an interrupted evaluation, run again into the same ``out``, plays only what it lacks.
"""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import Any, Sequence

from replicalab.agents import SKILLS
from replicalab.metrics import episode_metrics, role_reward
from replicalab.models import EpisodeLog
from replicalab.seats import MODEL, parse_seat
from replicalab.seeds import METRIC_PREFIXES
from training.config.eval import EvalConfig
from training.eval.exploitability import exploitability
from training.eval.gains import seat_gains
from training.eval.kept import KeptPairings, play_key
from training.eval.league import VS, league_tables, pairing_label
from training.eval.stats import bootstrap_ci
from training.rollout.records import EpisodeJob, episode_jobs

log = logging.getLogger(__name__)  # ``logger`` names the run's RunLogger below
ORACLE = "scripted:oracle"


def agent_model_dir(spec: str, role: str = "scientist") -> str | None:
    """The local directory a ``model:`` seat of ``role`` loads from (``training.model.snapshot.local_model_dir``:
    the default model built, a hub id downloaded or read from the cache); None for a scripted seat."""
    seat = parse_seat(role, spec)
    if seat.kind != MODEL:
        return None
    from training.model.snapshot import local_model_dir

    return local_model_dir(seat.arg)


def play_agent(spec: str, lab_manager: str, cfg: EvalConfig, jobs: list[EpisodeJob]) -> list[EpisodeLog]:
    """Every job's EpisodeLog with ``spec`` in the Scientist seat against ``lab_manager`` (models decode as
    ``cfg.sampling``)."""
    from training.model.snapshot import local_model_dirs, seat_models
    from training.model.validate import resolve_chat_template
    from training.rollout.backends import make_backend
    from training.rollout.contract import RolloutSpec
    from training.rollout.engines import worker_python
    from training.rollout.play import load_frozen, play_jobs
    from training.rollout.ray_backend import RayPool

    chat_template = resolve_chat_template(cfg.chat_template)
    model_dir = agent_model_dir(spec)
    if model_dir is None:
        frozen = load_frozen([lab_manager], device="cpu", chat_template=chat_template)
        records = play_jobs(None, jobs, scientist=spec, lab_manager=lab_manager, sampling=cfg.sampling,
                            max_rounds=cfg.max_rounds, frozen=frozen)
        return [r.log for r in records]
    python, _ = worker_python(cfg.engine, cfg.vllm)
    rollout = RolloutSpec(model=model_dir, scientist="policy", lab_manager=lab_manager, sampling=cfg.sampling,
                          max_rounds=cfg.max_rounds, device="auto", engine=cfg.engine, vllm=cfg.vllm,
                          chat_template=chat_template,
                          model_dirs=tuple(local_model_dirs(seat_models([lab_manager])).items()))
    backend = make_backend(cfg.backend, rollout, pool=RayPool(num_workers=cfg.num_workers, python=python))
    try:
        return [r.log for r in backend.collect(jobs, sampling_seed=cfg.sampling_seed)]
    finally:
        backend.close()


def block(logs: Sequence[EpisodeLog], oracle_mean: float, samples: int) -> dict[str, Any]:
    m = episode_metrics(logs)
    rewards = [log.total_reward for log in logs]
    lab = [role_reward(log, "lab_manager") for log in logs]
    strata = [(log.scenario_template, log.difficulty) for log in logs]
    mean = statistics.fmean(rewards)
    return {
        "mean_reward": mean,
        "ci95": bootstrap_ci(rewards, samples, strata=strata),
        "lab_manager_reward": statistics.fmean(lab),
        "lab_manager_ci95": bootstrap_ci(lab, samples, strata=strata),
        "agreement_rate": m["episode/agreement_rate"], "mean_rounds": m["episode/rounds"],
        "invalid_action_rate": m["episode/invalid_action_rate"],
        "parse_failure_rate": m["episode/parse_failure_rate"], "timeout_rate": m["episode/timeout_rate"],
        "rigor": m["reward/rigor"], "feasibility": m["reward/feasibility"], "fidelity": m["reward/fidelity"],
        "oracle_fraction": mean / oracle_mean if oracle_mean > 0 else float("nan"),
        "episodes": len(logs),
        "skill_use": {skill: {"use_rate": m[f"skill/{skill}/use_rate"], "chances": int(m[f"skill/{skill}/count"])}
                      for skill in SKILLS},
    }


def pairing(logs: Sequence[EpisodeLog], samples: int) -> dict[str, Any]:
    """One (Lab Manager, agent) pairing of the cross-play matrix: both roles' mean rewards with 95% intervals, and
    the share of each role's turns that were invalid (unparsed or rejected: a seat that collapsed shows here)."""
    strata = [(log.scenario_template, log.difficulty) for log in logs]
    m = episode_metrics(logs)
    out: dict[str, Any] = {}
    for role in ("scientist", "lab_manager"):
        values = [role_reward(log, role) for log in logs]
        out[role] = {"mean": statistics.fmean(values), "ci95": bootstrap_ci(values, samples, strata=strata),
                     "invalid_action_rate": m.get(f"by_role/{role}/invalid_action_rate", 0.0)}
    out["agreement_rate"] = statistics.fmean(float(log.agreement_reached) for log in logs)
    out["episodes"] = len(logs)
    return out


def build_report(cfg: EvalConfig, played: dict[tuple[str, str], list[EpisodeLog]]) -> dict[str, Any]:
    """The report of every (Lab Manager, agent) pairing played; the per-cell blocks are against the first Lab
    Manager.  ``league`` and ``exploitability`` are there when they have something to rate (the oracle reference,
    unless it is an agent, is not rated)."""
    primary = cfg.lab_managers[0]
    oracle = played[primary, ORACLE]
    report: dict[str, Any] = {"split": cfg.split, "seed_range": cfg.seed_range, "seeds": cfg.seeds,
                              "lab_manager": primary, "lab_managers": cfg.lab_managers,
                              "decoding": cfg.sampling.model_dump(), "sampling_seed": cfg.sampling_seed,
                              "cells": [f"{t}/{d}" for t, d in cfg.cells], "agents": {}, "cross_play": {}}
    for (lab, spec), logs in played.items():
        if spec == ORACLE and ORACLE not in cfg.agents:
            continue
        report["cross_play"].setdefault(lab, {})[spec] = pairing(logs, cfg.bootstrap_samples)
        if lab != primary:
            continue
        by_cell = {}
        for t, d in cfg.cells:
            mine = [log for log in logs if log.scenario_template == t and log.difficulty == d]
            ref = statistics.fmean(log.total_reward for log in oracle if log.scenario_template == t and log.difficulty == d)
            by_cell[f"{t}/{d}"] = block(mine, ref, cfg.bootstrap_samples)
        overall = block(logs, statistics.fmean(log.total_reward for log in oracle), cfg.bootstrap_samples)
        report["agents"][spec] = {"overall": overall, "by_cell": by_cell}
    rated = {key: logs for key, logs in played.items() if key[1] != ORACLE or ORACLE in cfg.agents}
    tables = {"league": league_tables(rated, cfg.bootstrap_samples),
              "exploitability": exploitability(rated, cfg.bootstrap_samples),
              "gains": seat_gains(rated, cfg.baseline, cfg.bootstrap_samples) if cfg.baseline else {}}
    report.update({name: table for name, table in tables.items() if table})
    if "gains" in report:
        report["baseline"] = cfg.baseline
    return report


def run_eval(cfg: EvalConfig, *, progress: bool = True) -> dict[str, Any]:
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from training.eval.report import plot_report, report_markdown
    from training.model.validate import resolve_chat_template, validate_seats
    from training.tracking import EPISODES_FILE, METRICS_FILE, RunLogger, truncate_jsonl

    validate_seats([*cfg.agents, *cfg.lab_managers], chat_template=resolve_chat_template(cfg.chat_template))
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = episode_jobs(cfg.cells, cfg.seeds)
    played: dict[tuple[str, str], list[EpisodeLog]] = {}
    specs = list(dict.fromkeys([*cfg.agents, ORACLE]))
    # the oracle, a reference for oracle_fraction, plays only the first Lab Manager unless it is an agent
    pairings = [(lab, spec) for lab in cfg.lab_managers for spec in specs
                if spec in cfg.agents or lab == cfg.lab_managers[0]]
    seats = {**{s: "scientist" for s in cfg.agents}, **{s: "lab_manager" for s in cfg.lab_managers}}
    model_dirs = {spec: path for spec, role in seats.items() if (path := agent_model_dir(spec, role))}
    kept = KeptPairings(out, play_key(cfg, model_dirs))
    resumed = set(kept.check(pairings))
    if resumed:
        log.info("%d of %d pairings were kept in %s by an earlier evaluation; playing the other %d",
                 len(resumed), len(pairings), kept.root, len(pairings) - len(resumed))
    bar = tqdm(total=len(pairings) * len(jobs), desc="eval", unit="episode", disable=None if progress else True)
    with bar, logging_redirect_tqdm():
        for lab, spec in pairings:
            bar.set_postfix_str(f"{spec}{VS}{lab}")
            if (lab, spec) in resumed:
                played[lab, spec] = kept.load(lab, spec)
            else:
                if progress:
                    log.info("evaluating %s against %s on %d %s episodes", spec, lab, len(jobs), cfg.split)
                played[lab, spec] = play_agent(spec, lab, cfg, jobs)
                kept.keep(lab, spec, played[lab, spec])
            bar.update(len(jobs))
    report = build_report(cfg, played)
    (out / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out / "report.md").write_text(report_markdown(report), encoding="utf-8")
    plots = plot_report(report, out)
    for name in (METRICS_FILE, EPISODES_FILE):  # the logs of this evaluation alone, as report.json is
        truncate_jsonl(out / name, 0)
    with RunLogger(out, cfg) as logger:
        flat = {f"{METRIC_PREFIXES[cfg.split]}/{spec}/{k}": v for spec, a in report["agents"].items()
                for k, v in a["overall"].items() if isinstance(v, (int, float))}
        logger.log(0, flat)
        for (lab, spec), logs in played.items():
            logger.log_episodes(0, logs, roles=[pairing_label(spec, lab, cfg.lab_managers[0])] * len(logs))
        for path in plots:
            logger.log_artifact(path, name=path.stem, type="plot")
        logger.log_artifact(out / "report.json", name="report", type="report")
    return report
