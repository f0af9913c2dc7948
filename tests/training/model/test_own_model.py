"""A user's own Hugging Face model: sampled exactly as configured, scored exactly as sampled (its validation
at load time: ``test_model_validation.py``).  Stand-ins (``tests/standins.py``): Llama-3-style (rotary, no pad
token), Qwen2.5-style (ChatML with an injected default system message, repetition_penalty in
generation_config.json), GPT-2 (absolute positions, no template: ``chat_template: chatml``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

TEMPERATURE = 0.7
CHATS = [
    [{"role": "system", "content": "You are the Scientist."}, {"role": "user", "content": "Propose a protocol."}],
    [{"role": "system", "content": "You are the Lab Manager. Reply with exactly one JSON object."},
     {"role": "user", "content": "Paper: effect 3. Method: use centrifuge and dmso; n=7. Check it and answer."}],
    [{"role": "user", "content": "hi"}],
]


# -- stand-ins (slow) ---------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["llama", "qwen", "gpt2"])
def standin(request, tmp_path_factory) -> tuple[str, Path]:
    from standins import BUILDERS

    out = tmp_path_factory.mktemp(f"standin-{request.param}")
    return request.param, BUILDERS[request.param](out)


def _policy(path: Path, **kwargs):
    from training.model.validate import resolve_chat_template, validate_model
    from training.rollout.policy import PolicyModel

    template = resolve_chat_template("chatml")
    return PolicyModel(validate_model(str(path), chat_template=template), device="cpu", chat_template=template,
                       **kwargs)


def _trainer(path: Path, tmp: Path, tokenizer):
    from datasets import Dataset
    from trl import GRPOConfig

    from training.trainer.grpo import ReplicaLabGRPOTrainer

    args = GRPOConfig(output_dir=str(tmp / "trl"), use_cpu=True, bf16=False, per_device_train_batch_size=2,
                      num_generations=2, temperature=TEMPERATURE, disable_dropout=True, report_to="none")
    return ReplicaLabGRPOTrainer(model=str(path), reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                                 args=args, train_dataset=Dataset.from_list([{"prompt": "x"}] * 2),
                                 processing_class=tokenizer)


def trainer_logprobs(trainer, gens, pad_id: int, *, position_ids: bool = True):
    """The trainer's per-token log-probs of ``gens`` scored as one left-padded TRL batch (TRL's own
    scoring when ``position_ids`` is False)."""
    import torch
    from trl import GRPOTrainer

    p_w = max(len(g.prompt_ids) for g in gens)
    c_w = max(len(g.completion_ids) for g in gens)
    ids = torch.full((len(gens), p_w + c_w), pad_id)
    mask = torch.zeros_like(ids)
    for i, g in enumerate(gens):
        ids[i, p_w - len(g.prompt_ids):p_w] = torch.tensor(g.prompt_ids)
        ids[i, p_w:p_w + len(g.completion_ids)] = torch.tensor(g.completion_ids)
        mask[i, p_w - len(g.prompt_ids):p_w + len(g.completion_ids)] = 1
    method = type(trainer)._get_per_token_logps_and_entropies if position_ids else \
        GRPOTrainer._get_per_token_logps_and_entropies
    with torch.no_grad():
        logps, _, _ = method(trainer, trainer.model, ids, mask, c_w)
    return [logps[i, :len(g.completion_ids)] for i, g in enumerate(gens)]


@pytest.mark.slow
def test_recorded_fresh_and_trainer_logprobs_agree(standin, tmp_path):
    import torch

    from training.config.model import SamplingConfig

    kind, path = standin
    policy = _policy(path)
    assert policy.tokenizer.pad_token_id is not None or kind != "qwen"
    sampling = SamplingConfig(temperature=TEMPERATURE, max_new_tokens=24, seed=3)
    gens = policy.generate(CHATS, sampling)
    assert len({len(g.prompt_ids) for g in gens}) > 1  # left padding really happens (prompts of different lengths)
    trainer = _trainer(path, tmp_path, policy.tokenizer)
    scored = trainer_logprobs(trainer, gens, policy.pad_token_id)
    unfixed = trainer_logprobs(trainer, gens, policy.pad_token_id, position_ids=False)
    for g, t, u in zip(gens, scored, unfixed):
        with torch.no_grad():
            logits = policy.model(torch.tensor([g.prompt_ids + g.completion_ids])).logits[0]
        fresh = torch.log_softmax(logits[len(g.prompt_ids) - 1:-1] / TEMPERATURE, -1)
        fresh = fresh.gather(1, torch.tensor(g.completion_ids)[:, None])[:, 0]
        recorded = torch.tensor(g.logprobs)
        assert torch.allclose(recorded, fresh, atol=1e-4), (kind, (recorded - fresh).abs().max())
        assert torch.allclose(t, fresh, atol=1e-4), (kind, (t - fresh).abs().max())
        shifted = len(g.prompt_ids) < max(len(x.prompt_ids) for x in gens)
        if kind == "gpt2" and shifted:  # TRL without position ids mis-scores absolute positions
            assert (u - fresh).abs().mean() > 1e-2
        elif kind != "gpt2":
            assert torch.allclose(u, fresh, atol=1e-4)


@pytest.mark.slow
def test_stop_tokens_include_the_end_of_turn_token(standin):
    kind, path = standin
    policy = _policy(path)
    end = {"llama": "<|eot_id|>", "qwen": "<|im_end|>", "gpt2": "<|im_end|>"}[kind]
    assert policy.tokenizer.convert_tokens_to_ids(end) in policy.stop_token_ids
    assert policy.tokenizer.eos_token_id in policy.stop_token_ids


@pytest.mark.slow
def test_checkpoint_sampling_extras_do_not_shape_what_is_sampled(standin, tmp_path, caplog):
    """A checkpoint with a huge repetition penalty and no_repeat_ngram_size=1: greedy decoding still picks the
    argmax of the model's own logits at every step, and the extras are named once in the log."""
    import torch

    from training.config.model import SamplingConfig

    kind, path = standin
    copy = tmp_path / kind
    shutil.copytree(path, copy)
    gen = json.loads((copy / "generation_config.json").read_text())
    gen.update(repetition_penalty=100.0, no_repeat_ngram_size=1, min_p=0.5)
    (copy / "generation_config.json").write_text(json.dumps(gen))
    with caplog.at_level("WARNING", logger="training.rollout.policy"):
        policy = _policy(copy)
    assert [r for r in caplog.records if "repetition_penalty" in r.getMessage()]
    greedy = policy.generate(CHATS, SamplingConfig(do_sample=False, max_new_tokens=24))
    repeats = 0
    for g in greedy:
        with torch.no_grad():
            logits = policy.model(torch.tensor([g.prompt_ids + g.completion_ids])).logits[0]
        argmax = logits[len(g.prompt_ids) - 1:-1].argmax(-1).tolist()
        assert argmax == g.completion_ids
        repeats += sum(t in g.prompt_ids + g.completion_ids[:i] for i, t in enumerate(g.completion_ids))
    assert repeats > 0  # the penalty would have forbidden these tokens: the check has teeth


