"""The embedded default model pipeline on a tiny config, SFT data in the rollouts' chat format, and
model agents in real episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_recipe import TINY_RECIPE

from replicalab import TEMPLATES, TEST_SEEDS, TRAIN_SEEDS, VALIDATION_SEEDS, ReplicaLabEnv, run_episode
from replicalab.agents import NaiveScientist
from replicalab.models import EpisodeLog
from training.config.model import SamplingConfig
from training.model.default import build_default_model, resolve_default_model
from training.model.sft import tokenize_example
from training.model.sft_data import (
    collect_transcripts,
    conversation_example,
    record_episode,
)
from training.rollout.agent import GREEDY, ModelAgent, load_agent_spec
from training.rollout.play import play_jobs
from training.rollout.policy import Generation, PolicyModel
from training.rollout.records import EpisodeJob

SHORT = SamplingConfig(max_new_tokens=32, seed=0)
SCIENTIST_SEATS = dict(scientist="policy", lab_manager="scripted")


@pytest.fixture(scope="module")
def built_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_default_model(tmp_path_factory.mktemp("default-model") / "model", TINY_RECIPE, progress=False)


@pytest.fixture(scope="module")
def untrained_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build's recipe without SFT: the tokenizer trained on ``TINY_RECIPE``'s transcripts and the
    model with random weights.  No training, so the fast tier plays the game's prompts through a model
    with the game's tokenizer (the model will not play well)."""
    from training.model.default import make_model, training_examples
    from training.model.sft_data import example_texts
    from training.model.tokenizer import save_and_verify, train_tokenizer

    sci, lab, _ = collect_transcripts(TINY_RECIPE.n_train_seeds, max_rounds=TINY_RECIPE.max_rounds)
    texts = list(example_texts([ex for _, ex in training_examples(sci, lab)]))
    tokenizer = train_tokenizer(texts, vocab_size=TINY_RECIPE.vocab_size,
                                min_frequency=TINY_RECIPE.tokenizer_min_frequency,
                                json_token_min_frequency=TINY_RECIPE.json_token_min_frequency,
                                number_tokens=TINY_RECIPE.number_tokens)
    out = tmp_path_factory.mktemp("untrained-model")
    make_model(TINY_RECIPE, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).save_pretrained(str(out))
    save_and_verify(tokenizer, out, probes=texts[:4])
    return out


@pytest.fixture(scope="module")
def tiny_policy(untrained_dir: Path) -> PolicyModel:
    return PolicyModel(str(untrained_dir), device="cpu")


def _jobs(role: str, n: int = 3) -> list[EpisodeJob]:
    return [EpisodeJob(job_id=i, seed=TEST_SEEDS[i], template=TEMPLATES[i % len(TEMPLATES)], difficulty=d,
                       role=role)  # type: ignore[arg-type]
            for i, d in enumerate(["easy", "medium", "hard"][:n])]


@pytest.mark.slow  # builds the default model (tiny config)
def test_build_writes_a_standard_checkpoint(built_dir: Path) -> None:
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json", "README.md", "build_info.json"):
        assert (built_dir / name).is_file(), name
    assert not built_dir.with_name(built_dir.name + ".building").exists()
    info = json.loads((built_dir / "build_info.json").read_text())
    seeds = info["transcripts"]["seeds"]
    assert seeds and all(s in TRAIN_SEEDS and s not in TEST_SEEDS for s in seeds)
    sft = TINY_RECIPE.sft
    assert [p["steps"] for p in info["sft_phases"]] == [sft.lm_steps, sft.completion_steps, sft.lab_manager_steps]
    # phase 1: all tokens of the Scientist chats, assistant turns of the Lab Manager chats; phase 2: assistant turns;
    # phase 3: the Lab Manager chats, their flag drill and as many Scientist rows
    assert [p["loss"] for p in info["sft_phases"]] == [
        "loss on all tokens of the scientist chats, on the assistant turns of the others", "loss on the assistant turns",
        f"loss on the assistant turns of every Lab Manager chat, on the flags alone of {sft.lab_manager_flag_drill} "
        "more copies of each, and as many Scientist rows"]
    assert info["max_example_tokens"] <= info["sft"]["max_length"]
    assert "TRAIN_SEEDS" in (built_dir / "README.md").read_text()


