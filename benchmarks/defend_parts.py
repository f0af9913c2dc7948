"""Where the defend skill's worth lies: its opening at the minimum sample size, its counter, and the counter's numbers.

    python benchmarks/defend_parts.py [--seeds 60] [--lab thrifty] [--model DIR [--model-seeds 10]]

Scripted Scientists on validation seeds (every template x difficulty) against one scripted lab: the naive one, the
defender, the defender's two parts alone (the opening at the brief's minimum sample size; the counter to a cut, with
the opening as published), and the counter written with the published sample size or schedule in place of the
minimum and the lab's days (what a seat that copies its own plan's numbers writes).  Each row's mean reward, the
agreement rate and the mean rounds, and its paired difference from naive on the same episodes.

With ``--model``, also what that model's Scientist seat would write at those counters, in the counter-only
Scientist's own chats (its opening is the published protocol, so its plan's numbers are not the counter's), on the
first ``--model-seeds`` validation seeds per cell: the model's teacher-forced probability of each number of the
counter, the defender's (the minimum sample size, the suggestion's days) and the plan's in its place, each given the
reply before it.  Under the numbers binding sampling picks among the numbers the view states, so the defender's share
of the two is about the share of counters that would carry its numbers.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Callable

from replicalab import ReplicaLabEnv, run_episode
from replicalab.agents.brief import published_protocol
from replicalab.agents.skilled import MAX_COUNTERS, OPENING_RATIONALE, SkilledScientist
from replicalab.lab import LAB_POLICIES
from replicalab.models import ScientistAction, ScientistObservation
from replicalab.models import ScientistActionType as SA
from replicalab.scenarios import cells
from replicalab.seeds import VALIDATION_SEEDS


class CounterOnly(SkilledScientist):
    """The defender that opens with the published protocol and counters a cut; ``published`` names the counter's
    numbers taken from the published protocol instead (``sample_size``, ``duration_days``)."""

    def __init__(self, published: tuple[str, ...] = ()) -> None:
        super().__init__(("defend",))
        self.published = published

    def __call__(self, obs: ScientistObservation) -> ScientistAction:
        if obs.current_protocol is None:
            self.at_minimum = False
            return self._write(SA.PROPOSE_PROTOCOL, published_protocol(obs), OPENING_RATIONALE, obs)
        return super().__call__(obs)

    def _defend(self, obs: ScientistObservation) -> ScientistAction | None:
        counter = super()._defend(obs)
        if counter is None or not self.published:
            return counter
        brief = published_protocol(obs)
        fields = counter.model_dump()
        for name in self.published:
            fields[name] = max(brief[name], fields[name]) if name == "sample_size" else brief[name]
        self.at_minimum = False
        return ScientistAction(**fields)


def opening_only() -> SkilledScientist:
    agent = SkilledScientist(("defend",))
    agent.counters = MAX_COUNTERS  # no counter left
    return agent


ROWS: dict[str, Callable[[], SkilledScientist]] = {
    "naive": lambda: SkilledScientist(()),
    "defender": lambda: SkilledScientist(("defend",)),
    "opening at the minimum only": opening_only,
    "counter only": CounterOnly,
    "counter at the published sample size": lambda: CounterOnly(("sample_size",)),
    "counter at the published days": lambda: CounterOnly(("duration_days",)),
    "counter at both": lambda: CounterOnly(("sample_size", "duration_days")),
}


def counter_numbers(path: str, grid: list, lab: str) -> dict[str, list[tuple[float, float]]]:
    """At each counter of the counter-only Scientist's chats on ``grid``: the model's probability of the defender's
    sample size and days and of the plan's in their place, each given the reply before it (teacher-forced), per
    number where the two differ."""
    import json

    from replicalab import generate_scenario
    from replicalab.lab import ScriptedLabManager
    from replicalab.models import ScientistAction
    from replicalab.parsing import format_action
    from replicalab.skill_use import skill_chances
    from training.bench.policy import _reply_logprobs, field_probabilities
    from training.model.sft_data import plan_before, record_episode
    from training.rollout.policy import PolicyModel

    policy = PolicyModel(path, device="cpu")
    out: dict[str, list[tuple[float, float]]] = {}
    for s, t, d in grid:
        lab_manager = ScriptedLabManager(generate_scenario(s, t, d), lab)
        examples, _, log = record_episode(s, t, d, agent=CounterOnly(), lab_manager=lab_manager)
        for chance in skill_chances(log):
            if chance.skill != "defend" or not chance.used:
                continue
            turn = examples[chance.turn]
            prompt = policy.encode_chat(turn["prompt"])
            counter = json.loads(turn["completion"][0]["content"])
            previous = plan_before(examples, chance.turn)
            for name in ("sample_size", "duration_days"):
                if previous[name] == counter[name]:
                    continue
                pair = []
                for value in (counter[name], previous[name]):
                    reply = format_action(ScientistAction(**{**counter, name: value}))
                    logp, ends = _reply_logprobs(policy, prompt, reply)
                    pair.append(field_probabilities(reply, logp, ends)[name])
                out.setdefault(name, []).append(tuple(pair))
    return out


def _model_path(name: str) -> str:
    """``--model`` checked before anything plays; a bad one stops the script with one line."""
    from training.errors import UserInputError
    from training.model.model_path import check_model_path

    try:
        return check_model_path(name)
    except UserInputError as err:
        raise SystemExit(f"--model: {err}") from None


def main() -> int:
    from training.argtypes import positive_int

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=positive_int, default=60, help="validation seeds per cell")
    parser.add_argument("--lab", default="thrifty", choices=LAB_POLICIES)
    parser.add_argument("--model", default=None, help="a model whose Scientist seat's counters to measure")
    parser.add_argument("--model-seeds", type=positive_int, default=10, help="validation seeds per cell for --model")
    args = parser.parse_args()
    model = _model_path(args.model) if args.model else None
    env = ReplicaLabEnv()
    grid = [(s, t, d) for t, d in cells() for s in VALIDATION_SEEDS[:args.seeds]]
    logs = {name: [run_episode(env, make(), args.lab, seed=s, template=t, difficulty=d) for s, t, d in grid]
            for name, make in ROWS.items()}
    naive = [log.total_reward for log in logs["naive"]]
    print(f"Scripted Scientists against scripted:{args.lab} on {len(grid)} validation episodes\n")
    print("| Scientist | mean reward | vs naive, paired | agreement | rounds |\n|---|---|---|---|---|")
    for name, played in logs.items():
        rewards = [log.total_reward for log in played]
        gain = statistics.fmean(r - n for r, n in zip(rewards, naive))
        print(f"| {name} | {statistics.fmean(rewards):.2f} | {gain:+.2f} | "
              f"{statistics.fmean(log.agreement_reached for log in played):.2f} | "
              f"{statistics.fmean(log.rounds_used for log in played):.2f} |")
    if model:
        probs = counter_numbers(model, [g for g in grid if g[0] in VALIDATION_SEEDS[:args.model_seeds]], args.lab)
        print(f"\n{args.model} at the counter-only Scientist's counters, teacher-forced: P(the number | the reply "
              "before it), where the defender's and the plan's differ\n")
        print("| number | counters | P(the defender's) | P(the plan's) | share where the defender's is likelier |\n"
              "|---|---|---|---|---|")
        for name, pairs in probs.items():
            print(f"| {name} | {len(pairs)} | {statistics.fmean(a for a, _ in pairs):.3f} | "
                  f"{statistics.fmean(b for _, b in pairs):.3f} | {statistics.fmean(a > b for a, b in pairs):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
