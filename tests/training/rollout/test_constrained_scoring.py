"""Whole constrained trajectories scored again: each model token's log-prob, under the mask its own reply's grammar key
gives (``trajectory_key``: a Scientist's key changes turn by turn), is the one the rollout recorded, on the CPU and,
where there is one, on a CUDA device (the ``gpu`` case, also run by ``launch/gpu_check.sh figures``; it needs no
Ray, TRL or W&B)."""

from __future__ import annotations

import pytest
import torch

from replicalab.scenarios import cells
from replicalab.seeds import VALIDATION_SEEDS

#: The largest and the mean difference allowed between a recorded and a rescored log-prob, per device: the rollout
#: decoded in a left-padded batch with a KV cache, the rescoring runs one unpadded forward pass (float32 on the CPU;
#: bfloat16 on CUDA, ``training.rollout.device.default_dtype``, where such a pass differs by up to about 0.06 nats).
TOLERANCE = {"cpu": (1e-4, 1e-5), "cuda": (0.2, 0.01)}
TEMPERATURE = 1.0

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("device", [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")])])
def test_constrained_trajectories_are_rescored_exactly_under_each_replys_grammar(device):
    from training.config.model import SamplingConfig
    from training.model.default import resolve_default_model
    from training.rollout.grammar import reply_keys
    from training.rollout.play import play_jobs
    from training.rollout.policy import PolicyModel
    from training.rollout.records import episode_jobs

    policy = PolicyModel(str(resolve_default_model()), device=device)
    sampling = SamplingConfig(temperature=TEMPERATURE, seed=7, constrained=True,
                              bound_roles=["lab_manager", "scientist"])
    records = []
    for role, opponent in (("scientist", "scripted:thrifty"), ("lab_manager", "scripted:naive")):
        seats = {"scientist": "policy", "lab_manager": opponent} if role == "scientist" else {
            "scientist": opponent, "lab_manager": "policy"}
        records += play_jobs(policy, episode_jobs(cells(), VALIDATION_SEEDS[:1], role=role), **seats,
                             sampling=sampling)
    several, masked, unmasked = 0, [], []
    for record in records:
        t = record.trajectory
        several += len(reply_keys(t.grammar)) > 1
        completion, model = torch.tensor([t.completion_ids]), torch.tensor([t.env_mask])
        allowed = policy.grammar.completion_masks([t.grammar], completion, model)[0].to(device)
        with torch.no_grad():
            logits = policy.model(torch.tensor([t.prompt_ids + t.completion_ids], device=device)).logits[0].float()
        logits = logits[len(t.prompt_ids) - 1:-1] / TEMPERATURE
        on_model, recorded = model[0].bool(), torch.tensor(t.logprobs)
        for out, scores in ((masked, logits.masked_fill(~allowed, float("-inf"))), (unmasked, logits)):
            rescored = scores.log_softmax(-1).gather(1, completion[0][:, None].to(device))[:, 0].cpu()
            assert torch.isfinite(rescored[on_model]).all(), record.job
            out.append((rescored - recorded)[on_model].abs())
    assert several >= 3, several  # Scientist trajectories whose replies were decoded under keys of their own
    masked, unmasked = torch.cat(masked), torch.cat(unmasked)
    largest, mean = TOLERANCE[device]
    assert masked.max() < largest and masked.mean() < mean, (float(masked.max()), float(masked.mean()))
    assert unmasked.mean() > 5 * masked.mean()  # the masks are what made the recorded numbers
