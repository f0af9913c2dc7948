"""Whether a model's Lab Manager seat copies each of the lab's flags from the check its prompt ends with.

The Lab Manager writes its flags first, each the lab's check of the plan on the table, which its prompt ends with
(``plan_check``, rendered as the same JSON tokens).  On the Lab Manager's views of scripted episodes (the naive and
the all-skills Scientist against the thrifty and the cooperative lab, every template x difficulty), ``flag_copy``
scores every flag teacher-forced (the true flags before it): the probability of the lab's value against the other,
each the probability of the whole field's tokens (``"budget_ok":false,`` is one token or a key and its value, as
the model's tokenizer has it), per flag and per value.  A flag copied from the check reads 1.00 for both values; a
seat that writes a prior instead reads the value's share of the data for one value and far below 0.5 for the
other -- the turns a sampled seat then gets wrong (``replicalab bench lab-manager``, true flags).  The build of the
default model records it after its seat check (``training.cli``).
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean
from typing import Iterable

from pydantic import BaseModel, ConfigDict

#: The Scientists and labs whose episodes give the Lab Manager's views.
SCIENTISTS = ("naive", "reader+defender+asker")
LABS = ("thrifty", "cooperative")
#: Below this probability of the lab's value, greedy decoding writes the other one.
WRONG = 0.5
#: Validation seeds (x every cell) of the check after a build of the default model.
CHECK_SEEDS = 2


class FlagCopy(BaseModel):
    """One flag and value: the model's mean probability of the lab's value, and the views where it loses."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flag: str
    value: bool
    views: int
    mean_probability: float
    wrong: int


def flags() -> list[str]:
    """The flags in the order the Lab Manager writes them (``parsing.field_order``)."""
    from replicalab.models import LabManagerAction
    from replicalab.parsing import field_order

    return [name for name in field_order(LabManagerAction) if name.endswith("_ok")]


def lab_manager_views(seeds: Iterable[int]) -> list:
    """The Lab Manager's views, with a plan on the table, of scripted episodes on ``seeds`` x every cell."""
    from replicalab import ReplicaLabEnv, run_episode
    from replicalab.episode import replayed_views
    from replicalab.models import LabManagerObservation
    from replicalab.scenarios import cells
    from replicalab.seats import scripted_agent

    env, views, seeds = ReplicaLabEnv(), [], list(seeds)
    for template, difficulty in cells():
        for seed in seeds:
            for name in SCIENTISTS:
                for lab in LABS:
                    log = run_episode(env, scripted_agent("scientist", name, seed, template, difficulty), lab,
                                      seed=seed, template=template, difficulty=difficulty)
                    views += [view for _, view in replayed_views(log)
                              if isinstance(view, LabManagerObservation) and view.plan_check]
    return views


def flag_probabilities(path: str, views: list) -> dict[tuple[str, bool], list[float]]:
    """(flag, the lab's value) -> the model's probability of that value, per view, teacher-forced."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from replicalab.prompts import build_messages

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    out: dict[tuple[str, bool], list[float]] = defaultdict(list)
    for view in views:
        text = tokenizer.apply_chat_template(build_messages(view), add_generation_prompt=True, tokenize=False) + "{"
        for flag in flags():
            truth = not view.plan_check[flag]
            start = len(tokenizer.encode(text, add_special_tokens=False))
            value = {}
            for v in (True, False):  # the whole field's tokens: one, or a key and its value
                ids = tokenizer.encode(text + f'"{flag}":{str(v).lower()},', add_special_tokens=False)
                with torch.no_grad():
                    logp = model(torch.tensor([ids])).logits[0, start - 1:-1].log_softmax(-1)
                value[v] = logp.gather(1, torch.tensor(ids[start:])[:, None]).sum().exp().item()
            out[(flag, truth)].append(value[truth] / (value[True] + value[False]))
            text += f'"{flag}":{str(truth).lower()},'
    return out


def flag_copy(path: str, seeds: Iterable[int]) -> list[FlagCopy]:
    """Per flag and value (in ``flags()`` order, true first), how the model at ``path`` copies it on ``seeds``."""
    probs = flag_probabilities(path, lab_manager_views(seeds))
    return [FlagCopy(flag=flag, value=value, views=len(p), mean_probability=mean(p),
                     wrong=sum(x < WRONG for x in p))
            for flag in flags() for value in (True, False) if (p := probs.get((flag, value)))]


def uncopied(rows: list[FlagCopy]) -> list[str]:
    """One phrase per flag and value the model gets wrong in some view (empty: every flag is copied)."""
    return [f"{r.flag} where the lab's is {str(r.value).lower()} (wrong in {r.wrong} of {r.views} views, "
            f"P {r.mean_probability:.2f})" for r in rows if r.wrong]
