"""Every notebook: structure (one literal `parameters` cell, kernelspec, no outputs,
params files that match), and a run of all of them at the smoke profile whose written
checks are asserted."""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys

import nbformat
import pytest
from papermill.translators import PythonTranslator

from spec_lib.notebook import params, run

NOTEBOOKS = sorted(params.NOTEBOOKS_DIR.glob("*.ipynb"))
PROFILES = ("smoke", "cpu", "gpu")


def test_there_are_notebooks():
    assert [p.stem for p in NOTEBOOKS][:1] == ["00_quickstart"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_structure(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == run.KERNEL_NAME
    assert set(nb.metadata) <= {"kernelspec", "language_info", "spec_lib"}, "no widget state or other saved metadata"
    assert nb.metadata["language_info"] == {"name": "python"}, "language_info as nbstripout keeps it"
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_nbstripout_filter_leaves_committed_notebooks_alone(path):
    """The clean filter that ``make`` configures (.gitattributes) must not rewrite a committed
    notebook, else ``git status`` shows every notebook modified after the first commit."""
    proc = subprocess.run([sys.executable, *shlex.split(nbstripout_filter()), "-t"], input=path.read_text(),
                          capture_output=True, text=True, check=True)
    assert proc.stdout == path.read_text()


def nbstripout_filter() -> str:
    """The filter's arguments, as the Makefile configures them."""
    line = next(ln for ln in (params.REPO_ROOT / "Makefile").read_text().splitlines() if ln.startswith("NBSTRIPOUT :="))
    return line.split(":=", 1)[1].strip()


def test_nbstripout_filter_strips_what_lab_and_papermill_add(tmp_path):
    """An executed notebook (outputs, papermill and kernel metadata) comes out of the filter
    with the committed notebook's metadata: opening and saving in Lab changes nothing."""
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python",
                                    "codemirror_mode": {"name": "ipython", "version": 3}}
    nb.metadata["papermill"] = {"duration": 1.0}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    code.execution_count = 3
    code.metadata["execution"] = {"iopub.status.busy": "2026-01-01"}
    proc = subprocess.run([sys.executable, *shlex.split(nbstripout_filter()), "-t"], input=nbformat.writes(nb),
                          capture_output=True, text=True, check=True)
    assert proc.stdout == NOTEBOOKS[0].read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_says_how_to_run_it_and_what_it_shows(path):
    """A "How to run" cell right under the parameters cell whose commands name this notebook
    and existing params files, and a closing "Findings" section (tests/test_findings.py checks its cell)."""
    nb = nbformat.read(path, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    how = nb.cells[at + 1]
    assert how.cell_type == "markdown" and how.source.startswith("### How to run")
    for profile in PROFILES:
        assert f"python -m spec_lib.run --profile {profile} {path.stem}`" in how.source
    for named in re.findall(r"params/(\w+)/([\w.]+\.yaml)", how.source):
        assert named == ("cpu", f"{path.stem}.yaml") and (params.PARAMS_DIR / named[0] / named[1]).is_file()
    assert "**First use.**" in how.source
    end = nb.cells[-2]
    assert end.cell_type == "markdown" and end.source.startswith("## Findings")
    assert f"results/<profile>/{path.stem}.json" in end.source


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_params_files_exist_and_match(path, profile):
    values = params.load_params(path, profile)                          # raises on unknown / wrong type
    assert values["profile"] == profile


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_defaults_are_the_smoke_profile(path):
    """One meaning of smoke: a notebook opened and run as it is (its literal defaults, labelled
    ``profile: "smoke"``) computes exactly what ``params/smoke/`` runs."""
    defaults = {name: d.default for name, d in params.declared_parameters(path).items()}
    smoke = params.load_params(path, "smoke")
    assert defaults["profile"] == "smoke"
    differ = {name: (defaults[name], value) for name, value in smoke.items() if defaults[name] != value}
    assert not differ, f"literal default vs params/smoke value: {differ}"


def test_no_stray_params_files():
    stems = {p.stem for p in NOTEBOOKS}
    for profile in PROFILES:
        for yaml_path in (params.PARAMS_DIR / profile).glob("*.yaml"):
            assert yaml_path.stem in stems, f"{yaml_path} has no notebook"


# smoke_outputs (tests/conftest.py): every notebook at the smoke profile, started in the background
# when the session starts, so the rest of the suite runs meanwhile.


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


#: Widest figure (inches, at save_figure's 150 dpi): JupyterLab shows a figure at about 900 px,
#: so 7-pt tick labels of a figure this wide still render at about 7 px; wider ones shrink below.
MAX_FIGURE_INCHES = 12.5


@pytest.mark.slow
def test_figures_fit_a_notebook_column(smoke_outputs):
    from PIL import Image

    pngs = sorted((smoke_outputs / "figures" / "smoke").glob("*.png"))
    assert pngs
    too_wide = {p.name: round(Image.open(p).size[0] / 150, 1) for p in pngs
                if Image.open(p).size[0] / 150 > MAX_FIGURE_INCHES}
    assert not too_wide, f"figures wider than {MAX_FIGURE_INCHES} in: {too_wide}"


@pytest.mark.slow
def test_executed_notebooks_print_no_machine_paths(smoke_outputs):
    """No stray return values and no absolute paths of this machine in a notebook's outputs."""
    root = str(smoke_outputs)
    for path in sorted((smoke_outputs / "runs" / "smoke").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            for output in cell.get("outputs", []):
                text = json.dumps(output.get("data", {}).get("text/plain", "")) + json.dumps(output.get("text", ""))
                assert root not in text and str(params.REPO_ROOT) not in text, f"{path.name} cell {i}: {text[:200]}"
                assert "PosixPath(" not in text, f"{path.name} cell {i} ends with a stray path: {text[:200]}"


# ----- notebooks hold no analysis --------------------------------------------------------------------

SIMPLE_VALUES = (ast.Call, ast.Name, ast.Attribute, ast.Constant, ast.Subscript)
MAX_LOGIC_LINES = 10


def _simple(node: ast.AST) -> bool:
    """A value a notebook may assign without it counting as logic: a call, a name, a constant,
    an attribute or index lookup, or a literal container of those; no comprehension or lambda
    anywhere inside."""
    if any(isinstance(n, (ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Lambda))
           for n in ast.walk(node)):
        return False
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_simple(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(_simple(v) for v in node.values)
    if isinstance(node, ast.Subscript):
        return _simple(node.value)
    return isinstance(node, SIMPLE_VALUES)


def logic_lines(path) -> int:
    """Lines of a notebook's code cells that are not an import, a call, an assertion, a display
    or a plot, or an assignment of a simple value (:func:`_simple`): the analysis a notebook
    should leave to the library."""
    nb = nbformat.read(path, as_version=4)
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code" or "parameters" in cell.metadata.get("tags", []):
            continue
        for stmt in ast.parse(cell.source).body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Assert)):
                continue
            if isinstance(stmt, ast.Expr) and _simple(stmt.value):
                continue
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None and _simple(stmt.value):
                continue
            count += stmt.end_lineno - stmt.lineno + 1
    return count


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_hold_little_logic(path):
    lines = logic_lines(path)
    print(f"{path.stem}: {lines} logic lines")
    assert lines <= MAX_LOGIC_LINES, f"{path.stem} has {lines} lines of logic; move them into spec_lib"


def test_logic_counter_counts_loops_and_comprehensions(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = f(1)\nfor i in range(3):\n    g(i)\ny = [i for i in x]\nz = a + b")]
    nbformat.write(nb, tmp_path / "n.ipynb")
    assert logic_lines(tmp_path / "n.ipynb") == 4
