"""The papermill runner: parameter checks before any run, failure reporting, skipping, and
outputs published as one set per run (a failed, crashed or killed run never leaves a mix)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import nbformat
import pandas as pd
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from spec_lib.notebook import params, results, run
from spec_lib.run import main

WRITER = """
import os
import pandas as pd
from spec_lib.notebook.results import save_table, save_results
save_table(pd.DataFrame({"n": [n]}), "01_good", profile, "table")
if fail:
    raise RuntimeError("boom after a table was written")
save_results("01_good", profile, globals(), metrics={"n": n}, checks={"n_positive": n > 0})
"""


def write_notebook(path, params_src, body_src):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": run.KERNEL_NAME, "display_name": "spec-lib", "language": "python"}
    cell = new_code_cell(params_src)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [new_markdown_cell("# test"), cell, new_code_cell(body_src)]
    nbformat.write(nb, path)


@pytest.fixture
def project(tmp_path, monkeypatch):
    notebooks, smoke = tmp_path / "notebooks", tmp_path / "params" / "smoke"
    notebooks.mkdir()
    smoke.mkdir(parents=True)
    write_notebook(notebooks / "01_good.ipynb",
                   'profile: str = "smoke"  # profile\nn: int = 2  # count\nratio: float = 0.5  # ratio\n'
                   'fail: bool = False  # raise after staging a table', WRITER)
    write_notebook(notebooks / "02_bad.ipynb", 'profile: str = "smoke"  # profile',
                   "x = 1\nraise RuntimeError('boom in the middle')")
    (smoke / "01_good.yaml").write_text("n: 3\n")
    (smoke / "02_bad.yaml").write_text("")
    monkeypatch.setattr(params, "NOTEBOOKS_DIR", notebooks)
    monkeypatch.setattr(params, "PARAMS_DIR", tmp_path / "params")
    monkeypatch.setenv("SPEC_LIB_NOTEBOOKS_DIR", str(notebooks))           # for the notebook kernels
    monkeypatch.setenv("SPEC_LIB_PARAMS_DIR", str(tmp_path / "params"))
    monkeypatch.setenv("SPEC_LIB_OUTPUT_ROOT", str(tmp_path / "out"))
    return tmp_path


def good_results(project):
    return json.loads((project / "out" / "results" / "smoke" / "01_good.json").read_text())


def test_failure_is_reported_and_others_still_run(project, capsys):
    code = main(["--profile", "smoke", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert "02_bad: failed in cell In[3]" in err and "RuntimeError: boom in the middle" in err
    result = good_results(project)
    assert result["metrics"] == {"n": 3} and result["parameters"]["n"] == 3      # the good one ran, with params
    assert list(result["files"]) == ["results/smoke/01_good_table.csv"]
    assert not list((project / "out" / ".staging" / "smoke").iterdir())           # nothing left staged


def test_unchanged_notebooks_are_skipped_unless_forced(project, capsys):
    assert main(["--profile", "smoke", "--no-progress", "01"]) == 0
    capsys.readouterr()
    assert main(["--profile", "smoke", "--no-progress", "01"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["--profile", "smoke", "--no-progress", "--force", "01"]) == 0
    assert "up to date" not in capsys.readouterr().out
    (project / "params" / "smoke" / "01_good.yaml").write_text("n: 4\n")   # changed params: re-run
    assert main(["--profile", "smoke", "--no-progress", "01"]) == 0
    assert "up to date" not in capsys.readouterr().out


def test_a_failed_run_leaves_the_previous_outputs_whole(project):
    assert main(["--profile", "smoke", "--no-progress", "01"]) == 0
    before = good_results(project)
    (project / "params" / "smoke" / "01_good.yaml").write_text("n: 7\nfail: true\n")
    assert main(["--profile", "smoke", "--no-progress", "01"]) == 1
    assert good_results(project) == before                                        # old JSON kept ...
    table = pd.read_csv(project / "out" / "results" / "smoke" / "01_good_table.csv")
    assert table["n"].tolist() == [3]                                             # ... and its own table
    assert results.check_published("01_good", "smoke") == []


def _publish_in_subprocess(project, n, kill_after_moves):
    """Stage and publish in a child process that SIGKILLs itself after some file moves."""
    code = f"""
