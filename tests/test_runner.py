"""The papermill runner: parameter checks before any run, failure reporting, skipping."""

from __future__ import annotations

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from spec_lib import run


def write_notebook(path, params_src, body_src):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": run.KERNEL_NAME, "display_name": "spec-lib", "language": "python"}
    params = new_code_cell(params_src)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [new_markdown_cell("# test"), params, new_code_cell(body_src)]
    nbformat.write(nb, path)


@pytest.fixture
def project(tmp_path, monkeypatch):
    notebooks, params = tmp_path / "notebooks", tmp_path / "params" / "smoke"
    notebooks.mkdir()
    params.mkdir(parents=True)
    write_notebook(notebooks / "01_good.ipynb",
                   'profile: str = "smoke"  # profile\nn: int = 2  # count\nratio: float = 0.5  # ratio',
                   "import json, os, pathlib\n"
                   "out = pathlib.Path(os.environ['SPEC_LIB_OUTPUT_ROOT']) / 'results' / profile\n"
                   "out.mkdir(parents=True, exist_ok=True)\n"
                   "(out / '01_good.json').write_text(json.dumps({'n': n, 'ratio': ratio}))")
    write_notebook(notebooks / "02_bad.ipynb", 'profile: str = "smoke"  # profile',
                   "x = 1\nraise RuntimeError('boom in the middle')")
    (params / "01_good.yaml").write_text("n: 3\n")
    (params / "02_bad.yaml").write_text("")
    monkeypatch.setattr(run, "NOTEBOOKS_DIR", notebooks)
    monkeypatch.setattr(run, "PARAMS_DIR", tmp_path / "params")
    monkeypatch.setenv("SPEC_LIB_OUTPUT_ROOT", str(tmp_path / "out"))
    return tmp_path


def test_failure_is_reported_and_others_still_run(project, capsys):
    code = run.main(["--profile", "smoke", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert "02_bad: failed in cell In[3]" in err  # papermill injects a parameters cell and "RuntimeError: boom in the middle" in err
    result = json.loads((project / "out" / "results" / "smoke" / "01_good.json").read_text())
    assert result == {"n": 3, "ratio": 0.5}                           # the good one ran, with params


def test_unchanged_notebooks_are_skipped_unless_forced(project, capsys):
    assert run.main(["--profile", "smoke", "--no-progress", "01"]) == 0
    capsys.readouterr()
    assert run.main(["--profile", "smoke", "--no-progress", "01"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert run.main(["--profile", "smoke", "--no-progress", "--force", "01"]) == 0
    assert "up to date" not in capsys.readouterr().out
    (project / "params" / "smoke" / "01_good.yaml").write_text("n: 4\n")   # changed params: re-run
    assert run.main(["--profile", "smoke", "--no-progress", "01"]) == 0
    assert "up to date" not in capsys.readouterr().out


@pytest.mark.parametrize("content,message", [
    ("m: 3\n", "unknown parameter(s) ['m']"),
    ("n: 'three'\n", "parameter 'n' must be int, got 'three'"),
    ("n: 2.5\n", "parameter 'n' must be int"),
    ("ratio: [1]\n", "parameter 'ratio' must be float"),
    ("profile: cpu\n", "'profile' is set by --profile"),
    ("- 1\n", "expected a mapping"),
])
def test_bad_params_fail_before_anything_runs(project, capsys, content, message):
    (project / "params" / "smoke" / "01_good.yaml").write_text(content)
    assert run.main(["--profile", "smoke", "--no-progress"]) == 2
    assert message in capsys.readouterr().err
    assert not (project / "out" / "runs").exists()                    # nothing executed


def test_missing_params_file_and_unknown_notebook(project, capsys):
    (project / "params" / "smoke" / "02_bad.yaml").unlink()
    assert run.main(["--profile", "smoke", "--no-progress", "02"]) == 2
    assert "no parameters file" in capsys.readouterr().err
    assert run.main(["--profile", "smoke", "--no-progress", "99_nope"]) == 2
    assert "unknown notebook '99_nope'" in capsys.readouterr().err


def test_type_matching():
    assert run.matches(3, int) and not run.matches(True, int) and not run.matches(3.0, int)
    assert run.matches(3, float) and run.matches([1, 2], list[int]) and not run.matches([1, "a"], list[int])
    assert run.matches(None, run._type_of("int | None")) and run.matches({"a": 1.0}, dict[str, float])
