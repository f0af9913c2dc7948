"""A non-finite gradient is dropped before the optimizer step, in a real transformers Trainer."""

import math

import pytest
import torch
from torch import nn
from transformers import Trainer, TrainingArguments

from training.trainer.grad_guard import SKIPS_METRIC, NonFiniteGradGuard, grads_finite


class Regressor(nn.Module):
    """A linear regressor whose loss is NaN on the forward calls numbered in ``poisoned`` (0-based)."""

    def __init__(self, poisoned=()):
        super().__init__()
        self.linear = nn.Linear(4, 1)
        self.poisoned, self.calls = set(poisoned), 0

    def forward(self, x, y):
        loss = ((self.linear(x).squeeze(-1) - y) ** 2).mean()
        if self.calls in self.poisoned:
            loss = loss * math.nan
        self.calls += 1
        return {"loss": loss}


def train(tmp_path, steps, guard, poisoned=()):
    """``steps`` optimizer steps on one repeated batch; the steps in ``poisoned`` have NaN gradients."""
    torch.manual_seed(0)
    model = Regressor(poisoned)
    data = [{"x": torch.arange(1.0, 5.0), "y": torch.tensor(1.0)}] * steps
    args = TrainingArguments(output_dir=str(tmp_path / "checkpoints"), per_device_train_batch_size=1,
                             max_steps=steps, learning_rate=1e-2, lr_scheduler_type="constant", use_cpu=True,
                             report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[guard]).train()
    return model


def test_grads_finite_sees_nan_and_inf():
    layer = nn.Linear(3, 2)
    assert grads_finite(layer)  # no gradients yet
    layer(torch.ones(1, 3)).sum().backward()
    assert grads_finite(layer)
    layer.bias.grad[0] = math.inf
    assert not grads_finite(layer)
    layer.bias.grad[0] = math.nan
    assert not grads_finite(layer)


def test_a_nan_step_is_skipped_and_training_goes_on(tmp_path):
    logged = []
    guard = NonFiniteGradGuard(lambda step, metrics: logged.append((step, metrics)))
    model = train(tmp_path, 6, guard, poisoned={2})
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert guard.skipped == 1 and guard.consecutive == 0
    assert logged == [(2, {SKIPS_METRIC: 1.0})]


def test_the_skipped_step_leaves_weights_and_optimizer_untouched(tmp_path):
    """Four steps with the third one NaN end exactly where three clean steps do (constant learning rate)."""
    skipped = train(tmp_path / "skipped", 4, NonFiniteGradGuard(), poisoned={2})
    clean = train(tmp_path / "clean", 3, NonFiniteGradGuard())
    moved = train(tmp_path / "moved", 4, NonFiniteGradGuard())
    for a, b, c in zip(skipped.parameters(), clean.parameters(), moved.parameters()):
        assert torch.equal(a, b) and not torch.equal(a, c)


def test_consecutive_nan_steps_stop_the_run(tmp_path):
    guard = NonFiniteGradGuard(max_consecutive=2)
    with pytest.raises(RuntimeError, match="2 consecutive optimizer steps had non-finite gradients"):
        train(tmp_path, 5, guard, poisoned={1, 2})
    with pytest.raises(ValueError):
        NonFiniteGradGuard(max_consecutive=0)
