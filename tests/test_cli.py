"""The command line as a user runs it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.cli import main


def run_cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    """``replicalab ARGS`` in this process (the entry point as a subprocess: ``test_cli_errors.py``): its exit
    status and stderr."""
    status = main(list(args))
    return status, capsys.readouterr().err


def test_play_prints_transcript_and_breakdown(capsys):
    assert main(["play", "--seed", "3", "--template", "ml_benchmark", "--difficulty", "medium"]) == 0
    out = capsys.readouterr().out
    assert "Episode ml_benchmark-medium-3" in out and "[round 1] Scientist (propose_protocol)" in out
    assert "total" in out and "fidelity" in out and "Verdict:" in out


def test_play_json_is_an_episode_log(capsys):
    main(["play", "--seed", "4", "--scientist", "scripted:oracle", "--json"])
    log = json.loads(capsys.readouterr().out)
    assert log["agreement_reached"] and log["reward_spec_version"]


@pytest.mark.parametrize("args, message", [
    (["play", "--template", "astrology"], "choose from 'cell_biology', 'ml_benchmark', 'behavioral_psychology'"),
    (["play", "--difficulty", "insane"], "choose from 'easy', 'medium', 'hard'"),
    (["play", "--seed", "-1"], "seed must be non-negative"),
    (["play", "--scientist", "genius"], "valid scientist seats: scripted, scripted:naive, scripted:reader, scripted:defender"),
    (["play", "--scientist", "naive"], "did you mean scripted:naive?"),
    (["eval", "--agent", "reader"], "did you mean scripted:reader?"),
    (["play", "--lab-manager", "scripted:naive"],
     "valid lab_manager seats: scripted, scripted:cooperative, scripted:thrifty, model:DIR"),
    (["play", "--lab-manager", "thrifty"], "did you mean scripted:thrifty?"),
])
def test_bad_arguments_name_the_valid_choices(args, message, capsys):
    status, err = run_cli(capsys, *args)
    assert status == 2 and message in err


def test_bench_env_prints_rates(capsys):
    assert main(["bench", "env", "--episodes", "300"]) == 0
    out = capsys.readouterr().out
    assert "episode, reader+defender+asker scientist" in out and "scenario generation only" in out and "/s" in out


@pytest.mark.parametrize("args, message", [
    (["train", "grpo.bogus=1"], "unknown key 'grpo.bogus'"),
    (["train", "grpo.max_steps"], "malformed override"),
    (["eval", "agents=[scripted:genius]"], "is not a scripted agent here"),
    (["sweep", "configs/sweeps/cpu_grid.yaml", "method=annealing"], "method: Input should be 'grid' or 'random'"),
    (["build-default-model", "--out", "unused", "--config", "configs/model/gpu.yaml", "architecture.bogus=1"],
     "unknown key 'architecture.bogus'"),
    (["build-default-model", "--out", "unused", "architecture.hidden_size=100", "architecture.num_attention_heads=3"],
     "hidden_size must be divisible by num_attention_heads"),
])
def test_bad_configs_exit_with_a_clear_error(args, message, capsys):
    status, err = run_cli(capsys, *args)
    assert status != 0 and message in err and "Traceback" not in err and err.count("\n") == 1


# ----- bench: one sub-parser per benchmark, every option honoured ------------------------------
BENCH_OPTIONS = {
    "env": (["--episodes", "7", "--original", "orig", "--original-deps", "deps", "--rounds", "2"],
            dict(episodes=7, original=Path("orig"), original_deps=Path("deps"), rounds=2),
            dict(episodes=5000, original=None, original_deps=None, rounds=3)),
    "skills": (["--episodes", "3", "--lab", "cooperative"], dict(episodes=3, lab="cooperative"),
               dict(episodes=100, lab="thrifty")),
    "rollout": (["--episodes", "16", "--max-new-tokens", "12", "--max-rounds", "3", "--ray-workers", "2",
                 "--repeats", "1", "--sample", "--model", "m"],
                dict(episodes=16, max_new_tokens=12, max_rounds=3, ray_workers=[2], repeats=1, sample=True, model="m"),
                dict(episodes=64, max_new_tokens=96, max_rounds=6, ray_workers=[1, 2], repeats=3, sample=False,
                     model=None)),
    "groups": (["--config", "c.yaml", "--steps", "2", "--model", "m", "grpo.num_generations=4"],
               dict(config="c.yaml", steps=2, model="m", overrides=["grpo.num_generations=4"]),
               dict(config="configs/train/default.yaml", steps=6, model=None, overrides=[])),
    "train": (["--config", "c.yaml", "--steps", "2", "grpo.beta=0.1", "rollout.num_workers=1"],
              dict(config="c.yaml", steps=2, overrides=["grpo.beta=0.1", "rollout.num_workers=1"]),
              dict(config="configs/train/default.yaml", steps=4, overrides=[])),
    "generate": (["--episodes", "5", "--role", "lab_manager", "--model", "m", "--batch", "4", "--new-tokens", "8"],
                 dict(episodes=5, role="lab_manager", model=["m"], batch=4, new_tokens=8),
                 dict(episodes=0, role="scientist", model=["default"], batch=32, prompt_tokens=256, new_tokens=64)),
    "generate-memory": (["--vocab", "1000", "--batch", "2", "--new-tokens", "3"],
                        dict(vocab=1000, batch=2, new_tokens=3), dict(vocab=150_000, batch=64, new_tokens=256)),
    "engines": (["--episodes", "4", "--workers", "2", "--engines", "vllm", "--model", "m"],
                dict(episodes=4, workers=2, engines=["vllm"], model="m"),
                dict(episodes=32, workers=1, engines=["hf", "vllm"], max_new_tokens=96, repeats=2, model=None)),
    "policy": (["--model", "m", "--seeds", "2", "--samples", "4", "--temperature", "0.7", "--lab", "cooperative"],
               dict(model="m", seeds=2, samples=4, temperature=0.7, lab="cooperative"),
               dict(model=None, seeds=10, samples=8, temperature=1.0, lab="thrifty")),
    "lab-manager": (["--model", "m", "--seeds", "2", "--samples", "3", "--temperature", "0.5", "--scientist",
                     "scripted:reader"],
                    dict(model="m", seeds=2, samples=3, temperature=0.5, scientist=["scripted:reader"]),
                    dict(model=None, seeds=5, samples=2, temperature=1.0, scientist=None)),
    "sync": (["--shape", "tiny", "--syncs", "2", "--bucket-mib", "16", "--workers", "2"],
             dict(shape="tiny", syncs=2, bucket_mib=16, workers=2), dict(shape="0.5b", syncs=3, bucket_mib=256, workers=1)),
}


@pytest.mark.parametrize("what", list(BENCH_OPTIONS))
def test_bench_parses_its_own_options_and_defaults(what):
    from training.bench import BENCHMARKS
    from training.cli import build_parser

    assert set(BENCHMARKS) == set(BENCH_OPTIONS)  # a new benchmark gets a row here
    argv, given, defaults = BENCH_OPTIONS[what]
    args = vars(build_parser().parse_args(["bench", what, *argv]))
    assert {k: args[k] for k in given} == given
    args = vars(build_parser().parse_args(["bench", what]))
    assert {k: args[k] for k in defaults} == defaults


@pytest.mark.parametrize("args, message", [
    (["bench", "env", "--steps", "3"], "unrecognized arguments: --steps"),  # another benchmark's option
    (["bench", "rollout", "--config", "x.yaml"], "unrecognized arguments: --config"),
    (["bench", "rollout", "--episodes", "0"], "must be at least 1"),
    (["bench", "train", "--episodes", "16"], "unrecognized arguments: --episodes"),
    (["bench", "fast"], "invalid choice: 'fast'"),
    (["bench", "policy", "--temperature", "0"], "must be above 0"),
    (["bench", "policy", "--lab", "generous"], "invalid choice: 'generous'"),
])
def test_bench_refuses_options_it_does_not_have(args, message, capsys):
    status, err = run_cli(capsys, *args)
    assert status == 2 and message in err


@pytest.mark.slow
def test_bench_rollout_plays_the_episodes_given(capsys, policy_wide_model_dir):
    """The case that once ran 64 episodes whatever --episodes said (no --ray-workers: no Ray)."""
    assert main(["bench", "rollout", "--model", str(policy_wide_model_dir), "--episodes", "3", "--max-new-tokens",
                 "8", "--max-rounds", "2", "--repeats", "1", "--ray-workers"]) == 0
    out = capsys.readouterr().out
    assert ": 3 episodes (greedy, best of 1), max_new_tokens 8," in out
    assert "\nbound " in out and "\ninprocess " in out and "ray x1" not in out


@pytest.mark.slow
def test_bench_generate_decodes_each_model_with_both_caches_and_plays_the_episodes_given(capsys,
                                                                                         policy_wide_model_dir):
    """One row per model, KV cache and sampler (a shape stand-in too), rates that agree with each other."""
    assert main(["bench", "generate", "--model", str(policy_wide_model_dir), "shape:tiny", "--episodes", "2",
                 "--role", "lab_manager", "--batch", "3", "--prompt-tokens", "16", "--new-tokens", "6",
                 "--profile"]) == 0
    out = capsys.readouterr().out
    assert "batch 3, 16 prompt tokens, up to 6 new tokens" in out and "copy bandwidth" in out
    rows = [words for words in map(str.split, out.splitlines())
            if len(words) == 9 and words[2] in ("per-row", "shared")]
    assert [(r[1], r[2]) for r in rows] == [("dynamic", "per-row"), ("static", "per-row"), ("static", "shared")] * 2
    assert rows[-1][0] == "shape:tiny" and rows[0][3] != rows[-1][3]  # the stand-in's own parameter count
    for row in rows:
        tokens_per_s, steps_per_s, mb_per_step, gb_per_s, share = (float(x.replace(",", "")) for x in row[4:])
        assert tokens_per_s >= steps_per_s > 0 and mb_per_step > 0 and share > 0
        assert abs(gb_per_s - mb_per_step * steps_per_s / 1e3) <= 0.03 * gb_per_s + mb_per_step * 0.1 / 1e3
    assert "role lab_manager, 2 episodes" in out and "one at a time:" in out and "speedup:" in out
    assert out.count("static KV cache, per-row streams: one call profiled:") == 2 and "aten::" in out


def test_bench_generate_refuses_an_unknown_shape_in_one_line(capsys):
    assert main(["bench", "generate", "--model", "shape:7b"]) == 2
    assert "unknown shape 'shape:7b'; known: shape:0.5b, shape:tiny" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_policy_measures_a_model_next_to_the_scripted_scientists(capsys, policy_wide_model_dir):
    """Every cell gets a row with the model's reward and its pass@k; each skill a use rate, the all-skills
    Scientist's at 1.000; the teacher-forced probabilities are probabilities."""
    import re

    assert main(["bench", "policy", "--model", str(policy_wide_model_dir), "--seeds", "1", "--samples", "1"]) == 0
    out = capsys.readouterr().out
    assert "(9 episodes)" in out and out.count(" easy | ") + out.count(" medium | ") + out.count(" hard | ") == 9
    for skill in ("read", "defend", "ask"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(skill) and "|" in ln and "/" in ln)
        assert line.rstrip().endswith(")") and "| 1.000 (" in line
    found = re.findall(r"^  \w+ +([0-9.]+) \| ([0-9.]+|-) over", out, re.M)
    probs = [float(v) for pair in found for v in pair if v != "-"]
    assert probs and all(0.0 <= p <= 1.0 for p in probs) and "naive Scientist's chats" in out
    fields = re.findall(r"P\(it \| the reply before it\): (.*)$", out, re.M)
    assert fields and any("technique " in line for line in fields)  # the read reply's fields, by name
    assert all(0.0 <= float(v) <= 1.0 for line in fields for v in re.findall(r" ([0-9.]+)(?:,|$)", line))


