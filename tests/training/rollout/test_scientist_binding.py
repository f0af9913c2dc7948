"""A Scientist's action grammar is bound to the names its brief and the dialogue gave it (``scientist_binding``):
every scripted Scientist writes within it, a name it was not given is refused, each reply of a trajectory is decoded
and scored under its own turn's binding."""

from __future__ import annotations

import json

import pytest
import torch
from grammar_checks import refused_tokens

from replicalab import ReplicaLabEnv, run_episode
from replicalab.agents.brief import (
    cross_check_method,
    last_suggestion,
    minimum_sample_size,
    offered_stand_ins,
    published_protocol,
)
from replicalab.episode import replayed_views
from replicalab.lab import LAB_POLICIES
from replicalab.models import ScientistAction
from replicalab.parsing import format_action
from replicalab.scenarios import cells
from replicalab.seats import SCIENTIST_FACTORIES, scripted_agent
from replicalab.seeds import VALIDATION_SEEDS
from training.rollout.binding import NamedPlan, grammar_key, scientist_binding
from training.rollout.grammar import reply_keys, trajectory_key

#: Every scripted Scientist a seat can be (the oracle reads the hidden scenario: a baseline, never a seat's model).
SEATED = tuple(name for name in SCIENTIST_FACTORIES if name != "oracle")
_KINDS = (("technique", "techniques"), ("required_equipment", "equipment"), ("required_reagents", "reagents"),
          ("controls", "controls"))


def _outside(action: dict, binding) -> list[str]:
    """The names ``action`` writes that ``binding`` does not hold, each with its field."""
    out = []
    for field, kind in _KINDS:
        written = action.get(field) or []
        for name in [written] if isinstance(written, str) else written:
            if name not in getattr(binding, kind):
                out.append(f"{field}={name}")
    return out


def _scripted_turns(seeds):
    """(view, action) of every Scientist turn of every seated scripted Scientist against each scripted lab."""
    env = ReplicaLabEnv()
    for seed in seeds:
        for t, d in cells():
            for name in SEATED:
                for lab in LAB_POLICIES:
                    log = run_episode(env, scripted_agent("scientist", name, seed, t, d), lab, seed=seed,
                                      template=t, difficulty=d)
                    for turn, view in replayed_views(log):
                        if turn.role == "scientist" and turn.action:
                            yield name, view, turn.action


@pytest.mark.parametrize("seeds", [pytest.param(VALIDATION_SEEDS[:1]),
                                   pytest.param(VALIDATION_SEEDS[1:11], marks=pytest.mark.slow)])
def test_every_scripted_scientist_writes_only_names_its_view_gave_it(seeds):
    """Each seated scripted Scientist (every skill combination and the random one), against each scripted lab,
    writes only techniques, items and controls its turn's binding holds, and each but the random one only sample
    sizes and schedules it holds (the defender's minimum among them); the binding holds the brief's two
    techniques, the lab's latest suggested technique and every stand-in an answer offered."""
    turns = stand_ins = suggested = at_minimum = 0
    for name, view, action in _scripted_turns(seeds):
        binding = scientist_binding(view)
        assert not _outside(action, binding), (name, _outside(action, binding))
        if name != "random" and action.get("action_type") in ("propose_protocol", "revise_protocol"):
            assert action["sample_size"] in binding.sample_sizes, (name, action["sample_size"], binding.sample_sizes)
            assert action["duration_days"] in binding.durations, (name, action["duration_days"], binding.durations)
            at_minimum += action["sample_size"] == minimum_sample_size(view) != published_protocol(view)["sample_size"]
        assert {published_protocol(view)["technique"], cross_check_method(view)["technique"]} <= set(binding.techniques)
        if moved := last_suggestion(view).get("technique"):
            assert moved in binding.techniques
            suggested += 1
        offered = [alt for _, alt in offered_stand_ins(view)]
        assert set(offered) <= set(binding.equipment) | set(binding.reagents)
        stand_ins += len(offered)
        turns += 1
    assert turns > 300 and suggested > 10 and stand_ins > 10 and at_minimum > 10, (turns, suggested, stand_ins,
                                                                                    at_minimum)


