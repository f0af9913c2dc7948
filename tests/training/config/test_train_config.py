"""TrainConfig: every YAML under configs/ loads, unknown keys fail, overrides parse, the resolved config
round-trips (seats and training seeds: ``test_train_seats.py``)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from replicalab import DIFFICULTIES, TEMPLATES
from training.config.loading import RESOLVED_CONFIG_NAME, ConfigError, load_config, save_resolved
from training.config.train import TrainConfig, load_train_config
from training.trainer.build import data_stream

REPO = Path(__file__).resolve().parents[3]
CONFIGS = REPO / "configs"
#: configs/<dir> -> the config class its YAML files load into ("module:Class").  A folder missing here fails.
LOADERS = {
    "train": "training.config.train:TrainConfig",
    "eval": "training.config.eval:EvalConfig",
    "sweeps": "training.config.sweep:SweepConfig",
    "model": "training.config.model:DefaultModelConfig",
}
HEAVY_MODULES = ("torch", "ray", "trl", "transformers", "wandb")
ALL_YAML = sorted(CONFIGS.glob("**/*.yaml")) + sorted(CONFIGS.glob("**/*.yml"))
CONFIG_MODULES = sorted(p.stem for p in (REPO / "training" / "config").glob("*.py") if p.stem != "__init__")


def _config_class(kind: str):
    target = LOADERS.get(kind)
    assert target is not None, f"configs/{kind}/ has no loader: add it to LOADERS in {Path(__file__).name}"
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def test_every_folder_under_configs_has_a_loader_and_yaml() -> None:
    folders = {p.name for p in CONFIGS.iterdir() if p.is_dir()}
    assert folders, "configs/ holds no folders"
    for kind in sorted(folders):
        _config_class(kind)
        assert any((CONFIGS / kind).glob("**/*.y*ml")), f"configs/{kind}/ holds no YAML"
    stray = [p for p in ALL_YAML if len(p.relative_to(CONFIGS).parts) < 2]
    assert not stray, f"YAML outside a configs/<kind>/ folder: {stray}"


@pytest.mark.parametrize("path", ALL_YAML, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_yaml_under_configs_loads(path: Path) -> None:
    cls = _config_class(path.relative_to(CONFIGS).parts[0])
    cfg = load_config(cls, path)
    assert isinstance(cfg, cls)
    assert cfg != cls.model_construct() or not path.read_text().strip()  # the file changed something


def _config_models() -> list[type]:
    """Every pydantic model defined in training/config/*.py."""
    from pydantic import BaseModel

    models = []
    for name in CONFIG_MODULES:
        module = importlib.import_module(f"training.config.{name}")
        models += [obj for obj in vars(module).values() if isinstance(obj, type) and issubclass(obj, BaseModel)
                   and obj.__module__ == module.__name__]
    return models


def test_every_config_field_is_described() -> None:
    models = _config_models()
    names = {m.__name__ for m in models}
    assert {"TrainConfig", "EvalConfig", "SweepConfig", "DefaultModelConfig", "SamplingConfig", "Range"} <= names
    undescribed = [f"{m.__name__}.{k}" for m in models for k, info in m.model_fields.items()
                   if not (info.description or "").strip()]
    assert not undescribed, f"fields without Field(description=...): {undescribed}"


def test_help_config_covers_every_field_of_every_section() -> None:
    from training.cli import COMMAND_CONFIGS, config_class
    from training.config.fields import config_fields, config_sections

    seen = set()
    for command in COMMAND_CONFIGS:
        cls = config_class(command)
        listed = {f.key for f in config_fields(cls)}
        for section in config_sections(cls):
            assert section.description.strip(), f"{command}: section {section.key or 'top level'} undescribed"
        seen |= {type(m) for m in _walk(cls.model_construct())}
        assert listed >= {k for k in _leaf_keys(cls)}, command
    models = set(_config_models())
    from training.config.pool import PoolMember
    from training.config.sweep import Range

    # Range is only inside SweepConfig.search (listed as search.<KEY>.*), PoolMember only inside seats.pools
    assert models - seen <= {Range, PoolMember}


def _walk(model):
    yield model
    for name in type(model).model_fields:
        value = getattr(model, name)
        if hasattr(type(value), "model_fields"):
            yield from _walk(value)


def _leaf_keys(cls, prefix=""):
    for name, info in cls.model_fields.items():
        if hasattr(info.annotation, "model_fields"):
            yield from _leaf_keys(info.annotation, f"{prefix}{name}.")
        else:
            yield prefix + name


def test_train_configs_exist_and_differ() -> None:
    names = {p.stem for p in (CONFIGS / "train").glob("*.yaml")}
    assert {"default", "selfplay", "gpu"} <= names
    default = load_train_config(CONFIGS / "train" / "default.yaml")
    assert default.model == "default" and default.seats.trained_roles == ("scientist",)
    assert default.seats.lab_manager == "scripted" and default.device == "auto"
    assert default.num_train_rows * default.grpo.num_generations <= 4000  # a CPU run of minutes
    assert load_train_config(CONFIGS / "train" / "selfplay.yaml").seats.trained_roles == ("scientist", "lab_manager")
    gpu = load_train_config(CONFIGS / "train" / "gpu.yaml")
    assert gpu.device == "cuda" and gpu.resolve_bf16("cuda") and gpu.model != "default"
    assert gpu.grpo.episodes_per_step > default.grpo.episodes_per_step


def test_config_modules_import_no_heavy_libraries() -> None:
    code = ("import sys, training.config.train, training.tracking; "
            f"print([m for m in {HEAVY_MODULES!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ----- unknown keys and malformed input -------------------------------------------------------
def test_unknown_key_in_yaml_names_key_and_valid_keys(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("grpo:\n  bta: 0.1\n")
    with pytest.raises(ConfigError, match=r"grpo\.bta") as err:
        load_train_config(path)
    assert "valid keys under 'grpo'" in str(err.value) and "beta" in str(err.value)
    path.write_text("learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match=r"valid keys at the top level: run_name.*grpo"):
        load_train_config(path)


def test_unknown_key_in_override_names_key_and_valid_keys() -> None:
    pattern = r"rollout\.sampling\.temp.*valid keys under 'rollout\.sampling'.*temperature"
    with pytest.raises(ConfigError, match=pattern):
        load_train_config(None, ["rollout.sampling.temp=0.5"])
    with pytest.raises(ConfigError, match=r"'nope'.*valid keys at the top level"):
        load_train_config(None, ["nope=1"])


def test_an_override_replaces_a_free_form_mapping_given_whole_and_reaches_into_it_by_key() -> None:
    selfplay = "configs/train/selfplay.yaml"  # pools for both seats
    assert set(load_train_config(selfplay).seats.pools) == {"scientist", "lab_manager"}
    assert load_train_config(selfplay, ["seats.pools={}"]).seats.pools == {}
    one = load_train_config(selfplay, ['seats.pools={"lab_manager": [{"seat": "policy", "weight": 1}]}'])
    assert list(one.seats.pools) == ["lab_manager"] and [m.seat for m in one.seats.pools["lab_manager"]] == ["policy"]
    keyed = load_train_config(selfplay, ['seats.pools.scientist=[{"seat": "scripted:naive", "weight": 1}]'])
    assert [m.seat for m in keyed.seats.pools["scientist"]] == ["scripted:naive"]
    assert keyed.seats.pools["lab_manager"] == load_train_config(selfplay).seats.pools["lab_manager"]
    fresh = load_train_config(None, ["seats.lab_manager=policy", 'seats.pools.lab_manager=[{"seat": "policy", "weight": 1}]'])
    assert list(fresh.seats.pools) == ["lab_manager"]
    # a config section given whole still merges key by key, and its unknown keys still fail
    merged = load_train_config(selfplay, ['grpo={"beta": 0.1}'])
    assert merged.grpo.beta == 0.1 and merged.grpo.max_steps == load_train_config(selfplay).grpo.max_steps
    with pytest.raises(ConfigError, match=r"grpo\.bta"):
        load_train_config(selfplay, ['grpo={"bta": 0.1}'])
    with pytest.raises(ConfigError, match=r"seats\.nope"):
        load_train_config(selfplay, ["seats.nope.x=1"])


@pytest.mark.parametrize("bad", ["grpo.beta", "=3", "grpo..beta=1", ".beta=1"])
def test_malformed_override_fails_clearly(bad: str) -> None:
    with pytest.raises(ConfigError, match="malformed override"):
        load_train_config(None, [bad])


@pytest.mark.parametrize("key,raw", [("grpo.beta", "[0.1"), ("data.templates", "[cell_biology"),
                                     ("run_name", "{a"), ("rollout.sampling.temperature", '"0.5'),
                                     ("seats.scientist", "a: b: c")])
def test_malformed_override_value_names_key_and_value(key: str, raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_train_config(None, [f"{key}={raw}"])
    text = str(err.value)
    assert "\n" not in text and f"'{key}'" in text and repr(raw) in text and "not valid YAML" in text


def test_yaml_must_be_a_mapping_and_may_be_empty(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_train_config(path)
    path.write_text("# nothing but a comment\n")
    assert load_train_config(path) == TrainConfig()


# ----- overrides ---------------------------------------------------------------------------------
def test_overrides_parse_types_and_deep_merge(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("grpo:\n  beta: 0.5\n  max_steps: 7\nrollout:\n  sampling:\n    temperature: 0.9\n")
    cfg = load_train_config(path, [
        "grpo.beta=0.04", "seats.lab_manager=policy", "data.templates=[cell_biology]", "rollout.num_workers=3",
        "wandb.entity=", "grpo.scale_rewards=false", "run_name=2024", "bf16=false", "grpo.learning_rate=1e-5",
        "wandb.tags=[a, b]",
    ])
    assert cfg.grpo.beta == 0.04 and isinstance(cfg.grpo.beta, float)
    assert cfg.grpo.max_steps == 7  # from the YAML, untouched by overrides
    assert cfg.rollout.sampling.temperature == 0.9
    assert cfg.rollout.sampling.max_new_tokens == TrainConfig().rollout.sampling.max_new_tokens  # deep merge
    assert cfg.seats.trained_roles == ("scientist", "lab_manager")
    assert cfg.data.templates == ["cell_biology"] and cfg.data.difficulties == list(DIFFICULTIES)
    assert cfg.rollout.num_workers == 3 and cfg.wandb.entity is None and cfg.grpo.scale_rewards == "none"
    assert cfg.run_name == "2024" and cfg.bf16 is False and cfg.grpo.learning_rate == 1e-5
    assert cfg.wandb.tags == ["a", "b"]


@pytest.mark.parametrize("override,match", [
    ("data.templates=[astrology]", "valid choices: " + ", ".join(TEMPLATES)),
    ("data.difficulties=[extreme]", "valid choices: " + ", ".join(DIFFICULTIES)),
    ("grpo.loss_type=ppo", "loss_type"),
    ("grpo.scale_rewards=std", "scale_rewards"),
    ("grpo.num_generations=1", "num_generations"),
    ("rollout.backend=threads", "backend"),
    ("rollout.sampling.do_sample=false", "do_sample"),
    ("bf16=true", "bf16"),  # device=auto is fine; see below for cpu
    ("grpo.warmup_ratio=1.0", "warmup_ratio"),
    ("grpo.gradient_accumulation_steps=5", "divisible"),
])
def test_bad_values_fail(override: str, match: str) -> None:
    overrides = [override] + (["device=cpu"] if override == "bf16=true" else [])
    with pytest.raises(ValueError, match=match):
        load_train_config(None, overrides)


def test_all_trl_loss_types_and_scale_rewards_accepted() -> None:
    for loss in ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"):
        assert load_train_config(None, [f"grpo.loss_type={loss}"]).grpo.loss_type == loss
    for value, expected in (("group", "group"), ("batch", "batch"), ("none", "none"), ("true", "group")):
        assert load_train_config(None, [f"grpo.scale_rewards={value}"]).grpo.scale_rewards == expected


# ----- resolved config ---------------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [
    [], ["grpo.epsilon_high=0.28", "wandb.tags=[x, y]", "bf16=true", "device=cuda", "rollout.ray_address=auto",
         "seats.scientist=scripted:random", "seats.lab_manager=policy", "grpo.learning_rate=3e-7"],
])
def test_saved_config_round_trips(tmp_path: Path, overrides: list[str]) -> None:
    cfg = load_train_config(CONFIGS / "train" / "default.yaml", overrides)
    path = save_resolved(cfg, tmp_path / "run")
    assert path == tmp_path / "run" / RESOLVED_CONFIG_NAME
    assert load_train_config(path) == cfg


def test_eval_decoding_is_greedy_unless_sampling_says_so() -> None:
    """Eval spells decoding as training does (``sampling``: a SamplingConfig); greedy is ``do_sample: false``."""
    from training.config.eval import load_eval_config
    from training.config.train import TrainConfig
    from training.eval.report import report_markdown

    greedy = load_eval_config(None, ["sampling.max_new_tokens=64"]).sampling
    assert not greedy.do_sample and greedy.max_new_tokens == 64
    sampled = load_eval_config(None, ["sampling.do_sample=true", "sampling.temperature=0.7"]).sampling
    assert sampled.do_sample and sampled.temperature == 0.7
    assert type(sampled) is type(TrainConfig().rollout.sampling)  # one spelling of decoding
    with pytest.raises(ValueError, match="temperature"):
        load_eval_config(None, ["sampling.temperature=0"])
    report = {"split": "test", "seeds": [1, 2], "lab_manager": "scripted", "decoding": sampled.model_dump(),
              "agents": {}, "cells": []}
    assert "sampled at temperature 0.7" in report_markdown(report)


def test_trl_config_scores_at_the_rollout_temperature_without_checkpointing(tmp_path: Path) -> None:
    from training.trainer.build import grpo_args

    cfg = load_train_config(None, ["rollout.sampling.temperature=0.7", "grpo.num_generations=4", "grpo.groups_per_step=2",
                                   f"output_dir={tmp_path}"])
    args = grpo_args(cfg, device="cpu")
    assert args.temperature == 0.7
    assert args.gradient_checkpointing is False
    assert args.per_device_train_batch_size == 8
    on = grpo_args(load_train_config(None, ["grpo.gradient_checkpointing=true", f"output_dir={tmp_path}"]), device="cpu")
    assert on.gradient_checkpointing is True
    for ours, trl in (("group", "group"), ("batch", "batch"), ("none", "none"), ("role", "none")):  # role: scaled after TRL
        cfg = load_train_config(None, [f"grpo.scale_rewards={ours}", f"output_dir={tmp_path}"])
        assert grpo_args(cfg, device="cpu").scale_rewards == trl


@pytest.mark.parametrize("weights", [{"hard": 3.0}, {"easy": 0.0, "hard": 2.0}, {"medium": 0.5}])
def test_difficulty_weights_oversample_in_proportion_and_stay_deterministic(weights):
    from collections import Counter

    cfg = TrainConfig(data={"difficulty_weights": weights}, grpo={"max_steps": 60})
    n = 9 * 20
    rows = data_stream(cfg)(n)
    assert rows == data_stream(cfg)(n)
    counts = Counter(r["difficulty"] for r in rows)
    w = {d: weights.get(d, 1.0) for d in DIFFICULTIES}
    for d in DIFFICULTIES:
        assert abs(counts[d] - n * w[d] / sum(w.values())) <= len(TEMPLATES), (counts, w)
    assert len({r["seed"] for r in rows}) == n
    hard = [r for r in rows if r["difficulty"] == "hard"]
    assert {r["template"] for r in hard} == set(TEMPLATES)


def test_difficulty_weights_default_keeps_the_plain_cycle_and_bad_weights_fail():
    cfg = TrainConfig()
    assert [(r["template"], r["difficulty"]) for r in data_stream(cfg)(9)] == cfg.data.cells
    for bad in ({"hardest": 1.0}, {"hard": -1.0}, {"easy": 0, "medium": 0, "hard": 0}):
        with pytest.raises(ValueError):
            TrainConfig(data={"difficulty_weights": bad})


def test_branch_groups_config_and_the_scoring_temperature() -> None:
    """``grpo.group_by=turn`` takes branch settings; a branched reply's own temperature needs reply-only tokens and
    is what the trainer scores at; anything else is refused in one line."""
    plain = load_train_config(None, ["grpo.group_by=turn", "rollout.sampling.temperature=0.5"])
    assert plain.grpo.branch.tokens == "reply" and plain.scoring_temperature == 0.5
    hot = load_train_config(None, ["grpo.group_by=turn", "rollout.sampling.temperature=0.5",
                                   "grpo.branch.temperature=1.0"])
    assert hot.scoring_temperature == 1.0
    whole = load_train_config(None, ["rollout.sampling.temperature=0.5", "grpo.branch.temperature=1.0"])
    assert whole.grpo.group_by == "episode" and whole.scoring_temperature == 0.5  # ignored for whole episodes
    for bad in (["grpo.group_by=turn", "grpo.branch.tokens=continuation", "grpo.branch.temperature=1.0"],
                ["grpo.group_by=step"], ["grpo.group_by=turn", "grpo.branch.other_share=1.5"]):
        with pytest.raises((ConfigError, ValueError)) as err:
            load_train_config(None, bad)
        assert ("group_by" in str(err.value)) or ("other_share" in str(err.value)) or ("temperature" in str(err.value))


def test_the_static_kv_cache_is_the_hf_engines():
    from pydantic import ValidationError

    from training.config.rollout import RolloutConfig

    with pytest.raises(ValidationError, match="kv_cache is the hf engine's"):
        RolloutConfig(backend="ray", engine="vllm", sampling={"temperature": 1.0, "kv_cache": "static"})
