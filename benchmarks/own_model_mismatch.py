# Run: PYTHONPATH=$PWD HF_HUB_OFFLINE=1 python benchmarks/own_model_mismatch.py
"""Rollout-vs-trainer log-prob mismatch of each stand-in, TRL's scoring (no position ids) vs the fix."""
import tempfile

import torch
from pathlib import Path
from tests.standins import BUILDERS
from tests.test_own_model import CHATS, TEMPERATURE, _policy, _trainer, trainer_logprobs
from training.config.model import SamplingConfig
for kind in BUILDERS:
    tmp = Path(tempfile.mkdtemp()); path = BUILDERS[kind](Path(tempfile.mkdtemp()))
    policy = _policy(path)
    gens = policy.generate(CHATS, SamplingConfig(temperature=TEMPERATURE, max_new_tokens=24, seed=3))
    tr = _trainer(path, tmp, policy.tokenizer)
    for fixed in (False, True):
        got = trainer_logprobs(tr, gens, policy.pad_token_id, position_ids=fixed)
        d = torch.cat([g - torch.tensor(x.logprobs) for g, x in zip(got, gens)])
        print(f"{kind:5} {'position ids' if fixed else 'TRL as is  '}: mean |diff| {d.abs().mean():.3g}  max {d.abs().max():.3g}  k3 KL {(torch.exp(d)-1-d).mean():.3g}")