def _first_view(seed=VALIDATION_SEEDS[0], template="cell_biology", difficulty="medium"):
    return ReplicaLabEnv().reset(seed, template, difficulty).scientist


def test_a_scientists_grammar_refuses_a_name_it_was_not_given(default_policy):
    """Bound to its first view, a Scientist's grammar allows the brief's protocol, its cross-check, the protocol at
    the power analysis's minimum sample size, a question and an accept, and refuses an invented technique, item or
    control, an item of one kind in the other's list, and a sample size or schedule the view never stated; the
    role's plain grammar allows each of them."""
    view = _first_view()
    binding, key = scientist_binding(view), grammar_key("scientist", view)
    published, cross = published_protocol(view), cross_check_method(view)
    assert set(binding.techniques) == {published["technique"], cross["technique"]}
    plan = {k: published[k] for k in ("sample_size", "controls", "technique", "duration_days",
                                      "required_equipment", "required_reagents")}
    allowed = [ScientistAction(action_type="propose_protocol", rationale="As published.", **plan),
               ScientistAction(action_type="revise_protocol", rationale="The cross-check.",
                               **{k: cross[k] for k in plan}),
               ScientistAction(action_type="revise_protocol", rationale="At the minimum.",
                               **{**plan, "sample_size": minimum_sample_size(view)}),
               ScientistAction(action_type="request_info", questions=["What can replace the incubator?"]),
               ScientistAction(action_type="accept")]
    assert binding.sample_sizes == sorted({published["sample_size"], minimum_sample_size(view)})
    assert set(binding.durations) == {published["duration_days"], cross["duration_days"]}
    for action in allowed:
        assert not refused_tokens(default_policy, key, format_action(action)), action
    reagent, equipment = binding.reagents[0], binding.equipment[0]
    invented = [{"technique": "western_blot_of_nothing"},
                {"required_equipment": [*plan["required_equipment"], "quantum_microscope"]},
                {"required_reagents": [*plan["required_reagents"], "unobtainium"]},
                {"controls": [*plan["controls"], "padding_control"]},
                {"required_equipment": [equipment, reagent]},
                {"required_reagents": [reagent, equipment]},
                {"sample_size": max(binding.sample_sizes) + 7}, {"duration_days": max(binding.durations) + 3}]
    for change in invented:
        text = format_action(ScientistAction(action_type="propose_protocol", rationale="x", **{**plan, **change}))
        assert refused_tokens(default_policy, key, text), change
        assert not refused_tokens(default_policy, "scientist", text), change


def test_each_reply_of_a_trajectory_is_scored_under_its_own_turns_grammar(default_policy):
    """A trajectory keeps each reply's key: a second reply that names what only its own turn's binding holds is
    allowed under the trajectory's key and refused when the first turn's key is taken for both; a row with more
    replies than its key names is refused in one line."""
    view = _first_view()
    first = scientist_binding(view)
    later = first.model_copy(update={"techniques": [*first.techniques, "lab_only_technique"], "plans": [
        *first.plans, NamedPlan(technique="lab_only_technique", equipment_slots=[], reagent_slots=[])]})
    keys = [first.model_dump_json(), later.model_dump_json()]
    assert reply_keys(trajectory_key(keys)) == keys and trajectory_key(keys[:1] * 3) == keys[0]
    tok, stop = default_policy.tokenizer, default_policy.stop_token_ids[0]
    encode = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    accept = encode(format_action(ScientistAction(action_type="accept"))) + [stop]
    between = encode(" The lab answered.")
    revise = encode(format_action(ScientistAction(action_type="revise_protocol", sample_size=first.sample_sizes[0],
                                                  rationale="x", technique="lab_only_technique"))) + [stop]
    ids = accept + between + revise
    row, model = torch.tensor([ids]), torch.tensor([[1] * len(accept) + [0] * len(between) + [1] * len(revise)])

    def refused_at(key):
        masks = default_policy.grammar.completion_masks([key], row, model)[0]
        return [t for t, token in enumerate(ids) if not masks[t, token]]

    assert not refused_at(trajectory_key(keys))
    assert refused_at(keys[0]) and min(refused_at(keys[0])) > len(accept)
    with pytest.raises(ValueError, match="more replies than its grammar key names"):
        default_policy.grammar.completion_masks([trajectory_key(keys)], torch.cat([row, row], 1),
                                                torch.cat([model, model], 1))
    with pytest.raises(ValueError, match="not an action grammar key"):
        default_policy.grammar.matcher(json.dumps({"role": "scientist", "techniques": []}))


