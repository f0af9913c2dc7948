"""What a resumable checkpoint must hold, by the layout the learner's backend writes it in.

The Trainer (transformers 5.23, ``Trainer._save_checkpoint``) writes every checkpoint's
``trainer_state.json`` and one RNG state per learner process (``rng_files``); the weights, optimizer and
scheduler depend on the backend (``_save_optimizer_and_scheduler`` and accelerate 1.15's
``save_fsdp_model`` / ``save_fsdp_optimizer``):

- ``plain`` (one process or DDP): ``optimizer.pt``, ``scheduler.pt`` and a weights file (``WEIGHT_FILES``);
- ``fsdp_full`` (FSDP, ``FULL_STATE_DICT``): gathered on the main process, ``pytorch_model_fsdp.bin``,
  ``optimizer.bin``, ``scheduler.pt`` (and ``model.safetensors``);
- ``fsdp_sharded`` (FSDP, ``SHARDED_STATE_DICT``): ``pytorch_model_fsdp_0/`` and ``optimizer_0/``, each a
  torch.distributed.checkpoint directory (``.metadata`` naming the ``*.distcp`` shard files every
  process wrote), and ``scheduler.pt``;
- ``deepspeed`` (ZeRO): ``latest`` naming a tag directory (``global_stepN``) with the model states and one
  ``*zero_pp_rank_R_mp_rank_*_optim_states.pt`` per process (the scheduler is the engine's, inside them).

``layout_of(trainer)`` says which one a trainer writes (``ManifestCallback`` records it in the manifest; a
manifest without one is ``plain``), ``missing_parts(...)`` what a sealed checkpoint of a layout lacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Collection

LAYOUTS = ("plain", "fsdp_full", "fsdp_sharded", "deepspeed")
#: The layout of a manifest that names none (written before layouts were recorded: one process or DDP).
DEFAULT_LAYOUT = "plain"
TRAINER_STATE = "trainer_state.json"
SCHEDULER = "scheduler.pt"
#: One of these holds the weights of a ``plain`` checkpoint.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "adapter_model.safetensors")
#: accelerate's names (``accelerate.utils.constants``: ``FSDP_MODEL_NAME``, ``OPTIMIZER_NAME``).
FSDP_MODEL = "pytorch_model_fsdp"
FSDP_OPTIMIZER = "optimizer"
#: What torch.distributed.checkpoint writes last into a directory, naming every shard file.
DCP_METADATA = ".metadata"
#: DeepSpeed's file naming the newest tag directory of a checkpoint.
DEEPSPEED_LATEST = "latest"


def rng_files(processes: int) -> tuple[str, ...]:
    """The Trainer's RNG-state files of a run with ``processes`` learner processes (one each)."""
    return ("rng_state.pth",) if processes == 1 else tuple(f"rng_state_{i}.pth" for i in range(processes))


def required_files(layout: str, processes: int) -> tuple[str, ...]:
    """The single files a checkpoint of ``layout`` written by ``processes`` processes must list."""
    own = {"plain": ("optimizer.pt", SCHEDULER), "fsdp_full": (f"{FSDP_OPTIMIZER}.bin", f"{FSDP_MODEL}.bin", SCHEDULER),
           "fsdp_sharded": (SCHEDULER,), "deepspeed": (DEEPSPEED_LATEST,)}[layout]
    return (*own, TRAINER_STATE, *rng_files(processes))


def layout_of(trainer: Any) -> str:
    """The layout ``trainer`` writes its checkpoints in."""
    if getattr(trainer, "is_deepspeed_enabled", False):
        return "deepspeed"
    if getattr(trainer, "is_fsdp_enabled", False):
        state_dict_type = str(trainer.accelerator.state.fsdp_plugin.state_dict_type)
        return "fsdp_sharded" if "SHARDED_STATE_DICT" in state_dict_type else "fsdp_full"
    return "plain"


def _dcp_problems(ckpt: Path, folder: str, listed: Collection[str]) -> list[str]:
    """What the torch.distributed.checkpoint directory ``folder`` lacks: its ``.metadata``, or a shard file
    the metadata names."""
    meta = f"{folder}/{DCP_METADATA}"
    if meta not in listed:
        return [f"{meta} never written"]
    if not (ckpt / meta).is_file():
        return []  # reported as missing with the other listed files
    from torch.distributed.checkpoint import FileSystemReader

    try:
        metadata = FileSystemReader(str(ckpt / folder)).read_metadata()
    except Exception as exc:  # noqa: BLE001 -- any unreadable metadata is one problem of this checkpoint
        return [f"{meta} unreadable ({type(exc).__name__})"]
    shards = sorted({info.relative_path for info in (metadata.storage_data or {}).values()})
    if not shards:
        return [f"{meta} names no shard files"]
    return [f"{folder}/{name} never written" for name in shards if f"{folder}/{name}" not in listed]


def _deepspeed_problems(ckpt: Path, listed: Collection[str], processes: int) -> list[str]:
    """What a DeepSpeed checkpoint lacks: the tag directory ``latest`` names, its model states, or a
    process's optimizer states."""
    if DEEPSPEED_LATEST not in listed or not (ckpt / DEEPSPEED_LATEST).is_file():
        return []  # reported with the required files
    tag = (ckpt / DEEPSPEED_LATEST).read_text(encoding="utf-8").strip()
    inside = [name[len(tag) + 1:] for name in listed if name.startswith(f"{tag}/")]
    if not tag or not inside:
        return [f"{tag or '(empty tag)'}/ (named by {DEEPSPEED_LATEST}) never written"]
    problems = []
    if not any(name.endswith("model_states.pt") for name in inside):
        problems.append(f"{tag}/*model_states.pt never written")
    for rank in range(processes):
        if not any(f"zero_pp_rank_{rank}_mp_rank_" in name and name.endswith("optim_states.pt") for name in inside):
            problems.append(f"{tag}/*zero_pp_rank_{rank}_mp_rank_*_optim_states.pt never written")
    return problems


def missing_parts(ckpt: Path, layout: str, listed: Collection[str], processes: int) -> list[str]:
    """What a checkpoint of ``layout`` by ``processes`` processes whose manifest lists ``listed`` lacks (empty:
    everything it needs was written)."""
    if layout not in LAYOUTS:
        return [f"unknown checkpoint layout {layout!r} (known: {', '.join(LAYOUTS)})"]
    problems = [f"{name} never written" for name in required_files(layout, processes) if name not in listed]
    if layout == "plain" and not any(name in listed for name in WEIGHT_FILES):
        problems.append("no weights file written")
    elif layout == "fsdp_sharded":
        problems += _dcp_problems(ckpt, f"{FSDP_MODEL}_0", listed) + _dcp_problems(ckpt, f"{FSDP_OPTIMIZER}_0", listed)
    elif layout == "deepspeed":
        problems += _deepspeed_problems(ckpt, listed, processes)
    return problems
