"""Constrained decoding (``rollout.sampling.constrained``): the action grammars allow every canonical action and
nothing but the role's JSON action; sampling under them is exact (the recorded log-probs are the masked
distribution's), and the run's config refuses it where it cannot hold."""

from __future__ import annotations

import json
import math

import pytest
import torch

from replicalab import ReplicaLabEnv, run_episode
from replicalab.lab import LAB_POLICIES
from replicalab.parsing import ACTION_MODELS, field_order, format_action, parse_action
from replicalab.scenarios import cells
from replicalab.seats import scripted_agent
from replicalab.seeds import VALIDATION_SEEDS
from grammar_checks import refused_tokens

SCIENTISTS = ("naive", "reader+defender+asker", "asker")


def _lab_view(env: ReplicaLabEnv):
    """The Lab Manager's first view of ``env``'s episode (before any protocol): what its grammar is bound to."""
    from replicalab.env_records import lab_manager_view

    s = env.scenario
    return lab_manager_view(s, [], None, 0, 0, s.lab.budget_total, None, env.techniques).lab_manager


def _canonical_replies(seeds=VALIDATION_SEEDS[:1]) -> list[tuple[str, str]]:
    """(grammar key, canonical text) of every action the scripted seats take on a spread of validation episodes,
    each under its seat's binding at that turn (a Lab Manager's: its lab's, and its check of the plan as the flags)."""
    from replicalab.episode import replayed_views
    from training.rollout.binding import grammar_key

    env, found = ReplicaLabEnv(), set()
    for seed in seeds:
        for t, d in cells():
            for sci in SCIENTISTS:
                for lab in LAB_POLICIES:
                    log = run_episode(env, scripted_agent("scientist", sci, seed, t, d), lab,
                                      seed=seed, template=t, difficulty=d)
                    for turn, view in replayed_views(log):
                        if turn.action is not None:
                            action = parse_action(json.dumps(turn.action), turn.role)
                            found.add((grammar_key(turn.role, view), format_action(action)))
    return sorted(found)


@pytest.fixture(scope="module")
def replies() -> list[tuple[str, str]]:
    return _canonical_replies()


def _grammar(path):
    from training.rollout.policy import PolicyModel

    return PolicyModel(str(path), device="cpu")


def _check_allowed(policy, replies) -> None:
    for key, text in replies:
        refused = refused_tokens(policy, key, text)
        assert not refused, f"{key[:40]} {text!r}: token {refused[0]} refused"


def test_the_default_tokenizer_spells_every_canonical_action_under_its_grammar(replies):
    from training.model.default import resolve_default_model

    roles = {json.loads(k)["role"] if k.startswith("{") else k for k, _ in replies}
    assert len(replies) > 50 and roles == set(ACTION_MODELS)
    assert any(k.startswith("{") and '"suggested_technique"' in text for k, text in replies)
    _check_allowed(_grammar(resolve_default_model()), replies)


@pytest.mark.slow
def test_every_scripted_repair_is_written_under_its_labs_bound_grammar(default_policy):
    """Over many seeds, every action of every scripted lab (a repair to another technique included) is one its
    episode's catalog-bound grammar allows."""
    replies = [(k, text) for k, text in _canonical_replies(VALIDATION_SEEDS[1:6]) if k.startswith("{")]
    assert sum('"suggested_technique"' in text for _, text in replies) > 20
    _check_allowed(default_policy, replies)


