"""Launchers work as written: the KubeRay manifest's GPU arithmetic agrees with its entrypoint (checked by the
placement planner) and every pod has a memory-backed /dev/shm; every launch script parses (`bash -n`); the
SLURM script logs into the submit directory, derives overrides the planner accepts, and its readiness check
(slow) waits for a real multi-node Ray -- a head and a worker node started on this machine -- bounded."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from training.cluster.plan import plan_placement
from training.cluster.resources import ClusterResources, NodeResources
from training.config.train import load_train_config

REPO = Path(__file__).resolve().parents[3]
LAUNCH = REPO / "launch"
SBATCH = LAUNCH / "slurm.sbatch"
GPU = "nvidia.com/gpu"


def kuberay() -> dict[str, Any]:
    return yaml.safe_load((LAUNCH / "kuberay.yaml").read_text())


def entrypoint_parts(manifest: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The entrypoint's OVERRIDES and its commands (split at &&, $OVERRIDES expanded)."""
    text = manifest["spec"]["entrypoint"]
    overrides = shlex.split(re.search(r'OVERRIDES="([^"]*)"', text).group(1))
    commands = [shlex.split(part.replace("$OVERRIDES", " ".join(overrides))) for part in text.split("&&")]
    return overrides, [c for c in commands if c and not c[0].startswith("OVERRIDES=")]


