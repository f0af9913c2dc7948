"""The learner config (``learner:``): sharding as TRL's arguments, ZeRO-3's 16-bit gather, the launcher check, the
process group's timeout and the signals that stop a run.  DeepSpeed is not installed on the CPU machines: the
ZeRO-3 config handling is tested here, the ZeRO-3 training path only on GPUs."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
from pathlib import Path

import pytest


def learner(**kwargs):
    from training.config.learner import LearnerConfig

    return LearnerConfig.model_validate(kwargs)


# -- config ---------------------------------------------------------------------------------------------
def test_defaults_are_one_hour_unsharded_and_stop_on_int_term_usr1():
    cfg = learner()
    assert cfg.sharding == "none" and not cfg.sharded and cfg.timeout_seconds == 3600
    assert cfg.signal_numbers() == (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


@pytest.mark.parametrize("bad, message", [
    ({"timeout_minutes": 0}, "greater than 0"),
    ({"sharding": "ddp"}, "'none', 'fsdp' or 'zero3'"),
    ({"stop_signals": ["SIGNOPE"]}, "unknown signal(s) ['SIGNOPE']"),
    ({"stop_signals": ["SIGKILL"]}, "SIGKILL and SIGSTOP cannot be caught"),
    ({"stop_signals": []}, "at least one signal"),
    ({"timeout": 5}, "Extra inputs are not permitted"),
])
def test_bad_learner_settings_are_refused(bad, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        learner(**bad)


def test_signal_names_are_normalised_and_deduplicated():
    cfg = learner(stop_signals=["term", "SIGUSR2", "sigterm"], timeout_minutes=90)
    assert cfg.stop_signals == ["SIGTERM", "SIGUSR2"] and cfg.timeout_seconds == 5400


def test_the_train_config_carries_the_learner_and_refuses_lora_sharded():
    from training.config.train import TrainConfig, load_train_config

    cfg = load_train_config(None, ["learner.sharding=fsdp", "learner.timeout_minutes=120"])
    assert cfg.learner.sharding == "fsdp" and cfg.learner.timeout_seconds == 7200
    with pytest.raises(ValueError, match="lora.enabled=true with learner.sharding=zero3 is not supported"):
        TrainConfig.model_validate({"lora": {"enabled": True}, "learner": {"sharding": "zero3"}})


# -- TRL's arguments ------------------------------------------------------------------------------------
def test_sharding_kwargs_of_each_mode():
    from training.trainer.sharding import sharding_kwargs

    assert sharding_kwargs(learner()) == {"ddp_timeout": 3600}
    fsdp = sharding_kwargs(learner(sharding="fsdp", timeout_minutes=5))
    assert fsdp["ddp_timeout"] == 300 and fsdp["fsdp"] is True
    assert fsdp["fsdp_config"]["state_dict_type"] == "SHARDED_STATE_DICT" and fsdp["fsdp_config"]["version"] == 2
    full = sharding_kwargs(learner(sharding="fsdp", fsdp_checkpoint="full"))
    assert full["fsdp_config"]["state_dict_type"] == "FULL_STATE_DICT"
    zero3 = sharding_kwargs(learner(sharding="zero3"))["deepspeed"]
    assert zero3["zero_optimization"]["stage"] == 3
    assert zero3["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True


def test_trl_takes_the_fsdp_arguments_and_the_timeout():
    from training.config.checkpoint import CheckpointConfig
    from training.config.grpo import GRPOParams
    from training.trainer.grpo import grpo_config
    from training.trainer.sharding import sharding_kwargs

    args = grpo_config(GRPOParams(), output_dir=Path("unused"), batch_per_process=8, temperature=1.0, seed=0,
                       checkpoint=CheckpointConfig(), use_cpu=True, bf16=False,
                       sharding=sharding_kwargs(learner(sharding="fsdp", timeout_minutes=45)))
    assert args.ddp_timeout == 2700 and args.fsdp
    plugin = args.fsdp_plugin_args
    assert plugin["fsdp_version"] == 2 and plugin["state_dict_type"] == "SHARDED_STATE_DICT"
    assert plugin["reshard_after_forward"] is True and plugin["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"


# -- ZeRO-3's gather ------------------------------------------------------------------------------------
def _ds_file(tmp_path: Path, zero: dict) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": zero}))
    return str(path)


def test_a_zero3_file_without_the_gather_gets_it_and_keeps_the_rest(tmp_path: Path):
    from training.trainer.sharding import zero3_config

    config = zero3_config(_ds_file(tmp_path, {"stage": 3, "offload_param": {"device": "cpu"}}))
    assert config["zero_optimization"] == {"stage": 3, "offload_param": {"device": "cpu"},
                                           "stage3_gather_16bit_weights_on_model_save": True}
    assert config["train_micro_batch_size_per_gpu"] == "auto"


@pytest.mark.parametrize("zero, message", [
    ({"stage": 3, "stage3_gather_16bit_weights_on_model_save": False}, "needs it true"),
    ({"stage": 2}, "has zero_optimization.stage 2; learner.sharding=zero3 needs stage 3"),
])
def test_zero3_files_that_cannot_sync_weights_are_refused(tmp_path: Path, zero: dict, message: str):
    from training.errors import UserInputError
    from training.trainer.sharding import zero3_config

    with pytest.raises(UserInputError, match=message) as err:
        zero3_config(_ds_file(tmp_path, zero))
    assert "\n" not in str(err.value)


def test_a_missing_or_broken_deepspeed_file_is_one_line(tmp_path: Path):
    from training.errors import UserInputError
    from training.trainer.sharding import zero3_config

    with pytest.raises(UserInputError, match="no such file"):
        zero3_config(str(tmp_path / "absent.json"))
    (tmp_path / "bad.json").write_text("{stage: 3")
    with pytest.raises(UserInputError, match="not a readable JSON file"):
        zero3_config(str(tmp_path / "bad.json"))


# -- what cannot start ----------------------------------------------------------------------------------
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is not None, reason="DeepSpeed is installed here")
def test_zero3_without_deepspeed_is_refused_before_anything_starts():
    from training.errors import UserInputError
    from training.trainer.sharding import check_learner

    with pytest.raises(UserInputError, match="needs DeepSpeed, which is not installed"):
        check_learner(learner(sharding="zero3"))


@pytest.mark.parametrize("env, sharding, launched", [
    ({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}, "none", "fsdp"),
    ({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_CONFIG_DS_FIELDS": ""}, "fsdp", "zero3"),
])
def test_a_launcher_sharding_its_own_way_is_refused(monkeypatch, env, sharding, launched):
    from training.errors import UserInputError
    from training.trainer.sharding import check_learner

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(UserInputError, match=f"its own {launched} config but learner.sharding={sharding}"):
        check_learner(learner(sharding=sharding))
    if launched == "fsdp":  # agreeing is fine (zero3 would stop at the missing DeepSpeed instead)
        check_learner(learner(sharding=launched))


def test_an_accelerator_built_earlier_in_the_process_is_not_a_launcher(monkeypatch):
    from training.trainer.sharding import check_learner

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # what accelerate's Accelerator leaves behind
    monkeypatch.delenv("FSDP_VERSION", raising=False)
    check_learner(learner())


def test_a_trainer_that_did_not_shard_is_refused():
    from types import SimpleNamespace

    from training.errors import UserInputError
    from training.trainer.sharding import check_sharded

    ddp = SimpleNamespace(is_fsdp_enabled=False, is_deepspeed_enabled=False,
                          accelerator=SimpleNamespace(distributed_type=SimpleNamespace(value="MULTI_CPU")))
    check_sharded(ddp, learner())
    with pytest.raises(UserInputError, match=r"sharding=fsdp but accelerate built a none learner \(MULTI_CPU\)"):
        check_sharded(ddp, learner(sharding="fsdp"))


# -- signals --------------------------------------------------------------------------------------------
def test_the_configured_signals_stop_the_run_and_others_are_left_alone():
    from training.trainer.interrupt import StopOnSignal

    before = signal.getsignal(signal.SIGUSR1)
    with StopOnSignal(learner().signal_numbers()) as stop:
        os.kill(os.getpid(), signal.SIGUSR1)  # SLURM's warning before the time limit
        assert stop.signum == signal.SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) is before
    with StopOnSignal(learner(stop_signals=["SIGINT"]).signal_numbers()) as stop:
        assert signal.getsignal(signal.SIGUSR1) is before and signal.getsignal(signal.SIGTERM) is not stop._handle


def test_a_signal_stop_exits_with_the_signals_status():
    from training.trainer.interrupt import TrainingInterrupted

    err = TrainingInterrupted(signal.SIGUSR1, 3, "runs/x/checkpoints/checkpoint-3", "replicalab train --resume")
    assert err.exit_code == 128 + signal.SIGUSR1 and "interrupted by SIGUSR1" in str(err)
