"""Loading weights into a ``PolicyModel``'s torch model: a state dict's tensors, the check that nothing is
missing, and a LoRA adapter (PEFT)."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import numpy as np
import torch


def state_tensors(own: Mapping[str, torch.Tensor], state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """``state``'s weights (tensors or numpy arrays) as tensors on the device and in the dtype of the model's own
    (``own``: its state dict); a name the model lacks raises ``KeyError``."""
    tensors = {}
    for key, value in state.items():
        if key not in own:
            raise KeyError(f"unexpected weight {key!r}")
        tensor = torch.from_numpy(np.asarray(value)) if not isinstance(value, torch.Tensor) else value
        tensors[key] = tensor.to(device=own[key].device, dtype=own[key].dtype)
    return tensors


def check_all_loaded(own: Mapping[str, torch.Tensor], loaded: Iterable[str]) -> None:
    """``KeyError`` unless every weight of ``own`` (the model's state dict) is ``loaded`` or tied to one that is."""
    loaded = set(loaded)
    missing = set(own) - loaded
    tied = {k for k in missing if any(own[k].data_ptr() == own[t].data_ptr() for t in loaded)}
    if missing - tied:
        raise KeyError(f"missing weights: {sorted(missing - tied)[:5]}")


def with_lora(model: Any, config_json: Any) -> Any:
    """``model`` wrapped with PEFT for a LoRA adapter (``config_json``: the ``LoraConfig``'s JSON), unless it
    already is."""
    from peft import LoraConfig, get_peft_model

    if hasattr(model, "peft_config"):
        return model
    return get_peft_model(model, LoraConfig(**json.loads(str(config_json)))).eval()


def load_lora_weights(model: Any, weights: Mapping[str, Any]) -> None:
    """Load LoRA adapter ``weights`` (tensors or numpy arrays) into a PEFT ``model``; a key it lacks raises."""
    from peft import set_peft_model_state_dict

    tensors = {k: v if isinstance(v, torch.Tensor) else torch.from_numpy(np.array(v)) for k, v in weights.items()}
    result = set_peft_model_state_dict(model, tensors)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise KeyError(f"unexpected adapter weights: {sorted(unexpected)[:5]}")
