"""The package's layering and the provenance keys: the decoding core never imports training,
studies or notebook code; checkpoint keys follow the code (syntax trees, docstrings and comments
aside) of exactly the modules a pipeline imports (a loss change retrains, a new layout or a comment
does not); the repository cites no file it lacks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spec_lib import provenance
from spec_lib.training import dedit, deer, feature_heads, self_speculative
from spec_lib.training.block_drafters import DEDIT_PRESETS

CORE = ["spec_lib.masks", "spec_lib.verify", "spec_lib.models", "spec_lib.architectures", "spec_lib.toy",
        "spec_lib.schedules", "spec_lib.drafters", "spec_lib.drafters.block_edit", "spec_lib.batch"]
UPPER = ("spec_lib.training", "spec_lib.studies", "spec_lib.notebook")
REPO = Path(__file__).resolve().parents[1]
LAYERS = "command line > notebooks > studies > training > decoding core > infrastructure"


def lint_imports(root) -> subprocess.CompletedProcess:
    """``lint-imports`` (import-linter) on the package under ``root`` with the repository's
    contracts (pyproject.toml: layers, and no cycle between siblings at any depth); grimp reads
    every import statement, those inside functions included."""
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("layering")
    shutil.copytree(provenance.PACKAGE_DIR, root / "spec_lib", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_layers_hold_and_no_siblings_import_each_other(tree_copy):
    """run > notebook > studies > training > decoding core > infrastructure (cluster, provenance,
    io): no upward import and no cycle, in the package as it is."""
    result = lint_imports(tree_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout, result.stdout


@pytest.mark.parametrize("module, line, broken", [
    # an upward import inside a function (the one the fan-out had: studies -> notebook)
    ("studies/fanout.py", "def _up():\n    from ..notebook import cluster\n", LAYERS),
    # the core reaching into training
    ("schedules/loops.py", "def _up():\n    from ..training import data\n", LAYERS),
    # a cycle between siblings (the runner's module and the Dask runner, as before)
    ("notebook/run.py", "def _back():\n    from . import cluster\n", "no import cycle between siblings"),
])
def test_an_upward_import_or_a_cycle_breaks_a_contract(tmp_path, module, line, broken):
    """Negative controls: each edit, made on a copy, breaks the named contract (an upward import
    also closes a cycle between the two packages, so it breaks both)."""
    shutil.copytree(provenance.PACKAGE_DIR, tmp_path / "spec_lib", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "spec_lib" / module
    path.write_text(path.read_text() + "\n\n" + line)
    result = lint_imports(tmp_path)
    verdicts = {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in result.stdout.splitlines()
                if line.endswith((" KEPT", " BROKEN"))}
    assert result.returncode != 0 and len(verdicts) == 2, result.stdout
    assert verdicts[broken] == "BROKEN", verdicts
    if broken != LAYERS:                      # a cycle within one layer: only the cycle contract sees it
        assert verdicts[LAYERS] == "KEPT", verdicts


def test_core_never_imports_training_studies_or_notebook():
    reached = provenance.closure(CORE)
    assert "spec_lib.schedules.loops" in reached and "spec_lib.masks.layouts" in reached   # the walk works
    assert not [m for m in reached if m.startswith(UPPER)]


def test_training_pipelines_do_not_import_inference_layouts():
    for pipeline in (self_speculative.PIPELINE, deer.PIPELINE, dedit.PIPELINE, feature_heads.PIPELINE):
        reached = provenance.closure([pipeline])
        assert "spec_lib.training.dual_mode" in reached and "spec_lib.masks.predicates" in reached
        assert "spec_lib.drafters.block_edit" not in reached and "spec_lib.training.block_drafters" not in reached
        assert "spec_lib.drafters.feature_drafting" not in reached, pipeline
        assert "spec_lib.masks.layouts" not in reached and "spec_lib.models" not in reached, pipeline


def test_import_resolution_handles_relative_and_package_imports():
    source = "from .. import verify\nfrom ..masks import predicates, call_kind\nimport spec_lib.toy\n" \
             "def f():\n    from .state import Decoding\n"
    found = provenance.imports_in_source(source, "spec_lib.schedules.loops")
    assert found == {"spec_lib.verify", "spec_lib.masks.predicates", "spec_lib.masks", "spec_lib.toy",
                     "spec_lib.schedules.state"}


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of spec_lib whose files a test may edit; provenance reads the copy."""
    copy = tmp_path / "spec_lib"
    shutil.copytree(provenance.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "PACKAGE_DIR", copy)
    return copy