def test_a_labs_bound_grammar_refuses_what_its_lab_cannot_offer(default_policy):
    """Bound to its lab, a Lab Manager's grammar refuses a technique the lab does not run or cannot run (a slot with
    no usable option), a slot left without one of its usable options (another technique's item, a booked option, a
    list that stops before its last slot), slot options out of order, an extra item the lab cannot use, a schedule
    past the time limit or under the technique's minimum; it allows the same repair written from what the lab can
    use, with a usable extra item, and one that names no technique.  A seat's grammar is bound only to its own
    role's view."""
    from replicalab.models import LabManagerObservation, LabTechnique
    from training.rollout.binding import grammar_key, lab_binding

    catalog = [LabTechnique(id="pcr", equipment_slots=[["thermocycler", "qpcr_machine"]],
                            reagent_slots=[["taq", "pfu"], ["primers"]], min_days=2),
               LabTechnique(id="elisa", equipment_slots=[["plate_reader"]], reagent_slots=[["antibody_a"]]),
               LabTechnique(id="flow", equipment_slots=[["cytometer"]], reagent_slots=[["dye"]])]
    view = LabManagerObservation(
        budget_total=100, budget_remaining=100, staff_count=2, time_limit_days=10, lab_techniques=catalog,
        equipment_available=["qpcr_machine", "centrifuge", "plate_reader"], equipment_booked=["thermocycler"],
        reagents_in_stock=["taq", "pfu", "primers", "dye"], reagents_out_of_stock=["antibody_a"])
    binding = lab_binding(view)
    assert [t.id for t in binding.lab_techniques] == ["pcr"]
    assert binding.lab_techniques[0].equipment_slots == [["qpcr_machine"]]
    key = grammar_key("lab_manager", view)
    assert grammar_key("lab_manager") == "lab_manager"
    with pytest.raises(ValueError, match="a scientist grammar is not bound to a LabManagerObservation"):
        grammar_key("scientist", view)
    head = ('{"budget_ok":true,"equipment_ok":false,"reagents_ok":true,"schedule_ok":true,"staff_ok":true,'
            '"feasible":false,"action_type":"suggest_alternative",')
    tail = '"explanation":"the lab runs this instead"}'
    allowed = ['"suggested_technique":"pcr","suggested_equipment":["qpcr_machine","centrifuge"],'
               '"suggested_reagents":["pfu","primers"],',
               '"suggested_technique":"pcr","suggested_duration_days":10,',
               '"suggested_sample_size":4,"suggested_equipment":["plate_reader"],"suggested_duration_days":3,']
    refused = ['"suggested_technique":"western_blot",',
               '"suggested_technique":"elisa",',
               '"suggested_technique":"pcr","suggested_equipment":["plate_reader"],',
               '"suggested_technique":"pcr","suggested_equipment":["thermocycler"],',
               '"suggested_technique":"pcr","suggested_reagents":["primers","taq"],',
               '"suggested_technique":"pcr","suggested_reagents":["pfu"],',
               '"suggested_technique":"pcr","suggested_reagents":["pfu","primers","antibody_a"],',
               '"suggested_technique":"pcr","suggested_duration_days":1,',
               '"suggested_duration_days":11,',
               '"suggested_equipment":["thermocycler"],']
    for middle in allowed:
        assert not refused_tokens(default_policy, key, head + middle + tail), middle
        assert not refused_tokens(default_policy, "lab_manager", head + middle + tail), middle
    for middle in refused:
        assert refused_tokens(default_policy, key, head + middle + tail), middle
        assert not refused_tokens(default_policy, "lab_manager", head + middle + tail), middle
    assert binding.flags == {}  # before any plan the flags stay the seat's


def test_a_labs_bound_grammar_states_its_check_of_the_plan_as_the_flags(default_policy):
    """With a plan on the table, a Lab Manager's bound grammar allows only the flags of the lab's check (a flag holds
    where the check found no reason against it) and ``feasible`` as their conjunction: any flag flipped, or a
    ``feasible`` that is not the conjunction, is refused; the plain grammar allows each."""
    from replicalab.models import LabManagerObservation, Protocol
    from training.rollout.binding import grammar_key, lab_binding

    flags = ("budget_ok", "equipment_ok", "reagents_ok", "schedule_ok", "staff_ok")
    plan = Protocol(sample_size=4, technique="pcr", duration_days=3, rationale="as published")
    for failing in ((), ("staff_ok",), ("budget_ok", "schedule_ok")):
        view = LabManagerObservation(budget_total=100, budget_remaining=100, staff_count=2, time_limit_days=10,
                                     current_protocol=plan,
                                     plan_check={f: ["the reason"] if f in failing else [] for f in flags})
        truth = {f: f not in failing for f in flags}
        assert lab_binding(view).flags == truth
        key = grammar_key("lab_manager", view)

        def reply(stated: dict, feasible: bool) -> str:
            head = ",".join(f'"{f}":{str(stated[f]).lower()}' for f in flags)
            return "{" + head + f',"feasible":{str(feasible).lower()},"action_type":"report_feasibility",' \
                '"explanation":"checked"}'

        assert not refused_tokens(default_policy, key, reply(truth, not failing))
        for flipped in flags:
            text = reply({**truth, flipped: not truth[flipped]}, not failing)
            assert refused_tokens(default_policy, key, text), flipped
            assert not refused_tokens(default_policy, "lab_manager", text), flipped
        assert refused_tokens(default_policy, key, reply(truth, bool(failing)))


def test_a_grammar_key_that_is_neither_a_role_nor_a_catalog_is_refused_in_one_line(default_policy):
    with pytest.raises(ValueError, match="not an action grammar key"):
        default_policy.grammar.matcher('{"role": "lab_manager"}')
    with pytest.raises(ValueError, match="no action grammar for role"):
        default_policy.grammar.matcher('{"role": "judge", "lab_techniques": []}')
    with pytest.raises(ValueError, match="not an action grammar key"):
        default_policy.grammar.matcher('{"role": "lab_manager", "lab_techniques": [], "equipment": []}')
    with pytest.raises(ValueError, match="not an action grammar key"):
        default_policy.grammar.matcher("judge")


@pytest.mark.slow
def test_a_tiny_trained_tokenizer_spells_every_canonical_action_under_its_grammar(policy_tiny_model_dir, replies):
    _check_allowed(_grammar(policy_tiny_model_dir), replies)


