"""The launchers stop a run in time and find the head node: the SLURM recipe asks for a warning signal before
the time limit and an exclusive allocation, resolves a non-loopback head address, passes the warning to the
training, and gives torchrun's processes the configured grace; the KubeRay manifest runs launch/Dockerfile's
image, which builds both Python environments."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SBATCH = REPO / "launch" / "slurm.sbatch"
DOCKERFILE = REPO / "launch" / "Dockerfile"


def sourced(command: str, path: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """``command`` in bash after sourcing the SLURM script; ``path`` goes first on PATH (stand-in tools)."""
    full = {**os.environ, "PY": sys.executable, **env}
    if path:
        full["PATH"] = f"{path}:{full['PATH']}"
    return subprocess.run(["bash", "-c", f"source {shlex.quote(str(SBATCH))} && {command}"], capture_output=True,
                          text=True, cwd=REPO, env=full, timeout=60)


def test_slurm_asks_for_a_warning_before_the_limit_and_the_whole_nodes():
    text = SBATCH.read_text()
    assert re.search(r"^#SBATCH --exclusive$", text, flags=re.M)
    (lead,) = re.findall(r"^#SBATCH --signal=B:USR1@(\d+)$", text, flags=re.M)
    (grace,) = re.findall(r'STOP_GRACE_S:-(\d+)', text)
    assert 0 < int(grace) < int(lead), "torchrun's grace must end before the time limit"
    assert "--shutdown-timeout \"$grace\"" in text and "--signals-to-handle \"$TORCHRUN_SIGNALS\"" in text
    assert "SIGUSR1" in re.search(r'^TORCHRUN_SIGNALS="([^"]+)"', text, flags=re.M).group(1)
    assert "hostname --ip-address" not in text.replace("`hostname --ip-address`", "")


def test_the_default_learner_stops_on_the_signal_slurm_sends():
    from training.config.learner import LearnerConfig

    assert "SIGUSR1" in LearnerConfig().stop_signals


def _tools(tmp_path: Path, hostname_i: str, route: str) -> str:
    """Stand-ins for ``hostname`` and ``ip`` printing what a node with these addresses prints."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hostname").write_text(f"#!/bin/sh\nif [ \"$1\" = -I ]; then echo '{hostname_i}'; "
                                      "elif [ \"$1\" = --ip-address ]; then echo 127.0.1.1; else echo node0; fi\n")
    (bin_dir / "ip").write_text(f"#!/bin/sh\necho '{route}'\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("hostname_i, route, expected", [
    ("127.0.0.1 10.1.2.3 fe80::1", "", "10.1.2.3"),  # loopback and IPv6 skipped
    ("127.0.1.1", "1.1.1.1 via 10.0.0.1 dev eth0 src 10.0.0.7 uid 0", "10.0.0.7"),  # only loopback: the route's
])
def test_the_head_address_is_never_a_loopback(tmp_path: Path, hostname_i: str, route: str, expected: str):
    out = sourced("head_node_ip", path=_tools(tmp_path, hostname_i, route))
    assert out.returncode == 0 and out.stdout.strip() == expected, out.stderr


def test_no_usable_head_address_is_one_line_and_head_ip_wins(tmp_path: Path):
    tools = _tools(tmp_path, "127.0.1.1", "")
    out = sourced("head_node_ip", path=tools)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == "cannot find a non-loopback IPv4 address of node0; set HEAD_IP"
    assert sourced("head_node_ip", path=tools, HEAD_IP="192.168.7.7").stdout.strip() == "192.168.7.7"


#: A stand-in training: stops gracefully on SIGUSR1 (prints which signal, exits 128 + its number).
GRACEFUL = ("import signal, sys, time\n"
            "def stop(signum, frame):\n"
            "    print('stopping on', signal.Signals(signum).name, flush=True); sys.exit(128 + signum)\n"
            "signal.signal(signal.SIGUSR1, stop)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")


def _until(predicate, what: str, limit_s: float = 30.0) -> None:
    deadline = time.time() + limit_s
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["python", "torchrun"])
def test_the_batch_shells_warning_reaches_the_training(tmp_path: Path, launcher: str):
    """SIGUSR1 to the batch shell (SLURM's --signal=B:USR1) reaches the training -- directly, or through torchrun
    with the recipe's --signals-to-handle and --shutdown-timeout -- and the shell ends with its status."""
    script = tmp_path / "train.py"
    script.write_text(GRACEFUL)
    log = tmp_path / "log.txt"
    if launcher == "python":
        command = f"{shlex.quote(sys.executable)} {script}"
    else:
        command = (f"{shlex.quote(sys.executable)} -m torch.distributed.run --standalone --nproc_per_node 1 "
                   f"--shutdown-timeout 20 --signals-to-handle \"$TORCHRUN_SIGNALS\" {script}")
    proc = subprocess.Popen(["bash", "-c", f"source {shlex.quote(str(SBATCH))} && "
                             f"run_forwarding_signals {command} > {log} 2>&1"], cwd=REPO)
    _until(lambda: log.is_file() and "ready" in log.read_text(), "the training to start")
    os.kill(proc.pid, signal.SIGUSR1)
    proc.wait(timeout=60)
    assert "stopping on SIGUSR1" in log.read_text(), log.read_text()[-2000:]
    assert proc.returncode != 0  # the training's status (138), or torchrun's failure after forwarding it
    if launcher == "python":
        assert proc.returncode == 128 + signal.SIGUSR1


def test_the_kuberay_image_is_the_dockerfiles_with_both_environments():
    import yaml

    text = DOCKERFILE.read_text()
    (tag,) = re.findall(r"docker build -f launch/Dockerfile -t (\S+) \.", text)
    assert "bash launch/setup.sh" in text and "VLLM_EXTRA=vllm-gpu bash launch/setup_vllm.sh" in text
    assert re.search(r"^WORKDIR /app$", text, flags=re.M) and "PATH=/app/.venv/bin:$PATH" in text
    manifest = yaml.safe_load((REPO / "launch" / "kuberay.yaml").read_text())
    cluster = manifest["spec"]["rayClusterSpec"]
    images = {c["image"] for spec in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
              for c in spec["template"]["spec"]["containers"]}
    assert images == {tag}
    assert "launch/Dockerfile" in (REPO / "launch" / "kuberay.yaml").read_text()
    assert "cd /app" in manifest["spec"]["entrypoint"]