@pytest.mark.slow
def test_sampled_distribution_is_the_configured_one(standin):
    """One step sampled 4000 times with top_k=4, T=0.7: every draw is in the configured top 4 and the
    frequencies match softmax(top-4 logits / T); the recorded log-prob is that distribution's."""
    import torch

    from training.config.model import SamplingConfig

    kind, path = standin
    policy = _policy(path)
    sampling = SamplingConfig(temperature=TEMPERATURE, top_k=4, max_new_tokens=1, seed=0)
    prompt = policy.encode_chat(CHATS[0])
    n = 4000
    gens = policy.generate_ids([prompt] * n, sampling)
    with torch.no_grad():
        logits = policy.model(torch.tensor([prompt])).logits[0, -1] / TEMPERATURE
    top = logits.topk(4)
    probs = torch.softmax(top.values, -1)
    counts = torch.tensor([sum(g.completion_ids[0] == t for g in gens) for t in top.indices.tolist()])
    assert int(counts.sum()) == n
    tv = 0.5 * (counts / n - probs).abs().sum()
    assert tv < 0.04, (kind, counts, probs)
    first = {g.completion_ids[0]: g.logprobs[0] for g in gens}
    for token, logprob in first.items():
        assert logprob == pytest.approx(float(probs.log()[top.indices.tolist().index(token)]), abs=1e-4)


