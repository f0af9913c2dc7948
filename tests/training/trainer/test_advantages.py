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
