"""How the command line reports a failure: ONE line on stderr and an exit status.

Bad input of any kind (arguments, config files and values, model and output paths) exits ``EXIT_USAGE``;
a run stopped by a signal exits with its own status (``TrainingInterrupted.exit_code``); anything else
exits ``EXIT_FAILURE`` with its type and message (an error raised inside a Ray worker as that error, not
Ray's wrapper with the remote traceback).  ``--debug`` or ``DEBUG_ENV`` shows the traceback instead.
"""

from __future__ import annotations

#: Environment variable that, set to a non-empty value other than 0, shows tracebacks like ``--debug``.
DEBUG_ENV = "REPLICALAB_DEBUG"
#: Exit statuses: bad input (usage, config, paths), an unexpected failure, Ctrl-C (128 + SIGINT).
EXIT_USAGE, EXIT_FAILURE, EXIT_INTERRUPTED = 2, 1, 130


#: Top-level modules of the training extra (``pip install -e ".[train]"``): a command that imports one of them
#: without the extra installed says so in one line.
TRAIN_EXTRA_MODULES = ("torch", "transformers", "trl", "ray", "wandb", "accelerate", "datasets", "tokenizers",
                       "peft", "tqdm", "matplotlib", "numpy")
TRAIN_EXTRA_HINT = "pip install -e '.[train]'"


class UsageError(Exception):
    """A command line argparse rejects (unknown option, bad value, missing argument)."""


def squashed(text: object) -> str:
    """``text`` with every run of whitespace (newlines included) as one space."""
    return " ".join(str(text).split())


def yaml_where(exc: Exception) -> str:
    """Where a YAML error is (``at line L, column C``) and what it is."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{where}: {getattr(exc, 'problem', None) or type(exc).__name__}"


def error_report(exc: BaseException) -> tuple[str, int]:
    """The one line ``replicalab`` prints for ``exc`` (after ``replicalab <command>: ``) and its exit status."""
    from pydantic import ValidationError

    from training.config.loading import one_line
    from training.errors import UserInputError

    if isinstance(exc, ValidationError):
        return "bad config: " + one_line(exc), EXIT_USAGE
    if isinstance(exc, (UsageError, UserInputError)):
        return squashed(exc), EXIT_USAGE
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing and missing.partition(".")[0] in TRAIN_EXTRA_MODULES:
        return (f"this command needs the training extra, which is not installed (no module {missing!r}): "
                f"{TRAIN_EXTRA_HINT}"), EXIT_USAGE
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int):  # a run stopped by a signal (TrainingInterrupted)
        return squashed(exc), code
    if isinstance(exc, OSError) and exc.filename is not None:  # a path the user gave
        return squashed(f"{exc.strerror or exc}: {exc.filename}"), EXIT_USAGE
    cause = getattr(exc, "cause", None)
    where = ""
    if type(exc).__name__.startswith("RayTaskError") and isinstance(cause, BaseException):  # raised in a worker
        exc, where = cause, "in a Ray worker: "
    line = squashed(f"{where}{type(exc).__name__}: {exc}") + " (an unexpected failure; --debug shows the traceback)"
    return line, EXIT_FAILURE
