"""The project's import graph: the game imports nothing from training, no import circles, layers in order, and
the research scripts of ``benchmarks/`` on top: they may import the game and the training stack, nothing imports
them (not even another benchmark).

Every import counts: module level, inside functions and under ``TYPE_CHECKING`` alike (a lazy import that
closes a circle is still a circle).  ``python tests/test_architecture.py [ROOT]`` prints the graph's figures
for a checkout (the layers and every import that runs from a lower layer up to a higher one).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("replicalab", "training", "benchmarks")
#: Layers, ground floor first (CONTRIBUTING.md, "Layout"): a module imports only from its own layer or below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("replicalab",),
    ("training.errors", "training.config"),
    ("training.model", "training.cluster", "training.tracking"),
    ("training.rollout",),
    ("training.trainer",),
    ("training.eval", "training.sweep"),
    ("training.bench", "training.cli", "training.cli_errors", "training.argtypes", "training"),
    ("benchmarks",),
)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project's packages (``benchmarks/``: its scripts): dotted name -> file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules whose names it uses: ``import a.b`` and ``from a import b`` count as
    importing ``a.b`` when that is a module, else ``a`` (a package's ``__init__`` is a facade, not an edge from
    each of its submodules)."""
    known = modules(root)
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                parent = ".".join(base[: len(base) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module or ""
                targets = [f"{parent}.{alias.name}" if f"{parent}.{alias.name}" in known else parent
                           for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in known and t != name)
    return graph


def layer(module: str) -> int:
    """The layer of ``module``: the most specific prefix in ``LAYERS``."""
    best, level = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), index
    return level


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a lower layer up to a higher one."""
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer(b) > layer(a))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    assert [m for m in modules() if layer(m) < 0] == []


def test_the_game_imports_nothing_from_training() -> None:
    graph = imports()
    crossing = sorted((a, b) for a, targets in graph.items() if a.startswith("replicalab")
                      for b in targets if b.startswith("training"))
    assert crossing == []


def test_nothing_imports_a_benchmark() -> None:
    graph = imports()
    assert any(m.startswith("benchmarks.") for m in modules()), "the layer check sees the benchmark scripts"
    assert sorted((a, b) for a, targets in graph.items() for b in targets if b.startswith("benchmarks")) == []


def test_no_import_circles() -> None:
    assert cycles(imports()) == []


def test_no_import_runs_from_a_lower_layer_to_a_higher_one() -> None:
    assert upward(imports()) == []


def test_the_checker_sees_circles_and_upward_imports(tmp_path: Path) -> None:
    """The checks above can fail: a tree with a lazy circle, a game module importing training and the training stack
    importing a benchmark."""
    for package, files in {"replicalab": {"a.py": "def f():\n    from replicalab import b\n",
                                          "b.py": "from replicalab.a import f\nimport training.x\n"},
                           "training": {"x.py": "", "cli.py": "import training.x\nimport benchmarks.probe\n"},
                           "benchmarks": {"probe.py": "from training import x\n"}}.items():
        (tmp_path / package).mkdir()
        if package != "benchmarks":  # scripts, not a package
            (tmp_path / package / "__init__.py").write_text("")
        for name, text in files.items():
            (tmp_path / package / name).write_text(text)
    graph = imports(tmp_path)
    assert cycles(graph) == [["replicalab.a", "replicalab.b"]]
    assert upward(graph) == [("replicalab.b", "training.x"), ("training.cli", "benchmarks.probe")]
    assert graph["benchmarks.probe"] == {"training.x"}  # a benchmark on top may import the training stack


# -- the benchmark scripts --------------------------------------------------------------------------------
def _is_declaration(node: ast.stmt) -> bool:
    """What a script may hold at module level: its docstring, imports, definitions, constants and the
    ``if __name__ == "__main__":`` guard; anything else runs on import."""
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    if isinstance(node, ast.If):
        return ast.unparse(node.test).replace("'", '"') == '__name__ == "__main__"' and not node.orelse
    return isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                             ast.Assign, ast.AnnAssign))


@pytest.mark.parametrize("script", sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")))
def test_every_benchmark_imports_and_runs_nothing_until_main(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each script imports as it runs (from the repository root: some borrow test helpers), and its work waits for
    ``main()`` under the ``__main__`` guard."""
    path = ROOT / "benchmarks" / f"{script}.py"
    stray = [f"line {node.lineno}: {type(node).__name__}" for node in ast.parse(path.read_text(encoding="utf-8")).body
             if not _is_declaration(node)]
    assert stray == [], f"benchmarks/{script}.py runs code on import ({stray}): move it into main()"
    monkeypatch.syspath_prepend(str(ROOT))
    spec = importlib.util.spec_from_file_location(f"benchmarks.{script}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(getattr(module, "main", None)), f"benchmarks/{script}.py has no main()"


if __name__ == "__main__":
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    graph = imports(root)
    edges = sum(map(len, graph.values()))
    up = upward(graph)
    print(f"{root}: {len(modules(root))} modules, {edges} imports, {len(up)} upward, "
          f"{len(cycles(graph))} circles")
    for a, b in up:
        print(f"  up: {a} -> {b}")
    for component in cycles(graph):
        print("  circle:", " ".join(component))
