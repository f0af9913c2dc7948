"""The GRPO maths (``training.trainer.grpo_maths``) on small tensors whose answers can be checked by hand:
per-role credit, each process's share, the rollout-vs-trainer mismatch sums on a mask, the truncated correction
weights and the per-token advantages they give."""

import math

import pytest
import torch

from training.trainer.grpo_maths import (correction_metrics, correction_sums, corrected_advantages,
                                         mismatch_metrics, mismatch_sums, process_share, role_advantages,
                                         role_scaled, rollout_correction)

#: Two sequences of two tokens; the second sequence's last token is the environment's (mask 0).
TRAINER = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]])
ROLLOUT = torch.tensor([[-1.5, -2.0], [-1.0, -3.0]])
MASK = torch.tensor([[1, 1], [1, 0]])
ROLES = ["scientist", "lab_manager"]


def test_role_advantages_measure_each_role_against_its_own_baseline_and_move_it():
    rewards, roles = [9.0, 7.0, 2.0, 4.0], ["scientist", "scientist", "lab_manager", "lab_manager"]
    first, means = role_advantages(rewards, roles, {}, decay=0.5)
    assert first == [1.0, -1.0, -1.0, 1.0]  # a role's first batch: its own batch mean
    assert means == {"scientist": 8.0, "lab_manager": 3.0}
    before = dict(means)
    second, after = role_advantages([10.0, 10.0, 3.0, 3.0], roles, means, decay=0.5)
    assert second == [2.0, 2.0, 0.0, 0.0]  # alike rewards still teach, against the running baseline
    assert after == {"scientist": 0.5 * 8.0 + 0.5 * 10.0, "lab_manager": 3.0}
    assert means == before  # pure: the baselines passed in are left as they were
    _, only_one = role_advantages([1.0], ["scientist"], {"lab_manager": 3.0}, decay=0.0)
    assert only_one == {"lab_manager": 3.0, "scientist": 1.0}  # a role absent from the batch keeps its baseline
    with pytest.raises(ValueError, match="rewards for"):
        role_advantages([1.0], roles, {}, decay=0.5)


def test_role_scaling_gives_each_seat_unit_scale_and_keeps_each_groups_weight():
    # two Scientist groups (one whose replies differ by 0.1, one by 3.0) and a Lab Manager group on a smaller scale
    advantages = [0.1, -0.1, 3.0, -3.0, 0.5, -0.5]
    roles = ["scientist"] * 4 + ["lab_manager"] * 2
    scaled = role_scaled(advantages, roles)
    for role in ("scientist", "lab_manager"):
        mine = [a for a, r in zip(scaled, roles) if r == role]
        assert math.isclose(sum(a * a for a in mine) / len(mine), 1.0)  # unit root mean square per role
    assert math.isclose(scaled[2] / scaled[0], 30.0)  # the near-flat group stays 30 times lighter (group std: 1)
    assert [a > 0 for a in scaled] == [a > 0 for a in advantages]  # signs kept
    assert role_scaled([0.0, 0.0, 2.0, -2.0], ["lab_manager"] * 2 + ["scientist"] * 2) == [0.0, 0.0, 1.0, -1.0]
    assert advantages == [0.1, -0.1, 3.0, -3.0, 0.5, -0.5]  # pure
    with pytest.raises(ValueError, match="advantages for"):
        role_scaled([1.0], roles)


def test_each_process_takes_its_own_share_in_process_order():
    values = [10, 11, 20, 21, 30, 31]
    assert [process_share(values, i, 2) for i in range(3)] == [[10, 11], [20, 21], [30, 31]]
    assert process_share(values, 0, 6) == values


def test_mismatch_sums_count_model_tokens_only_per_role():
    sums = mismatch_sums(ROLLOUT, TRAINER, MASK, ROLES)
    # scientist: d = 0.5 and 0 on its two model tokens; lab_manager: d = 0 on its one model token, the masked
    # environment token (d = 2) does not count
    assert sums["scientist"] == pytest.approx((0.5, math.exp(0.5) - 1.5, 2.0))
    assert sums["lab_manager"] == (0.0, 0.0, 1.0)
    metrics = mismatch_metrics([sums, {"scientist": (0.1, 0.0, 3.0)}])  # a second process's share
    assert metrics["mismatch/scientist/abs_diff"] == pytest.approx(0.6 / 5)  # token-weighted over processes
    assert metrics["mismatch/scientist/kl"] == pytest.approx((math.exp(0.5) - 1.5) / 5)
    assert metrics["mismatch/lab_manager/abs_diff"] == 0.0 and metrics["mismatch/lab_manager/kl"] == 0.0
    assert mismatch_metrics([{"scientist": (0.0, 0.0, 0.0)}])["mismatch/scientist/abs_diff"] == 0.0  # no tokens


def test_correction_weights_are_clipped_at_clip_and_one_off_the_model_tokens():
    weights = rollout_correction(ROLLOUT, TRAINER, MASK, clip=1.5)
    assert weights.tolist() == [[1.5, 1.0], [1.0, 1.0]]  # exp(0.5) > 1.5 is clipped; exp(2) is masked: 1
    assert rollout_correction(ROLLOUT, TRAINER, MASK, clip=2.0)[0, 0].item() == pytest.approx(math.exp(0.5))
    assert rollout_correction(ROLLOUT, ROLLOUT, MASK, clip=2.0).tolist() == [[1.0, 1.0], [1.0, 1.0]]  # on-policy
    unsampled = torch.tensor([[-1.5, -2.0], [-1.0, float("nan")]])  # no rollout log-prob on the env token
    assert rollout_correction(unsampled, TRAINER, MASK, clip=1.5).tolist() == [[1.5, 1.0], [1.0, 1.0]]
    assert correction_sums(weights, MASK, clip=1.5) == (3.5, 1.0, 3.0)  # 1.5 + 1 + 1 over 3 model tokens
    assert correction_metrics([(3.5, 1.0, 3.0), (2.0, 0.0, 2.0)]) == pytest.approx(
        {"rollout_correction/mean": 5.5 / 5, "rollout_correction/clipped": 1 / 5})


def test_corrected_advantages_are_per_token():
    weights = torch.tensor([[1.5, 1.0], [1.0, 0.5]], dtype=torch.float64)
    per_sequence = corrected_advantages(torch.tensor([2.0, -1.0]), weights)
    assert per_sequence.dtype == torch.float32 and per_sequence.tolist() == [[3.0, 2.0], [-1.0, -0.5]]
    per_token = corrected_advantages(torch.tensor([[2.0, 4.0], [-1.0, -2.0]]), weights)
    assert per_token.tolist() == [[3.0, 4.0], [-1.0, -1.0]]
