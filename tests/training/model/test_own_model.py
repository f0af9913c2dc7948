"""A user's own Hugging Face model: validated at load time, sampled exactly as configured, scored exactly as
sampled.  Stand-ins (``tests/standins.py``): Llama-3-style (rotary, no pad token), Qwen2.5-style (ChatML with
an injected default system message, repetition_penalty in generation_config.json), GPT-2 (absolute
positions, no template: ``chat_template: chatml``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from training.errors import UserInputError

TEMPERATURE = 0.7
CHATS = [
    [{"role": "system", "content": "You are the Scientist."}, {"role": "user", "content": "Propose a protocol."}],
    [{"role": "system", "content": "You are the Lab Manager. Reply with exactly one JSON object."},
     {"role": "user", "content": "Paper: effect 3. Method: use centrifuge and dmso; n=7. Check it and answer."}],
    [{"role": "user", "content": "hi"}],
]


# -- validation (fast) ----------------------------------------------------------------------------------
def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert text and "\n" not in text
    return text


def test_missing_local_path_is_an_error_not_a_hub_lookup(tmp_path, monkeypatch):
    from training.model.validate import validate_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in (str(tmp_path / "nope"), "./nope", "../a/b", "~/nope", "a/b/c"):
        with pytest.raises(UserInputError) as err:
            validate_model(name)
        assert "does not exist" in _one_line(err)
    with pytest.raises(UserInputError) as err:  # a hub id, offline and not cached
        validate_model("someone/not-cached-model-xyz")
    assert "cache" in _one_line(err)


def test_directories_that_are_not_models(tmp_path):
    from training.model.validate import validate_model

    (tmp_path / "empty").mkdir()
    with pytest.raises(UserInputError, match="config.json"):
        validate_model(str(tmp_path / "empty"))
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(UserInputError, match="no weights"):
        validate_model(str(tmp_path / "empty"))
    (tmp_path / "empty" / "model.safetensors").write_bytes(b"")
    with pytest.raises(UserInputError, match="no tokenizer"):
        validate_model(str(tmp_path / "empty"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserInputError, match="not a directory"):
        validate_model(str(tmp_path / "file"))


def test_one_rule_set_for_model_paths(tmp_path, monkeypatch):
    """The cheap pre-start check, the seat check and the load-time validation refuse the same paths with the
    same one line (there is one implementation)."""
    from training.model.model_path import check_model_path, check_seat_models
    from training.model.validate import validate_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "afile").write_text("x")
    model = tmp_path / "m"
    model.mkdir()
    steps = [("config.json", "{}"), ("model.safetensors", ""), ("tokenizer.json", "{}")]
    bad = {str(tmp_path / "nope"): "does not exist", "./nope": "does not exist", str(tmp_path / "afile"): "is a file",
           "someone/not-cached-model-xyz": "not in the Hugging Face cache"}
    for name, text in steps:  # each missing file in turn, then added
        bad[str(model)] = {"config.json": "no config.json", "model.safetensors": "no weights",
                           "tokenizer.json": "no tokenizer"}[name]
        for path, fragment in bad.items():
            lines = set()
            for check in (check_model_path, lambda p: check_seat_models("scripted", f"model:{p}"), validate_model):
                with pytest.raises(UserInputError) as err:
                    check(path)
                lines.add(_one_line(err))
            assert len(lines) == 1 and fragment in lines.pop() and path in str(err.value)
        (model / name).write_text(text)
    assert check_model_path(str(model)) == str(model)  # the cheap check passes a complete directory
    check_seat_models("scripted", "policy", f"model:{model}")


def _base_model_dir(path: Path) -> Path:
    """A model directory whose tokenizer has no chat template (a base model); no weights are loaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "</s>": 1, **{w: i + 2 for i, w in enumerate("a b c".split())}}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", eos_token="</s>")
    path.mkdir()
    tok.save_pretrained(str(path))
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"")
    return path


def test_no_chat_template_names_the_option_of_every_entry_point(tmp_path):
    from training.model.validate import CHATML_TEMPLATE, validate_model

    base = _base_model_dir(tmp_path / "base")
    with pytest.raises(UserInputError) as err:
        validate_model(str(base))
    text = _one_line(err)
    assert "no chat template" in text
    assert "chat_template (train and eval configs)" in text and "--chat-template (play)" in text
    assert validate_model(str(base), chat_template=CHATML_TEMPLATE) == str(base)


def test_chat_template_option(tmp_path):
    from training.model.validate import CHATML_TEMPLATE, resolve_chat_template

    assert resolve_chat_template(None) is None
    assert resolve_chat_template("chatml") == CHATML_TEMPLATE
    (tmp_path / "t.jinja").write_text("{{ messages }}")
    assert resolve_chat_template(str(tmp_path / "t.jinja")) == "{{ messages }}"
    with pytest.raises(UserInputError) as err:
        resolve_chat_template("llama9")
    assert "built-in" in _one_line(err)


def test_append_only_check_rejects_templates_that_rewrite_history(policy_tiny_model_dir):
    from transformers import AutoTokenizer

    from standins import LLAMA3_TEMPLATE, QWEN25_TEMPLATE
    from training.model.validate import CHATML_TEMPLATE, check_append_only

    tok = AutoTokenizer.from_pretrained(str(policy_tiny_model_dir))
    for good in (CHATML_TEMPLATE, LLAMA3_TEMPLATE, QWEN25_TEMPLATE, tok.chat_template):
        check_append_only(tok, good)
    only_last = "{{ messages[-1]['content'] }}"  # forgets earlier turns
    hides_old_assistant = ("{% for m in messages %}{% if m.role != 'assistant' or loop.last %}"
                           "{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}")
    broken = "{{ messages[0]['nope']['x'] }}"
    for bad in (only_last, hides_old_assistant, broken):
        with pytest.raises(UserInputError) as err:
            check_append_only(tok, bad)
        _one_line(err)


def test_exact_generation_config_neutralises_every_extra():
    from transformers import GenerationConfig

    from training.config.model import SamplingConfig
    from training.rollout.generation import NEUTRAL_SAMPLING, explicit_generation_config, neutralised_extras

    ckpt = GenerationConfig(repetition_penalty=1.3, no_repeat_ngram_size=3, min_p=0.1, typical_p=0.9,
                            epsilon_cutoff=3e-4, eta_cutoff=1e-3, suppress_tokens=[5], bad_words_ids=[[7]],
                            encoder_repetition_penalty=1.1, temperature=0.6, top_k=20)
    found = neutralised_extras(ckpt)
    assert set(found) == {"repetition_penalty", "no_repeat_ngram_size", "min_p", "typical_p", "epsilon_cutoff",
                          "eta_cutoff", "suppress_tokens", "bad_words_ids", "encoder_repetition_penalty"}
    cfg = explicit_generation_config(SamplingConfig(temperature=0.9, top_k=3), max_new_tokens=5, eos=[1], pad=0)
    for key, neutral in NEUTRAL_SAMPLING.items():
        if neutral is not None:
            assert getattr(cfg, key) == neutral, key
    assert (cfg.temperature, cfg.top_k, cfg.top_p) == (1.0, 0, 1.0)  # the warpers are ours, not generate's


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
    gens = policy.generate(CHATS, sampling, roles=roles)
    trainer = _trainer(path, tmp_path, policy.tokenizer)
    trainer.grammar = trainer_grammar(trainer, policy.tokenizer)
    trainer._scored_rows = (roles, lambda: None)
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
