"""The reference training run and the comparisons that resume, fault and multi-process tests share: a few
cheap in-process steps of a tiny model, and the check that two runs ended with the same weights and logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAIN_CFG = str(REPO / "configs" / "train" / "default.yaml")
#: A few cheap steps: 2 episodes a step, short replies, a checkpoint every step (all kept).
RESUME_STEPS = 4
RESUME_TINY = ["grpo.groups_per_step=1", "grpo.num_generations=2", "rollout.backend=inprocess",
               "checkpoint.save_steps=1", "checkpoint.save_total_limit=10", "validation.every_steps=0",
               "rollout.sampling.max_new_tokens=24", "rollout.max_rounds=2", "wandb.mode=disabled",
               "grpo.weight_decay=0.1", "device=cpu"]
#: Metric keys that measure time or aggregate one session (not one step): left out of log comparisons.
SESSION_KEYS = ("train/train_runtime", "train/train_samples_per_second", "train/train_steps_per_second",
                "train/train_loss", "train/step_time")


def resume_overrides(model: Path | str, output_dir: Path, run_name: str, steps: int = RESUME_STEPS) -> list[str]:
    return [*RESUME_TINY, f"grpo.max_steps={steps}", f"model={model}", f"output_dir={output_dir}",
            f"run_name={run_name}"]


#: Logged step loss is a difference of the trainer's float32 running sums (transformers' ``tr_loss``), so a run
#: resumed from a checkpoint (its sum restarting at 0) may log it one float32 ulp of the sum apart
#: (2**-27 ~ 7.5e-9 after a step of loss 0.1).  The gradient norm of a step whose advantages cancel (every
#: group scored alike) is rounding noise, ~1e-8, whose last bits follow the kernels' summation order (seen in a
#: full CI run: 2.1379515e-08 against 2.1379513e-08).  The step's mean token entropy, a float32 sum over the
#: batch, follows the same kernels' order in its last bits (seen in a LoRA self-play resume: 0.44483912 against
#: 0.44483906, the episodes and every other logged value equal).  All three are compared at this many decimals.
LOSS_DECIMALS = 6
#: The logged values compared at ``LOSS_DECIMALS``.
ROUNDED_KEYS = ("train/loss", "train/grad_norm", "train/entropy")


def comparable_rows(path: Path) -> list[dict]:
    """A JSONL log's rows without timing and memory fields (a resumed process's allocator starts afresh) and
    per-session aggregates (``ROUNDED_KEYS`` at ``LOSS_DECIMALS``)."""
    rows = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        kept = {k: v for k, v in row.items() if not k.startswith(("time/", "memory/")) and k not in SESSION_KEYS}
        for key in ROUNDED_KEYS:
            if isinstance(kept.get(key), float):
                kept[key] = round(kept[key], LOSS_DECIMALS) + 0.0
        rows.append(kept)
    return rows


def first_difference(got: list[dict], want: list[dict]) -> str:
    """Where two comparable logs part: the row count, or the first row's step and the keys whose values differ."""
    if len(got) != len(want):
        return f"{len(got)} rows, expected {len(want)}"
    for g, w in zip(got, want):
        if g != w:
            keys = sorted(k for k in g.keys() | w.keys() if g.get(k) != w.get(k))
            return f"step {w.get('step')}: " + ", ".join(f"{k} {g.get(k)!r} != {w.get(k)!r}" for k in keys)
    return "equal"


def weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "final" / "model.safetensors"))


def resume_from_cut(whole: Path, part_cfg, last_step: int) -> None:
    """Copy the finished run ``whole`` to ``part_cfg.run_dir`` without its final weights and last checkpoint,
    resume it, and check it resumed from the checkpoint before."""
    import shutil

    from training.trainer.run import run_train

    shutil.copytree(whole, part_cfg.run_dir)
    shutil.rmtree(part_cfg.run_dir / "final")
    shutil.rmtree(part_cfg.run_dir / "checkpoints" / f"checkpoint-{last_step}")
    assert run_train(part_cfg, resume=True)["resumed_from"].endswith(f"checkpoint-{last_step - 1}")


def resume_cut_run(whole: Path, part_cfg, last_step: int) -> None:
    """``resume_from_cut``, then check the resumed run logged what the whole run logged."""
    resume_from_cut(whole, part_cfg, last_step)
    for name in ("metrics.jsonl", "episodes.jsonl"):
        got, want = comparable_rows(part_cfg.run_dir / name), comparable_rows(whole / name)
        assert got == want, f"{name}: {first_difference(got, want)}"


def assert_same_run(run: Path, reference: Path) -> None:
    """Same final weights (bitwise) and the same metrics and episodes, step for step, each step once."""
    import torch

    a, b = weights(run), weights(reference)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "final weights differ"
    for name in ("metrics.jsonl", "episodes.jsonl"):
        got, want = comparable_rows(run / name), comparable_rows(reference / name)
        assert [r["step"] for r in got] == [r["step"] for r in want], name
        assert got == want, f"{name} differs from the uninterrupted run: {first_difference(got, want)}"
    ids = [(r["step"], r["log"]["episode_id"], i % 2) for i, r in enumerate(comparable_rows(run / "episodes.jsonl"))]
    assert len(ids) == len(set(ids))


@pytest.fixture(scope="module")
def reference_run(policy_wide_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted ``RESUME_STEPS``-step run (checkpoint after every step)."""
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    out = tmp_path_factory.mktemp("reference")
    cfg = load_train_config(TRAIN_CFG, resume_overrides(policy_wide_model_dir, out, "ref"))
    summary = run_train(cfg)
    assert summary["steps"] == RESUME_STEPS
    return cfg.run_dir
