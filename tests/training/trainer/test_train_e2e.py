"""End to end: GRPO training changes the weights and checkpoints resume exactly (on ``policy_coin_model_dir``,
whose groups differ in reward by construction), and on a quick build of the embedded model self-play runs,
evaluation writes its report, a grid sweep picks a best config, and a Ray job trains.  Slow: the model is
built once per module."""

import json
import os
import shutil

import pytest

from coin_model import COIN_OVERRIDES

pytestmark = pytest.mark.slow

TINY = ["grpo.max_steps=2", "grpo.groups_per_step=2", "grpo.num_generations=4", "rollout.backend=inprocess",
        "checkpoint.save_steps=1", "wandb.mode=offline", "rollout.sampling.max_new_tokens=128"]

#: The weights test learns on the coin model (``tests/coin_model.py``): 2 steps x 2 groups of 4 episodes; that no
#: group has reward variance has probability at most 0.008 ** 4 = 4.1e-9, on any CPU and sampling seed.
LEARN = [*TINY, *COIN_OVERRIDES]


@pytest.fixture(scope="module")
def default_model(tmp_path_factory):
    """A quick build of the embedded model (same recipe, fewer seeds and steps): these tests check the
    pipeline, not the model's quality (``benchmarks/default_model_targets.py`` measures the real build)."""
    from training.config.model import DefaultModelConfig, SFTHyperParams
    from training.model.default import build_default_model

    cfg = DefaultModelConfig(n_train_seeds=4, sft=SFTHyperParams(lm_steps=60, completion_steps=60, lab_manager_steps=30))
    return str(build_default_model(tmp_path_factory.mktemp("quick-default") / "model", cfg, progress=False))


@pytest.fixture(autouse=True)
def _offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _weights(path):
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "model.safetensors"))


def test_train_changes_weights_logs_and_resumes(policy_coin_model_dir, tmp_path):
    import torch

    from training.config.train import load_train_config
    from training.trainer.run import run_train

    model = policy_coin_model_dir
    cfg = load_train_config("configs/train/default.yaml", [*LEARN, f"model={model}", f"output_dir={tmp_path}"])
    summary = run_train(cfg)
    run = cfg.run_dir
    assert summary["steps"] == 2 and summary["episodes"] == 16
    before, after = _weights(model), _weights(run / "final")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    zero_std = [r["train/frac_reward_zero_std"] for r in rows if "train/frac_reward_zero_std" in r]
    changed = [k for k in after if not torch.equal(before[k], after[k])]
    # GRPO learns only where a group's rewards differ: the run must have had such groups, and moved weights
    assert zero_std and min(zero_std) < 1.0, f"every GRPO group had equal rewards (frac_reward_zero_std {zero_std})"
    assert changed, "GRPO steps with reward variance left every weight unchanged"
    assert len(changed) > len(after) // 2, f"only {len(changed)} of {len(after)} weight tensors changed"
    assert any("reward/mean" in r for r in rows) and any("train/loss" in r for r in rows)
    episodes = (run / "episodes.jsonl").read_text().splitlines()
    assert len(episodes) == 16 and all(json.loads(e)["log"]["seed"] < 1_000_000 for e in episodes)
    assert (run / "checkpoints" / "checkpoint-2" / "optimizer.pt").exists()
    with pytest.raises(FileExistsError):
        run_train(cfg)
    longer = load_train_config("configs/train/default.yaml",
                               [*LEARN, "grpo.max_steps=3", f"model={model}", f"output_dir={tmp_path}"])
    resumed = run_train(longer, resume=True)
    assert resumed["steps"] == 3 and resumed["episodes"] == 8
    assert resumed["resumed_from"].endswith("checkpoint-2")


def test_selfplay_config_runs(default_model, tmp_path):
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    cfg = load_train_config("configs/train/selfplay.yaml", [*TINY, f"model={default_model}", f"output_dir={tmp_path}"])
    assert cfg.seats.trained_roles == ("scientist", "lab_manager")
    summary = run_train(cfg)
    assert summary["steps"] == 2
    rows = [json.loads(line) for line in (cfg.run_dir / "episodes.jsonl").read_text().splitlines()]
    roles = [row["role"] for row in rows]
    assert set(roles) == {"scientist", "lab_manager"}
    assert all(set(row["log"]["role_rewards"]) == {"scientist", "lab_manager"} for row in rows)
    # GRPO groups (G consecutive episodes) never mix roles
    assert all(len(set(roles[i:i + 4])) == 1 for i in range(0, len(roles), 4))