def pod_specs(manifest: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """(pod spec, replicas) of the head and each worker group."""
    cluster = manifest["spec"]["rayClusterSpec"]
    specs = [(cluster["headGroupSpec"]["template"]["spec"], 1)]
    for group in cluster["workerGroupSpecs"]:
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"], "a fixed-size cluster"
        specs.append((group["template"]["spec"], group["replicas"]))
    return specs


def test_kuberay_gpu_arithmetic_matches_entrypoint() -> None:
    manifest = kuberay()
    overrides, commands = entrypoint_parts(manifest)
    values = dict(o.split("=", 1) for o in overrides)
    workers, trainer = int(values["rollout.num_workers"]), int(values["placement.trainer_gpus"])
    per_worker = float(values["placement.gpus_per_worker"])
    nodes = []
    for spec, replicas in pod_specs(manifest):
        (container,) = spec["containers"]
        limits, requests = container["resources"]["limits"], container["resources"].get("requests", {})
        assert requests.get(GPU, limits[GPU]) == limits[GPU]
        nodes += [NodeResources(int(limits[GPU]), float(limits["cpu"]))] * replicas
    head_gpus, total = nodes[0].gpus, sum(n.gpus for n in nodes)
    assert head_gpus == trainer, "the job's driver (the learner) runs on the head pod"
    assert workers * per_worker + trainer == total, (workers, per_worker, trainer, total)

    # the planner agrees: every GPU of the pods reserved, none over-subscribed
    config = next(c[c.index("--config") + 1] for c in commands if "--config" in c)
    cfg = load_train_config(REPO / config, overrides)
    cluster = ClusterResources(gpus=total, nodes=len(nodes), per_node=tuple(nodes), cpus=sum(n.cpus for n in nodes))
    plan = plan_placement(cfg, cluster, param_count=None, dtype_bytes=2)
    assert sum(load.reserved for load in plan.gpu_loads) == total
    assert all(w.node > 0 for w in plan.workers), "rollout workers run on the worker pods"

    # the readiness check waits for every pod's Ray node; the plan is printed before training
    ready = next(c for c in commands if "training.cluster.resources" in c)
    assert int(ready[ready.index("--nodes") + 1]) == len(nodes)
    modules = [c[c.index("-m") + 1] for c in commands if "-m" in c]
    assert modules == ["training.cluster.resources", "training.cli", "training.cli"]
    assert all(c[0] in ("cd", "python") for c in commands), "no `replicalab` script assumed"


def test_kuberay_every_pod_mounts_memory_backed_shm() -> None:
    for spec, _ in pod_specs(kuberay()):
        volumes = {v["name"]: v for v in spec["volumes"]}
        (container,) = spec["containers"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert "/dev/shm" in mounts
        shm = volumes[mounts["/dev/shm"]]
        assert shm["emptyDir"]["medium"] == "Memory"
        assert shm["emptyDir"].get("sizeLimit"), "bounded, so it cannot eat the pod's memory silently"


@pytest.mark.parametrize("script", sorted(p.name for p in LAUNCH.glob("*.sh")) + ["slurm.sbatch"])
def test_launch_scripts_parse(script: str) -> None:
    out = subprocess.run(["bash", "-n", str(LAUNCH / script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_slurm_logs_into_the_submit_directory() -> None:
    text = SBATCH.read_text()
    (output,) = re.findall(r"^#SBATCH --output=(\S+)", text, flags=re.M)
    assert "/" not in output, "SBATCH --output cannot create directories: name none"
    assert "sleep" not in text, "readiness is checked, not waited out"
    assert "replicalab train" not in text.replace("training.cli train", "")


def sourced(command: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``command`` in bash after sourcing the SLURM script (which then runs nothing by itself)."""
    return subprocess.run(["bash", "-c", f"source {shlex.quote(str(SBATCH))} && {command}"], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, "PY": sys.executable, **env}, timeout=300)


@pytest.mark.parametrize("nodes, gpus, learners, per_worker", [(2, 8, 1, 1), (2, 8, 4, 1), (1, 8, 1, 0.5),
                                                               (2, 8, 1, 0.25), (4, 4, 2, 1)])
def test_slurm_overrides_use_every_gpu_the_plan_allows(nodes: int, gpus: int, learners: int,
                                                       per_worker: float) -> None:
    out = sourced(f"rollout_overrides {nodes} {gpus} {learners} {per_worker}")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    overrides = out.stdout.split()
    cfg = load_train_config(REPO / "configs/train/gpu.yaml", overrides)
    plan = plan_placement(cfg, ClusterResources(gpus=nodes * gpus, nodes=nodes), param_count=None, dtype_bytes=2,
                          learner_processes=learners)
    idle = nodes * gpus - sum(load.reserved for load in plan.gpu_loads)
    assert 0 <= idle < max(per_worker, 1) * nodes, (overrides, idle)  # only what a whole worker cannot use


def test_sourcing_the_slurm_script_runs_nothing() -> None:
    out = sourced("declare -F | awk '{print $3}'")
    assert out.returncode == 0 and out.stderr == ""
    assert {"main", "wait_for_ray_nodes", "rollout_overrides"} <= set(out.stdout.split())


# -- the readiness check against a real multi-node Ray on this machine -------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_args() -> list[str]:
    """Ports of their own for every service of a node (other Ray sessions share this machine)."""
    return [f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
            "--num-cpus=1", "--num-gpus=0", "--node-ip-address=127.0.0.1", "--block"]


def stop_groups(procs: list[subprocess.Popen], grace_s: float = 5.0) -> None:
    """SIGTERM the process groups this test started, then SIGKILL what is left of them (the GCS server can
    outlive SIGTERM); by process-group id only, never by name."""
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_group_alive(p.pid) for p in procs):
        time.sleep(0.25)
    for proc in procs:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _group_alive(pgid: int) -> bool:
    out = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout.split("\n")
    return any(line.split()[0] == str(pgid) and not line.split()[1].startswith("Z") for line in out if line.strip())


@pytest.fixture
def ray_head() -> Iterator[tuple[str, Path, list[subprocess.Popen]]]:
    """A Ray head started with `ray start --head --block` in its own process group; yields its address,
    its temp dir and the list of started node processes (a test appends its worker nodes)."""
    ray_bin = str(Path(sys.executable).parent / "ray")
    temp = Path(tempfile.mkdtemp(prefix="rl-launch-", dir="/tmp"))  # short: Ray's socket paths are bounded
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    port = free_port()
    procs = [subprocess.Popen([ray_bin, "start", "--head", f"--port={port}", "--include-dashboard=false",
                               f"--dashboard-port={free_port()}", f"--ray-client-server-port={free_port()}",
                               f"--temp-dir={temp}", *node_args()], env=env, start_new_session=True,
                              stdout=(temp / "head.log").open("w"), stderr=subprocess.STDOUT)]
    try:
        yield f"127.0.0.1:{port}", temp, procs
    finally:
        stop_groups(procs)
        assert not any(_group_alive(p.pid) for p in procs)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_slurm_readiness_check_waits_for_every_node(ray_head) -> None:
    address, temp, procs = ray_head
    up = sourced(f"wait_for_ray_nodes {address} 1 120")
    assert up.returncode == 0 and "1 node(s) alive" in up.stdout, up.stderr[-2000:]

    tick = time.monotonic()
    short = sourced(f"wait_for_ray_nodes {address} 2 3")
    assert short.returncode == 1 and time.monotonic() - tick < 60
    (line,) = short.stderr.strip().splitlines()
    assert f"only 1 of 2 Ray nodes joined {address} within 3s" in line

    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    procs.append(subprocess.Popen([str(Path(sys.executable).parent / "ray"), "start", f"--address={address}",
                                   *node_args()], env=env, start_new_session=True,
                                  stdout=(temp / "worker.log").open("w"), stderr=subprocess.STDOUT))
    both = sourced(f"wait_for_ray_nodes {address} 2 120")
    assert both.returncode == 0 and "2 node(s) alive" in both.stdout, both.stderr[-2000:]


@pytest.mark.slow
def test_slurm_readiness_check_bounded_when_no_head() -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    tick = time.monotonic()
    out = sourced(f"wait_for_ray_nodes {address} 2 2")
    assert out.returncode == 1 and time.monotonic() - tick < 30
    (line,) = out.stderr.strip().splitlines()
    assert f"the Ray head at {address} did not accept connections within 2s" in line
