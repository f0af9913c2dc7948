"""Seed splits: train, validation and test are disjoint; everything that trains, sweeps or selects plays
only train and validation seeds (checked by recording every seed the env generates a scenario for);
a test-split sweep metric is refused in one line; seed-range arguments are bounded; the data order does
not depend on ``grpo.max_steps``, so a resumed run with more steps continues the same scenarios."""

from __future__ import annotations

import json

import pytest

from replicalab import TEMPLATES, TEST_SEEDS, TRAIN_SEEDS, VALIDATION_SEEDS
from replicalab.seeds import SPLITS, split_of, split_seeds

TRAIN_TINY = ["grpo.max_steps=2", "grpo.groups_per_step=1", "grpo.num_generations=2", "rollout.backend=inprocess",
              "checkpoint.save_steps=1", "wandb.mode=disabled", "rollout.sampling.max_new_tokens=16",
              "grpo.max_completion_length=256", "rollout.max_rounds=1", "validation.every_steps=1",
              "validation.episodes=2", "data.templates=[cell_biology]"]


# ---------------------------------------------------------------- fast tier

def test_splits_are_disjoint_and_named_once() -> None:
    ranges = list(SPLITS.values())
    for i, a in enumerate(ranges):
        for b in ranges[i + 1:]:
            assert a.stop <= b.start or b.stop <= a.start
    assert TRAIN_SEEDS == range(0, 1_000_000) and TEST_SEEDS == range(1_000_000, 1_100_000)
    assert VALIDATION_SEEDS == range(2_000_000, 2_100_000)
    assert [split_of(s) for s in (0, 999_999, 1_000_000, 1_099_999, 2_000_000, 2_099_999)] == [
        "train", "train", "test", "test", "validation", "validation"]
    assert split_of(1_500_000) is None and split_of(-1) is None


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("count,offset", [(-1, 0), (0, -1), (1, 10**7), (10**7, 0), (2, "end-1")])
def test_split_seeds_refuses_out_of_range_slices(split, count, offset) -> None:
    size = len(SPLITS[split])
    offset = size - 1 if offset == "end-1" else offset
    with pytest.raises(ValueError) as err:
        split_seeds(split, count, offset)
    assert "\n" not in str(err.value) and str(size) in str(err.value)
    assert list(split_seeds(split, 3, size - 3)) == list(SPLITS[split][-3:])


def test_eval_config_split_bounds_and_default() -> None:
    from training.config.eval import EvalConfig, load_eval_config
    from training.config.loading import ConfigError

    assert EvalConfig().split == "test" and EvalConfig().seeds[0] == TEST_SEEDS.start
    assert EvalConfig(split="validation", episodes=2).seeds == [VALIDATION_SEEDS[0], VALIDATION_SEEDS[1]]
    for bad in (["seed_offset=-1"], ["episodes=-3"], ["episodes=100001"], ["seed_offset=99999"],
                ["split=validation", "seed_offset=99990", "episodes=11"], ["split=heldout"]):
        with pytest.raises(ConfigError) as err:
            load_eval_config(None, bad)
        assert "\n" not in str(err.value), bad
    assert load_eval_config(None, ["split=train", "seed_offset=999998", "episodes=2"]).seeds == [999_998, 999_999]


def test_train_config_seed_bounds() -> None:
    from training.config.data import DataConfig
    from training.config.validation import ValidationConfig

    for kwargs in ({"episodes": 0}, {"episodes": len(VALIDATION_SEEDS) + 1}, {"every_steps": -1}):
        with pytest.raises(ValueError):
            ValidationConfig(**kwargs)
    for offset in (-1, len(TRAIN_SEEDS)):
        with pytest.raises(ValueError):
            DataConfig(seed_offset=offset)
    assert ValidationConfig(episodes=len(VALIDATION_SEEDS)).episodes == len(VALIDATION_SEEDS)


@pytest.mark.parametrize("metric", ["test/reward/mean", "test/scripted:naive/mean_reward", "heldout/reward/mean"])
def test_sweep_refuses_a_test_metric_in_one_line(metric) -> None:
    from training.config.loading import ConfigError
    from training.config.sweep import load_sweep_config

    with pytest.raises(ConfigError) as err:
        load_sweep_config("configs/sweeps/cpu_grid.yaml", [f"metric={metric}"])
    assert "test split" in str(err.value) and "\n" not in str(err.value)
    ok = load_sweep_config("configs/sweeps/cpu_grid.yaml", [
        "metric=val/reward/mean", 'overrides=["grpo.max_steps=3", "validation.every_steps=1"]'])
    assert ok.metric == "val/reward/mean"


