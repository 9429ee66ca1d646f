"""The direction of dependencies: theory imports nothing outside itself, and the WeiNCE
extreme-value diagnostics never load the loss or its gate."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_theory_imports_nothing_from_the_other_packages():
    for path in (ROOT / "theory").rglob("*.py"):
        bad = {m for m in _imports(path) if m.split(".")[0] in ("synthetic", "realdata", "figures", "benchmarks")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_no_flat_modules_left():
    for name in ("losses", "sampling", "bounds", "convex", "symbolic", "weince", "evt", "collapse"):
        assert not (ROOT / "theory" / f"{name}.py").exists(), name


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
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
