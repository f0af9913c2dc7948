"""Fixtures of the rollout tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def default_policy():
    """The embedded default model, on the CPU (the grammar and rollout tests sample from it)."""
    from training.model.default import resolve_default_model
    from training.rollout.policy import PolicyModel

    return PolicyModel(str(resolve_default_model()), device="cpu")