def test_sweep_refuses_a_validation_metric_without_the_check() -> None:
    from training.config.loading import ConfigError
    from training.config.sweep import load_sweep_config

    with pytest.raises(ConfigError, match="validation.every_steps"):
        load_sweep_config("configs/sweeps/cpu_grid.yaml", ["metric=val/reward/mean",
                                                           'overrides=["validation.every_steps=0"]'])


def test_metric_value_refuses_test_metrics(tmp_path) -> None:
    from training.sweep.trial import metric_value

    (tmp_path / "metrics.jsonl").write_text(json.dumps({"test/reward/mean": 1.0, "val/reward/mean": 2.0}) + "\n")
    with pytest.raises(ValueError, match="test split"):
        metric_value(tmp_path, "test/reward/mean", 1)
    assert metric_value(tmp_path, "val/reward/mean", 1) == 2.0


def test_metric_value_leaves_out_the_check_of_the_starting_weights(tmp_path) -> None:
    from training.sweep.trial import metric_value

    rows = [{"step": 0, "val/reward/mean": 9.0}, {"step": 0, "reward/mean": 1.0},
            {"step": 4, "val/reward/mean": 2.0}, {"step": 8, "val/reward/mean": 4.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert metric_value(tmp_path, "val/reward/mean", 3) == 3.0
    assert metric_value(tmp_path, "reward/mean", 1) == 1.0  # a training metric's step 0 is the trial's own


@pytest.mark.parametrize("value", ["-1", "100001", str(10**6)])
def test_build_default_model_refuses_bad_eval_seeds_before_building(value, tmp_path, capsys) -> None:
    from training.cli import main

    out = tmp_path / "model"
    assert main(["build-default-model", "--out", str(out), "--eval-seeds", value]) != 0 and not out.exists()
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--eval-seeds" in lines[0] and "100000" in lines[0], err


def test_validation_slice_plays_validation_seeds_only() -> None:
    from training.rollout.records import validation_slice

    for episodes in (1, 9, 27, 100):
        jobs = validation_slice(episodes, TEMPLATES, ["easy", "hard"])
        assert len(jobs) == episodes and all(j.seed in VALIDATION_SEEDS for j in jobs)


@pytest.mark.parametrize("seed", [0, 7])
def test_train_rows_are_a_stream_independent_of_length(seed) -> None:
    from training.config.train import TrainConfig
    from training.trainer.build import data_stream

    cfg = TrainConfig(seed=seed, data={"seed_offset": 123})
    long = data_stream(cfg)(3000)
    for n in (0, 1, 5, 64, 999):
        assert data_stream(cfg)(n) == long[:n]
    seeds = [r["seed"] for r in long]
    assert len(set(seeds)) == len(seeds) and all(s in TRAIN_SEEDS and s >= 123 for s in seeds)
    assert data_stream(TrainConfig(seed=seed + 1))(5) != data_stream(TrainConfig(seed=seed))(5)


# ---------------------------------------------------------------- slow tier: seeds actually played

@pytest.fixture
def played_seeds(monkeypatch):
    """Every seed a scenario is generated for in this process: ``generate_scenario`` (whoever imported it:
    the env, scripted agents) looks ``build_scenario`` up in ``replicalab.scenarios`` at each call."""
    import replicalab.scenarios as scenarios

    seen: list[int] = []
    real = scenarios.build_scenario

    def recording(domain, seed, difficulty):
        seen.append(seed)
        return real(domain, seed, difficulty)

    monkeypatch.setattr(scenarios, "build_scenario", recording)
    return seen


@pytest.fixture(autouse=True)
def _offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _episode_seeds(run_dir) -> list[tuple]:
    """Each logged training episode as (step, role, seed, template, difficulty), in log order."""
    rows = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    return [(r["step"], r["role"], r["log"]["seed"], r["log"]["scenario_template"], r["log"]["difficulty"])
            for r in rows]


@pytest.mark.slow
def test_training_with_validation_every_step_never_plays_a_test_seed(policy_wide_model_dir, tmp_path, played_seeds):
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    cfg = load_train_config(None, [*TRAIN_TINY, f"model={policy_wide_model_dir}", f"output_dir={tmp_path}"])
    run_train(cfg)
    assert played_seeds and not [s for s in played_seeds if s in TEST_SEEDS]
    validation = [s for s in played_seeds if s not in TRAIN_SEEDS]
    assert validation and all(s in VALIDATION_SEEDS for s in validation)
    rows = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(k.startswith("val/") for r in rows for k in r)
    checked = [r["step"] for r in rows if "val/reward/mean" in r]
    assert checked == list(range(cfg.grpo.max_steps + 1))  # the starting weights, then every step
    assert not any(k.startswith(("test/", "heldout/")) for r in rows for k in r)


@pytest.mark.slow
def test_sweep_trial_scores_on_validation_and_never_plays_a_test_seed(policy_wide_model_dir, tmp_path,
                                                                      played_seeds):
    from training.config.sweep import load_sweep_config
    from training.sweep.trial import run_trial

    sweep = load_sweep_config("configs/sweeps/cpu_grid.yaml", [
        f"out={tmp_path}", "metric=val/reward/mean", "metric_window=1",
        f"overrides={json.dumps([*TRAIN_TINY, 'grpo.max_steps=1', f'model={policy_wide_model_dir}'])}"])
    result = run_trial(sweep.trials()[0], sweep, 0)
    assert isinstance(result["score"], float)
    assert played_seeds and all(s in TRAIN_SEEDS or s in VALIDATION_SEEDS for s in played_seeds)
    assert any(s in VALIDATION_SEEDS for s in played_seeds)


@pytest.mark.slow
def test_seat_check_of_the_build_plays_validation_seeds(policy_wide_model_dir, played_seeds):
    from training.eval.seat_check import evaluate_model_seats

    report = evaluate_model_seats(policy_wide_model_dir, split_seeds("validation", 1), templates=TEMPLATES[:1],
                                  difficulties=["easy"])
    assert report.scientist.episodes == 1
    assert played_seeds and all(s in VALIDATION_SEEDS for s in played_seeds)


@pytest.mark.slow
def test_resume_with_larger_max_steps_continues_the_same_scenarios(policy_wide_model_dir, tmp_path):
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    base = [*TRAIN_TINY, "validation.every_steps=0", "grpo.groups_per_step=2", f"model={policy_wide_model_dir}"]
    straight = load_train_config(None, [*base, "grpo.max_steps=4", f"output_dir={tmp_path / 'a'}"])
    run_train(straight)
    short = load_train_config(None, [*base, "grpo.max_steps=2", f"output_dir={tmp_path / 'b'}"])
    run_train(short)
    longer = load_train_config(None, [*base, "grpo.max_steps=4", f"output_dir={tmp_path / 'b'}"])
    run_train(longer, resume=True)
    uninterrupted, resumed = _episode_seeds(straight.run_dir), _episode_seeds(longer.run_dir)
    assert len(uninterrupted) == 4 * 2 * 2 and [k[0] for k in uninterrupted] == [s for s in range(4) for _ in range(4)]
    assert resumed == uninterrupted


def test_trl_keeps_the_row_order(tmp_path) -> None:
    """TRL's shuffle permutes the whole dataset (its length is max_steps * groups_per_step): it stays off."""
    from training.config.train import TrainConfig
    from training.trainer.build import grpo_args

    assert grpo_args(TrainConfig(output_dir=str(tmp_path)), device="cpu").shuffle_dataset is False


# ---------------------------------------------------------------- selection guards (fast)

@pytest.mark.parametrize("overrides", [
    ['overrides=["grpo.max_steps=3", "validation.every_steps=4"]'],  # the check would first run after the end
    ['overrides=["validation.every_steps=1", "seats.scientist=scripted", "seats.lab_manager=policy"]'],
])
def test_sweep_refuses_a_validation_metric_no_trial_logs(overrides) -> None:
    from training.config.loading import ConfigError
    from training.config.sweep import load_sweep_config

    with pytest.raises(ConfigError, match="never runs it") as err:
        load_sweep_config("configs/sweeps/cpu_grid.yaml", ["metric=val/reward/mean", *overrides])
    assert "\n" not in str(err.value)


def test_sweep_checks_the_validation_metric_for_every_trial() -> None:
    """A search over the check's own keys: the second trial turns it off, and is refused before any trains."""
    from training.config.sweep import SweepConfig

    with pytest.raises(ValueError, match=r"trial \{'validation.every_steps': 0\} never runs it"):
        SweepConfig(base="configs/train/default.yaml", search={"validation.every_steps": [2, 0]},
                    metric="val/reward/mean")
    with pytest.raises(ValueError, match=r"trial \{'grpo.max_steps': 1\} never runs it"):
        SweepConfig(base="configs/train/default.yaml", overrides=["validation.every_steps=2"],
                    search={"grpo.max_steps": [4, 1]}, metric="val/reward/mean")
    ok = SweepConfig(base="configs/train/default.yaml", overrides=["validation.every_steps=1"],
                     search={"grpo.max_steps": [4, 1]}, metric="val/reward/mean")
    assert len(ok.trials()) == 2


def test_seat_check_refuses_test_seeds_before_loading_a_model(tmp_path) -> None:
    from training.eval.seat_check import evaluate_model_seats

    for seeds in ([TEST_SEEDS[0]], [VALIDATION_SEEDS[0], TEST_SEEDS[-1]]):
        with pytest.raises(ValueError, match="may not play test seeds"):
            evaluate_model_seats(tmp_path / "no-model-here", seeds)


def test_eval_metrics_carry_the_split_prefix(tmp_path) -> None:
    """An eval report on the validation split logs ``val/<agent>/...`` (the spelling the check during
    training uses) and states its split and seeds in report.json and report.md."""
    from replicalab.seeds import METRIC_PREFIXES
    from training.config.eval import EvalConfig
    from training.eval.run import run_eval

    assert METRIC_PREFIXES == {"train": "train", "validation": "val", "test": "test"}
    cfg = EvalConfig(agents=["scripted:naive"], split="validation", episodes=2, templates=["cell_biology"],
                     difficulties=["easy"], backend="inprocess", out=str(tmp_path / "eval"),
                     wandb={"mode": "disabled"}, bootstrap_samples=100)
    report = run_eval(cfg, progress=False)
    assert report["split"] == "validation" and report["seeds"] == list(VALIDATION_SEEDS[:2])
    (row,) = [json.loads(line) for line in (tmp_path / "eval" / "metrics.jsonl").read_text().splitlines()]
    keys = [k for k in row if k != "step"]
    assert keys and all(k.startswith("val/") for k in keys) and "val/scripted:naive/mean_reward" in keys
    md = (tmp_path / "eval" / "report.md").read_text()
    assert "validation" in md and f"{VALIDATION_SEEDS[0]}..{VALIDATION_SEEDS[1]}" in md


def test_trl_reads_the_rows_in_the_same_order_for_any_max_steps(policy_tiny_model_dir, tmp_path) -> None:
    """TRL's own sampler and dataloader over ``build_dataset``: step k's prompts are the same whether the run
    has 2 or 5 steps (TRL's shuffle, a permutation of the whole dataset, would reorder them)."""
    from trl import GRPOTrainer

    from training.config.train import load_train_config
    from training.trainer.build import data_stream, grpo_args
    from training.trainer.grpo import build_dataset, job_key, role_reward

    orders = []
    for steps in (2, 5):
        cfg = load_train_config(None, [*TRAIN_TINY, "grpo.groups_per_step=2", f"grpo.max_steps={steps}",
                                       f"output_dir={tmp_path}", f"run_name=run-{steps}"])
        dataset = build_dataset(data_stream(cfg)(cfg.num_train_rows))
        trainer = GRPOTrainer(model=str(policy_tiny_model_dir), reward_funcs=[role_reward], train_dataset=dataset,
                              args=grpo_args(cfg, device="cpu"),
                              rollout_func=lambda prompts, trainer: {})
        prompts = [row["prompt"] for batch in trainer.get_train_dataloader() for row in batch]
        assert prompts == [job_key(r) for r in dataset for _ in range(cfg.grpo.num_generations)]
        orders.append(prompts)
    assert orders[1][: len(orders[0])] == orders[0]
