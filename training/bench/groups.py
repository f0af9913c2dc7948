"""``replicalab bench groups``: how often a train config's GRPO groups contrast a decision, whole-episode groups
against branch groups, before training.

GRPO learns from the reward differences inside a group.  This plays the first ``--steps`` steps of a train
config's groups (its rows, seats, sampling and ``num_generations``) with the config's model (or ``--model``) in
this process twice, once as whole-episode groups and once as branch groups (``training.rollout.branch``), and
prints for each kind of group:

- how many groups there are and the share whose rewards differ (a group with equal rewards trains nothing);
- among the groups where a skill's chance shows, the share holding both a used and an unused skill (at the same
  chance, for a branch group; anywhere in the episodes, for a whole-episode group);
- for branch groups at a skill's chance, the policy's rate of using the skill there, the mean reward of the replies
  that used it and of those that did not, and the share of the reward's variance inside those groups that the
  decision explains (the rest is the continuation's: what the branched reply's tokens would be credited with
  besides the decision if the continuation's tokens trained on the same advantage).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from training.argtypes import positive_int

#: Samples that make a step in one ``collect`` of this benchmark (bounds the KV cache of one generation).
CHUNK_GROUPS = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="configs/train/default.yaml", help="train config (YAML)")
    parser.add_argument("--steps", type=positive_int, default=6, help="steps of groups to play, from the first")
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the config's model)")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")


def _decision_rows(records) -> list[tuple[str, bool, float, int]]:
    """(skill, used, reward, group) of every branch reply at a skill's chance."""
    from training.rollout.branch import OTHER_TURN, branch_turn, used_at

    rows = []
    for r in records:
        kind = r.job.branch
        if kind and kind != OTHER_TURN:
            used = used_at(r, kind, branch_turn(r.job))
            if used is not None:
                rows.append((kind, used, r.trajectory.reward, r.job.group))
    return rows


def explained_share(rows) -> float:
    """Share of the within-group reward variance that the decision (used or not) explains, over groups."""
    total = between = 0.0
    groups = defaultdict(list)
    for _, used, reward, group in rows:
        groups[group].append((used, reward))
    for members in groups.values():
        mean = statistics.fmean(r for _, r in members)
        total += sum((r - mean) ** 2 for _, r in members)
        for flag in (True, False):
            part = [r for u, r in members if u == flag]
            if part:
                between += len(part) * (statistics.fmean(part) - mean) ** 2
    return between / total if total > 0 else float("nan")


def run(args: argparse.Namespace) -> int:
    from training.config.train import load_train_config
    from training.model.snapshot import local_model_dir
    from training.rollout.branch import BranchCollector, branch_metrics
    from training.rollout.contract import RolloutSpec
    from training.rollout.inprocess import InProcessBackend
    from training.rollout.records import EpisodeJob
    from training.trainer.build import data_stream
    from training.trainer.rollouts import STEP_SEED_STRIDE

    cfg = load_train_config(args.config, args.overrides)
    model = args.model or local_model_dir(cfg.model)
    g, per_step = cfg.grpo.num_generations, cfg.grpo.groups_per_step
    rows = data_stream(cfg)(args.steps * per_step)
    spec = RolloutSpec(model=model, sampling=cfg.rollout.sampling, max_rounds=cfg.rollout.max_rounds,
                       scientist=cfg.seats.scientist, lab_manager=cfg.seats.lab_manager)
    backend = InProcessBackend(spec)
    branching = BranchCollector.from_config(backend, cfg.grpo.branch)
    print(f"replicalab bench groups: {args.steps} steps x {per_step} groups x {g} samples of {args.config}, "
          f"model {model}, temperature {cfg.rollout.sampling.temperature} (branched replies: "
          f"{cfg.scoring_temperature})")
    results = {}
    for name, collector in (("whole-episode groups", backend), ("branch groups", branching)):
        start, records = time.perf_counter(), []
        for step in range(args.steps):
            for first in range(0, per_step, CHUNK_GROUPS):
                chunk = rows[step * per_step + first: step * per_step + min(first + CHUNK_GROUPS, per_step)]
                jobs = [EpisodeJob(job_id=i, group=len(records) // g + i // g, **{k: row[k] for k in (
                    "seed", "role", "template", "difficulty")}) for i, row in
                    enumerate(r for r in chunk for _ in range(g))]
                got = collector.collect(jobs, sampling_seed=cfg.seed * STEP_SEED_STRIDE + step)
                records += got
        results[name] = (branch_metrics(records), records, time.perf_counter() - start)
    print("\n| groups | groups by kind | rewards differ | both used and unused, of the groups at a chance | s |")
    print("|---|---|---|---|---|")
    for name, (metrics, records, seconds) in results.items():
        kinds = ", ".join(f"{k.split('/')[-1]} {int(v)}" for k, v in metrics.items() if k.startswith("branch/groups/"))
        both = metrics.get("branch/both_used_and_unused", float("nan"))
        print(f"| {name} | {kinds} | {metrics['branch/with_variance']:.2f} | {both:.2f} "
              f"(of {int(metrics['branch/groups_at_a_chance'])}) | {seconds:.0f} |")
    rows_ = _decision_rows(results["branch groups"][1])
    print("\nBranch replies at a skill's chance:\n")
    print("| skill | replies | use rate | reward used | reward unused |")
    print("|---|---|---|---|---|")
    for skill in sorted({r[0] for r in rows_}):
        mine = [r for r in rows_ if r[0] == skill]
        used = [r[2] for r in mine if r[1]]
        unused = [r[2] for r in mine if not r[1]]
        mean = lambda xs: f"{statistics.fmean(xs):.2f}" if xs else "-"  # noqa: E731
        print(f"| {skill} | {len(mine)} | {len(used) / len(mine):.2f} | {mean(used)} | {mean(unused)} |")
    print(f"\nShare of the reward variance inside branch groups at a chance that the decision explains: "
          f"{explained_share(rows_):.2f}")
    backend.close()
    return 0