def test_eval_report(default_model, tmp_path):
    from training.config.eval import load_eval_config
    from training.eval.run import run_eval

    cfg = load_eval_config(None, [f"agents=[model:{default_model}, 'scripted:naive', 'scripted:oracle']", "episodes=2",
                                  "templates=[cell_biology]", "backend=inprocess", f"out={tmp_path / 'eval'}"])
    report = run_eval(cfg, progress=False)
    saved = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert saved["split"] == "test" and saved["seeds"] == [1_000_000, 1_000_001]
    for spec in (f"model:{default_model}", "scripted:naive", "scripted:oracle"):
        overall = saved["agents"][spec]["overall"]
        assert overall["episodes"] == 6 and overall["ci95"][0] <= overall["mean_reward"] <= overall["ci95"][1]
        low, high = overall["lab_manager_ci95"]
        assert low <= overall["lab_manager_reward"] <= high  # both seats' rewards are reported
        assert set(saved["agents"][spec]["by_cell"]) == {"cell_biology/easy", "cell_biology/medium", "cell_biology/hard"}
    assert saved["agents"]["scripted:oracle"]["overall"]["oracle_fraction"] == pytest.approx(1.0)
    # the bar chart holds every agent's mean reward in every cell, and was saved
    from figures import bars, saved_as

    from training.eval.report import reward_by_cell_figure

    fig = reward_by_cell_figure(report)
    by_cell = {spec: saved["agents"][spec]["by_cell"] for spec in saved["agents"]}
    assert bars(fig.axes[0]) == {spec: [cells[c]["mean_reward"] for c in saved["cells"]]
                                 for spec, cells in by_cell.items()}
    assert len(saved["agents"]) == 3 and len(saved["cells"]) == 3
    assert saved_as(fig, tmp_path / "eval" / "reward_by_cell.png", dpi=120)
    assert "| scripted:naive |" in (tmp_path / "eval" / "report.md").read_text()
    assert report == saved


def test_grid_sweep_picks_a_best_config(default_model, tmp_path):
    from training.config.sweep import load_sweep_config
    from training.sweep.run import run_sweep

    overrides = [*TINY, "grpo.max_steps=1", "grpo.groups_per_step=1", f"model={default_model}",
                 "checkpoint.save_steps=100"]
    cfg = load_sweep_config("configs/sweeps/cpu_grid.yaml", [f"out={tmp_path}", f"overrides={json.dumps(overrides)}"])
    result = run_sweep(cfg)
    assert len(result["trials"]) == 4 and all(t["score"] is not None for t in result["trials"])
    scores = [t["score"] for t in result["trials"]]
    assert result["best"]["score"] == max(scores)
    best = (tmp_path / "cpu-grid" / "best.yaml").read_text()
    assert f"learning_rate: {result['best']['grpo.learning_rate']}" in best
    assert (tmp_path / "cpu-grid" / "trials.md").exists()


