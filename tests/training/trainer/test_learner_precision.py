"""The learner's weight dtype (``dtype``) reaches TRL's model loading, AdamW's state stays float32, and the
re-scoring forward (old, reference and mismatch log-probs) runs in chunks of ``grpo.rescore_batch_size`` with the
log-probs of one unchunked forward."""

import tempfile

import pytest
from pydantic import ValidationError

from training.config.loading import one_line
from training.config.train import load_train_config

BASE = ["rollout.backend=inprocess", "wandb.mode=disabled"]


def test_dtype_resolves_per_device_and_refuses_16_bit_full_fine_tuning():
    cfg = load_train_config(None, BASE)
    assert cfg.dtype == "auto" and cfg.resolve_dtype("cpu") == "float32" and cfg.resolve_dtype("cuda") == "float32"
    lora = load_train_config(None, [*BASE, "lora.enabled=true"])
    assert lora.resolve_dtype("cuda") == "bfloat16" and lora.resolve_dtype("cpu") == "float32"
    assert load_train_config(None, [*BASE, "lora.enabled=true", "dtype=float16"]).resolve_dtype("cpu") == "float16"
    assert load_train_config(None, [*BASE, "dtype=float32"]).resolve_dtype("cuda") == "float32"
    for bad, words in ((["dtype=bfloat16"], "AdamW's moments in bfloat16"), (["dtype=float64"], "dtype")):
        with pytest.raises(ValidationError) as err:
            load_train_config(None, [*BASE, *bad])
        line = one_line(err.value)
        assert "\n" not in line and words in line


def _trainer(model_dir, *, dtype: str, lora: bool = False, batch: int = 2):
    from datasets import Dataset
    from transformers import AutoTokenizer

    from training.config.checkpoint import CheckpointConfig
    from training.config.grpo import GRPOParams
    from training.config.lora import LoraConfig
    from training.trainer.grpo import ReplicaLabGRPOTrainer, grpo_config
    from training.trainer.weights import lora_peft_config

    args = grpo_config(GRPOParams(num_generations=2, groups_per_step=batch // 2), output_dir=tempfile.mkdtemp(),
                       batch_per_process=batch, temperature=0.7, seed=0, checkpoint=CheckpointConfig(),
                       use_cpu=True, bf16=False, dtype=dtype)
    assert args.model_init_kwargs == {"dtype": dtype}
    return ReplicaLabGRPOTrainer(model=str(model_dir), reward_funcs=[lambda completions, **k: [0.0] * len(completions)],
                                 args=args, train_dataset=Dataset.from_list([{"prompt": "x"}] * batch),
                                 processing_class=AutoTokenizer.from_pretrained(str(model_dir)),
                                 peft_config=lora_peft_config(LoraConfig(enabled=lora)))


def _adam_dtypes(trainer) -> tuple[set, set]:
    """(dtypes of the trainable weights, dtypes of AdamW's moments) after one optimizer step."""
    import torch

    trainer.create_optimizer_and_scheduler(num_training_steps=1)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    trainer.model(input_ids=ids, labels=ids).loss.float().backward()
    trainer.optimizer.step()
    trained = {p.dtype for p in trainer.model.parameters() if p.requires_grad}
    return trained, {s[k].dtype for s in trainer.optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")}


def test_learner_dtype_reaches_trl_and_adam_state_stays_float32(policy_tiny_model_dir):
    import torch

    full = _trainer(policy_tiny_model_dir, dtype="float32")
    assert _adam_dtypes(full) == ({torch.float32}, {torch.float32})
    lora = _trainer(policy_tiny_model_dir, dtype="bfloat16", lora=True)
    frozen = {p.dtype for p in lora.model.parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16}  # the base as loaded
    assert _adam_dtypes(lora) == ({torch.float32}, {torch.float32})  # PEFT's adapters and their AdamW state


def _left_padded(n: int, longest: int, pad: int):
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 300, (n, longest), generator=g)
    mask = torch.ones(n, longest, dtype=torch.long)
    for row in range(n):
        cut = row * 3 % 7  # different lengths, left padding
        ids[row, :cut], mask[row, :cut] = pad, 0
    return ids, mask


def test_rescoring_in_chunks_matches_one_forward(policy_tiny_model_dir):
    import torch

    trainer = _trainer(policy_tiny_model_dir, dtype="float32", batch=2)
    model = trainer.model.eval()
    ids, mask = _left_padded(7, 40, trainer.processing_class.pad_token_id)
    calls = []
    hook = model.register_forward_hook(lambda module, args, kwargs_out: calls.append(1))

    def score(chunk):
        trainer.rescore_batch_size = chunk
        calls.clear()
        with torch.no_grad():
            logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, 16)
        return logps, len(calls)

    whole, forwards = score(7)
    assert forwards == 1 and whole.shape == (7, 16)
    for chunk in (1, 2, 3):
        chunked, forwards = score(chunk)
        assert forwards == -(-7 // chunk)
        torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-6)
    default, forwards = score(None)  # None: the per-process micro-batch (2)
    assert forwards == 4
    torch.testing.assert_close(default, whole, rtol=0, atol=1e-6)
    calls.clear()  # with gradients (the loss) the micro-batch goes through whole
    trainer._get_per_token_logps_and_entropies(model, ids, mask, 16)
    assert len(calls) == 1
    hook.remove()
