"""The house rules of the layout, checked on the source: the direction of imports, no import
cycles (imports inside functions counted), lazy imports only with a reason, one source of option
literals, and no module past the size at which it holds two concepts."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from theory import options

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("theory", "synthetic", "realdata", "figures", "benchmarks")
#: Which packages each package may import (``theory <- synthetic <- realdata``, figures on top).
ALLOWED = {
    "theory": {"theory"},
    "synthetic": {"theory", "synthetic"},
    "realdata": {"theory", "synthetic", "realdata"},
    "figures": {"theory", "synthetic", "realdata", "figures"},
    "benchmarks": {"theory", "synthetic", "realdata", "figures", "benchmarks"},
}
#: "about 600 lines" (CONTRIBUTING.md#layout-and-the-direction-of-imports).
MAX_LINES = 650
#: The comment that must precede (or end) an import made inside a function.
LAZY = "# lazy:"


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


MODULES = _modules()


def _target(name: str) -> str | None:
    """The project module an import of ``name`` loads (the longest existing prefix)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> list[tuple[str, int, bool, bool]]:
    """``(imported project module, line, inside a function, under TYPE_CHECKING)`` of a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function: set[int] = set()
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            in_function |= {id(n) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)}
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only |= {id(n) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for name in names:
            target = _target(name) if name.split(".")[0] in PACKAGES else None
            if target and target != module:
                out.append((target, node.lineno, id(node) in in_function, id(node) in type_only))
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_imports_flow_one_way():
    bad = [
        f"{MODULES[m].relative_to(ROOT)}:{line} imports {t}"
        for m, edges in GRAPH.items()
        for t, line, _, _ in edges
        if t.split(".")[0] not in ALLOWED[m.split(".")[0]]
    ]
    assert not bad, "\n".join(bad)


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), imports inside functions and
    under TYPE_CHECKING counted."""
    edges = {m: sorted({t for t, *_ in GRAPH[m]}) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in MODULES:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    cycles = _cycles()
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_can_fail(monkeypatch):
    # a back edge store -> engine closes a cycle with engine.config -> store.keys
    edge = ("synthetic.engine.config", 1, True, False)
    monkeypatch.setitem(GRAPH, "synthetic.store.keys", [*GRAPH["synthetic.store.keys"], edge])
    assert any("synthetic.store.keys" in c for c in _cycles())


def test_imports_inside_functions_say_why():
    bad = []
    for m, edges in GRAPH.items():
        lines = MODULES[m].read_text(encoding="utf-8").splitlines()
        for _, line, inside, _ in edges:
            if not inside:
                continue
            here = lines[line - 1]
            above = [lines[i].strip() for i in range(max(0, line - 4), line - 1)]
            if LAZY not in here and not any(a.startswith(LAZY) for a in above):
                bad.append(f"{MODULES[m].relative_to(ROOT)}:{line}: {here.strip()}")
    assert not bad, (
        f"imports of the project inside functions need a '{LAZY} <reason>' comment (heavy or "
        "optional dependencies only):\n" + "\n".join(bad)
    )


def test_no_module_holds_two_concepts():
    long = [
        f"{p.relative_to(ROOT)}: {n}"
        for p in MODULES.values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    ]
    assert not long, long


# --------------------------------------------------------------------------------------------
# one source of options


def _option_sets() -> dict[str, set[str]]:
    out = {}
    for name in options.__all__:
        value = getattr(options, name)
        if isinstance(value, dict):
            value = tuple(value)
        if isinstance(value, tuple) and len(value) >= 2 and all(isinstance(v, str) for v in value):
            out[name] = set(value)
    return out


def _strings(node: ast.AST) -> set[str] | None:
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        elts = node.elts
        if len(elts) >= 2 and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts):
            return {e.value for e in elts}  # type: ignore[attr-defined]
    return None


def option_redeclarations(source: str, where: str) -> list[str]:
    """Literal tuples of option values that declare choices: module-level constants equal to or a
    subset (>= 2 values) of an option tuple of ``theory.options``, and ``choices=``, ``in`` /
    ``==`` tests and ``for`` loops over exactly an option tuple's values."""
    sets = _option_sets()
    tree = ast.parse(source)
    literal_types: set[int] = set()
    for node in ast.walk(tree):  # typing.Literal["core", "released"] must spell its values
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
            literal_types |= {id(n) for n in ast.walk(node.slice)}
    candidates: list[tuple[ast.AST, bool]] = []  # (literal, a subset counts)
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            candidates.append((node.value, True))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "choices":
            candidates.append((node.value, True))
        elif isinstance(node, ast.Compare):
            candidates += [(c, False) for c in node.comparators]
        elif isinstance(node, ast.For | ast.comprehension):
            candidates.append((node.iter, False))
    bad = []
    for node, subset in candidates:
        found = _strings(node)
        if found is None or id(node) in literal_types:
            continue
        for name, values in sets.items():
            if found == values or (subset and found < values):
                bad.append(f"{where}:{node.lineno}: {sorted(found)} spells out theory.options.{name}")
    return bad


def test_options_are_spelled_out_only_in_theory_options():
    bad = []
    for p in MODULES.values():
        if p != ROOT / "theory" / "options.py":
            bad += option_redeclarations(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "source",
    [
        'ESTIMATORS = ("sampled", "expectation")',
        'MINE = ["ball", "sphere"]',
        'p.add_argument("--views", choices=("label", "simclr"))',
        'def f(v):\n    if v not in ("label", "simclr"):\n        raise ValueError(v)',
        'for s in ("supervised", "unsupervised"):\n    pass',
    ],
)
def test_the_options_check_can_fail(source):
    assert option_redeclarations(source, "x.py")


def test_the_options_check_leaves_other_strings_alone():
    ok = 'COLUMNS = ("loss", "epoch")\nRecipe = Literal["core", "released"]\nSTYLE = {"label": "-", "noise": "--"}\n'
    ok += 'def f(m):\n    return m in ("SCL",)\n'
    assert option_redeclarations(ok, "x.py") == []


# --------------------------------------------------------------------------------------------


def test_diagnostics_do_not_load_the_loss():
    code = (
        "import sys\n"
        "import theory.weince.gpd, theory.weince.tails, theory.weince.links, theory.weince.noise_floor\n"
        "from theory.weince import pot_fit, link_select, tail_aic_fit\n"
        "bad = [m for m in ('theory.weince.loss', 'theory.weince.gate', 'theory.weince.recipe') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "from theory.weince import weince_loss\n"
        "assert 'theory.weince.loss' in sys.modules\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


def test_the_claims_record_loads_without_torch():
    code = (
        "import sys\nimport theory.claims\nassert 'torch' not in sys.modules, 'theory.claims imports torch'\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