def test_ray_submit_trains_through_a_ray_job(default_model, tmp_path):
    import socket
    import subprocess
    import sys

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    import tempfile

    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    port, dash, agent = free_port(), free_port(), free_port()
    temp_dir = tempfile.mkdtemp(prefix="rl-ray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    subprocess.run([ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                    "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--dashboard-agent-listen-port={agent}",
                    "--num-cpus=2", f"--temp-dir={temp_dir}"], check=True, env=env, capture_output=True)
    try:
        out = subprocess.run(
            ["bash", "launch/ray_submit.sh", "configs/train/default.yaml", *TINY, "grpo.max_steps=1",
             "grpo.groups_per_step=1", "rollout.backend=ray", "rollout.num_workers=1", f"model={default_model}",
             f"output_dir={tmp_path / 'runs'}"],
            env={**env, "RAY_ADDRESS": f"http://127.0.0.1:{dash}", "JOB_PYTHON": sys.executable},
            capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "Training finished" in out.stdout and "succeeded" in out.stdout.lower()
        assert (tmp_path / "runs" / "scientist-vs-scripted" / "final" / "model.safetensors").exists()
    finally:
        # stop only this head (a plain `ray stop` would also end other Ray sessions on the machine);
        # a process that outlives SIGTERM (the GCS server can) is killed
        _stop_processes_matching(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _stop_processes_matching(pattern: str, grace_s: float = 10.0) -> None:
    import subprocess
    import time

    subprocess.run(["pkill", "-f", pattern], capture_output=True)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode != 0:
            return
        time.sleep(0.5)
    subprocess.run(["pkill", "-9", "-f", pattern], capture_output=True)


def test_role_baseline_learns_and_resumes_exactly(policy_coin_model_dir, tmp_path):
    """``grpo.advantage=role_baseline``: the run moves the weights, every checkpoint holds the baselines, and the
    run resumed from its step-2 checkpoint (the later ones removed) ends exactly like the uninterrupted run."""
    import torch
    from resume_runs import resume_cut_run

    from training.config.train import load_train_config
    from training.trainer.run import run_train

    def config(out):
        return load_train_config("configs/train/default.yaml", [
            *LEARN, "grpo.advantage=role_baseline", "grpo.max_steps=3", f"model={policy_coin_model_dir}",
            f"output_dir={out}", "run_name=rb"])

    whole = config(tmp_path / "whole")
    run_train(whole)
    state = json.loads((whole.run_dir / "checkpoints" / "checkpoint-2" / "trainer_state.json").read_text())
    means = state["stateful_callbacks"]["RoleBaseline"]["attributes"]["means"]
    assert set(means) == {"scientist"} and isinstance(means["scientist"], float)
    part = config(tmp_path / "part")
    resume_cut_run(whole.run_dir, part, 3)
    resumed, after = _weights(part.run_dir / "final"), _weights(whole.run_dir / "final")
    assert all(torch.equal(resumed[k], after[k]) for k in after), "the resumed run ended with other weights"
    before = _weights(policy_coin_model_dir)
    assert any(not torch.equal(before[k], after[k]) for k in after)


def test_selfplay_with_an_opponent_pool_resumes_with_the_same_opponents(policy_coin_model_dir, tmp_path):
    """Self-play whose Lab Manager, in the Scientist's episodes, is drawn from a pool (the live policy, its
    snapshots, the thrifty scripted lab): the pool is logged per step, its snapshots are saved in every checkpoint,
    and a run resumed from step 2 plays the same opponents, step for step, and ends like the uninterrupted one."""
    import torch
    from resume_runs import resume_cut_run

    from training.config.train import load_train_config
    from training.trainer.run import run_train

    pools = ('seats.pools={"lab_manager": [{"seat": "policy", "weight": 1}, {"seat": "snapshot", "weight": 1}, '
             '{"seat": "scripted:thrifty", "weight": 1}]}')

    def config(out):
        return load_train_config("configs/train/selfplay.yaml", [
            *LEARN, pools, "seats.snapshots.every=1", "seats.snapshots.keep=2", "grpo.max_steps=3",
            "grpo.groups_per_step=4", f"model={policy_coin_model_dir}", f"output_dir={out}", "run_name=pool"])

    whole = config(tmp_path / "whole")
    run_train(whole)
    rows = [json.loads(line) for line in (whole.run_dir / "metrics.jsonl").read_text().splitlines()]
    drawn = [r for r in rows if "pool/snapshots_held" in r]
    assert [r["pool/snapshots_held"] for r in drawn] == [1.0, 2.0, 2.0]
    assert any(k.startswith("pool/lab_manager/") for r in drawn for k in r)
    saved = json.loads((whole.run_dir / "checkpoints" / "checkpoint-2" / "opponent_snapshots" / "pool.json").read_text())
    assert saved["steps"] == [0, 1]
    part = config(tmp_path / "part")
    resume_cut_run(whole.run_dir, part, 3)
    resumed, after = _weights(part.run_dir / "final"), _weights(whole.run_dir / "final")
    assert all(torch.equal(resumed[k], after[k]) for k in after)


@pytest.mark.parametrize("group_by", ["turn", "episode"])
def test_constrained_selfplay_trains_on_policy(tmp_path, group_by):
    """``rollout.sampling.constrained`` through the real trainer, both seats, a KL term (TRL's reference scoring)
    and several micro-batches: the trainer's masked log-probs are the rollouts' (mismatch under 1e-4 nats per
    token for each role) and the weights move; with whole-episode groups each Scientist row holds several replies,
    each scored under its own turn's grammar."""
    import torch

    from training.config.train import load_train_config
    from training.model.default import resolve_default_model
    from training.trainer.run import run_train

    model = str(resolve_default_model())
    cfg = load_train_config("configs/train/selfplay.yaml", [
        *TINY, "grpo.max_steps=1", "grpo.num_generations=8", "rollout.sampling.constrained=true", "grpo.beta=0.04",
        f"grpo.group_by={group_by}", "rollout.sampling.bound_roles=[lab_manager,scientist]", f"model={model}",
        f"output_dir={tmp_path}"])
    run_train(cfg)
    rows = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    mismatch = {k: v for r in rows for k, v in r.items() if k.startswith("mismatch/") and k.endswith("/abs_diff")}
    assert set(mismatch) == {"mismatch/scientist/abs_diff", "mismatch/lab_manager/abs_diff"}
    assert max(mismatch.values()) < 1e-4, mismatch
    before, after = _weights(model), _weights(cfg.run_dir / "final")
    assert any(not torch.equal(before[k], after[k]) for k in after)


def test_selfplay_with_role_weights_and_role_scaling_trains(policy_coin_model_dir, tmp_path):
    """``data.role_weights`` and ``grpo.scale_rewards=role`` through the real trainer in self-play: each step plays 3
    Scientist groups and 1 Lab Manager group, and the advantages scaled per role move the weights."""
    import torch

    from training.config.train import load_train_config
    from training.trainer.run import run_train

    cfg = load_train_config("configs/train/selfplay.yaml", [
        *LEARN, "grpo.max_steps=2", "grpo.groups_per_step=4", "grpo.scale_rewards=role",
        "data.role_weights={scientist: 3}", f"model={policy_coin_model_dir}", f"output_dir={tmp_path}"])
    run_train(cfg)
    rows = [json.loads(line) for line in (cfg.run_dir / "episodes.jsonl").read_text().splitlines()]
    g = cfg.grpo.num_generations
    for step in (0, 1):
        roles = [r["role"] for r in rows if r["step"] == step]
        assert roles.count("scientist") == 3 * g and roles.count("lab_manager") == g, (step, roles)
    before, after = _weights(policy_coin_model_dir), _weights(cfg.run_dir / "final")
    assert any(not torch.equal(before[k], after[k]) for k in after)
