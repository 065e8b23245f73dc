"""The shape of the house: pure calculators, sourced formulas, help everywhere, lint clean."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "tpcalc"
IMPURE = {"typer", "rich", "click", "sys", "numpy", "torch"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted((PACKAGE / "calc").rglob("*.py")), ids=lambda p: p.name)
def test_calculators_are_pure(path):
    """calc/ imports neither the CLI/render stack nor numpy/torch (design.md: pure functions);
    the planner (calc/plan) may use numpy over its candidate grid (issue 11 §2)."""
    impure = IMPURE - {"numpy"} if path.parent.name == "plan" else IMPURE
    assert not (_imports(path) & impure), f"{path} imports {_imports(path) & impure}"


def test_only_the_cli_exits():
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        assert "sys.exit(" not in text and "typer.Exit" not in text, path


def test_no_assert_in_product_code():
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert not any(isinstance(n, ast.Assert) for n in ast.walk(tree)), path


@pytest.mark.parametrize("path", sorted((PACKAGE / "calc").rglob("*.py")), ids=lambda p: p.name)
def test_public_formulas_name_a_source(path):
    """Every public calculator function's docstring exists (it names the source)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    missing = [
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
        and not n.name.startswith("_")
        and not ast.get_docstring(n)
    ]
    assert not missing, f"{path.name}: {missing} have no docstring"


def test_lint_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed (pip install '.[test]')")
    result = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_lint_and_format_and_types_are_clean():
    """ruff format --check and mypy over the package, as CI runs them (issue 8 §7)."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed (pip install '.[test]')")
    fmt = subprocess.run([ruff, "format", "--check", str(ROOT)], capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    types = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert types.returncode == 0, types.stdout[-3000:] + types.stderr[-1000:]


def _function_defs() -> dict[str, list[str]]:
    defs: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                defs.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    return defs


def test_each_shared_quantity_has_one_function():
    """A count used by several calculators lives in one function (a second copy drifts: the
    pipeline's own active-params once missed Qwen's decoder_sparse_step)."""
    defs = _function_defs()
    owners = {
        "active_layer_params": "tpcalc/calc/params/counts.py",
        "shared_expert_intermediate": "tpcalc/calc/params/counts.py",
        "routed_layer_params": "tpcalc/calc/params/counts.py",
        "lm_head_matmul_params": "tpcalc/calc/params/counts.py",
        "ring_sends_per_layer": "tpcalc/calc/cp/ring.py",
        "sp_seq_problem": "tpcalc/calc/activations/paper.py",
        "ring_steps": "tpcalc/calc/links/link.py",
    }
    assert {name: defs.get(name) for name in owners} == {n: [p] for n, p in owners.items()}
    for gone in ("routed_params_of_layer", "_shared_intermediate"):
        assert gone not in defs
    mlp = (PACKAGE / "calc" / "activations" / "exact" / "mlp.py").read_text(encoding="utf-8")
    assert "shared_expert_intermediate(spec)" in mlp and "n_shared_experts" not in mlp


def test_pyproject_lists_every_package():
    """pyproject lists packages by hand (tpcalc.configs is mapped from configs/); a new
    subpackage missing from the list would be left out of the wheel."""
    import tomllib

    from setuptools import find_packages

    root = Path(__file__).parents[1]
    listed = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = set(find_packages(str(root), include=["tpcalc*"])) | {"tpcalc.configs"}
    assert set(listed) == found


TOP_LEVEL = {
    ".ci", ".gitignore", "LICENSE", "README.md", "benchmarks", "configs", "docs", "pyproject.toml",
    "tests", "tools", "tpcalc",
}  # fmt: skip


def test_top_level_holds_only_the_project():
    """The design card's top level (issue 8 §8). A stray output (a fuzz case's '--save-svg 8'
    once committed files named '8' and 'inf') fails here."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert {name.split("/")[0] for name in listed} <= TOP_LEVEL