def test_constrained_replies_are_their_roles_json_actions_sampled_exactly(default_policy):
    """Sampled at 1.0 from prompts the model never saw, every finished reply is one JSON object of its role's
    fields in canonical order, and each recorded log-prob is the masked distribution's."""
    from training.config.model import SamplingConfig

    chats = [[{"role": "user", "content": f"Case {i}: the plan needs {i} days. Your move."}] for i in range(6)]
    roles = ["scientist", "lab_manager"] * 3
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=200, seed=5, constrained=True)
    gens = default_policy.generate(chats, sampling, grammars=roles)
    finished = [(g, r) for g, r in zip(gens, roles) if g.finished]
    assert len(finished) >= 4
    for g, role in finished:
        obj = json.loads(g.text)
        order = field_order(ACTION_MODELS[role])
        assert list(obj) == sorted(obj, key=order.index), g.text
        assert all(len(v) <= 256 for v in obj.values() if isinstance(v, str))
    for g, role in zip(gens, roles):
        ids = torch.tensor([g.completion_ids])
        allowed = default_policy.grammar.completion_masks([role], ids, torch.ones_like(ids))[0]
        with torch.no_grad():
            logits = default_policy.model(torch.tensor([g.prompt_ids + g.completion_ids])).logits[0]
        masked = logits[len(g.prompt_ids) - 1:-1].masked_fill(~allowed, float("-inf")).log_softmax(-1)
        fresh = masked.gather(1, ids[0][:, None])[:, 0]
        assert torch.allclose(torch.tensor(g.logprobs), fresh, atol=1e-4)
        assert all(math.isfinite(x) for x in g.logprobs)


def test_constrained_sampling_needs_each_prompts_role(default_policy):
    from training.config.model import SamplingConfig

    with pytest.raises(ValueError, match="one grammar key per prompt"):
        default_policy.generate_ids([[1, 2]], SamplingConfig(constrained=True))


def test_a_constrained_run_refuses_the_vllm_engine():
    from pydantic import ValidationError

    from training.config.rollout import RolloutConfig

    with pytest.raises(ValidationError, match="constrained decodes with the hf engine"):
        RolloutConfig(backend="ray", engine="vllm", sampling={"temperature": 1.0, "constrained": True})
    assert RolloutConfig(sampling={"temperature": 1.0, "constrained": True}).sampling.constrained


def test_constrained_decoding_needs_a_fast_tokenizer():
    from training.errors import UserInputError
    from training.rollout.grammar import ActionGrammar

    class Slow:
        is_fast = False

    with pytest.raises(UserInputError, match="fast"):
        ActionGrammar(Slow(), [2], 10)


@pytest.mark.slow
def test_a_lab_manager_seat_replies_under_its_episodes_binding(default_policy):
    """Played as rollouts, constrained at 1.0: each Lab Manager reply is decoded under the binding of its own view,
    so every turn states the lab's check as its flags (no turn is refused for its flags), and every suggestion
    offers only what the lab can use: a technique it can run, each item list empty or one usable option of each of
    its slots, in order, first, every item usable of its kind, a schedule within the time limit and, for a named
    technique, from its minimum days."""
    from replicalab.env import UNTRUE_FLAGS
    from replicalab.episode import replayed_views
    from training.config.model import SamplingConfig
    from training.rollout.binding import grammar_key, lab_binding
    from training.rollout.grammar import trajectory_key
    from training.rollout.play import play_jobs
    from training.rollout.records import episode_jobs

    jobs = episode_jobs(cells(), VALIDATION_SEEDS[:1], role="lab_manager")
    sampling = SamplingConfig(temperature=1.0, seed=3, constrained=True)
    records = play_jobs(default_policy, jobs, scientist="scripted:naive", lab_manager="policy", sampling=sampling)
    env, named, suggested, infeasible = ReplicaLabEnv(), 0, 0, 0
    for record in records:
        env.reset(record.job.seed, record.job.template, record.job.difficulty)
        view = _lab_view(env)
        views = [v for turn, v in replayed_views(record.log) if turn.role == "lab_manager"]
        assert record.trajectory.grammar == trajectory_key([grammar_key("lab_manager", v) for v in views])
        assert all(lab_binding(v).flags == {f: not why for f, why in v.plan_check.items()} != {} for v in views)
        infeasible += sum(not all(lab_binding(v).flags.values()) for v in views)
        assert not any((turn.error or "").startswith(UNTRUE_FLAGS) for turn in record.log.turns)
        binding = lab_binding(view)
        catalog = {t.id: t for t in binding.lab_techniques}
        for turn in record.log.turns:
            action = turn.action or {}
            if turn.role != "lab_manager" or action.get("action_type") != "suggest_alternative":
                continue
            suggested += 1
            assert set(action.get("suggested_equipment", [])) <= set(view.equipment_available), action
            assert set(action.get("suggested_reagents", [])) <= set(view.reagents_in_stock), action
            assert action.get("suggested_duration_days", 0) <= view.time_limit_days, action
            if not action.get("suggested_technique"):
                continue
            named += 1
            technique = catalog[action["suggested_technique"]]
            days = action.get("suggested_duration_days", 0)
            assert days == 0 or days >= technique.min_days, action
            for slots, field in ((technique.equipment_slots, "suggested_equipment"),
                                 (technique.reagent_slots, "suggested_reagents")):
                items = action.get(field, [])
                assert not items or (len(items) >= len(slots)
                                     and all(item in slot for item, slot in zip(items, slots))), action
    assert named >= 3 and suggested > named and infeasible, (named, suggested, infeasible)
