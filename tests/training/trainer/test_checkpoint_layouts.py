"""Checkpoint manifests of every learner backend's layout (plain, FSDP full, FSDP sharded, DeepSpeed ZeRO): an
intact checkpoint of each verifies; each way of being incomplete or damaged is named; resume skips a damaged
one and keeps it aside.  The layouts are the files transformers 5.23 and accelerate 1.15 write (the FSDP
sharded one is written here by torch.distributed.checkpoint itself, as accelerate does)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest


def _write(ckpt: Path, name: str, data: bytes = b"x") -> None:
    (ckpt / name).parent.mkdir(parents=True, exist_ok=True)
    (ckpt / name).write_bytes(data)


def _dcp_dir(ckpt: Path, folder: str) -> None:
    """A torch.distributed.checkpoint directory (``.metadata`` naming its ``__0_0.distcp`` shard file), written
    by DCP itself in one process."""
    import torch
    import torch.distributed.checkpoint as dcp

    with pytest.warns(UserWarning, match="single process"):
        dcp.save({"w": torch.arange(4.0)}, checkpoint_id=str(ckpt / folder))


def _rng(ckpt: Path, processes: int) -> None:
    from training.trainer.checkpoint_layouts import rng_files

    for name in rng_files(processes):
        _write(ckpt, name)


def make_plain(ckpt: Path, processes: int) -> None:
    for name in ("optimizer.pt", "scheduler.pt", "trainer_state.json", "model.safetensors"):
        _write(ckpt, name)
    _rng(ckpt, processes)


def make_fsdp_full(ckpt: Path, processes: int) -> None:
    for name in ("optimizer.bin", "pytorch_model_fsdp.bin", "model.safetensors", "scheduler.pt", "trainer_state.json"):
        _write(ckpt, name)
    _rng(ckpt, processes)


def make_fsdp_sharded(ckpt: Path, processes: int) -> None:
    _dcp_dir(ckpt, "pytorch_model_fsdp_0")
    _dcp_dir(ckpt, "optimizer_0")
    for name in ("scheduler.pt", "trainer_state.json"):
        _write(ckpt, name)
    _rng(ckpt, processes)


def make_deepspeed(ckpt: Path, processes: int) -> None:
    _write(ckpt, "latest", b"global_step3")
    _write(ckpt, "zero_to_fp32.py", b"# recovery script")
    for rank in range(processes):
        _write(ckpt, f"global_step3/zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
        _write(ckpt, f"global_step3/bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    for name in ("trainer_state.json", "model.safetensors"):
        _write(ckpt, name)
    _rng(ckpt, processes)


MAKERS: dict[str, Callable[[Path, int], None]] = {"plain": make_plain, "fsdp_full": make_fsdp_full,
                                                 "fsdp_sharded": make_fsdp_sharded, "deepspeed": make_deepspeed}


def sealed(tmp_path: Path, layout: str, processes: int = 2, step: int = 3,
           before_seal: Callable[[Path], None] = lambda c: None) -> Path:
    from training.trainer.checkpoints import write_manifest

    ckpt = tmp_path / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    MAKERS[layout](ckpt, processes)
    before_seal(ckpt)
    write_manifest(ckpt, step, processes=processes, layout=layout)
    return ckpt


@pytest.mark.parametrize("layout", list(MAKERS))
def test_an_intact_checkpoint_of_every_layout_verifies(tmp_path: Path, layout: str):
    from training.trainer.checkpoints import read_manifest, verify_checkpoint

    ckpt = sealed(tmp_path, layout)
    assert verify_checkpoint(ckpt) == []
    manifest = read_manifest(ckpt)
    assert manifest["layout"] == layout and manifest["processes"] == 2
    if layout == "fsdp_sharded":  # the shard files sit in the manifest like any file
        assert {"optimizer_0/.metadata", "optimizer_0/__0_0.distcp"} <= set(manifest["files"])


#: (layout, what happens to the checkpoint, and when: "before" the seal -- never written -- or "after" it
#: -- lost or damaged on disk --, the problem verify_checkpoint must name)
DAMAGE = {
    "plain-no-optimizer": ("plain", lambda c: (c / "optimizer.pt").unlink(), "before", "optimizer.pt never written"),
    "fsdp_full-no-optimizer": ("fsdp_full", lambda c: (c / "optimizer.bin").unlink(), "before",
                               "optimizer.bin never written"),
    "fsdp_full-model-lost": ("fsdp_full", lambda c: (c / "pytorch_model_fsdp.bin").unlink(), "after",
                             "pytorch_model_fsdp.bin missing"),
    "fsdp_full-plain-optimizer-only": ("fsdp_full", lambda c: ((c / "optimizer.bin").rename(c / "optimizer.pt")),
                                       "before", "optimizer.bin never written"),
    "fsdp_sharded-shard-never-written": ("fsdp_sharded", lambda c: (c / "optimizer_0" / "__0_0.distcp").unlink(),
                                         "before", "optimizer_0/__0_0.distcp never written"),
    "fsdp_sharded-no-metadata": ("fsdp_sharded", lambda c: (c / "pytorch_model_fsdp_0" / ".metadata").unlink(),
                                 "before", "pytorch_model_fsdp_0/.metadata never written"),
    "fsdp_sharded-shard-truncated": ("fsdp_sharded",
                                     lambda c: (c / "pytorch_model_fsdp_0" / "__0_0.distcp").write_bytes(b"x"),
                                     "after", "pytorch_model_fsdp_0/__0_0.distcp has 1 bytes"),
    "fsdp_sharded-metadata-garbled": ("fsdp_sharded", lambda c: (c / "optimizer_0" / ".metadata").write_bytes(b"?"),
                                      "before", "optimizer_0/.metadata unreadable"),
    "fsdp_sharded-no-scheduler": ("fsdp_sharded", lambda c: (c / "scheduler.pt").unlink(), "before",
                                  "scheduler.pt never written"),
    "deepspeed-rank-optimizer-never-written": (
        "deepspeed", lambda c: (c / "global_step3" / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink(),
        "before", "global_step3/*zero_pp_rank_1_mp_rank_*_optim_states.pt never written"),
    "deepspeed-latest-names-absent-tag": ("deepspeed", lambda c: (c / "latest").write_text("global_step9"), "before",
                                          "global_step9/ (named by latest) never written"),
    "deepspeed-no-latest": ("deepspeed", lambda c: (c / "latest").unlink(), "before", "latest never written"),
    "deepspeed-states-changed": (
        "deepspeed", lambda c: (c / "global_step3" / "zero_pp_rank_0_mp_rank_00_model_states.pt").write_bytes(b"y"),
        "after", "global_step3/zero_pp_rank_0_mp_rank_00_model_states.pt content differs from the manifest (sha256)"),
    "rng-of-rank-1-never-written": ("fsdp_sharded", lambda c: (c / "rng_state_1.pth").unlink(), "before",
                                    "rng_state_1.pth never written"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_every_way_a_checkpoint_is_incomplete_or_damaged_is_named(tmp_path: Path, case: str):
    from training.trainer.checkpoints import verify_checkpoint

    layout, hurt, when, named = DAMAGE[case]
    if when == "before":
        ckpt = sealed(tmp_path, layout, before_seal=hurt)
    else:
        ckpt = sealed(tmp_path, layout)
        hurt(ckpt)
    problems = verify_checkpoint(ckpt)
    assert any(p.startswith(named) for p in problems), problems


def test_a_layout_is_read_from_the_manifest_and_defaults_to_plain(tmp_path: Path):
    from training.trainer.checkpoints import MANIFEST_FILE, verify_checkpoint

    ckpt = sealed(tmp_path, "fsdp_full")
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    del manifest["layout"]  # a manifest written before layouts were recorded is a plain checkpoint's
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert verify_checkpoint(ckpt) == ["optimizer.pt never written"]
    manifest["layout"] = "megatron"
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert verify_checkpoint(ckpt) == ["unknown checkpoint layout 'megatron' (known: plain, fsdp_full, fsdp_sharded, "
                                       "deepspeed)"]


def test_resume_sets_a_damaged_sharded_checkpoint_aside_and_uses_the_previous(tmp_path: Path):
    from training.trainer.checkpoints import resume_checkpoint

    sealed(tmp_path, "fsdp_sharded", step=1)
    newest = sealed(tmp_path, "fsdp_sharded", step=2)
    (newest / "optimizer_0" / "__0_0.distcp").unlink()  # a shard lost after the seal
    ckpt, manifest = resume_checkpoint(tmp_path)
    assert ckpt.name == "checkpoint-1" and manifest["layout"] == "fsdp_sharded"
    aside = tmp_path / "damaged-checkpoint-2"
    assert aside.is_dir() and (aside / "pytorch_model_fsdp_0" / "__0_0.distcp").is_file()  # renamed, not deleted


def test_the_trainer_says_which_layout_it_writes():
    from types import SimpleNamespace

    from training.trainer.checkpoint_layouts import layout_of

    def fsdp(kind: str):
        plugin = SimpleNamespace(state_dict_type=f"StateDictType.{kind}")
        return SimpleNamespace(is_fsdp_enabled=True, is_deepspeed_enabled=False,
                               accelerator=SimpleNamespace(state=SimpleNamespace(fsdp_plugin=plugin)))

    assert layout_of(SimpleNamespace(is_fsdp_enabled=False, is_deepspeed_enabled=False)) == "plain"
    assert layout_of(fsdp("SHARDED_STATE_DICT")) == "fsdp_sharded"
    assert layout_of(fsdp("FULL_STATE_DICT")) == "fsdp_full"
    assert layout_of(SimpleNamespace(is_fsdp_enabled=False, is_deepspeed_enabled=True)) == "deepspeed"