@pytest.mark.slow
def test_bench_lab_manager_measures_the_seat_against_each_scientist(capsys, policy_wide_model_dir):
    """One row per Scientist with the seat's rates as shares in [0, 1] (true flags never above parsed, valid never
    above true flags) and the scripted Lab Managers' rewards on the same episodes; then the target line."""
    assert main(["bench", "lab-manager", "--model", str(policy_wide_model_dir), "--seeds", "1", "--samples", "1",
                 "--scientist", "scripted:naive", "--scientist", "scripted:asker"]) == 0
    out = capsys.readouterr().out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| scripted:")]
    assert [r[0] for r in rows] == ["| scripted:naive", "| scripted:asker"]
    for row in rows:
        parsed, true_flags, valid = map(float, row[2:5])
        assert 0.0 <= valid <= true_flags <= parsed <= 1.0
        share, offered = row[9].split()
        assert 0.0 <= float(share) <= 1.0 and int(offered.strip("()")) >= 0
    assert "(target 0.95: " in out and "Why the failing suggestions fail" in out


def test_bench_lab_manager_refuses_a_seat_that_is_not_a_scripted_scientist(capsys):
    for seat in ("scripted:thrifty", "model:m", "policy"):
        assert main(["bench", "lab-manager", "--scientist", seat]) == 2
        assert "--scientist" in capsys.readouterr().err