@pytest.mark.slow  # builds the default model (tiny config)
def test_checkpoint_reloads_offline_with_identical_token_ids(built_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(built_dir))
    model = AutoModelForCausalLM.from_pretrained(str(built_dir))
    text = '{"action_type":"propose_protocol","sample_size":12,"technique":"mtt_assay"} Café — 3.5'
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert model.config.vocab_size == len(tokenizer)
    assert tokenizer.eos_token_id in model.generation_config.eos_token_id
    # whole JSON tokens: a key with its colon and a quoted identifier are one token each
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode('{"action_type":"accept"}')) == \
        ["{", '"action_type":', '"accept"', "}"]


def test_sft_examples_use_the_rollouts_append_only_chat() -> None:
    """Each turn's prompt is the previous prompt + the assistant reply + one new user message."""
    sci, lab, stats = collect_transcripts(1)
    multi = [t for t in sci + lab if len(t) >= 2]
    assert multi and stats.examples_scientist == sum(map(len, sci))
    for transcript in multi:
        first, second = transcript[0], transcript[1]
        assert [m["role"] for m in first["prompt"]] == ["system", "user"]
        assert second["prompt"][:3] == [*first["prompt"], *first["completion"]]
        assert [m["role"] for m in second["prompt"][2:]] == ["assistant", "user"]
        whole = conversation_example(transcript)["messages"]
        assert whole == [*transcript[-1]["prompt"], *transcript[-1]["completion"]]
        assert sum(m["role"] == "assistant" for m in whole) == len(transcript)


def test_sft_tokens_are_the_rollout_tokens(tiny_policy: PolicyModel) -> None:
    """A conversation example tokenizes to exactly the ids and mask ``play_jobs`` builds when the
    model's replies are the scripted ones (so the warm start is trained on rollout sequences)."""
    seed, template, difficulty = TEST_SEEDS[2], TEMPLATES[0], "hard"
    sci, _, log = record_episode(seed, template, difficulty)
    replies = iter(ex["completion"][0]["content"] for ex in sci)
    tok = tiny_policy.tokenizer

    class Teacher(PolicyModel):
        def generate_ids(self, prompts, sampling, **kwargs):  # type: ignore[override]
            text = next(replies)
            ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
            return [Generation(text=text, prompt_ids=list(prompts[0]), completion_ids=ids, logprobs=[0.0] * len(ids))]

    teacher = Teacher(model=tiny_policy.model, tokenizer=tok, device="cpu")
    job = EpisodeJob(job_id=0, seed=seed, template=template, difficulty=difficulty, role="scientist")
    (record,) = play_jobs(teacher, [job], sampling=SHORT, **SCIENTIST_SEATS)
    assert record.log == log and len(sci) >= 2
    row = tokenize_example(tok, conversation_example(sci))
    traj = record.trajectory
    assert traj is not None
    assert traj.prompt_ids + traj.completion_ids == row["input_ids"]
    assert [0] * len(traj.prompt_ids) + traj.env_mask == row["completion_mask"]


@pytest.mark.parametrize("role", ["scientist", "lab_manager"])
def test_model_agent_plays_full_episode(tiny_policy: PolicyModel, role: str) -> None:
    agent = ModelAgent(tiny_policy, role, SHORT)  # type: ignore[arg-type]
    scientist, lab = (agent, None) if role == "scientist" else (NaiveScientist(), agent)
    log = run_episode(ReplicaLabEnv(), scientist, lab, seed=TEST_SEEDS[0], template=TEMPLATES[0],
                      difficulty="easy")
    assert isinstance(log, EpisodeLog)
    assert len(agent.generations) == sum(t.role == role for t in log.turns) >= 1
    assert agent.chat.messages[0]["role"] == "system"
    assert sum(m["role"] == "assistant" for m in agent.chat.messages) == len(agent.generations)
    for earlier, later in zip(agent.generations, agent.generations[1:]):  # one growing sequence
        assert later.prompt_ids[: len(earlier.prompt_ids) + len(earlier.completion_ids)] == \
            earlier.prompt_ids + earlier.completion_ids


