"""The GRPO maths of a generation batch, as pure functions: tensors and lists in, tensors and numbers out.

No trainer, no state: ``ReplicaLabGRPOTrainer`` (``training.trainer.grpo_trainer``) and ``RoleBaseline``
(``training.trainer.advantages``) call these (as verl keeps ``core_algos`` apart from its trainer).

- Per-role credit: ``role_advantages`` (each reward minus its role's running baseline), ``role_scaled`` (each
  advantage over the root mean square of its role's) and ``process_share`` (one learner process's slice of the
  step's values).
- Rollout-vs-trainer mismatch: ``mismatch_sums`` per role on one process, ``mismatch_metrics`` over every
  process (means per model token).
- Rollout correction: ``rollout_correction`` (per-token truncated importance weights), ``corrected_advantages``
  (per-token advantages), ``correction_sums`` on one process and ``correction_metrics`` over every process.

Masks are 1 on model tokens and 0 on the environment's (and padding); log-prob tensors are ``(batch, tokens)``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence, TypeVar

import torch

T = TypeVar("T")
#: Per role on one process: (sum of |trainer - rollout|, sum of the k3 KL estimate, model tokens).
MismatchSums = dict[str, tuple[float, float, float]]
#: On one process: (sum of the correction weights, weights at the clip, model tokens).
CorrectionSums = tuple[float, float, float]


def role_advantages(rewards: Sequence[float], roles: Sequence[str], means: dict[str, float],
                    decay: float) -> tuple[list[float], dict[str, float]]:
    """Each reward minus its role's baseline before this batch (``means``; a role's first batch: its mean in the
    batch), and the baselines after it: each role's moved toward its mean in this batch,
    ``decay * before + (1 - decay) * batch mean``."""
    if len(rewards) != len(roles):
        raise ValueError(f"{len(rewards)} rewards for {len(roles)} roles")
    by_role: dict[str, list[float]] = defaultdict(list)
    for reward, role in zip(rewards, roles):
        by_role[role].append(float(reward))
    batch = {role: sum(values) / len(values) for role, values in by_role.items()}
    base = {role: means.get(role, mean) for role, mean in batch.items()}
    advantages = [float(reward) - base[role] for reward, role in zip(rewards, roles)]
    after = dict(means)
    for role, mean in batch.items():
        after[role] = decay * base[role] + (1.0 - decay) * mean
    return advantages, after


def role_scaled(advantages: Sequence[float], roles: Sequence[str]) -> list[float]:
    """Each advantage divided by the root mean square of its role's advantages in the batch (a role whose
    advantages are all zero keeps them): each seat's advantages get unit scale while a group whose replies differ
    by a little weighs less than one whose replies differ by a lot."""
    if len(advantages) != len(roles):
        raise ValueError(f"{len(advantages)} advantages for {len(roles)} roles")
    squares: dict[str, list[float]] = defaultdict(list)
    for advantage, role in zip(advantages, roles):
        squares[role].append(float(advantage) ** 2)
    rms = {role: (sum(values) / len(values)) ** 0.5 for role, values in squares.items()}
    return [float(a) / rms[role] if rms[role] > 0 else 0.0 for a, role in zip(advantages, roles)]


def process_share(values: Sequence[T], process_index: int, share: int) -> list[T]:
    """Process ``process_index``'s ``share`` values of a step's values gathered in process order."""
    start = process_index * share
    return list(values[start:start + share])


def mismatch_sums(rollout: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor,
                  roles: Sequence[str]) -> MismatchSums:
    """Per role: the sums over model tokens of |trainer - rollout| log-prob and of the k3 estimate of
    KL(sampling || trainer) (``exp(d) - 1 - d`` with ``d = trainer - rollout``), and the token count."""
    out: MismatchSums = {}
    diff = (trainer.double() - rollout.double()) * mask
    for role in sorted(set(roles)):
        rows = torch.tensor([r == role for r in roles], device=mask.device)
        m, d = mask[rows].double(), diff[rows]
        out[role] = (float((d.abs() * m).sum()), float(((torch.exp(d) - 1 - d) * m).sum()), float(m.sum()))
    return out


def mismatch_metrics(per_process: Sequence[MismatchSums]) -> dict[str, float]:
    """``mismatch/<role>/abs_diff`` and ``mismatch/<role>/kl``: means per model token over every learner
    process's ``mismatch_sums``."""
    out: dict[str, float] = {}
    for role in sorted(set().union(*per_process)):
        abs_sum, kl_sum, n = (sum(part[role][i] for part in per_process if role in part) for i in range(3))
        out[f"mismatch/{role}/abs_diff"] = abs_sum / max(n, 1.0)
        out[f"mismatch/{role}/kl"] = kl_sum / max(n, 1.0)
    return out


def rollout_correction(rollout: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor, clip: float) -> torch.Tensor:
    """Per token: ``min(clip, exp(trainer - rollout log-prob))`` on model tokens, 1 elsewhere: the truncated
    importance weight of each token the rollout engine (or older weights) sampled, under the trainer's policy
    (verl's token-level truncated IS)."""
    log_ratio = torch.nan_to_num((trainer.double() - rollout.double()) * mask, nan=0.0)
    return torch.exp(log_ratio).clamp(max=clip).detach()


def corrected_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-token advantages ``(batch, tokens)``: each sequence's advantage (or each token's) times each token's
    correction weight, which TRL's loss multiplies into that token's term."""
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    return advantages * weights.to(advantages.dtype)


def correction_sums(weights: torch.Tensor, mask: torch.Tensor, clip: float) -> CorrectionSums:
    """The sum of the per-token weights over model tokens, how many of them were clipped, and the token count."""
    m = mask.bool()
    return float(weights[m].sum()), float((weights[m] >= clip).sum()), float(m.sum())


def correction_metrics(per_process: Sequence[CorrectionSums]) -> dict[str, float]:
    """``rollout_correction/mean`` (the mean weight per model token) and ``rollout_correction/clipped`` (the
    share of model tokens clipped) over every learner process's ``correction_sums``."""
    total, clipped, n = (sum(part[i] for part in per_process) for i in range(3))
    return {"rollout_correction/mean": total / max(n, 1.0), "rollout_correction/clipped": clipped / max(n, 1.0)}
