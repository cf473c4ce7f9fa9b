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


def _split_row(slice_, method, fresh, repeated, temperature=None, repetition=0.5, reference=0.05):
    """One row of a repetition report (``fresh`` / ``repeated``: (tokens per iteration, iterations) or None)."""
    row = {"slice": slice_, "method": method, "responses": 2, "repetition": repetition,
           "reference_repetition": reference,
           "fresh_tokens_per_iteration": fresh and fresh[0], "fresh_iterations": fresh and fresh[1],
           "repeated_tokens_per_iteration": repeated and repeated[0], "repeated_iterations": repeated and repeated[1]}
    return row if temperature is None else {"temperature": temperature, **row}


def test_the_repetition_row_reads_the_report_and_is_absent_without_one():
    """The row pools each method's fresh and repeated iterations over slices (weighted by their
    counts), sets each slice's output share against the real text's, per temperature; a result
    without a report (published before it existed) gets no row."""
    assert findings.repetition({"absolute": []}) is None and findings.repetition({"repetition_report": []}) is None
    rows = [_split_row("code", "ar", None, None, 0.0, 0.6),
            _split_row("code", "deer k=8", (2.0, 10), (6.0, 30), 0.0, 0.6),
            _split_row("math", "ar", None, None, 0.0, 0.2, 0.1),
            _split_row("math", "deer k=8", (3.0, 30), (5.0, 10), 0.0, 0.2, 0.1),
            _split_row("math", "ar_draft k=8", (1.0, 5), (1.0, 5), 0.0, 0.2, 0.1),
            _split_row("code", "deer k=8", (1.5, 40), (None, 0), 0.6, 0.04)]
    made = findings.repetition({"repetition_report": rows}, ["deer k=8"])
    assert made.verdict == "measured" and "earned on loops" in made.claim
    assert made.measured == ("T = 0: repeated 4-grams, outputs vs real text: code 60% vs 5%, math 20% vs 10%; "
                             "tokens per iteration, fresh / repeated iterations: deer k=8 2.75 / 5.75 (40 / 40); "
                             "T = 0.6: repeated 4-grams, outputs vs real text: code 4% vs 5%; tokens per iteration, "
                             "fresh / repeated iterations: deer k=8 1.50 / n/a (40 / 0)")
    # negative control: without a method list every method with iterations is read, AR never
    every = findings.repetition({"repetition_report": [r for r in rows if r["temperature"] == 0.0]}).measured
    assert every.startswith("T = 0: ") and "T = 0.6" not in every
    assert "deer k=8 2.75 / 5.75 (40 / 40), ar_draft k=8 1.00 / 1.00 (5 / 5)" in every and " ar " not in every
    # a report without temperatures (notebooks 11-13) names none
    plain = [{k: v for k, v in r.items() if k != "temperature"} for r in rows[:2]]
    assert findings.repetition({"repetition_report": plain}).measured.startswith("repeated 4-grams")

