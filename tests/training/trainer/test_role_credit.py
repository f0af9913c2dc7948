"""Per-role credit on real self-play steps: every GRPO group holds one role, and each episode's advantage is its
own role's reward against its own group (``grpo.advantage=group``) or its role's running baseline
(``role_baseline``), on steps where the two roles' rewards of one episode differ.  Slow: it trains."""

from __future__ import annotations

import json

import pytest
import torch
from coin_model import COIN_OVERRIDES

pytestmark = pytest.mark.slow

#: 2 steps of 4 groups x 4 episodes, both seats played by the policy (the coin model: its groups differ by construction).
SELFPLAY_TINY = ["grpo.max_steps=2", "grpo.groups_per_step=4", "grpo.num_generations=4", "rollout.backend=inprocess",
                 "checkpoint.save_steps=2", "wandb.mode=disabled", "rollout.sampling.max_new_tokens=128",
                 "validation.every_steps=0", "seats.pools={}", *COIN_OVERRIDES]


def _train_and_capture(model_dir, out, advantage: str, monkeypatch) -> tuple[list[dict], list[dict]]:
    """Run self-play and return, per generation batch, the rows the trainer scored (role, reward) with the
    advantages it trained on; and the run's episode log rows."""
    from training.config.train import load_train_config
    from training.trainer.grpo import REWARD_KEY, ReplicaLabGRPOTrainer
    from training.trainer.run import run_train

    seen: list[dict] = []
    original = ReplicaLabGRPOTrainer._generate_and_score_completions

    def capture(self, inputs):
        output = original(self, inputs)
        advantages = output["advantages"]
        seen.append({"roles": [row["role"] for row in inputs], "rewards": [float(row[REWARD_KEY]) for row in inputs],
                     "advantages": (advantages if advantages.dim() == 1 else advantages[:, 0]).tolist()})
        return output

    monkeypatch.setattr(ReplicaLabGRPOTrainer, "_generate_and_score_completions", capture)
    cfg = load_train_config("configs/train/selfplay.yaml", [
        *SELFPLAY_TINY, f"grpo.advantage={advantage}", f"model={model_dir}", f"output_dir={out}", "run_name=credit"])
    run_train(cfg)
    episodes = [json.loads(line) for line in (cfg.run_dir / "episodes.jsonl").read_text().splitlines()]
    return seen, episodes


def test_group_advantages_use_each_roles_own_reward_within_one_role_groups(policy_coin_model_dir, tmp_path,
                                                                          monkeypatch):
    seen, episodes = _train_and_capture(policy_coin_model_dir, tmp_path, "group", monkeypatch)
    assert len(seen) == 2
    # the logged episodes: each trained row's reward is its role's own, and the two roles' rewards differ
    assert any(e["log"]["role_rewards"]["scientist"] != e["log"]["role_rewards"]["lab_manager"] for e in episodes)
    own = [e["log"]["role_rewards"][e["role"]] for e in episodes]
    assert [r for batch in seen for r in batch["rewards"]] == pytest.approx(own)
    for batch in seen:
        roles, rewards, advantages = batch["roles"], batch["rewards"], batch["advantages"]
        assert set(roles) == {"scientist", "lab_manager"}  # both seats trained in one step
        for start in range(0, len(roles), 4):
            group = slice(start, start + 4)
            assert len(set(roles[group])) == 1, "a GRPO group mixed roles"
            r = torch.tensor(rewards[group], dtype=torch.float64)
            want = (r - r.mean()) / (r.std() + 1e-4)  # scale_rewards=group: this group's own statistics
            assert advantages[group] == pytest.approx(want.tolist(), abs=1e-4)


def test_role_baseline_advantages_follow_each_roles_running_mean(policy_coin_model_dir, tmp_path, monkeypatch):
    from training.config.train import TrainConfig
    from training.trainer.advantages import RoleBaseline

    seen, _ = _train_and_capture(policy_coin_model_dir, tmp_path, "role_baseline", monkeypatch)
    replay = RoleBaseline(decay=TrainConfig().grpo.role_baseline_decay)
    for batch in seen:  # the same baselines, fed the same rewards, give the advantages trained on
        want = replay.advantages(batch["rewards"], batch["roles"])
        assert batch["advantages"] == pytest.approx(want, abs=1e-5)
        lab = [a for a, role in zip(batch["advantages"], batch["roles"]) if role == "lab_manager"]
        sci = [a for a, role in zip(batch["advantages"], batch["roles"]) if role == "scientist"]
        assert lab and sci
