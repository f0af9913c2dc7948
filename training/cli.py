"""``replicalab <subcommand>``: the one command line, above the game and the training stack.

The command line is an edge: it parses arguments, prints, and imports the training stack lazily, so
``play`` and ``bench env`` work with only the core install (``pip install -e .``); a command that needs the
training extra says so in one line (``training.cli_errors``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from functools import partial
from pathlib import Path
from typing import Callable

from replicalab.scenarios import DIFFICULTIES, TEMPLATES
from replicalab.seats import MODEL, parse_seat, scripted_agent, seat_choices
from training.argtypes import positive_int, seed_int
from training.cli_errors import DEBUG_ENV, EXIT_INTERRUPTED, UsageError, error_report, yaml_where
from training.config.kinds import BACKENDS


def _seat(role: str) -> Callable[[str], str]:
    """An argparse type for ``role``'s seat spec (``replicalab.seats``): the spec, or a usage error."""

    def check(text: str) -> str:
        try:
            parse_seat(role, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return check


def _agent(role: str, spec: str, seed: int, template: str, difficulty: str, chat_template: str | None = None):
    """A fresh agent for ``role`` per its seat spec (``scripted_agent`` for a scripted seat)."""
    seat = parse_seat(role, spec)
    if seat.kind == MODEL:
        from training.model.validate import resolve_chat_template
        from training.rollout.agent import load_agent_spec

        return load_agent_spec(spec, role, chat_template=resolve_chat_template(chat_template))()
    return scripted_agent(role, seat.arg, seed, template, difficulty)


def cmd_play(args: argparse.Namespace) -> int:
    from replicalab.env import ReplicaLabEnv
    from replicalab.episode import run_episode
    from replicalab.transcript import format_episode
    from training.model.model_path import check_seat_models

    check_seat_models(args.scientist, args.lab_manager)  # before any model loads
    scientist = _agent("scientist", args.scientist, args.seed, args.template, args.difficulty, args.chat_template)
    lab_manager = _agent("lab_manager", args.lab_manager, args.seed, args.template, args.difficulty,
                         args.chat_template)
    env = ReplicaLabEnv(max_rounds=args.max_rounds)
    log = run_episode(env, scientist, lab_manager, seed=args.seed, template=args.template, difficulty=args.difficulty)
    print(log.model_dump_json(indent=2) if args.json else format_episode(log))
    return 0


def cmd_build_default_model(args: argparse.Namespace) -> int:
    from training.config.loading import load_config
    from training.config.model import DefaultModelConfig

    cfg = _load_config(partial(load_config, DefaultModelConfig), args.config, args.overrides)
    from replicalab.seeds import split_seeds
    from training.errors import UserInputError

    try:  # checked before the build: the seat check plays the first N validation seeds
        eval_seeds = list(split_seeds("validation", args.eval_seeds))
    except ValueError as exc:
        raise UserInputError(f"--eval-seeds {args.eval_seeds}: {exc}") from None
    from training.model.default import build_default_model, check_build_target

    check_build_target(Path(args.out).expanduser().resolve())  # before the minutes of the build

    out = build_default_model(args.out, cfg, progress=True)
    print(f"default model written to {out}")
    if eval_seeds:
        from training.eval.flag_copy import CHECK_SEEDS, flag_copy, uncopied
        from training.eval.seat_check import evaluate_model_seats
        from training.model.card import record_evaluation

        report = evaluate_model_seats(out, eval_seeds)
        copies = flag_copy(str(out), eval_seeds[:CHECK_SEEDS])
        record_evaluation(out, report, copies)
        for seat in (report.scientist, report.lab_manager):
            print(f"{seat.role}: parse rate {seat.parse_rate:.1%} over {seat.model_turns} turns, mean reward "
                  f"{seat.mean_reward:.3f} ({seat.baseline_name} {seat.baseline_mean_reward:.3f}), "
                  f"{seat.episodes} validation episodes")
        wrong = uncopied(copies)
        print("lab_manager flags: " + (f"NOT copied from the lab's check: {'; '.join(wrong)}" if wrong
                                       else "every flag copied from the lab's check"))
    return 0


def _load_config(loader: Callable, path, overrides):
    """A config from YAML + overrides; a config file that is missing, not a file or not YAML raises
    ``UserInputError`` naming it (pydantic's ``ValidationError`` is formatted by ``main``)."""
    import yaml

    from training.errors import UserInputError

    if path is not None:
        file = Path(path).expanduser()
        if not file.exists():
            raise UserInputError(f"config file {path} does not exist; give a YAML file (see configs/)")
        if not file.is_file():
            raise UserInputError(f"config path {path} is a directory, not a file; give a YAML file")
        try:
            yaml.safe_load(file.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise UserInputError(f"config file {path} is not valid YAML{yaml_where(exc)}") from exc
        except UnicodeDecodeError as exc:
            raise UserInputError(f"config file {path} is not UTF-8 text; give a YAML file") from exc
        except OSError as exc:
            raise UserInputError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    return loader(path, overrides)  # a malformed override value is a UserInputError naming its key


def cmd_train(args: argparse.Namespace) -> int:
    from training.config.train import load_train_config

    cfg = _load_config(load_train_config, args.config, args.overrides)
    from training.trainer.distributed import learner_from_env
    from training.trainer.run import print_summary, run_train

    summary = run_train(cfg, resume=args.resume, command=_resume_command(args))
    if learner_from_env().is_main:  # under torchrun the main learner process reports the run
        print_summary(summary)
    return 0


def _resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this training run: the same config and overrides, plus --resume."""
    import shlex

    words = ["replicalab", "train", "--config", args.config, *args.overrides, "--resume"]
    return " ".join(shlex.quote(w) for w in words)


def cmd_eval(args: argparse.Namespace) -> int:
    from training.config.eval import load_eval_config

    overrides = list(args.overrides)
    if args.agent:
        overrides.append("agents=" + json.dumps(args.agent))
    if args.lab_manager:
        overrides.append("lab_managers=" + json.dumps(args.lab_manager))
    for key in ("split", "episodes", "out", "backend"):
        if getattr(args, key) is not None:
            overrides.append(f"{key}={getattr(args, key)}")
    cfg = _load_config(load_eval_config, args.config, overrides)
    _check_eval_inputs(cfg)
    from training.eval.run import run_eval

    run_eval(cfg)
    print(Path(cfg.out, "report.md").read_text())
    return 0


def _check_eval_inputs(cfg) -> None:
    """Every ``model:`` agent is a usable model and ``out`` is a directory, before anything loads."""
    from training.errors import UserInputError
    from training.eval.kept import KEPT_DIR
    from training.model.model_path import check_seat_models

    check_seat_models(*cfg.agents, *cfg.lab_managers)
    out = Path(cfg.out).expanduser()
    if out.exists() and not out.is_dir():
        raise UserInputError(f"out={cfg.out} is a file; give a directory for the report")
    if out.is_dir() and any(out.iterdir()) and not (out / "report.json").is_file() and not (out / KEPT_DIR).is_dir():
        raise UserInputError(f"out={cfg.out} is a non-empty directory that holds no earlier evaluation (report.json "
                             f"or {KEPT_DIR}/); refusing to write into it: give a new or empty directory")


def cmd_sweep(args: argparse.Namespace) -> int:
    from training.config.sweep import load_sweep_config

    cfg = _load_config(load_sweep_config, args.config, args.overrides)
    from training.config.train import load_train_config
    from training.trainer.run import check_models

    check_models(load_train_config(cfg.base, cfg.overrides))  # before any trial starts
    from training.sweep.run import print_sweep, run_sweep

    print_sweep(run_sweep(cfg, resume=args.resume))
    return 0


def cmd_preflight(args: argparse.Namespace) -> int:
    from training.cluster.preflight import run

    print(run(args))
    return 0


#: Every subcommand.
COMMANDS = ("train", "eval", "sweep", "play", "bench", "build-default-model", "preflight")
#: The config each command reads (``module:Class``), printed by its ``--help-config``.
COMMAND_CONFIGS = {
    "train": "training.config.train:TrainConfig",
    "eval": "training.config.eval:EvalConfig",
    "sweep": "training.config.sweep:SweepConfig",
    "build-default-model": "training.config.model:DefaultModelConfig",
}


def config_class(command: str) -> type:
    """The pydantic config class of ``command`` (torch-free import)."""
    module, _, name = COMMAND_CONFIGS[command].partition(":")
    return getattr(importlib.import_module(module), name)


def _add_help_config(parser: argparse.ArgumentParser) -> None:
    """``--help-config``: print every field of the command's config (dotted key, type, default,
    description) grouped by section, and exit, like ``--help``."""
    command = parser.prog.split()[-1]

    class HelpConfig(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            from training.config.fields import format_config_help

            print(format_config_help(config_class(command), command), end="")
            parser.exit()

    parser.add_argument("--help-config", action=HelpConfig, nargs=0, default=argparse.SUPPRESS,
                        help="list every config field (key, type, default, description) and exit")


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are raised (``main`` prints them as one line), not printed
    with the usage block; subparsers inherit it."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="replicalab", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error (also REPLICALAB_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True)

    play = sub.add_parser("play", help="play one episode and print the transcript and score breakdown")
    play.add_argument("--seed", type=seed_int, default=0)
    play.add_argument("--template", choices=TEMPLATES, default=TEMPLATES[0])
    play.add_argument("--difficulty", choices=DIFFICULTIES, default="easy")
    play.add_argument("--scientist", type=_seat("scientist"), default="scripted",
                      help=", ".join(seat_choices("scientist")))
    play.add_argument("--lab-manager", type=_seat("lab_manager"), default="scripted",
                      help=", ".join(seat_choices("lab_manager")))
    play.add_argument("--max-rounds", type=positive_int, default=6)
    play.add_argument("--json", action="store_true", help="print the EpisodeLog as JSON")
    play.add_argument("--chat-template", default=None, metavar="FILE|chatml",
                      help="chat template for model seats whose tokenizer has none (a base model)")
    play.set_defaults(func=cmd_play)

    bench = sub.add_parser("bench", help="benchmarks that print figures next to a baseline from the same run",
                           description="Benchmarks; each has its own options (replicalab bench NAME --help).")
    from training.bench import add_bench_parsers  # torch-free: each benchmark imports torch when it runs

    add_bench_parsers(bench)

    train = sub.add_parser("train", help="GRPO training from a config (YAML overrides TrainConfig defaults)")
    train.add_argument("--config", default="configs/train/default.yaml")
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="e.g. grpo.max_steps=4 seats.lab_manager=policy")
    train.add_argument("--resume", action="store_true", help="continue from the run's newest checkpoint")
    train.set_defaults(func=cmd_train)
    _add_help_config(train)

    ev = sub.add_parser("eval", help=(
        "agents as the Scientist on one seed split (default test): report.json, report.md, plots"))
    ev.add_argument("--config", default=None, help="an eval YAML (configs/eval/*.yaml)")
    ev.add_argument("--agent", action="append", type=_seat("scientist"),
                    help="the Scientist to evaluate (repeatable): " + ", ".join(seat_choices("scientist")))
    ev.add_argument("--lab-manager", action="append", type=_seat("lab_manager"),
                    help="a Lab Manager every agent plays against (repeatable; several give the cross-play matrix "
                         "and a Lab Manager league): "
                         + ", ".join(seat_choices("lab_manager")))
    ev.add_argument("--split", choices=("validation", "test", "train"), default=None,
                    help="seed split played (default test: the final report; validation: what selection uses)")
    ev.add_argument("--episodes", type=positive_int, default=None, help="episodes per template x difficulty")
    ev.add_argument("--backend", choices=BACKENDS, default=None)
    ev.add_argument("--out", default=None)
    ev.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    ev.set_defaults(func=cmd_eval)
    _add_help_config(ev)

    sw = sub.add_parser("sweep", help="hyperparameter sweep from a config, trials on Ray Tune")
    sw.add_argument("config", help="configs/sweeps/NAME.yaml")
    sw.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    sw.add_argument("--resume", action="store_true",
                    help="continue the interrupted sweep: finished trials kept, unfinished ones resumed")
    sw.set_defaults(func=cmd_sweep)
    _add_help_config(sw)

    build = sub.add_parser("build-default-model", help="build the embedded default model (tokenizer, SFT warm start)")
    build.add_argument("--out", required=True)
    build.add_argument("--config", default=None,
                       help="a DefaultModelConfig YAML (configs/model/*.yaml); built-in defaults otherwise")
    build.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="e.g. architecture.hidden_size=256")
    build.add_argument("--eval-seeds", type=int, default=10,
                       help="validation seeds (x 9 cells per seat) to check on afterwards, 0..100000; 0 skips it")
    build.set_defaults(func=cmd_build_default_model)
    _add_help_config(build)

    pre = sub.add_parser("preflight", help=(
        "the GPU/CPU placement plan of a train config with estimated memory, before anything loads"))
    from training.cluster.preflight import add_arguments as add_preflight_arguments  # torch- and ray-free

    add_preflight_arguments(pre)
    pre.set_defaults(func=cmd_preflight)
    return parser


#: Packages whose progress messages (INFO) the command line shows; other libraries show warnings only.
LOGGED_PACKAGES = ("replicalab", "training")
LOG_FORMAT = "%(asctime)s %(name)s: %(message)s"


def configure_logging() -> None:
    """Progress to stderr through ``logging``: INFO for this project's packages, WARNING for the rest.
    Called once by ``main``; the final results are printed to stdout."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT, datefmt="%H:%M:%S", stream=sys.stderr)
    for name in LOGGED_PACKAGES:
        logging.getLogger(name).setLevel(logging.INFO)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; ``KEY=VALUE`` overrides are accepted anywhere after the subcommand (argparse
    leaves those that follow an option such as ``--resume`` unparsed)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        if hasattr(args, "overrides"):
            stray = [a for a in extra if a.startswith("-") or "=" not in a]
            args.overrides = [*args.overrides, *(a for a in extra if a not in stray)]
            extra = stray
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see replicalab {args.command} --help)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand.  A failure prints ONE line on stderr (``replicalab <command>: <problem>``) and
    exits with the status ``training.cli_errors.error_report`` gives it; Ctrl-C exits ``EXIT_INTERRUPTED``.
    ``--debug`` (anywhere) or ``REPLICALAB_DEBUG=1`` shows the traceback instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    configure_logging()
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        args = _parse(build_parser(), argv)
        command = args.command
        return args.func(args)
    except BrokenPipeError:  # the reader left (`| head`): nothing more to say, and not a failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush goes nowhere
        return 0
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"replicalab {command or ''}: interrupted".replace("  ", " "), file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 -- the one place that turns any failure into one line
        if debug:
            raise
        line, status = error_report(exc)
        prefix = f"replicalab {command}" if command in COMMANDS else "replicalab"
        print(f"{prefix}: {line}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
