"""The code base keeps its shape: the import contracts of pyproject.toml hold (import-linter),
no import circles between our modules (module- or function-level), and function-level imports
of our own code stay the few that keep a light command light."""
from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sheaf", "pipelines", "assets", "io_managers")
#: Function-level imports of our own modules allowed in all (the CLI reaching the Dagster side,
#: the query path reaching the vector stack only for a vector query).
MAX_FUNCTION_LEVEL = 15


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = p
    return mods


def _imports(mods: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """(module → our modules it imports anywhere, [function-level imports as 'module:line'])."""
    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    inner: list[str] = []
    for m, p in mods.items():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        in_function: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                in_function.update(id(n) for n in ast.walk(fn))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            targets = {resolve(n) for n in names if n.split(".")[0] in PACKAGES} - {None, m}
            if not targets:
                continue
            edges[m] |= targets  # type: ignore[arg-type]
            if id(node) in in_function:
                inner.append(f"{m}:{node.lineno}")
    return edges, inner


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "broken" not in proc.stdout.lower().replace("0 broken", ""), proc.stdout


def test_ruff_finds_no_mistake():
    """`ruff check` with the project's rules (pyproject.toml: unused, undefined or shadowed names,
    syntax errors, the rules `noqa` comments name, sorted imports) finds nothing in the code, the
    tests or the benchmarks."""
    ruff = Path(sys.executable).with_name("ruff")
    proc = subprocess.run([str(ruff), "check", "--no-cache", *PACKAGES, "tests", "bench"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_no_error():
    """`mypy` with the project's settings (pyproject.toml: strict on `sheaf.core`, `sheaf.store`
    and `sheaf.search`) finds nothing."""
    mypy = Path(sys.executable).with_name("mypy")
    proc = subprocess.run([str(mypy), "--no-incremental"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_no_import_circles_between_our_modules():
    edges, _ = _imports(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in list(edges):
        if v not in index:
            visit(v)
    assert cycles == [], cycles


def test_function_level_imports_of_our_modules_are_few():
    _, inner = _imports(_modules())
    assert len(inner) <= MAX_FUNCTION_LEVEL, "\n".join(inner)


#: The only places that may name Dagster's private modules (`dagster._*`).
PRIVATE_WALL = ("pipelines/dagster_internals/", "tests/kits/dagster_private.py")
PRIVATE = "dagster" + "._"  # spelled apart, or this file would name one


def test_dagsters_private_api_is_reached_only_through_its_wall():
    """Every import of `dagster._*` (and every string naming such a module, as a patch target
    does) is in `pipelines/dagster_internals` or, for tests, `tests/kits/dagster_private.py`: a Dagster
    upgrade has two files to check. import-linter cannot forbid an external package's
    sub-packages, so this test does."""
    found = []
    for folder in (*PACKAGES, "tests", "bench", "scripts"):
        for p in (ROOT / folder).rglob("*.py"):
            rel = p.relative_to(ROOT).as_posix()
            if rel.startswith(PRIVATE_WALL):
                continue
            for node in ast.walk(ast.parse(p.read_text(), rel)):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    names = [node.value]
                if any(n.startswith(PRIVATE) for n in names):
                    found.append(f"{rel}:{node.lineno}")
    assert found == [], found


def test_no_private_name_is_imported_from_another_module():
    """A name with a leading underscore is its module's own: another module of ours that needs it
    gets a public name (tests may reach in)."""
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                found += [f"{name}:{node.lineno} {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == [], found


def test_test_modules_import_kits_never_one_another():
    """What tests share lives in tests/kits: no test module and no benchmark imports a test module
    or a conftest."""
    found = []
    for p in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{p.relative_to(ROOT)}: {n}" for n in names
                      if n.startswith("tests.") and n.rsplit(".", 1)[-1].startswith(("test_", "conftest"))]
    assert not found, found


def test_helpers_of_tests_live_in_kits():
    """Outside tests/kits every module under tests/ is a test module, a conftest or a package's
    `__init__`: a helper found loose beside the tests belongs in the kits."""
    loose = [p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("*.py")
             if "kits" not in p.relative_to(ROOT / "tests").parts[:1]
             and not p.name.startswith("test_") and p.name not in ("__init__.py", "conftest.py")]
    assert loose == [], loose