@pytest.mark.parametrize("role", ["scientist", "lab_manager"])
def test_play_jobs_with_the_model_in_either_seat(tiny_policy: PolicyModel, role: str) -> None:
    seats = SCIENTIST_SEATS if role == "scientist" else dict(scientist="scripted:naive", lab_manager="policy")
    jobs = _jobs(role)
    records = play_jobs(tiny_policy, jobs, sampling=SHORT, **seats)
    assert [r.job for r in records] == jobs
    for record in records:
        assert record.log.seed == record.job.seed
        traj = record.trajectory
        assert traj is not None and traj.role == role
        assert traj.turns == sum(t.role == role for t in record.log.turns) >= 1
        assert len(traj.completion_ids) == len(traj.logprobs) == len(traj.env_mask)


def test_batched_greedy_matches_one_at_a_time(tiny_policy: PolicyModel) -> None:
    job = EpisodeJob(job_id=0, seed=TEST_SEEDS[1], template=TEMPLATES[0], difficulty="medium", role="scientist")
    greedy = GREEDY.model_copy(update={"max_new_tokens": 32})
    agent = ModelAgent(tiny_policy, "scientist", greedy)
    log = run_episode(ReplicaLabEnv(), agent, None, seed=job.seed, template=job.template,
                      difficulty=job.difficulty)
    (record,) = play_jobs(tiny_policy, [job], sampling=greedy, **SCIENTIST_SEATS)
    assert record.log == log


