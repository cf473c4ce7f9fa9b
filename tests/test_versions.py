"""Results keyed by behaviour: the fingerprint of the decoding core and the notebooks' code versions.

On copies of the repository: a comment in ``masks/layouts.py`` leaves every notebook's version as
it was; renaming a private function and splitting a module leave the fingerprint unchanged (the
battery is rerun on the copy, not read from a cache); the negative controls, an off-by-one in a
layout's mask and a changed acceptance rule, change it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spec_lib import provenance
from spec_lib.notebook import fingerprint, versions
from spec_lib.notebook.params import NOTEBOOKS_DIR

from .test_structure import CORE

REPO = provenance.REPO_ROOT
NOTEBOOKS = sorted(p.stem for p in NOTEBOOKS_DIR.glob("*.ipynb"))


@pytest.fixture(scope="module")
def reference() -> dict[str, str]:
    """The current code's fingerprint (cached on disk once computed)."""
    return fingerprint.fingerprint()


def repo_copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for folder in ("spec_lib", "notebooks", "params"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def in_copy(root: Path, code: str, cache: Path | None = None, **env) -> object:
    """Run ``code`` (which prints one JSON value last) with the copy's ``spec_lib`` first on the path."""
    environment = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1",
                   "SPEC_LIB_MODELS": str(REPO / "models"),               # the committed models, not copied
                   "SPEC_LIB_FINGERPRINT_CACHE": str(cache or root / "fingerprint-cache"), **env}
    environment.pop("SPEC_LIB_NOTEBOOKS_DIR", None)
    environment.pop("SPEC_LIB_PARAMS_DIR", None)
    proc = subprocess.run([sys.executable, "-c", "import spec_lib; assert spec_lib.__file__.startswith("
                           f"{str(root)!r}), spec_lib.__file__\n" + code],
                          cwd=root, env=environment, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def copy_fingerprint(root: Path, names=fingerprint.NAMES) -> dict[str, str]:
    return in_copy(root, f"import json\nfrom spec_lib.notebook import fingerprint as f\n"
                         f"print(json.dumps(f.compute({list(names)!r})))")


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert text.count(old) >= count, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


# ----- coverage --------------------------------------------------------------------------------------

def test_every_core_module_is_fingerprinted_or_compared_as_code():
    roots = [*CORE, "spec_lib.compiled", "spec_lib.compiled.drafters", "spec_lib.lora", "spec_lib.anyorder_models",
             "spec_lib.decoding", "spec_lib.attention"]
    core = provenance.closure(roots)
    covered = set(fingerprint.covered_modules())
    missing = [m for m in core if m not in covered and m not in fingerprint.CODE_COMPARED]
    assert not missing, f"core modules neither in a fingerprint component nor compared as code: {missing}"
    assert "spec_lib.masks.layouts" in covered and "spec_lib.schedules.loops" in covered


def test_a_package_component_covers_a_new_module_in_it(tmp_path, monkeypatch):
    copy = tmp_path / "spec_lib"
    shutil.copytree(provenance.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "PACKAGE_DIR", copy)
    (copy / "masks" / "templates.py").write_text("X = 1\n")
    (copy / "schedules" / "extra.py").write_text("X = 1\n")
    covered = fingerprint.covered_modules()
    assert "spec_lib.masks.templates" in covered and "spec_lib.schedules.extra" not in covered


def _is_stub(function: ast.FunctionDef) -> bool:
    """A body of only a docstring and ``...`` (a Protocol's method): nothing to execute."""
    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return not body


def test_the_battery_runs_every_covered_module_and_repeats_itself(reference):
    """In this process, under a profiler: the battery gives the cached (other-process) hashes, and
    it calls functions of every covered module that defines any with a body (data classes and
    Protocol stubs have nothing to run), so no covered module is counted without being
    exercised."""
    import inspect
    import sys

    called: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            called.add(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        fresh = fingerprint.compute()
    finally:
        sys.setprofile(None)
    assert fresh == reference
    idle = []
    for module in fingerprint.covered_modules():
        path = provenance.module_path(module)
        tree = ast.parse(path.read_text())
        defines = any(isinstance(n, ast.FunctionDef) and not _is_stub(n) for n in ast.walk(tree))
        if defines and str(path) not in called:
            idle.append(module)
    assert not idle, f"covered modules the battery never calls into: {idle}"
    assert inspect.isfunction(fingerprint.compute)


def test_random_drafts_are_accepted_several_at_a_time():
    """Random Qwen3 drafts over the battery's small vocabulary are accepted several tokens at a
    time, so the battery sees multi-token acceptance and cache commits, not only rejections."""
    from spec_lib import decode
    from spec_lib.models import DualModeLM

    model = DualModeLM(fingerprint.tiny_lm("qwen3", seed=2), fingerprint.MASK_ID)
    accepted = [a for p in fingerprint._prompts() for a in
                decode(model, p, schedule="linear", width=6, max_new_tokens=14).accepted]
    assert max(accepted) >= 3, accepted


def test_recorder_rounds_floats_and_rejects_unknown_values():
    import torch

    a, b = fingerprint.Recorder(), fingerprint.Recorder()
    a.add("x", torch.tensor([0.1234567891], dtype=torch.float64))
    b.add("x", torch.tensor([0.1234567891 + 1e-13], dtype=torch.float64))
    assert a.digest() == b.digest()
    big = torch.finfo(torch.float64).min
    special = fingerprint._canonical(torch.tensor([big, -big, float("nan"), float("inf"), 0.5]))
    assert special[2] == [-1, -2, -3, -2, 500000] and special[3] == [1, 1, 1, 1, 0]
    b.add("y", 1)
    assert a.digest() != b.digest()
    with pytest.raises(TypeError, match="cannot fingerprint"):
        a.add("z", object())


# ----- negative controls: behaviour changes change the fingerprint ----------------------------------

def test_an_off_by_one_in_a_layout_mask_changes_the_fingerprint(tmp_path, reference):
    root = repo_copy(tmp_path)
    edit(root / "spec_lib" / "masks" / "predicates.py", "(pos_k < sees_upto[..., :, None])",
         "(pos_k <= sees_upto[..., :, None])")
    changed = copy_fingerprint(root, ["masks"])
    assert changed["masks"] != reference["masks"]


def test_a_changed_acceptance_rule_changes_the_fingerprint(tmp_path, reference):
    root = repo_copy(tmp_path)
    edit(root / "spec_lib" / "verify.py", "accept = u < torch.clamp(p_d / q_d, max=1.0)",
         "accept = u < torch.clamp(0.9 * p_d / q_d, max=1.0)")
    changed = copy_fingerprint(root, ["verify", "toy"])
    assert changed["verify"] != reference["verify"] and changed["toy"] != reference["toy"]


# ----- refactors that keep behaviour keep it ---------------------------------------------------------

def test_a_comment_in_layouts_leaves_every_result_current(tmp_path, reference):
    """The issue's check: a comment added to ``masks/layouts.py`` changes no notebook's version
    (no cached fingerprint is invalidated either: the copy reads the same cache)."""
    root = repo_copy(tmp_path)
    layouts = root / "spec_lib" / "masks" / "layouts.py"
    layouts.write_text("# A comment added by a refactor.\n" + layouts.read_text().replace(
        "def build_layout(", "# Another one, mid-file.\ndef build_layout(", 1))
    code = ("import json\nfrom spec_lib.notebook import versions\n"
            f"print(json.dumps({{nb: versions.code_version(nb, 'cpu') for nb in {NOTEBOOKS!r}}}))")
    copied = in_copy(root, code, cache=fingerprint.cache_dir())
    assert copied == {nb: versions.code_version(nb, "cpu") for nb in NOTEBOOKS}


def test_renaming_a_private_function_leaves_the_fingerprint_unchanged(tmp_path, reference):
    root = repo_copy(tmp_path)
    renamed = 0
    for path in (root / "spec_lib").rglob("*.py"):
        text = path.read_text()
        if re.search(r"\b_build_ltr\b", text):
            path.write_text(re.sub(r"\b_build_ltr\b", "_build_left_to_right", text))
            renamed += 1
    assert renamed >= 1
    assert copy_fingerprint(root) == reference


def _split(module: Path, names: tuple[str, ...], new_name: str) -> None:
    """Move the top-level definitions ``names`` of ``module`` into a sibling module ``new_name``,
    imported back at the end of ``module`` (a module split, as a refactor does it)."""
    source = module.read_text()
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    moved, kept_names, imports = [], [], []
    spans = []
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append("".join(lines[start:node.end_lineno]))
        elif getattr(node, "name", None) in names:
            moved.append("".join(lines[start:node.end_lineno]))
            spans.append((start, node.end_lineno))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            kept_names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            kept_names += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    assert len(moved) == len(names), names
    for start, end in sorted(spans, reverse=True):
        del lines[start:end]
    header = "".join(i for i in imports if not i.startswith("from __future__"))
    back = f"from .{module.stem} import {', '.join(kept_names)}\n" if kept_names else ""
    module.with_name(f"{new_name}.py").write_text(
        f'"""Split out of {module.stem}."""\n\nfrom __future__ import annotations\n\n{header}{back}\n\n'
        + "\n\n".join(moved))
    module.write_text("".join(lines) + f"\n\nfrom .{new_name} import {', '.join(names)}  # noqa: E402\n")


def test_splitting_a_module_leaves_the_fingerprint_unchanged(tmp_path, reference):
    root = repo_copy(tmp_path)
    layouts = root / "spec_lib" / "masks" / "layouts.py"
    _split(layouts, ("LayoutTemplate",), "templates")
    assert "class LayoutTemplate" not in layouts.read_text()
    assert "class LayoutTemplate" in (layouts.parent / "templates.py").read_text()
    assert copy_fingerprint(root) == reference


# ----- the same fingerprint on another CPU instruction set ------------------------------------------

def test_the_fingerprint_does_not_depend_on_the_cpu_vector_isa(tmp_path, reference):
    """Committed results carry the fingerprint of the machine that made them, and CI may run on
    another: float64 and rounding to 1e-6 make the hashes equal across torch's AVX2 and AVX-512
    kernels (and MKL's).  On a machine without AVX-512 both runs use AVX2 and agree trivially."""
    root = repo_copy(tmp_path)
    pinned = in_copy(root, "import json\nfrom spec_lib.notebook import fingerprint as f\nprint(json.dumps(f.compute()))",
                     ATEN_CPU_CAPABILITY="avx2", MKL_ENABLE_INSTRUCTIONS="AVX2", ONEDNN_MAX_CPU_ISA="AVX2")
    assert pinned == reference


# ----- versions and their reasons --------------------------------------------------------------------

def test_stale_reasons_name_what_changed():
    current = versions.version_parts("11_packed_ss_greedy", "cpu")
    assert versions.stale_reasons(current, current) == []
    assert "no recorded" in versions.stale_reasons(None, current)[0]
    old = json.loads(json.dumps(current))
    old["code"]["spec_lib.studies.bench"] = "0" * 16
    old["code"]["parameters"] = "0" * 16
    old["code"]["spec_lib.studies.gone"] = "0" * 16
    model = next(iter(old["models"]))
    old["models"][model] = "f" * 16
    old["behaviour"]["masks"] = "0" * 16
    reasons = versions.stale_reasons(old, current)
    assert len(reasons) == 3 and model in reasons[1] and reasons[2].endswith("masks")
    assert reasons[0] == ("code changed: its parameters, spec_lib.studies.bench (changed), "
                          "spec_lib.studies.gone (no longer imported)")
    fewer = {**current, "behaviour": {k: v for k, v in current["behaviour"].items() if k != "stops"}}
    assert versions.stale_reasons(fewer, current) == ["now reaches more of the decoding core: stops"]
    assert versions.stale_reasons(current, fewer) == ["no longer reaches: stops"]
    legacy = {**current, "code": "0" * 16}                     # recorded before code was kept by part
    assert versions.stale_reasons(legacy, current) == [
        "the notebook, its parameters or the library code it imports changed"]


def test_a_notebook_depends_only_on_the_models_and_components_it_imports():
    quickstart, dedit = versions.version_parts("02_pathwise_dominance", "cpu"), \
        versions.version_parts("31_dedit_decoding", "cpu")
    assert quickstart["models"] == {} and "block_edit" not in quickstart["behaviour"]
    assert "cpu (dedit)" in dedit["models"] and "block_edit" in dedit["behaviour"]
    assert set(versions.version_parts("15_any_order_setdlm", "cpu")["models"]) == {"cpu/smax16 (anyorder)",
                                                                                 "cpu/smax32 (anyorder)"}


def test_ledger_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_LIB_OUTPUT_ROOT", str(tmp_path))
    assert versions.read_ledger("smoke") == {}
    entries = {"11_x": {"why": "behaviour of the decoding core changed: masks", "results_commit": "abc",
                        "found_at": "def"}, "02_y": {"why": "a | b", "results_commit": "none", "found_at": "def"}}
    versions.write_ledger("smoke", entries)
    read = versions.read_ledger("smoke")
    assert set(read) == {"11_x", "02_y"} and read["11_x"] == entries["11_x"] and read["02_y"]["why"] == "a / b"
    versions.write_ledger("smoke", {})
    assert versions.read_ledger("smoke") == {} and "None:" in versions.ledger_path("smoke").read_text()


def test_the_one_loader_adds_only_the_kinds_a_notebook_names():
    """``spec_lib.load`` imports its kinds by name; a notebook that reaches it depends on the
    models of the kinds it names (``load("deer", ...)``), not on every model the registry can
    load: 21 on DEER's, the feature-level drafters' (trained on DEdit's teacher set, so their
    pipeline imports DEdit's) and its target, 11 on the target only, 04 on the any-order models only."""
    from spec_lib.provenance import closure

    assert closure([versions.REGISTRY]) == [versions.REGISTRY]   # the registry itself reaches no loader
    pipelines = {stem: {k for k, v in versions.PIPELINES.items() if v in versions.code_closure(stem)}
                 for stem in ("04_any_order_correctness", "11_packed_ss_greedy", "21_deer_decoding")}
    assert pipelines == {"04_any_order_correctness": {"anyorder"}, "11_packed_ss_greedy": {"models"},
                         "21_deer_decoding": {"dedit", "drafters", "feature_heads", "models"}}
    assert versions.loaded_kinds(['spec_lib.load("deer", preset)', "checkpoint_key('dedit', p)",
                                  'load("nothing")']) == {"deer", "dedit"}
