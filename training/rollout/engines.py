"""The generation engines of a rollout worker (``rollout.engine``): ``hf`` (``PolicyModel``, transformers
``generate``) and ``vllm`` (``VLLMPolicyModel``), and the learner-side check of the vLLM environment.

vLLM's pins (transformers < 5.20) differ from the learner's, so vLLM never enters the learner's
environment: ``launch/setup_vllm.sh`` makes ``.venv-vllm`` (vLLM, the driver's Ray, this project) and the
Ray rollout workers run in it (Ray's ``py_executable``).  ``check_vllm_python`` runs before anything
starts and turns a missing or mismatched environment into one line.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from training.config.kinds import ENGINES
from training.config.model import REPO_ROOT, VLLMConfig
from training.errors import UserInputError
from training.rollout.contract import SNAPSHOT_PREFIX, RolloutSpec

logger = logging.getLogger(__name__)

#: The vLLM environment ``launch/setup_vllm.sh`` makes, relative to the repository root.
VLLM_VENV = ".venv-vllm"
#: Seconds the check may take (importing vLLM the first time compiles nothing, but is slow on 2 cores).
CHECK_TIMEOUT_S = 300
_PROBE = ("import ray, vllm, training.rollout.vllm_policy; "
          "print(ray.__version__, vllm.__version__)")


def vllm_python(cfg: VLLMConfig) -> str:
    """The interpreter of the rollout workers' vLLM environment: ``rollout.vllm.python``, else the
    repository's ``.venv-vllm``, else this interpreter."""
    if cfg.python:
        return str(Path(cfg.python).expanduser())
    local = REPO_ROOT / VLLM_VENV / "bin" / "python"
    return str(local) if local.exists() else sys.executable


def check_vllm_python(python: str) -> str:
    """The vLLM version ``python`` imports; ``UserInputError`` (one line) when it cannot import vLLM and
    this project, or runs another Ray than the driver (workers and driver must match)."""
    import ray

    fix = "run bash launch/setup_vllm.sh (makes .venv-vllm) or set rollout.vllm.python"
    if not Path(python).exists():
        raise UserInputError(f"rollout.engine=vllm: no Python at {python}; {fix}")
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=CHECK_TIMEOUT_S,
                              cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        raise UserInputError(f"rollout.engine=vllm: {python} took over {CHECK_TIMEOUT_S} s to import vLLM") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserInputError(f"rollout.engine=vllm: {python} cannot import vLLM and this project ({last}); {fix}")
    ray_version, version = done.stdout.split()[-2:]
    if ray_version != ray.__version__:
        raise UserInputError(f"rollout.engine=vllm: {python} has Ray {ray_version}, the driver Ray {ray.__version__}; "
                             f"they must match ({fix})")
    return version


def worker_python(engine: str, vllm: VLLMConfig) -> tuple[Optional[str], str]:
    """The interpreter ``engine``'s rollout workers run in (None: this one, for hf; the checked vLLM
    environment for vllm, ``UserInputError`` when it cannot serve) and the engine's name with its version."""
    if engine != "vllm":
        return None, engine
    python = vllm_python(vllm)
    version = check_vllm_python(python)
    logger.info("rollout engine: vLLM %s in %s", version, python)
    return python, f"vllm {version}"


def make_policy(spec: RolloutSpec) -> Any:
    """The policy model of a rollout worker playing ``spec``, on its engine (``spec.engine``)."""
    if spec.engine == "vllm":
        from training.rollout.vllm_policy import VLLMPolicyModel

        return VLLMPolicyModel(spec.model, device=spec.device, chat_template=spec.chat_template, vllm=spec.vllm,
                               seed=spec.sampling.seed or 0)
    if spec.engine != "hf":
        raise ValueError(f"unknown rollout engine {spec.engine!r}; valid: {', '.join(ENGINES)}")
    from training.rollout.policy import PolicyModel

    return PolicyModel(spec.model, device=spec.device, chat_template=spec.chat_template)


def update_snapshots(held: dict[str, Any], snapshots: Mapping[str, Mapping[str, Any]], spec: RolloutSpec) -> None:
    """Make ``held`` (name -> frozen policy model) hold exactly ``snapshots``: a new name gets its own model (the
    spec's engine, loaded from the checkpoint, then the snapshot's weights); a name no longer listed is dropped."""
    for name in [n for n in held if n not in snapshots]:
        del held[name]
    for name, state in snapshots.items():
        if name not in held:
            if not name.startswith(SNAPSHOT_PREFIX):
                raise ValueError(f"a snapshot is named {SNAPSHOT_PREFIX}STEP, got {name!r}")
            model = make_policy(spec)
            model.load_state(state, int(name[len(SNAPSHOT_PREFIX):]))
            held[name] = model
