"""A user's own Hugging Face model, validated at load time: a missing path is an error, not a hub lookup; a
directory that is no model, a model without a chat template and a template that rewrites history are refused in
one line; the checkpoint's generation extras are neutralised."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.errors import UserInputError


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
