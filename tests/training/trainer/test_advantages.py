"""Per-role credit: the role baseline's advantages, its state across a resume, and groups that never mix roles."""

from types import SimpleNamespace

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


def test_the_trainer_hands_each_process_its_share_of_the_role_advantages():
    """What ``ReplicaLabGRPOTrainer`` does with the rollout's per-episode role rewards (single process)."""
    from training.trainer.grpo import REWARD_KEY, ReplicaLabGRPOTrainer

    trainer = SimpleNamespace(accelerator=SimpleNamespace(num_processes=1, process_index=0),
                              role_baseline=RoleBaseline(decay=0.0))
    inputs = [{REWARD_KEY: r, "role": role} for r, role in
              [(8.0, "scientist"), (6.0, "scientist"), (-2.0, "lab_manager"), (0.0, "lab_manager")]]
    advantages = ReplicaLabGRPOTrainer._role_advantages(trainer, inputs)
    assert advantages.tolist() == [1.0, -1.0, -1.0, 1.0]
