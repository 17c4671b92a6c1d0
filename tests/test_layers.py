"""The layer rule of docs/architecture.md: import-linter's contracts (pyproject.toml) hold for the
package and break when a module imports from a floor above its own, at the top or inside a function."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

ROOT = Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"


def lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with the contracts of ``root/pyproject.toml`` on the package under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_package_keeps_its_floors():
    run = lint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("module, added, broken", [
    ("theory/bounds.py", "from ..algorithms import registry",
     "privfedstat.theory is not allowed to import privfedstat.algorithms"),
    ("results/summary.py", "from ..fitting import base", "privfedstat.results is not allowed to import privfedstat.fitting"),
    ("fitting/stages.py", "def _hidden():\n    from ..planning import power\n    return power",
     "privfedstat.fitting is not allowed to import privfedstat.planning"),
    ("families/glm.py", "def _hidden():\n    from ..simulations import runner\n    return runner",
     "privfedstat.families is not allowed to import privfedstat.simulations"),
    ("data/federated.py", "from ..deep import data", "privfedstat.data is not allowed to import privfedstat.deep"),
    ("privacy/gdp.py", "import torch", "privfedstat.privacy is not allowed to import torch"),
])
def test_an_upward_import_breaks_a_contract(tmp_path, module, added, broken):
    shutil.copytree(ROOT / "privfedstat", tmp_path / "privfedstat", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = tmp_path / "privfedstat" / module
    path.write_text(path.read_text() + "\n\n" + added + "\n")
    run = lint(tmp_path)
    assert run.returncode != 0
    assert broken in run.stdout, run.stdout