def test_lab_manager_turns_are_counted_by_what_went_wrong():
    """A reply that does not parse counts as a turn only; a parsed one with a flag that is not the truth as parsed
    but not true; a valid one in its move's column."""
    from replicalab import ReplicaLabEnv, run_episode
    from replicalab.agents import NaiveScientist
    from replicalab.lab import ScriptedLabManager
    from replicalab.models import InvalidAction, LabManagerAction
    from training.bench.lab_manager import turn_counts

    env = ReplicaLabEnv()
    env.reset(5, "cell_biology", "hard")
    honest = ScriptedLabManager(env.scenario, "thrifty", env.feasibility)
    turns = iter(range(100))

    def lab_manager(obs):
        k, action = next(turns), honest(obs)
        if k == 0:
            return InvalidAction(role="lab_manager", error="unterminated string inside the JSON object",
                                 raw_text='{"budget_ok":')
        if k == 1:
            flags = {f: getattr(action, f) for f in ("budget_ok", "equipment_ok", "reagents_ok", "schedule_ok",
                                                    "staff_ok")}
            flags["budget_ok"] = not flags["budget_ok"]
            return LabManagerAction(action_type="report_feasibility", explanation="x", feasible=all(flags.values()),
                                    **flags)
        return action

    log = run_episode(env, NaiveScientist(), lab_manager, seed=5, template="cell_biology", difficulty="hard")
    c = turn_counts([log])
    lab_turns = [t for t in log.turns if t.role == "lab_manager"]
    assert c["turns"] == len(lab_turns) >= 2
    assert c["parsed"] == c["turns"] - 1
    assert c["true_flags"] == c["parsed"] - 1 and c["valid"] == c["true_flags"]
    assert sum(c[m] for m in ("accept", "suggest_alternative", "report_feasibility", "reject")) == c["valid"]


