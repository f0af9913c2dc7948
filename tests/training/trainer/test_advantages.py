"""Per-role credit: the role baseline's advantages, its state across a resume, and groups that never mix roles."""

import pytest

from training.trainer.advantages import RoleBaseline


def test_each_role_is_measured_against_its_own_baseline():
    baseline = RoleBaseline(decay=0.5)
    roles = ["scientist", "scientist", "lab_manager", "lab_manager"]
    # the two roles' rewards differ: each advantage uses its own role's mean, never the other's
    first = baseline.advantages([9.0, 7.0, 2.0, 4.0], roles)
    assert first == [1.0, -1.0, -1.0, 1.0]
    assert baseline.means == {"scientist": 8.0, "lab_manager": 3.0}
    # a group whose episodes all score alike still teaches against the running baseline
    second = baseline.advantages([10.0, 10.0, 3.0, 3.0], roles)
    assert second == [2.0, 2.0, 0.0, 0.0]
    assert baseline.means == {"scientist": 9.0, "lab_manager": 3.0}
    with pytest.raises(ValueError, match="rewards for"):
        baseline.advantages([1.0], roles)
    with pytest.raises(ValueError, match="decay"):
        RoleBaseline(decay=1.0)


def test_the_baseline_is_saved_with_a_checkpoint_and_read_back_on_resume(tmp_path):
    from transformers import TrainerState

    saved = RoleBaseline(decay=0.9)
    saved.advantages([5.0, 1.0], ["scientist", "lab_manager"])
    TrainerState(stateful_callbacks=[saved]).save_to_json(str(tmp_path / "trainer_state.json"))  # a checkpoint's
    state = TrainerState.load_from_json(str(tmp_path / "trainer_state.json"))  # what a resumed run begins with
    resumed = RoleBaseline(decay=0.9)
    resumed.on_train_begin(None, state, None)
    assert resumed.means == saved.means == {"scientist": 5.0, "lab_manager": 1.0}
    fresh = RoleBaseline(decay=0.9)
    fresh.on_train_begin(None, TrainerState(stateful_callbacks=[RoleBaseline(decay=0.9)]), None)
    assert fresh.means == {}


def test_each_process_gets_its_share_of_the_role_advantages():
    """What ``ReplicaLabGRPOTrainer`` does with the step's per-episode role rewards: the role baseline's
    advantages of the whole step, gathered in process order, cut into each process's share."""
    from training.trainer.grpo_maths import process_share, role_advantages

    rewards = [8.0, 6.0, -2.0, 0.0]
    roles = ["scientist", "scientist", "lab_manager", "lab_manager"]
    advantages, _ = role_advantages(rewards, roles, {}, decay=0.0)
    assert advantages == [1.0, -1.0, -1.0, 1.0]
    assert process_share(advantages, 0, 4) == advantages  # one process: the whole step
    assert [process_share(advantages, i, 2) for i in range(2)] == [[1.0, -1.0], [-1.0, 1.0]]  # two processes


def test_the_trainer_scales_its_batch_advantages_per_role():
    """``grpo.scale_rewards: role``: the trainer divides the batch's advantages (TRL's, group mean removed) by the
    root mean square of each role's, on one process with a real Accelerator."""
    import torch
    from accelerate import Accelerator

    from training.trainer.grpo_trainer import ReplicaLabGRPOTrainer

    trainer = ReplicaLabGRPOTrainer.__new__(ReplicaLabGRPOTrainer)  # only the scaling: no model, no TRL state
    trainer.accelerator = Accelerator(cpu=True)
    rows = [{"role": "scientist"}] * 4 + [{"role": "lab_manager"}] * 2
    out = trainer._role_scaled(torch.tensor([0.1, -0.1, 3.0, -3.0, 0.5, -0.5], dtype=torch.float64), rows)
    assert out.dtype == torch.float64 and out.shape == (6,)
    rms = (18.02 / 4) ** 0.5  # the Scientist's: sqrt((0.01 + 0.01 + 9 + 9) / 4)
    expected = torch.tensor([0.1 / rms, -0.1 / rms, 3.0 / rms, -3.0 / rms, 1.0, -1.0], dtype=torch.float64)
    assert torch.allclose(out, expected)
