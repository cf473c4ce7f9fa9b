"""Every notebook closes with findings printed from its own result, and the README's notebook
table is generated from the committed results through the same functions."""

from __future__ import annotations

import json
import shutil

import nbformat
import pytest

from spec_lib.notebook import findings, readme, versions
from spec_lib.notebook.params import NOTEBOOKS_DIR
from spec_lib.io import REPO_ROOT

NOTEBOOKS = sorted(p.stem for p in NOTEBOOKS_DIR.glob("*.ipynb"))


def test_every_notebook_has_findings_in_one_module():
    assert sorted(readme.REGISTRY) == NOTEBOOKS
    assert len(readme.MODULES) == len(readme.REGISTRY)          # no notebook in two modules


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_notebook_ends_with_its_findings(notebook):
    nb = nbformat.read(NOTEBOOKS_DIR / f"{notebook}.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    alias = readme.MODULES[notebook].rsplit(".", 1)[1]
    assert code[-1].strip() == f"{alias}.show(NOTEBOOK, profile)", code[-1]
    assert any(f"from spec_lib.notebook import {alias}" in source for source in code[:-1])
    assert nb.cells[-2].cell_type == "markdown" and nb.cells[-2].source.startswith("## Findings")


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_findings_of_the_committed_result(notebook):
    made = findings.report(readme.REGISTRY, notebook, findings.read_result(notebook, "cpu"))
    assert made.headline and "\n" not in made.headline and "|" not in made.headline
    assert made.findings, "a notebook's findings name at least one claim"
    for finding in made.findings:
        assert finding.claim and finding.measured and "\n" not in finding.measured + finding.claim
        assert "nan" not in finding.measured.lower().split(), finding.measured


def test_a_finding_refuses_an_unknown_verdict():
    with pytest.raises(ValueError, match="verdict must be one of"):
        findings.Finding("claim", "measured", "probably")
    with pytest.raises(KeyError, match="no findings for"):
        findings.report({}, "11_packed_ss_greedy", {})
    with pytest.raises(FileNotFoundError, match="run the notebook first"):
        findings.read_result("99_missing", "cpu")


def test_formatting_and_verdict_helpers():
    assert findings.times(1.3339, 1.2855, 1.3869) == "1.33× [1.29, 1.39]"
    assert findings.pct(0.782) == "78%" and findings.num(float("nan")) == "n/a" and findings.num(1234.5, 0) == "1,234"
    assert [findings.above_one(1.01, 1.2), findings.above_one(0.8, 0.99), findings.above_one(0.9, 1.1)] == [
        "agrees", "disagrees", "not resolved"]
    assert findings.combine(["agrees", "agrees"]) == "agrees" and findings.combine(["agrees", "not resolved"]) == "mixed"
    assert findings.combine(["disagrees", "not resolved"]) == "disagrees"
    assert findings.combine(["not resolved", "measured"]) == "not resolved"


def test_the_readme_generated_part_is_current():
    text = (REPO_ROOT / "README.md").read_text()
    assert readme.render(text) == text, "run python -m spec_lib.notebook.readme"


def test_an_edited_result_makes_the_readme_out_of_date(tmp_path, monkeypatch):
    """Negative control: the generated part follows the result files, not the README's text."""
    shutil.copytree(REPO_ROOT / "results" / "cpu", tmp_path / "results" / "cpu")
    path = tmp_path / "results" / "cpu" / "11_packed_ss_greedy.json"
    result = json.loads(path.read_text())
    result["metrics"]["exactness"]["identical"] -= 1
    path.write_text(json.dumps(result))
    monkeypatch.setenv("SPEC_LIB_OUTPUT_ROOT", str(tmp_path))
    text = (REPO_ROOT / "README.md").read_text()
    rendered = readme.render(text)
    assert rendered != text
    assert f"{result['metrics']['exactness']['identical']} of {result['metrics']['exactness']['responses']}" in rendered
    with pytest.raises(ValueError, match="markers once each"):
        readme.render(text.replace(readme.END, ""))


def test_rewording_a_finding_leaves_every_result_current():
    """The findings modules format numbers and decide none: no result's code version holds them."""
    parts = versions.version_parts("11_packed_ss_greedy", "cpu")["code"]
    assert not set(parts) & set(versions.PRESENTATION)
    assert "spec_lib.studies.bench" in parts                   # a study module still counts
