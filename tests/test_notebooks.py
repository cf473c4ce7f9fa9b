"""Every notebook: structure (one literal `parameters` cell, kernelspec, no outputs,
params files that match), and a run of all of them at the smoke profile whose written
checks are asserted."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import nbformat
import pytest
from papermill.translators import PythonTranslator

from spec_lib import run

NOTEBOOKS = sorted(run.NOTEBOOKS_DIR.glob("*.ipynb"))
PROFILES = ("smoke", "cpu", "gpu")


def test_there_are_notebooks():
    assert [p.stem for p in NOTEBOOKS][:1] == ["00_quickstart"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_structure(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == run.KERNEL_NAME
    code = [c for c in nb.cells if c.cell_type == "code"]
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0] is code[0], "the first code cell is the only 'parameters' cell"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    for cell in code:
        assert not cell.get("outputs") and cell.get("execution_count") is None, "commit without outputs"
    lines = [ln for ln in tagged[0].source.splitlines() if ln.strip()]
    parsed = PythonTranslator.inspect(tagged[0])                       # what papermill sees
    assert [p.name for p in parsed] == [ast.parse(ln).body[0].target.id for ln in lines]
    for line, param in zip(lines, parsed):
        assert "  # " in line and param.help, f"parameter without a comment: {line!r}"
        assert param.inferred_type_name != "None", f"papermill cannot read the type of {line!r}"
    assert "profile" in {p.name for p in parsed}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_params_files_exist_and_match(path, profile):
    params = run.load_params(path, profile)                             # raises on unknown / wrong type
    assert params["profile"] == profile


def test_no_stray_params_files():
    stems = {p.stem for p in NOTEBOOKS}
    for profile in PROFILES:
        for yaml_path in (run.PARAMS_DIR / profile).glob("*.yaml"):
            assert yaml_path.stem in stems, f"{yaml_path} has no notebook"


@pytest.fixture(scope="module")
def smoke_outputs(tmp_path_factory):
    """Run every notebook at the smoke profile into a temporary output root."""
    out = tmp_path_factory.mktemp("smoke")
    env = {**os.environ, "SPEC_LIB_OUTPUT_ROOT": str(out)}
    proc = subprocess.run([sys.executable, "-m", "spec_lib.run", "--profile", "smoke", "--no-progress"],
                          cwd=run.REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_at_smoke_and_its_checks_hold(smoke_outputs, path):
    results = json.loads((smoke_outputs / "results" / "smoke" / f"{path.stem}.json").read_text())
    assert results["profile"] == "smoke" and results["notebook"] == path.stem
    assert results["checks"], "a notebook must record at least one check"
    failed = [name for name, ok in results["checks"].items() if ok is not True]
    assert not failed, f"checks failed: {failed}"
    assert (smoke_outputs / "runs" / "smoke" / path.name).exists()
    assert list((smoke_outputs / "figures" / "smoke").glob(f"{path.stem}_*.png"))