@pytest.mark.slow
def test_standin_plays_evaluates_and_trains(standin, tmp_path, monkeypatch):
    from replicalab.env import ReplicaLabEnv
    from replicalab.episode import run_episode
    from training.config.eval import load_eval_config
    from training.config.model import SamplingConfig
    from training.config.train import load_train_config
    from training.eval.run import run_eval
    from training.model.validate import resolve_chat_template
    from training.rollout.agent import load_agent_spec
    from training.trainer.run import run_train

    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")
    kind, path = standin
    template = resolve_chat_template("chatml")
    greedy = SamplingConfig(do_sample=False, max_new_tokens=16)
    agent = load_agent_spec(f"model:{path}", "scientist", sampling=greedy, chat_template=template, device="cpu")()
    log = run_episode(ReplicaLabEnv(max_rounds=2), agent, seed=1_000_000, template="cell_biology",
                      difficulty="easy")
    assert agent.generations and log.turns
    cfg = load_eval_config(None, [f"agents=[model:{path}]", "episodes=2", "templates=[cell_biology]",
                                  "difficulties=[easy]", "backend=inprocess", "sampling.max_new_tokens=16",
                                  "chat_template=chatml", f"out={tmp_path / 'eval'}", "wandb.mode=offline"])
    report = run_eval(cfg, progress=False)
    assert report["agents"][f"model:{path}"]["overall"]["episodes"] == 2
    train = load_train_config("configs/train/default.yaml", [
        f"model={path}", "chat_template=chatml", "grpo.max_steps=1", "grpo.groups_per_step=1",
        "grpo.num_generations=2", "rollout.backend=inprocess", "rollout.sampling.max_new_tokens=16",
        "wandb.mode=offline", f"output_dir={tmp_path}", "run_name=own"])
    summary = run_train(train)
    final = Path(summary["final_model"])
    metrics = [json.loads(line) for line in (final.parent / "metrics.jsonl").read_text().splitlines()]
    mismatch = [m for m in metrics if any(k.startswith("mismatch/") for k in m)]
    assert mismatch and all(v < 1e-4 for m in mismatch for k, v in m.items() if k.startswith("mismatch/"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (final / name).read_bytes() == (path / name).read_bytes()  # the user's files, unchanged
    readme = (final / "README.md").read_text()
    assert ("chat_template.jinja added" in readme) == (kind == "gpt2")
    assert ("pad token" in readme) == (kind != "qwen")
    again = load_agent_spec(f"model:{final}", "scientist", sampling=greedy, device="cpu")()  # no option needed
    run_episode(ReplicaLabEnv(max_rounds=1), again, seed=1_000_001, template="cell_biology", difficulty="easy")
    assert again.generations


@pytest.mark.slow
def test_constrained_sampling_is_scored_exactly_by_the_trainer(standin, tmp_path):
    """Under ``rollout.sampling.constrained`` the recorded log-probs, a fresh masked scoring and the trainer's
    masked scoring are the same numbers, for each model family's tokenizer and template."""
    import torch

    from training.config.model import SamplingConfig
    from training.trainer.grpo import trainer_grammar

    kind, path = standin
    policy = _policy(path)
    roles = ["scientist", "lab_manager", "lab_manager"]
    sampling = SamplingConfig(temperature=TEMPERATURE, max_new_tokens=24, seed=3, constrained=True)
    gens = policy.generate(CHATS, sampling, grammars=roles)
    trainer = _trainer(path, tmp_path, policy.tokenizer)
    trainer.grammar = trainer_grammar(trainer, policy.tokenizer)
    trainer._scored_rows = (lambda: roles, lambda: None)
    scored = trainer_logprobs(trainer, gens, policy.pad_token_id)
    for g, role, t in zip(gens, roles, scored):
        assert policy.tokenizer.decode(g.completion_ids[:1]).startswith("{"), kind
        ids = torch.tensor([g.completion_ids])
        allowed = policy.grammar.completion_masks([role], ids, torch.ones_like(ids))[0]
        with torch.no_grad():
            logits = policy.model(torch.tensor([g.prompt_ids + g.completion_ids])).logits[0]
        fresh = (logits[len(g.prompt_ids) - 1:-1] / TEMPERATURE).masked_fill(~allowed, float("-inf"))
        fresh = torch.log_softmax(fresh, -1).gather(1, ids[0][:, None])[:, 0]
        assert torch.allclose(torch.tensor(g.logprobs), fresh, atol=1e-4), (kind, role)
        assert torch.allclose(t, fresh, atol=1e-4), (kind, role)
        unmasked = torch.log_softmax(logits[len(g.prompt_ids) - 1:-1] / TEMPERATURE, -1)
        assert (fresh - unmasked.gather(1, ids[0][:, None])[:, 0]).max() > 0.1  # the mask really renormalised


@pytest.mark.slow
def test_a_static_kv_cache_samples_what_the_dynamic_one_does(standin):
    """``sampling.kv_cache: static`` (compiled decoding on a GPU) draws the same tokens with the same log-probs as
    the dynamic cache, on a left-padded batch, for each model family."""
    import torch

    from training.config.model import SamplingConfig

    kind, path = standin
    policy = _policy(path)
    prompts = [policy.encode_chat(chat) for chat in CHATS]
    dynamic = SamplingConfig(temperature=TEMPERATURE, max_new_tokens=24)
    static = dynamic.model_copy(update={"kv_cache": "static"})
    a = policy.generate_ids(prompts, dynamic, row_seeds=[1, 2, 3])
    b = policy.generate_ids(prompts, static, row_seeds=[1, 2, 3])
    for x, y in zip(a, b):
        assert x.completion_ids == y.completion_ids, kind
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4), kind
