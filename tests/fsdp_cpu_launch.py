"""``replicalab`` under torchrun with FSDP allowed on CPU: the entry point of the CPU FSDP tests.

accelerate 1.15 turns FSDP on only for GPU-class devices: ``AcceleratorState.__init__`` (accelerate/state.py)
sets ``DistributedType.FSDP`` for MULTI_GPU/XPU/NPU/... and leaves MULTI_CPU (gloo, ``use_cpu``) to DDP, so
``learner.sharding=fsdp`` on CPU builds a DDP learner (which ``check_sharded`` refuses).  PyTorch's FSDP2
itself runs on CPU with gloo; this entry point lifts only accelerate's device gate, in the test's own
processes, so the real trainer trains, checkpoints, resumes and exports through FSDP2 on a CPU machine:

    python -m torch.distributed.run --nproc_per_node 2 tests/fsdp_cpu_launch.py train --config ... learner.sharding=fsdp
"""

from __future__ import annotations

import sys


def allow_fsdp_on_cpu() -> None:
    """After accelerate builds its state with an FSDP plugin on MULTI_CPU, make it an FSDP state (the one
    thing accelerate's GPU-only branch would have done)."""
    import accelerate.state as state
    from accelerate.utils import DistributedType

    original = state.AcceleratorState.__init__

    def init(self, *args, fsdp_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            # AcceleratorState copies PartialState's type on every construction: set both
            state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin

    state.AcceleratorState.__init__ = init


if __name__ == "__main__":
    allow_fsdp_on_cpu()
    from training.cli import main

    sys.exit(main(sys.argv[1:]))
