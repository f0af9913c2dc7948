"""The kinds a run picks by name: the rollout backend and the generation engine (torch-free).

Each kind is spelled once here, as a ``Literal`` for config fields and as a tuple of its values for code
that lists or checks them.
"""

from __future__ import annotations

from typing import Literal, get_args

#: Where episodes are played (``rollout.backend``, ``EvalConfig.backend``): the driver process or Ray actors.
BackendKind = Literal["inprocess", "ray"]
#: What generates a policy's turns (``rollout.engine``, ``EvalConfig.engine``): transformers or vLLM.
Engine = Literal["hf", "vllm"]
#: The backend kinds, in ``BackendKind`` order.
BACKENDS: tuple[str, ...] = get_args(BackendKind)
#: The engines, in ``Engine`` order.
ENGINES: tuple[str, ...] = get_args(Engine)