@pytest.mark.slow  # builds the default model (tiny config)
def test_load_agent_spec_and_resolve(built_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLICALAB_DEFAULT_MODEL", str(built_dir))
    assert resolve_default_model() == built_dir  # present: no rebuild
    agent = load_agent_spec("model:default", "scientist", device="cpu")()
    assert agent.policy.name_or_path == str(built_dir)
    assert agent.sampling.do_sample is False and agent.sampling.max_new_tokens == TINY_RECIPE.max_new_tokens
    assert load_agent_spec(f"model:{built_dir}", "lab_manager", device="cpu")().role == "lab_manager"


def test_model_evaluation_reports_both_seats(tiny_policy: PolicyModel) -> None:
    from training.eval.seat_check import evaluate_model_seats

    report = evaluate_model_seats(tiny_policy, VALIDATION_SEEDS[:1], templates=TEMPLATES[:1],
                                  difficulties=["easy", "hard"], sampling=SHORT)
    for seat in (report.scientist, report.lab_manager):
        assert seat.episodes == 2 and seat.model_turns >= 2
        assert 0.0 <= seat.parse_rate <= 1.0 and seat.parse_failures <= seat.model_turns
    assert report.naive_scientist_mean_reward == report.scientist.baseline_mean_reward
    lab = [run_episode(ReplicaLabEnv(), NaiveScientist(), seed=s, template=TEMPLATES[0], difficulty=d)
           for d in ("easy", "hard") for s in VALIDATION_SEEDS[:1]]
    # each seat is measured by its own reward: the Lab Manager's baseline is the scripted lab's own reward
    assert report.lab_manager.baseline_mean_reward == pytest.approx(
        sum(log.role_rewards["lab_manager"] for log in lab) / len(lab))


def test_language_model_phase_masks_by_seat() -> None:
    """All-token rows carry the loss on every token; the other seat's rows keep their assistant mask."""
    from training.model.default import lm_phase_row, training_examples

    sci, lab, _ = collect_transcripts(1)
    labelled = training_examples(sci, lab, first_turn_repeats=1)
    roles = [role for role, _ in labelled]
    assert roles.count("scientist") == len(sci) * 2 and roles.count("lab_manager") == len(lab)
    row = {"input_ids": [5, 6, 7, 8], "completion_mask": [0, 0, 1, 1]}
    assert lm_phase_row(row, True)["completion_mask"] == [1, 1, 1, 1]
    assert lm_phase_row(row, False) == row
    with pytest.raises(ValueError, match="skill_rate"):
        collect_transcripts(1, skill_rate=1.5)


@pytest.mark.parametrize("drill_copies", [0, 2])
def test_the_lab_manager_phase_gives_the_scientist_as_many_rows_as_the_lab_manager(drill_copies: int) -> None:
    """Every Lab Manager chat, the drill rows, then as many Scientist rows in ``labelled``'s order (whole chats
    first, from the start again when they run out)."""
    from training.model.default import lab_manager_phase_rows, training_examples

    sci, lab, _ = collect_transcripts(1)
    labelled = training_examples(sci, lab, first_turn_repeats=2, decision_turn_repeats=2)
    rows = [{"input_ids": [i], "completion_mask": [1]} for i in range(len(labelled))]
    lab_ids = [i for i, (role, _) in enumerate(labelled) if role == "lab_manager"]
    drill = [{"input_ids": [-1 - i], "completion_mask": [1]} for i in range(drill_copies * len(lab_ids))]
    picked = [r["input_ids"][0] for r in lab_manager_phase_rows(labelled, rows, drill)]
    assert picked[:len(lab_ids)] == lab_ids
    assert picked[len(lab_ids):len(lab_ids) + len(drill)] == [r["input_ids"][0] for r in drill]
    scientist = picked[len(lab_ids) + len(drill):]
    assert len(scientist) == len(lab_ids) + len(drill)
    order = [i for i, (role, _) in enumerate(labelled) if role == "scientist"]
    assert scientist == [order[k % len(order)] for k in range(len(scientist))]
    assert all(labelled[i][1] == conversation_example(sci[k]) for k, i in enumerate(scientist[:len(sci)]))


def test_the_flag_drill_puts_the_loss_on_each_lab_manager_replys_checks_alone() -> None:
    """Each drill row is a whole Lab Manager chat whose loss covers, in every reply, the flags and ``feasible``
    (each key and value) and nothing from the decision on; the values are tokens of their own."""
    from training.model.default import DECISION_FIELD, flag_drill_rows, training_examples
    from training.model.sft_data import example_texts
    from training.model.tokenizer import train_tokenizer

    sci, lab, _ = collect_transcripts(1)
    labelled = training_examples(sci, lab)
    tokenizer = train_tokenizer(example_texts([ex for _, ex in labelled]), vocab_size=TINY_RECIPE.vocab_size,
                                json_token_min_frequency=TINY_RECIPE.json_token_min_frequency,
                                number_tokens=TINY_RECIPE.number_tokens)
    drill = flag_drill_rows(tokenizer, labelled)
    chats = [ex for role, ex in labelled if role == "lab_manager"]
    assert len(drill) == len(chats) == len(lab)
    for row, chat in zip(drill, chats):
        whole = tokenize_example(tokenizer, chat)
        assert row["input_ids"] == whole["input_ids"]
        assert all(w for m, w in zip(row["completion_mask"], whole["completion_mask"]) if m)  # inside replies
        trained = tokenizer.decode([i for i, m in zip(row["input_ids"], row["completion_mask"]) if m])
        replies = [m["content"] for m in chat["messages"] if m["role"] == "assistant"]
        checks = [reply[:reply.index(f'"{DECISION_FIELD}"')] for reply in replies]
        assert trained == "".join(checks)
        for check in checks:
            flags = json.loads(check.rstrip(",") + "}")
            assert list(flags)[-1] == "feasible" and all(isinstance(v, bool) for v in flags.values())
    tokens = tokenizer.tokenize('{"budget_ok":false,"feasible":true,')
    assert tokens == ["{", '"budget_ok":', "false,", '"feasible":', "true,"]


def test_decision_turns_are_the_skill_chances_answered_both_ways() -> None:
    """The repeated decision turns are exactly the Scientist turns at a skill's chance; with each skill drawn at
    rate 0.5 every skill's chances are answered both ways (the skill's action and the naive accept), the opening
    is never one, and the counts match the collection's stats."""
    from replicalab.skill_use import skill_chances
    from training.model.default import training_examples
    from training.model.sft_data import is_skill_chance, record_episode

    sci, lab, stats = collect_transcripts(6, skill_rate=0.5)
    decisions = [t[k] for t in sci for k in range(1, len(t)) if is_skill_chance(t[k])]
    assert len(decisions) == stats.chance_turns and 0 < stats.chance_turns_used < stats.chance_turns
    replies = {json.loads(d["completion"][0]["content"])["action_type"] for d in decisions}
    assert {"accept", "revise_protocol", "request_info"} <= replies
    assert not any(is_skill_chance(t[0]) for t in sci)
    base = len(training_examples(sci, lab))
    assert len(training_examples(sci, lab, decision_turn_repeats=2)) == base + 2 * len(decisions)
    examples, _, log = record_episode(2, "cell_biology", "hard", scientist="reader+defender+asker")
    assert [k for k, ex in enumerate(examples) if "skill_chance" in ex] == []  # only collect_transcripts marks them
    assert {c.turn for c in skill_chances(log)} and max(c.turn for c in skill_chances(log)) < len(examples)


def test_marked_skills_mark_only_their_chances_and_keep_the_transcripts() -> None:
    """``marked_skills`` marks the chances of the named skills alone; the transcripts, their order and the stats
    are those of every skill marked, so a narrower mark changes nothing the build or its fingerprint sees."""
    from training.model.sft_data import is_skill_chance

    sci, lab, stats = collect_transcripts(4, skill_rate=0.5)
    only, only_lab, only_stats = collect_transcripts(4, skill_rate=0.5, marked_skills=("defend",))
    strip = [[{k: v for k, v in ex.items() if k != "skill_chance"} for ex in t] for t in sci]
    assert strip == [[{k: v for k, v in ex.items() if k != "skill_chance"} for ex in t] for t in only]
    assert only_lab == lab and only_stats == stats
    marked = [(i, k) for i, t in enumerate(only) for k, ex in enumerate(t) if is_skill_chance(ex)]
    every = [(i, k) for i, t in enumerate(sci) for k, ex in enumerate(t) if is_skill_chance(ex)]
    assert 0 < len(marked) == stats.skill_chances["defend"] < len(every) and set(marked) < set(every)
    assert all(json.loads(only[i][k]["completion"][0]["content"])["action_type"] in ("accept", "revise_protocol")
               for i, k in marked)
    with pytest.raises(ValueError, match="unknown skills"):
        collect_transcripts(1, marked_skills=("persuade",))


@pytest.mark.slow  # records the transcripts of many episodes (about 7 s)
def test_transcript_scientists_decide_per_chance_independently_of_the_history() -> None:
    """Every episode trains both seats; each skill is used at about ``skill_rate`` of its chances, and whether a
    chance is used does not depend on whether the Scientist used a skill earlier in the episode (a coin per
    chance, not a persona per episode); rates 0 and 1 give the naive and the all-skills play."""
    from replicalab.skill_use import skill_chances
    from training.model.sft_data import chance_scientist, record_episode

    sci, lab, stats = collect_transcripts(40, skill_rate=0.5)
    assert len(lab) == len(sci) == stats.episodes == 360
    for skill, n in stats.skill_chances.items():
        assert n >= 30 and 0.35 * n < stats.skill_uses[skill] < 0.65 * n, (skill, n, stats.skill_uses[skill])
    after = {True: [0, 0], False: [0, 0]}  # earlier use in the episode -> [chances, uses]
    for seed in range(60):
        for template, difficulty in (("cell_biology", "hard"), ("ml_benchmark", "medium")):
            _, _, log = record_episode(seed, template, difficulty, agent=chance_scientist(seed, 0.5))
            used_before = False
            for chance in skill_chances(log):
                after[used_before][0] += 1
                after[used_before][1] += chance.used
                used_before = used_before or chance.used
    rates = {k: uses / max(n, 1) for k, (n, uses) in after.items()}
    assert min(n for n, _ in after.values()) >= 20 and abs(rates[True] - rates[False]) < 0.2, after
    _, _, none = collect_transcripts(2, skill_rate=0.0)
    assert none.chance_turns > 0 and none.chance_turns_used == 0
    _, _, every = collect_transcripts(2, skill_rate=1.0)
    assert every.chance_turns_used == every.chance_turns > 0
    with pytest.raises(ValueError, match="lab_thrifty_rate"):
        collect_transcripts(1, lab_thrifty_rate=-0.1)


def test_default_model_lives_under_the_repository_artifacts(monkeypatch) -> None:
    from training.config.model import DEFAULT_MODEL_ENV
    from training.model.default import default_model_dir

    monkeypatch.delenv(DEFAULT_MODEL_ENV, raising=False)
    path = default_model_dir()
    assert path.parent.name == "artifacts" and (path.parent.parent / "pyproject.toml").is_file()
