"""What the learner ships to the rollout workers each step: the policy's weights as tensors in the model's own
dtype (the full model, or with LoRA only the adapter and its config), gathered whole from the learner's
processes.  The rollout backend decides how they travel (``rollout.weight_sync``: over a collective in that
dtype, or through the object store as float32 numpy arrays)."""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

import torch

from training.config.lora import LoraConfig
from training.rollout.sync_wire import plan_layout
from training.rollout.collective_sync import MIB


def model_state(model, state: Optional[Mapping[str, torch.Tensor]] = None) -> dict[str, torch.Tensor]:
    """The model's weights as detached tensors in their own dtype and place (tied weights stay shared)."""
    state = model.state_dict() if state is None else state
    return {k: v.detach() for k, v in state.items()}


def lora_peft_config(lora: LoraConfig):
    """The PEFT ``LoraConfig`` of a run's ``lora`` section (None when LoRA is off)."""
    if not lora.enabled:
        return None
    import peft

    return peft.LoraConfig(**lora_kwargs(lora))


def lora_kwargs(lora: LoraConfig) -> dict[str, Any]:
    targets = lora.target_modules
    return dict(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, task_type="CAUSAL_LM",
                target_modules=targets[0] if targets == ["all-linear"] else list(targets))


def policy_weights(model, lora: LoraConfig, state: Optional[Mapping[str, torch.Tensor]] = None) -> dict[str, Any]:
    """What rollout workers load each step: the full weights, or with LoRA only the adapter's plus its config
    under ``LORA_CONFIG_KEY`` (``PolicyModel.load_adapter``), as tensors in the model's dtype that share memory
    with the model (the backend copies or sends them before the next optimizer step).  ``state`` is the
    model's full state dict when the caller gathered it (default: ``model.state_dict()``)."""
    if not hasattr(model, "peft_config"):
        return model_state(model, state)
    from peft import get_peft_model_state_dict

    from training.rollout.policy import LORA_CONFIG_KEY

    adapter = get_peft_model_state_dict(model, state_dict=state)
    adapter = {k: v.detach() for k, v in adapter.items()}
    return {**adapter, LORA_CONFIG_KEY: json.dumps(lora_kwargs(lora))}


def trainer_weights(trainer: Any, lora: LoraConfig) -> Optional[dict[str, Any]]:
    """``policy_weights`` of the trainer's model, gathered whole: every learner process calls it (under
    FSDP or ZeRO-3 the gather is collective); the main process gets the payload, the others None."""
    full = trainer.accelerator.get_state_dict(trainer.model_wrapped)
    if not trainer.accelerator.is_main_process:
        return None
    return policy_weights(trainer.model, lora, full)


def payload_bytes(state: Mapping[str, Any]) -> int:
    """Bytes of a payload's tensors and arrays in their own dtype, tied ones once."""
    return plan_layout(state, MIB).payload_bytes
