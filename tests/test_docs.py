"""The docs describe main: every repository path they name exists, and every ``replicalab`` command they show is
one the command line has (``docs/LOG.md`` is the dated history and may name what is gone)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md",
                *(p for p in (REPO / "docs").glob("*.md") if p.name != "LOG.md")])
#: Top-level folders whose files a page may name as repository paths (``runs/`` and the like are outputs).
TRACKED_ROOTS = ("replicalab", "training", "configs", "launch", "tests", "benchmarks", "docs", "artifacts")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*[\w/])" % "|".join(TRACKED_ROOTS))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
COMMAND = re.compile(r"(?:^|[`$] ?|\.venv/bin/)replicalab ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", re.MULTILINE)
#: Words that mark a named path as a pattern or a placeholder, not a file.
PLACEHOLDERS = ("*", "<", "NAME", "DIR", "...", "{")


def _named_paths(text: str) -> set[str]:
    found = {m.group(1).rstrip("./") for m in PATH.finditer(text) if text[m.end():m.end() + 1] not in "*<{"}
    return {p for p in found if not any(mark in p for mark in PLACEHOLDERS)}


def _subcommands() -> dict[str, set[str]]:
    """Each ``replicalab`` subcommand -> its own subcommands (``bench env``, ...)."""
    from training.cli import build_parser

    def choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    return {name: set(choices(sub)) for name, sub in choices(build_parser()).items()}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_a_page_names_exists(page: Path) -> None:
    text = page.read_text()
    missing = sorted(p for p in _named_paths(text) if not (REPO / p).exists())
    links = [m.group(1) for m in LINK.finditer(text) if "://" not in m.group(1)]
    missing += sorted(link for link in links if not (page.parent / link).exists())
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_a_page_shows_exists(page: Path) -> None:
    commands = _subcommands()
    unknown = []
    for m in COMMAND.finditer(page.read_text()):
        name, sub = m.group(1), m.group(2)
        if name not in commands:
            unknown.append(name)
        elif commands[name] and sub is not None and sub not in commands[name]:
            unknown.append(f"{name} {sub}")
    assert not unknown, f"{page.name} shows commands the command line does not have: {sorted(set(unknown))}"


def test_the_checks_catch_a_missing_path_and_an_unknown_command() -> None:
    assert _named_paths("see `training/no_such_module.py` and configs/train/*.yaml") == {"training/no_such_module.py"}
    assert "env" in _subcommands()["bench"] and "frobnicate" not in _subcommands()


def test_the_usage_errors_faults_md_quotes_are_the_parsers() -> None:
    """Each row of docs/faults.md whose message is a usage error (an argument the parser rejects) quotes it as the
    parser words it today: the rows stay true as commands and choices are added."""
    import shlex

    from training.cli import build_parser
    from training.cli_errors import UsageError

    rows = re.findall(r"^\| `([^`]+)` \| (replicalab[^:]*): (argument .*?) \|$", (REPO / "docs" / "faults.md").read_text(),
                      re.MULTILINE)
    assert rows
    for args, _, quoted in rows:
        with pytest.raises(UsageError) as raised:
            build_parser().parse_args(shlex.split(args))
        assert str(raised.value) == quoted, args
