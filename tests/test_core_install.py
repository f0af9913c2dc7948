"""``pip install -e .`` alone (no training extra): ``play``, ``bench env`` and ``bench skills`` work, and a command that needs the
training extra says so in one line.  The extra's packages are hidden from a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from training.cli_errors import EXIT_USAGE, TRAIN_EXTRA_HINT, TRAIN_EXTRA_MODULES

REPO = Path(__file__).resolve().parents[1]
#: Runs ``training.cli.main`` with every module of the training extra unimportable.
WITHOUT_EXTRA = f"""
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in {TRAIN_EXTRA_MODULES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hide())
from training.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_without_extra(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRA, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_play_and_bench_env_and_skills_need_only_the_core_install(tmp_path: Path) -> None:
    played = run_without_extra("play", "--seed", "3", "--scientist", "scripted:reader", "--json")
    assert played.returncode == 0, played.stderr
    assert '"agreement_reached"' in played.stdout
    bench = run_without_extra("bench", "env", "--episodes", "50")
    assert bench.returncode == 0, bench.stderr
    assert "episodes" in bench.stdout
    skills = run_without_extra("bench", "skills", "--episodes", "2")
    assert skills.returncode == 0, skills.stderr
    for row in ("| read | ", "| defend | ", "| ask | ", "| reader+defender+asker | ", "Lab Manager matrix", "brute-force"):
        assert row in skills.stdout


@pytest.mark.parametrize("args", [
    ("train", "grpo.max_steps=1", "output_dir=OUT"),
    ("eval", "--agent", "scripted:naive", "--episodes", "2", "--out", "OUT"),
    ("play", "--scientist", "model:default"),
])
def test_a_command_that_needs_the_training_extra_says_so_in_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    got = run_without_extra(*(a.replace("OUT", str(tmp_path / "out")) for a in args))
    assert got.returncode == EXIT_USAGE
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and TRAIN_EXTRA_HINT in lines[0] and "training extra" in lines[0], got.stderr
    assert lines[0].startswith(f"replicalab {args[0]}: ")