@pytest.mark.slow
def test_a_scientist_seat_replies_under_each_turns_binding(default_policy):
    """Played as rollouts at 1.0 against a scripted lab with the Scientist in ``bound_roles``, each Scientist
    trajectory carries the key of each of its turns' bindings, in order, and every name a reply writes is one its
    turn's view gave it; without it, the role's plain grammar."""
    from training.config.model import SamplingConfig
    from training.rollout.play import CONTEXT_EXHAUSTED, play_jobs
    from training.rollout.records import episode_jobs

    jobs = episode_jobs(cells(), VALIDATION_SEEDS[:2], role="scientist")
    sampling = SamplingConfig(temperature=1.0, seed=3, constrained=True)
    plain = play_jobs(default_policy, jobs[:2], scientist="policy", lab_manager="scripted:thrifty", sampling=sampling)
    assert [r.trajectory.grammar for r in plain] == ["scientist"] * 2  # bound_roles' default: the Lab Manager only
    sampling = sampling.model_copy(update={"bound_roles": ["lab_manager", "scientist"]})
    records = play_jobs(default_policy, jobs, scientist="policy", lab_manager="scripted:thrifty", sampling=sampling)
    plans = 0
    for record in records:
        views = [(turn, view) for turn, view in replayed_views(record.log)
                 if turn.role == "scientist" and turn.error != CONTEXT_EXHAUSTED]
        assert record.trajectory.grammar == trajectory_key([grammar_key("scientist", v) for _, v in views])
        for turn, view in views:
            action = turn.action or {}
            assert not _outside(action, scientist_binding(view)), action
            plans += bool(action.get("technique"))
    assert plans >= 10, plans


def test_a_technique_the_scientist_was_given_comes_with_its_plans_items(default_policy):
    """Under a technique, each item list starts with the items a plan it was given lists under that technique (or
    a stand-in an answer offered for one), in that plan's order, before any other named item: the brief's
    cross-check technique with the published protocol's items, or the other way round, is refused; each protocol
    as the brief gives it, and with a named item added after its own, is allowed."""
    view = _first_view()
    key = grammar_key("scientist", view)
    published, cross = published_protocol(view), cross_check_method(view)
    fields = ("sample_size", "controls", "technique", "duration_days", "required_equipment", "required_reagents")
    swapped = [field for field in ("required_equipment", "required_reagents") if published[field] != cross[field]]
    assert swapped and published["technique"] != cross["technique"]
    extra = next(r for r in scientist_binding(view).reagents if r not in published["required_reagents"])

    def text(plan: dict, **change) -> str:
        return format_action(ScientistAction(action_type="revise_protocol", rationale="x",
                                             **{**{k: plan[k] for k in fields}, **change}))

    for plan in (published, cross):
        assert not refused_tokens(default_policy, key, text(plan))
    assert not refused_tokens(default_policy, key, text(published, required_reagents=[
        *published["required_reagents"], extra]))
    for field in swapped:
        assert refused_tokens(default_policy, key, text(cross, **{field: published[field]})), field
        assert refused_tokens(default_policy, key, text(published, **{field: cross[field]})), field
    assert refused_tokens(default_policy, key, text(published, required_reagents=[
        extra, *published["required_reagents"]]))
    assert not refused_tokens(default_policy, "scientist", text(cross, **{swapped[0]: published[swapped[0]]}))