import os, pandas as pd
from spec_lib.notebook import results
moves = [0]
real = os.replace
def counting(a, b):
    if {kill_after_moves} >= 0 and moves[0] == {kill_after_moves}:
        os.kill(os.getpid(), 9)
    moves[0] += 1
    return real(a, b)
results.save_table(pd.DataFrame({{"n": [{n}]}}), "01_good", "smoke", "table")
results.save_table(pd.DataFrame({{"m": [{n}]}}), "01_good", "smoke", "other")
os.replace = counting
results.save_results("01_good", "smoke", {{"n": {n}}}, metrics={{"n": {n}}}, checks={{}})
"""
    env = {**os.environ, "SPEC_LIB_OUTPUT_ROOT": str(project / "out")}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


@pytest.mark.parametrize("kill_after_moves", [0, 1, 2])
def test_a_killed_publish_is_rolled_forward(project, kill_after_moves):
    assert main(["--profile", "smoke", "--no-progress", "01"]) == 0
    # os.replace calls after the patch: the staged JSON, the journal, then the publish's moves.
    proc = _publish_in_subprocess(project, 9, kill_after_moves + 2)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    journal = project / "out" / ".staging" / "smoke" / "01_good.publish"
    assert journal.exists()                                                       # interrupted mid-publish
    assert results.recover("smoke") == ["01_good"]
    assert not journal.exists()
    assert good_results(project)["metrics"] == {"n": 9}
    assert results.check_published("01_good", "smoke") == []                      # one run's files only
    assert pd.read_csv(project / "out" / "results" / "smoke" / "01_good_other.csv")["m"].tolist() == [9]


def test_check_published_detects_a_mixed_set(project):
    assert main(["--profile", "smoke", "--no-progress", "01"]) == 0
    folder = project / "out" / "results" / "smoke"
    (folder / "01_good_table.csv").write_text("n\n99\n")
    (folder / "01_good_stray.csv").write_text("x\n1\n")
    problems = results.check_published("01_good", "smoke")
    assert "changed since the run: results/smoke/01_good_table.csv" in problems
    assert "not from this run: results/smoke/01_good_stray.csv" in problems


@pytest.mark.parametrize("content,message", [
    ("m: 3\n", "unknown parameter(s) ['m']"),
    ("n: 'three'\n", "parameter 'n' must be int, got 'three'"),
    ("n: 2.5\n", "parameter 'n' must be int"),
    ("ratio: [1]\n", "parameter 'ratio' must be float"),
    ("profile: cpu\n", "'profile' is set by --profile"),
    ("- 1\n", "expected a mapping"),
    ("n: 3\nn: 4\n", "params/smoke/01_good.yaml:2: invalid YAML: duplicate key 'n' (first on line 1)"),
    ("n: [1,\nratio: 2\n", "params/smoke/01_good.yaml:3: invalid YAML: expected ',' or ']'"),
    (b"n: 3\nratio: \xff\xfe\n", "params/smoke/01_good.yaml:2: not UTF-8 text"),
    ("dir", "params/smoke/01_good.yaml: is a directory"),
])
def test_bad_params_fail_before_anything_runs(project, capsys, content, message):
    path = project / "params" / "smoke" / "01_good.yaml"
    if content == "dir":
        path.unlink()
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    assert main(["--profile", "smoke", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (project / "out" / "runs").exists()                    # nothing executed


def test_missing_params_file_and_unknown_notebook(project, capsys):
    (project / "params" / "smoke" / "02_bad.yaml").unlink()
    assert main(["--profile", "smoke", "--no-progress", "02"]) == 2
    assert "no parameters file" in capsys.readouterr().err
    assert main(["--profile", "smoke", "--no-progress", "99_nope"]) == 2
    assert "unknown notebook '99_nope'" in capsys.readouterr().err


def test_type_matching():
    assert params.matches(3, int) and not params.matches(True, int) and not params.matches(3.0, int)
    assert params.matches(3, float) and params.matches([1, 2], list[int]) and not params.matches([1, "a"], list[int])
    assert params.matches(None, params.type_of("int | None")) and params.matches({"a": 1.0}, dict[str, float])


def test_no_module_touches_the_process_umask():
    """Reading the umask means setting it (a race with other threads): nothing may call it."""
    sources = sorted(params.REPO_ROOT.joinpath("spec_lib").rglob("*.py"))
    assert sources and not [p.name for p in sources if "umask(" in p.read_text()]


def test_written_files_get_normal_permissions(tmp_path):
    from spec_lib.io import atomic_write_bytes

    old = os.umask(0o022)
    try:
        path = atomic_write_bytes(tmp_path / "f.txt", b"x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_live_view_shows_lines_and_the_running_progress_bar():
    import io

    from spec_lib.notebook.live import LiveView, first_line

    out = io.StringIO()
    view = LiveView("01_good", 3, file=out)
    view.cell_started({"cell_type": "code", "source": "\n  x = train(model)  # a long cell\n"})
    view.write("loading data\n\rtraining:  10%|#  | 1/10")       # one printed line, one bar being drawn
    assert "  01_good | loading data\n" in out.getvalue()
    assert "cell 0/3: x = train(model)  # a long cell | training:  10%|#  | 1/10" in view.bar.desc
    view.write("\rtraining: 100%|###| 10/10\n")                      # the bar finishes: its last state is kept
    assert "  01_good | training: 100%|###| 10/10\n" in out.getvalue()
    assert "|" not in view.bar.desc.split(": ", 1)[1].split("long cell", 1)[1]   # no stale bar after the cell
    view.cell_finished({"cell_type": "code", "source": "x"})
    view.cell_finished({"cell_type": "markdown", "source": "# not counted"})
    assert view.bar.n == 1
    view.close()
    assert first_line("\n\n" + "y" * 80, limit=10) == "y" * 9 + "…"


def test_a_run_with_progress_streams_the_notebook_and_ends_with_a_table(project, capsys):
    nb = nbformat.read(project / "notebooks" / "01_good.ipynb", as_version=4)
    nb.cells.append(new_code_cell("import os, tqdm.auto, tqdm.std\n"
                                  "print('kernel says hello')\n"
                                  "print('text bars:', tqdm.auto.tqdm is tqdm.std.tqdm,\n"
                                  "      os.path.isfile(os.path.join(os.environ['IPYTHONDIR'], 'profile_default',\n"
                                  "                                  'startup', '00-text-progress.py')))"))
    nbformat.write(nb, project / "notebooks" / "01_good.ipynb")
    before = os.environ.get("IPYTHONDIR")
    assert main(["--profile", "smoke", "01", "02"]) == 1
    assert os.environ.get("IPYTHONDIR") == before                       # restored after the run
    captured = capsys.readouterr()
    assert "  01_good | kernel says hello" in captured.err              # live, while the notebook runs
    assert "  01_good | text bars: True True" in captured.err           # the kernel ran the start-up file
    table = captured.out.splitlines()
    assert table[0].split() == ["notebook", "status", "time", "results"]
    assert table[1].split()[:2] == ["01_good", "ok"] and table[1].split()[-1] == "results/smoke/01_good.json"
    assert table[2].split()[:2] == ["02_bad", "FAILED"] and table[2].split()[-1] == "runs/smoke/02_bad.ipynb"


# ----- the Dask cluster runner (spec_lib.notebook.cluster) -------------------------------------------

NEEDS_FIRST = """
import pathlib, time
marker = pathlib.Path(os.environ["SPEC_LIB_OUTPUT_ROOT"]) / "first-done"
time.sleep(3)
marker.write_text("x")
"""
NEEDS_SECOND = """
import pathlib
assert (pathlib.Path(os.environ["SPEC_LIB_OUTPUT_ROOT"]) / "first-done").exists(), "started before 03_first ended"
"""


def _set_metadata(path, **spec_lib):
    nb = nbformat.read(path, as_version=4)
    nb.metadata["spec_lib"] = spec_lib
    nbformat.write(nb, path)


@pytest.fixture
def cluster_project(project):
    notebooks, smoke = project / "notebooks", project / "params" / "smoke"
    write_notebook(notebooks / "03_first.ipynb", 'profile: str = "smoke"  # profile', "import os\n" + NEEDS_FIRST)
    write_notebook(notebooks / "04_second.ipynb", 'profile: str = "smoke"  # profile', "import os\n" + NEEDS_SECOND)
    write_notebook(notebooks / "05_gpu.ipynb", 'profile: str = "smoke"  # profile', "x = 1")
    _set_metadata(notebooks / "04_second.ipynb", needs=["03_first"])
    _set_metadata(notebooks / "05_gpu.ipynb", resources={"smoke": {"GPU": 1}})
    for stem in ("03_first", "04_second", "05_gpu"):
        (smoke / f"{stem}.yaml").write_text("")
    return project


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks a cluster without a GPU")
def test_cluster_runs_like_the_serial_runner(cluster_project, capsys):
    """Two local workers: the same failure report and results as the serial runner, 'needs'
    respected (04 asserts that 03 finished), a GPU notebook refused with a message, and a
    second run skipping what is up to date."""
    code = main(["--profile", "smoke", "--no-progress", "--cluster", "local:2"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "02_bad: failed in cell In[3]" in err and "RuntimeError: boom in the middle" in err
    assert "05_gpu: not run: needs resources {'GPU': 1}" in err
    assert "04_second" not in err and "03_first" not in err, err
    assert good_results(cluster_project)["metrics"] == {"n": 3}
    assert not list((cluster_project / "out" / ".staging" / "smoke").iterdir())
    table = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:] if line.strip()}
    assert table == {"01_good": "ok", "02_bad": "FAILED", "03_first": "ok", "04_second": "ok", "05_gpu": "FAILED"}
    assert main(["--profile", "smoke", "--no-progress", "--cluster", "local:1", "01"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_cluster_without_ordering_is_caught(cluster_project, capsys):
    """Negative control of the 'needs' check above: without the declaration, 04 starts beside 03
    on the second worker and its assertion fails."""
    _set_metadata(cluster_project / "notebooks" / "04_second.ipynb")
    assert main(["--profile", "smoke", "--no-progress", "--cluster", "local:2", "03", "04"]) == 1
    assert "04_second: failed" in capsys.readouterr().err


@pytest.mark.parametrize("address, message", [
    ("local:0", "N >= 1"), ("local:two", "N >= 1"), ("nowhere", "names no port"), ("tcp://", "names no host"),
    ("tcp://:8786", "names no host"), ("tcp://host", "names no port"), ("tcp://host:", "names no port"),
    ("tcp://host:port", "has port 'port'"), ("tcp://host:99999", "has port '99999'"),
    ("http://host:8786", "has scheme 'http'")])
def test_bad_cluster_address_is_refused_in_one_line_before_anything_runs(project, capsys, address, message):
    assert main(["--profile", "smoke", "--no-progress", "--cluster", address]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (project / "out" / "results").exists()


def test_a_scheduler_that_does_not_answer_is_one_line_after_the_timeout(project, capsys):
    """Nothing listens on the port (bound here, never accepting): the runner gives up after
    --cluster-timeout seconds with one line naming the address, exit 2, nothing run."""
    import socket
    import time

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))                # bound, not listening: connections are refused
        port = silent.getsockname()[1]
        started = time.perf_counter()
        code = main(["--profile", "smoke", "--no-progress", "--cluster", f"tcp://127.0.0.1:{port}",
                     "--cluster-timeout", "2"])
        waited = time.perf_counter() - started
    err = capsys.readouterr().err
    assert code == 2 and f"no Dask scheduler answered at tcp://127.0.0.1:{port} within 2 s" in err, err
    assert err.count("\n") == 1 and waited < 30, (err, waited)
    assert not (project / "out" / "results").exists()


@pytest.mark.parametrize("timeout", ["0", "-1", "inf", "nan"])
def test_a_bad_cluster_timeout_is_refused(project, capsys, timeout):
    assert main(["--profile", "smoke", "--no-progress", "--cluster", "tcp://127.0.0.1:8786",
                 "--cluster-timeout", timeout]) == 2
    assert "cluster timeout must be a number of seconds > 0" in capsys.readouterr().err


def test_bad_resource_declaration_is_refused(cluster_project, capsys):
    _set_metadata(cluster_project / "notebooks" / "05_gpu.ipynb", resources={"smoke": {"GPU": -1}})
    assert main(["--profile", "smoke", "--no-progress", "--cluster", "local:2"]) == 2
    assert "05_gpu.ipynb: resources for 'smoke' must map names to positive numbers" in capsys.readouterr().err


def test_real_notebooks_declare_their_order_and_gpu_needs():
    """Every notebook that loads a trained model waits for the notebook that trains it, and
    every notebook whose gpu parameters put it on cuda asks the cluster for a GPU."""
    from spec_lib.notebook import cluster

    notebooks = {p.stem: p for p in sorted(params.NOTEBOOKS_DIR.glob("*.ipynb"))}
    loading = 0
    for stem, path in notebooks.items():
        resources, needs = cluster.declared(path, "gpu")
        assert all(need in notebooks and need < stem for need in needs), stem
        source = path.read_text()
        trainer = {'spec_lib.load(\\"target\\"': "10_", 'spec_lib.load(\\"deer\\"': "20_",
                   'spec_lib.load(\\"dedit\\"': "30_"}
        for call, prefix in trainer.items():
            loading += call in source
            if call in source and not stem.startswith(prefix):
                assert any(n.startswith(prefix) for n in needs), f"{stem} calls {call} without needs"
        gpu = params.load_params(path, "gpu").get("device") == "cuda"
        assert (resources.get("GPU", 0) >= 1) == gpu, stem
    assert loading >= 10, "the loader calls the check looks for are not in the notebooks (renamed?)"


def test_stale_runs_only_stale_notebooks_longest_first_and_keeps_the_ledger(project, capsys):
    """``--stale``: notebooks without results or with results of other code run, never-timed and
    longest first; the ledger lists them before anything runs and loses each one as it is
    published (a failed one stays listed); ``--list-stale`` writes the ledger and runs nothing."""
    from spec_lib.notebook import versions

    assert main(["--profile", "smoke", "--no-progress", "01"]) == 0
    assert run.run_times("smoke")["01_good"] > 0
    capsys.readouterr()
    assert main(["--profile", "smoke", "--list-stale"]) == 0          # 02 has no results: listed, not run
    assert set(versions.read_ledger("smoke")) == {"02_bad"}
    assert versions.read_ledger("smoke")["02_bad"]["why"] == "no results"
    assert "stale: 02_bad" in capsys.readouterr().err
    (project / "params" / "smoke" / "01_good.yaml").write_text("n: 4\n")  # 01's results now come from other params
    before = good_results(project)["code_version"]
    assert main(["--profile", "smoke", "--list-stale"]) == 0
    ledger = versions.read_ledger("smoke")
    assert set(ledger) == {"01_good", "02_bad"} and "parameters" in ledger["01_good"]["why"]
    assert good_results(project)["code_version"] == before                # listing runs nothing
    assert main(["--profile", "smoke", "--no-progress", "--stale"]) == 1   # 02 fails, 01 reruns
    out = capsys.readouterr()
    assert out.out.index("02_bad") < out.out.index("01_good")             # never timed: first
    assert set(versions.read_ledger("smoke")) == {"02_bad"}                # 01 struck off when published
    assert good_results(project)["metrics"] == {"n": 4}
    assert main(["--profile", "smoke", "--no-progress", "--stale", "01"]) == 0   # nothing stale to run
    assert "01_good" not in capsys.readouterr().out.split("notebook", 1)[-1]


def test_longest_first_orders_by_recorded_run_time(project):
    run.record_run_time("smoke", "01_good", 5.0)
    run.record_run_time("smoke", "02_bad", 50.0)
    plans = run.plan("smoke", [])
    assert [nb.stem for nb, _ in run.longest_first("smoke", plans)] == ["02_bad", "01_good"]
    run.record_run_time("smoke", "02_bad", 1.0)
    assert [nb.stem for nb, _ in run.longest_first("smoke", plans)] == ["01_good", "02_bad"]