def test_pass_at_k_is_the_unbiased_estimate():
    from training.bench.policy import pass_at_k

    assert pass_at_k(8, 0, 4) == 0.0 and pass_at_k(8, 5, 4) == 1.0 and pass_at_k(8, 8, 1) == 1.0
    assert pass_at_k(8, 2, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 4)


def test_field_probabilities_credit_each_value_its_own_tokens():
    """Each field's probability is the product over the tokens of its value, a token straddling an edge counting
    toward the value it enters; the same value spelled twice is found at its own field."""
    import math

    from training.bench.policy import field_probabilities

    reply = '{"action_type":"accept","n":12,"names":["a","ü"],"m":12}'
    cut = [reply.index("12") + 1, reply.index('["a"') + 3, len(reply)]  # a token ending inside each value
    ends = sorted({*range(1, len(reply) + 1, 5), *cut, len(reply)})
    logp = [math.log(0.9 if i % 2 else 0.5) for i in range(len(ends))]
    got = field_probabilities(reply, logp, ends)
    assert list(got) == ["action_type", "n", "names", "m"]

    def expected(start: int, end: int) -> float:
        return math.exp(sum(lp for i, lp in enumerate(logp) if ends[i] > start and (ends[i - 1] if i else 0) < end))

    for field in got:
        value = reply[reply.index(f'"{field}":') + len(field) + 3:]
        start = len(reply) - len(value)
        written = {"action_type": '"accept"', "n": "12", "names": '["a","ü"]', "m": "12"}[field]
        assert value.startswith(written)
        assert got[field] == pytest.approx(expected(start, start + len(written)))
    assert 0 < got["names"] < got["n"] <= 1


# ----- --help-config ----------------------------------------------------------------------------
HELP_CONFIG_COMMANDS = ("train", "eval", "sweep", "build-default-model")


@pytest.fixture(scope="module")
def help_config_outputs() -> dict[str, str]:
    """``--help-config`` of every command, printed by one fresh interpreter (which then names the heavy
    libraries it imported: ``HEAVY [...]``), split by command."""
    code = ("import sys\nfrom training.cli import main\n"
            f"for command in {HELP_CONFIG_COMMANDS!r}:\n    print('@@', command)\n    try:\n"
            "        main([command, '--help-config'])\n    except SystemExit as e:\n        assert not e.code, e.code\n"
            "print('@@ HEAVY', [m for m in ('torch', 'transformers', 'trl', 'ray', 'wandb') if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    sections = [part.partition("\n") for part in r.stdout.split("@@ ")[1:]]
    return {head.strip(): body for head, _, body in sections}


@pytest.mark.parametrize("command", HELP_CONFIG_COMMANDS)
def test_help_config_lists_every_field_without_torch(command, help_config_outputs):
    from training.cli import config_class
    from training.config.fields import config_fields

    assert [k for k in help_config_outputs if k.startswith("HEAVY")] == ["HEAVY []"]
    fields = config_fields(config_class(command))
    assert len(fields) >= 5
    lines = help_config_outputs[command].splitlines()
    for f in fields:
        header = f"  {f.key}: {f.type} = {f.default}"
        assert header in lines, header
        below = lines[lines.index(header) + 1:]
        end = next((i for i, line in enumerate(below) if not line.startswith(" " * 6)), len(below))
        text = " ".join(line.strip() for line in below[:end])
        assert text == " ".join(f.description.replace("``", "").split()) != "", f.key