"""Bad input to every subcommand: exit status 2, exactly ONE line on stderr naming the problem, no
traceback, nothing started or written.  Table-driven; each case runs ``python -m training.cli`` in a
subprocess (no model loads: every case fails before one would).  ``docs/faults.md`` lists the messages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAIN_CFG = str(REPO / "configs" / "train" / "default.yaml")
SWEEP_CFG = str(next((REPO / "configs" / "sweeps").glob("*.yaml"), REPO / "configs" / "sweeps" / "missing.yaml"))
#: Overrides that put a train run under the case's scratch directory.
RUN = ["output_dir={tmp}/runs", "run_name=r"]

#: (case id, argv ({tmp} is the scratch directory), a fragment the one stderr line must contain)
CASES: list[tuple[str, list[str], str]] = [
    # top level
    ("no-command", [], "arguments are required: command"),
    ("unknown-command", ["fly"], "invalid choice: 'fly'"),
    ("unknown-global-flag", ["--fast", "play"], "unrecognized arguments: --fast"),
    # play
    ("play-seed-negative", ["play", "--seed", "-1"], "seed must be non-negative"),
    ("play-seed-text", ["play", "--seed", "x"], "seed must be an integer"),
    ("play-template", ["play", "--template", "chemistry"], "invalid choice: 'chemistry'"),
    ("play-difficulty", ["play", "--difficulty", "extreme"], "invalid choice: 'extreme'"),
    ("play-max-rounds-zero", ["play", "--max-rounds", "0"], "must be at least 1"),
    ("play-max-rounds-text", ["play", "--max-rounds", "many"], "must be an integer"),
    ("play-scientist-unknown", ["play", "--scientist", "wizard"], "--scientist"),
    ("play-lab-manager-unknown", ["play", "--lab-manager", "scripted:oracle"], "--lab-manager"),
    ("play-model-missing", ["play", "--scientist", "model:{tmp}/nope"], "does not exist"),
    ("play-model-relative-missing", ["play", "--scientist", "model:./no/such/model"], "does not exist"),
    ("play-model-not-a-model", ["play", "--scientist", "model:{tmp}/userdir"], "no config.json"),
    ("play-model-no-weights", ["play", "--scientist", "model:{tmp}/config_only"], "no weights"),
    ("play-model-no-tokenizer", ["play", "--scientist", "model:{tmp}/no_tokenizer"], "no tokenizer"),
    ("play-model-is-file", ["play", "--scientist", "model:{tmp}/afile"], "is a file"),
    ("play-stray-argument", ["play", "seed=3"], "unrecognized arguments: seed=3"),
    # train
    ("train-config-missing", ["train", "--config", "{tmp}/nope.yaml"], "does not exist"),
    ("train-config-directory", ["train", "--config", "{tmp}"], "is a directory"),
    ("train-config-malformed", ["train", "--config", "{tmp}/bad.yaml"], "not valid YAML at line"),
    ("train-config-list", ["train", "--config", "{tmp}/list.yaml"], "must hold a mapping"),
    ("train-config-binary", ["train", "--config", "{tmp}/binary.yaml"], "not UTF-8"),
    ("train-override-malformed-yaml", ["train", "--config", TRAIN_CFG, "data.templates=[cell_biology"],
     "override of 'data.templates': its value '[cell_biology' is not valid YAML"),
    ("train-section-not-mapping", ["train", "--config", TRAIN_CFG, "grpo=5"], "grpo: Input should be"),
    ("train-unknown-key", ["train", "--config", TRAIN_CFG, "grpo.nope=1"], "unknown key 'grpo.nope'"),
    ("train-malformed-override", ["train", "--config", TRAIN_CFG, "grpo.max_steps"], "malformed override"),
    ("train-seed-negative", ["train", "--config", TRAIN_CFG, "seed=-1"], "seed: Input should be greater"),
    ("train-steps-zero", ["train", "--config", TRAIN_CFG, "grpo.max_steps=0"], "grpo.max_steps"),
    ("train-lr-text", ["train", "--config", TRAIN_CFG, "grpo.learning_rate=fast"], "grpo.learning_rate"),
    ("train-backend", ["train", "--config", TRAIN_CFG, "rollout.backend=gpu"], "rollout.backend"),
    ("train-device", ["train", "--config", TRAIN_CFG, "device=tpu"], "device"),
    ("train-template", ["train", "--config", TRAIN_CFG, "data.templates=[chemistry]"], "chemistry"),
    ("train-seat", ["train", "--config", TRAIN_CFG, "seats.scientist=wizard"], "seats"),
    ("train-unknown-flag", ["train", "--config", TRAIN_CFG, "--fast"], "unrecognized arguments: --fast"),
    ("train-resume-no-checkpoint", ["train", "--config", TRAIN_CFG, *RUN, "--resume"], "no checkpoint"),
    ("train-override-after-resume", ["train", "--config", TRAIN_CFG, "--resume", *RUN], "no checkpoint"),
    ("train-resume-damaged", ["train", "--config", TRAIN_CFG, "output_dir={tmp}", "run_name=damaged", "--resume",
                              "model={tmp}/tinymodel"], "no complete checkpoint"),
    ("train-output-is-file", ["train", "--config", TRAIN_CFG, "output_dir={tmp}/afile", "model={tmp}/tinymodel"],
     "is a file"),
    ("train-foreign-run-dir", ["train", "--config", TRAIN_CFG, "output_dir={tmp}", "run_name=userdir",
                               "model={tmp}/tinymodel"], "not created by replicalab train"),
    ("train-earlier-run", ["train", "--config", TRAIN_CFG, "output_dir={tmp}", "run_name=earlier",
                           "model={tmp}/tinymodel"], "pass --resume"),
    ("train-model-missing", ["train", "--config", TRAIN_CFG, *RUN, "model={tmp}/nope"], "does not exist"),
    ("train-model-not-a-model", ["train", "--config", TRAIN_CFG, *RUN, "model={tmp}/userdir"], "no config.json"),
    ("train-model-hub-offline", ["train", "--config", TRAIN_CFG, *RUN, "model=nobody/no-such-model"],
     "not in the Hugging Face cache"),
    ("train-frozen-seat-missing", ["train", "--config", TRAIN_CFG, *RUN, "seats.lab_manager=model:{tmp}/nope"],
     "does not exist"),
    # eval
    ("eval-agent-unknown", ["eval", "--agent", "wizard"], "--agent"),
    ("eval-agent-model-missing", ["eval", "--agent", "model:{tmp}/nope"], "does not exist"),
    ("eval-agent-not-a-model", ["eval", "--agent", "model:{tmp}/userdir"], "no config.json"),
    ("eval-agent-no-weights", ["eval", "--agent", "model:{tmp}/config_only"], "no weights"),
    ("eval-agent-no-tokenizer", ["eval", "--agent", "model:{tmp}/no_tokenizer"], "no tokenizer"),
    ("eval-lab-manager-model-missing", ["eval", "--agent", "scripted:naive", "--lab-manager", "model:{tmp}/nope"],
     "does not exist"),
    ("eval-lab-manager-old-key", ["eval", "--agent", "scripted:naive", "lab_manager=scripted"],
     "unknown key 'lab_manager'"),
    ("eval-episodes-zero", ["eval", "--episodes", "0"], "must be at least 1"),
    ("eval-episodes-text", ["eval", "--episodes", "few"], "must be an integer"),
    ("eval-split", ["eval", "--split", "heldout"], "invalid choice: 'heldout'"),
    ("eval-backend", ["eval", "--backend", "gpu"], "invalid choice: 'gpu'"),
    ("eval-config-missing", ["eval", "--config", "{tmp}/nope.yaml"], "does not exist"),
    ("eval-config-directory", ["eval", "--config", "{tmp}"], "is a directory"),
    ("eval-config-malformed", ["eval", "--config", "{tmp}/bad.yaml"], "not valid YAML"),
    ("eval-unknown-key", ["eval", "nope=1"], "unknown key 'nope'"),
    ("eval-out-user-dir", ["eval", "--agent", "scripted:naive", "--out", "{tmp}/userdir"], "refusing to write"),
    ("eval-out-is-file", ["eval", "--agent", "model:default", "--out", "{tmp}/afile"], "is a file"),
    # sweep
    ("sweep-no-config", ["sweep"], "arguments are required: config"),
    ("sweep-config-missing", ["sweep", "{tmp}/nope.yaml"], "does not exist"),
    ("sweep-config-directory", ["sweep", "{tmp}"], "is a directory"),
    ("sweep-config-malformed", ["sweep", "{tmp}/bad.yaml"], "not valid YAML"),
    ("sweep-unknown-key", ["sweep", SWEEP_CFG, "nope=1"], "unknown key 'nope'"),
    ("sweep-model-missing", ["sweep", SWEEP_CFG, f"base={TRAIN_CFG}", "overrides=[model={tmp}/nope]"],
     "does not exist"),
    ("sweep-base-missing", ["sweep", SWEEP_CFG, "base={tmp}/nope.yaml"], "nope.yaml"),
    # bench
    ("bench-unknown", ["bench", "fly"], "invalid choice: 'fly'"),
    ("bench-no-name", ["bench"], "required"),
    # build-default-model
    ("build-no-out", ["build-default-model"], "arguments are required: --out"),
    ("build-out-user-dir", ["build-default-model", "--out", "{tmp}/userdir"], "refusing to replace it"),
    ("build-out-file", ["build-default-model", "--out", "{tmp}/afile"], "is a file"),
    ("build-unknown-key", ["build-default-model", "--out", "{tmp}/new", "nope=1"], "unknown key 'nope'"),
    ("build-bad-value", ["build-default-model", "--out", "{tmp}/new", "architecture.hidden_size=-4"],
     "architecture.hidden_size"),
    ("build-config-missing", ["build-default-model", "--out", "{tmp}/new", "--config", "{tmp}/nope.yaml"],
     "does not exist"),
    ("build-eval-seeds-negative", ["build-default-model", "--out", "{tmp}/new", "--eval-seeds", "-1"],
     "--eval-seeds -1: validation split has 100000 seeds"),
]


def make_scratch(tmp: Path) -> Path:
    """Files the cases point at: malformed configs, a plain file, a user's directory, a directory with
    a config.json only, one with config and weights but no tokenizer, a minimal model directory, an earlier
    run and a damaged run."""
    (tmp / "bad.yaml").write_text("grpo: [\n")
    (tmp / "list.yaml").write_text("- 1\n- 2\n")
    (tmp / "binary.yaml").write_bytes(b"\xff\xfe\x00\x81")
    (tmp / "afile").write_text("not a directory\n")
    (tmp / "userdir").mkdir()
    (tmp / "userdir" / "thesis.tex").write_text("precious\n")
    (tmp / "config_only").mkdir()
    (tmp / "config_only" / "config.json").write_text("{}")
    (tmp / "no_tokenizer").mkdir()
    (tmp / "no_tokenizer" / "config.json").write_text("{}")
    (tmp / "no_tokenizer" / "model.safetensors").write_bytes(b"")
    (tmp / "tinymodel").mkdir()  # enough for the path check; these cases fail before anything loads
    (tmp / "tinymodel" / "config.json").write_text("{}")
    (tmp / "tinymodel" / "model.safetensors").write_bytes(b"")
    (tmp / "tinymodel" / "tokenizer.json").write_text("{}")
    (tmp / "earlier").mkdir()
    (tmp / "earlier" / "config.yaml").write_text("seed: 0\n")
    (tmp / "earlier" / "metrics.jsonl").write_text(json.dumps({"step": 0}) + "\n")
    ckpt = tmp / "damaged" / "checkpoints" / "checkpoint-2"
    ckpt.mkdir(parents=True)
    (tmp / "damaged" / "config.yaml").write_text("seed: 0\n")
    (ckpt / "optimizer.pt").write_bytes(b"half")
    return tmp


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_scratch(tmp_path_factory.mktemp("cli-errors"))


#: Cases run at once (each a subprocess that mostly waits on imports).
PARALLEL_CASES = 4


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """Every selected case of ``test_bad_input_is_one_line``, run concurrently, each in a scratch directory of
    its own: case id -> (the finished process, the scratch listing before, after, the user's file after)."""
    selected = [item.callspec.id for item in request.session.items
                if item.originalname == "test_bad_input_is_one_line" and hasattr(item, "callspec")]
    argv_of = {c[0]: c[1] for c in CASES}

    def run(case: str) -> tuple:
        tmp = make_scratch(tmp_path_factory.mktemp(f"cli-{case}"))
        before = sorted(str(p) for p in tmp.rglob("*"))
        proc = _run([a.format(tmp=tmp) for a in argv_of[case]], tmp)
        return proc, before, sorted(str(p) for p in tmp.rglob("*")), (tmp / "userdir" / "thesis.tex").read_text()

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(PARALLEL_CASES) as pool:
        return dict(zip(selected, pool.map(run, selected)))


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled",
           "REPLICALAB_DEFAULT_MODEL": str(cwd / "no-default-model-here")}
    env.pop("REPLICALAB_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "training.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # 85 command-line processes (about 22 s on 2 cores): CI's tier, not the edit loop's
@pytest.mark.parametrize("argv, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(outcomes: dict[str, tuple], request: pytest.FixtureRequest, argv: list[str],
                               fragment: str) -> None:
    proc, before, after, thesis = outcomes[request.node.callspec.id]
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Repo id must be in the form" not in proc.stderr
    assert lines[0].startswith("replicalab"), lines[0]
    assert fragment in lines[0], lines[0]
    assert proc.stdout == ""
    assert after == before, "a failing command created or removed files"
    assert thesis == "precious\n"


def test_table_is_large_and_covers_every_subcommand() -> None:
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)
    firsts = {c[1][0] for c in CASES if c[1]}
    assert {"train", "eval", "sweep", "play", "bench", "build-default-model"} <= firsts


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback(scratch: Path, how: str) -> None:
    argv = ["train", "--config", str(scratch / "nope.yaml")]
    if how == "flag":
        proc = _run(["--debug", *argv], scratch)
    else:
        env_argv = argv
        env = {**os.environ, "PYTHONPATH": str(REPO), "REPLICALAB_DEBUG": "1"}
        proc = subprocess.run([sys.executable, "-m", "training.cli", *env_argv], cwd=scratch, env=env,
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "UserInputError" in proc.stderr


def test_help_config_still_works(scratch: Path) -> None:
    proc = _run(["train", "--help-config"], scratch)
    assert proc.returncode == 0 and "grpo.max_steps" in proc.stdout and proc.stderr == ""


def test_an_error_raised_in_a_ray_worker_is_its_cause_in_one_line() -> None:
    ray_exceptions = pytest.importorskip("ray.exceptions")
    from training.cli_errors import EXIT_FAILURE, error_report

    remote = ray_exceptions.RayTaskError(
        "RolloutWorkerImpl.collect", "Traceback (most recent call last):\n  File \"play.py\", line 1\nRuntimeError: x",
        RuntimeError("Unsupported CPU attention configuration: head_dim=16")).as_instanceof_cause()
    line, status = error_report(remote)
    assert status == EXIT_FAILURE
    assert line.startswith("in a Ray worker: RuntimeError: Unsupported CPU attention configuration: head_dim=16")
    assert "\n" not in line and "Traceback" not in line


def test_a_run_that_stopped_before_it_started_can_be_started_again(tmp_path: Path) -> None:
    from training.config.train import load_train_config
    from training.errors import UserInputError
    from training.trainer.run import check_run_dir

    cfg = load_train_config(TRAIN_CFG, [f"output_dir={tmp_path}", "run_name=r"])
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / "config.yaml").write_text("seed: 0\n")  # written, then the plan or vLLM check refused
    check_run_dir(cfg, resume=False)  # the same command again is fine
    (cfg.run_dir / "metrics.jsonl").write_text("{}\n")  # a run that got going is never overwritten
    with pytest.raises(UserInputError, match="pass --resume"):
        check_run_dir(cfg, resume=False)


def test_a_reader_that_leaves_early_is_not_a_failure(capsys: pytest.CaptureFixture) -> None:
    """``replicalab ... | head -1``: output into a pipe whose reader is gone ends the command quietly, status 0."""
    from contextlib import redirect_stdout

    from training.cli import main

    read, write = os.pipe()
    os.close(read)  # the reader has left
    with open(write, "w", buffering=1) as out, redirect_stdout(out):  # line-buffered: the first line meets the pipe
        assert main(["play", "--seed", "7"]) == 0
    assert capsys.readouterr().err == ""
