"""The command line as a user runs it."""

import json
import subprocess
import sys

import pytest

from replicalab.cli import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "replicalab.cli", *args], capture_output=True, text=True)


def test_play_prints_transcript_and_breakdown(capsys):
    assert main(["play", "--seed", "3", "--template", "ml_benchmark", "--difficulty", "medium"]) == 0
    out = capsys.readouterr().out
    assert "Episode ml_benchmark-medium-3" in out and "[round 1] Scientist (propose_protocol)" in out
    assert "total" in out and "fidelity" in out and "Verdict:" in out


def test_play_json_is_an_episode_log(capsys):
    main(["play", "--seed", "4", "--scientist", "scripted:oracle", "--json"])
    log = json.loads(capsys.readouterr().out)
    assert log["agreement_reached"] and log["reward_spec_version"]


@pytest.mark.parametrize("args, message", [
    (["play", "--template", "astrology"], "choose from 'cell_biology', 'ml_benchmark', 'behavioral_psychology'"),
    (["play", "--difficulty", "insane"], "choose from 'easy', 'medium', 'hard'"),
    (["play", "--seed", "-1"], "seed must be non-negative"),
    (["play", "--scientist", "genius"], "valid scientist seats: scripted:naive, scripted:adaptive, scripted:reader"),
    (["play", "--scientist", "adaptive"], "did you mean scripted:adaptive?"),
    (["eval", "--agent", "adaptive"], "did you mean scripted:adaptive?"),
    (["play", "--lab-manager", "scripted:naive"], "valid lab_manager seats: scripted, model:DIR"),
])
def test_bad_arguments_name_the_valid_choices(args, message):
    r = run_cli(*args)
    assert r.returncode == 2 and message in r.stderr


def test_bench_env_prints_rates(capsys):
    assert main(["bench", "env", "--episodes", "300"]) == 0
    out = capsys.readouterr().out
    assert "episode, adaptive scientist" in out and "scenario generation only" in out and "/s" in out


@pytest.mark.parametrize("args, message", [
    (["train", "grpo.bogus=1"], "unknown key 'grpo.bogus'"),
    (["train", "grpo.max_steps"], "malformed override"),
    (["eval", "agents=[scripted:genius]"], "is not a scripted agent here"),
    (["sweep", "configs/sweeps/cpu_grid.yaml", "method=annealing"], "bad config"),
    (["build-default-model", "--out", "unused", "--config", "configs/model/gpu.yaml", "architecture.bogus=1"],
     "unknown key 'architecture.bogus'"),
    (["build-default-model", "--out", "unused", "architecture.hidden_size=100", "architecture.num_attention_heads=3"],
     "hidden_size must be divisible by num_attention_heads"),
])
def test_bad_configs_exit_with_a_clear_error(args, message):
    r = run_cli(*args)
    assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr
