"""The docs point at things that exist: every module, function or class named in docs/, the README,
CONTRIBUTING and the docstrings, every repository path they name, and every link to a section."""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("theory", "synthetic", "realdata", "figures", "benchmarks")
TEXTS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
SOURCES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
#: A dotted name of the project, as written in prose and docstrings.
DOTTED = re.compile(r"(?<![\w./-])((?:theory|synthetic|realdata|figures|benchmarks)(?:\.[A-Za-z_]\w*)+)")
#: A path inside the repository.
PATH = re.compile(r"(?<![\w./-])((?:theory|synthetic|realdata|figures|benchmarks|tests)/[\w/]*\.(?:py|toml))")
#: File endings: ``realdata.csv`` is a file name, not a module.
FILES = (".csv", ".json", ".md", ".py", ".toml", ".pt", ".npz", ".html", ".png", ".pdf")


@cache
def resolves(name: str) -> bool:
    """``name`` is an importable module, or an attribute path below one."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    return frozenset(
        _slug(m.group(1)) for line in path.read_text().splitlines() if (m := re.match(r"^#+\s+(.*)", line))
    )


def test_named_modules_and_objects_exist():
    bad = []
    for path in TEXTS + SOURCES:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in DOTTED.finditer(line):
                name = m.group(1).rstrip(".")
                if not name.endswith(FILES) and not resolves(name):
                    bad.append(f"{path.relative_to(ROOT)}:{n}: {name}")
    assert not bad, "\n".join(bad)


def test_named_paths_exist():
    bad = [
        f"{path.relative_to(ROOT)}:{n}: {m.group(1)}"
        for path in TEXTS + SOURCES
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in PATH.finditer(line)
        if not (ROOT / m.group(1)).exists()
    ]
    assert not bad, "\n".join(bad)


def test_links_to_sections_resolve():
    bad = []
    for path in TEXTS:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in re.finditer(r"\]\(([^)#\s]*)#([^)\s]+)\)", line):
                target = (path.parent / m.group(1)).resolve() if m.group(1) else path
                if target.suffix == ".md" and m.group(2) not in anchors(target):
                    bad.append(f"{path.relative_to(ROOT)}:{n}: {m.group(1)}#{m.group(2)}")
    for path in SOURCES + TEXTS:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in re.finditer(r"docs/(\w+\.md)#([\w\-]+)", line):
                target = ROOT / "docs" / m.group(1)
                if not target.is_file() or m.group(2) not in anchors(target):
                    bad.append(f"{path.relative_to(ROOT)}:{n}: docs/{m.group(1)}#{m.group(2)}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", ["theory.hcl.no_such_loss", "synthetic.results.load_results"])
def test_a_stale_name_is_caught(name):
    assert not resolves(name)