def _key():
    from spec_lib.training.presets import PRESETS
    model_config, train_config = PRESETS["smoke"]
    return self_speculative.checkpoint_key(model_config, train_config)


def test_checkpoint_key_changes_with_the_loss_and_not_with_a_new_layout(package_copy):
    before = _key()
    layouts = package_copy / "masks" / "layouts.py"
    layouts.write_text(layouts.read_text() + "\n\nEXTRA = register(LTRCall('extra_kind', True, 'a new layout'))\n")
    (package_copy / "masks" / "setdlm.py").write_text('"""A new family of layouts."""\n')
    assert _key() == before                                        # inference-only change: no retraining
    loss = package_copy / "training" / "dual_mode.py"
    loss.write_text(loss.read_text().replace("loss = ar + diffusion_weight * diffusion",
                                             "loss = ar + 2 * diffusion_weight * diffusion"))
    assert _key() != before                                        # the objective changed: retrain
    predicates = package_copy / "masks" / "predicates.py"
    loss.write_text(loss.read_text().replace("loss = ar + 2 * diffusion_weight", "loss = ar + diffusion_weight"))
    assert _key() == before
    predicates.write_text(predicates.read_text() + "\n# a comment: the trees are equal, no retraining\n")
    loss.write_text(loss.read_text().replace('"""', '"""Edited docstring.  ', 1))
    assert _key() == before
    predicates.write_text(predicates.read_text() + "\nTRAINING_MASK_EDITED = True\n")
    assert _key() != before                                        # code of the training mask's module changed


def test_dedit_key_follows_its_objective_and_not_its_decoding_or_other_presets(package_copy):
    config = DEDIT_PRESETS["smoke"]
    before = dedit.dedit_cache_key(config)
    for module in ("drafters/block_edit.py", "training/block_drafters.py"):           # decoding and presets
        path = package_copy / module
        path.write_text(path.read_text() + "\n# edited\n")
    assert dedit.dedit_cache_key(config) == before
    objective = package_copy / "training" / "block_edit.py"
    objective.write_text(objective.read_text().replace("loss = unmask + edit if joint", "loss = unmask + 2 * edit if joint"))
    assert dedit.dedit_cache_key(config) != before
    assert dedit.dedit_cache_key(DEDIT_PRESETS["cpu"]) != before


def test_deer_key_follows_its_target():
    config = deer.D2A_PRESETS["smoke"]
    assert deer.deer_cache_key(config) != deer.deer_cache_key(deer.D2AConfig(**{**config.__dict__, "alpha": 1.02}))


def test_the_repository_cites_no_missing_design_file():
    root = provenance.REPO_ROOT
    texts = [p for p in [*root.joinpath("spec_lib").rglob("*.py"), *root.joinpath("tests").rglob("*.py"),
                         root / "README.md", *root.joinpath("docs").rglob("*.md")] if p.name != "test_structure.py"]
    assert not [p.name for p in texts if re.search(r"\bDESIGN\.md\b", p.read_text())]
    assert (root / "docs" / "architecture.md").is_file()
    assert "docs/architecture.md" in (root / "README.md").read_text()


def test_the_runner_and_results_start_without_torch():
    """``spec_lib``'s entry points load lazily: the runner, the results module every notebook
    imports, and the package itself start without importing torch (about 3 s per notebook
    kernel and runner start), and ``spec_lib.decode`` still resolves on first use."""
    code = ("import sys, spec_lib, spec_lib.notebook.run, spec_lib.notebook.results\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "from spec_lib import decode, DecodeResult, SCHEDULES\n"
            "assert 'torch' in sys.modules and callable(decode) and 'packed' in SCHEDULES\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
