"""The committed models: present for every result, whole (sha256 against the manifest), keyed by the
current training code, within the size budget; loaded instead of trained, refused when tampered
with, bypassed by a retrain; committing writes a manifest and (optionally) float16 weights."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from spec_lib.notebook.params import NOTEBOOKS_DIR
from spec_lib.notebook.results import results_dir
from spec_lib.notebook.versions import read_ledger
from spec_lib.notebook import store
from spec_lib.training import cache

BUDGET_BYTES = 150 * 10**6
COMMITTED_RESULTS = sorted(p.stem for p in NOTEBOOKS_DIR.glob("*.ipynb") if (results_dir("cpu") / f"{p.stem}.json").exists())


def committed_keys() -> set[str]:
    return {f"{p.parent.name}/{p.name}" for p in store.committed_folders()}


def test_committed_models_are_whole_current_and_within_budget():
    """Every committed folder matches its manifest (sha256 of each file) and its key is one the
    current training code computes for the cpu profile; every cpu checkpoint is committed, or
    pending while every result that used it is listed stale (a retraining spanning sessions)."""
    problems = {k: v for k, v in store.verify_all("cpu").items() if v}
    assert not problems, problems
    unlisted = store.unlisted_users_of_pending("cpu", read_ledger("cpu"))
    assert not unlisted, f"checkpoints not committed, used by results the stale ledger does not list: {unlisted}"
    assert store.size_bytes() <= BUDGET_BYTES, f"{store.size_bytes() / 1e6:.1f} MB of committed models"
    for folder in store.committed_folders():
        manifest = json.loads((folder / cache.MANIFEST).read_text())
        assert manifest["trained_on"]["cpu_capability"] and manifest["train_seconds"] > 0, folder
        assert manifest["parameters"] and all(n > 0 for n in manifest["parameters"].values()), folder


@pytest.mark.parametrize("stem", COMMITTED_RESULTS)
def test_every_model_a_committed_result_used_is_committed(stem):
    """A result records the models it used as ``"<preset> (<kind>)": "<key> <weights>"``; each must
    be committed and loaded from the commit (not from a local ``artifacts/`` training)."""
    if stem in read_ledger("cpu"):
        pytest.skip(f"{stem} is listed stale in results/cpu/STALE.md: its rerun records the models it uses")
    result = json.loads((results_dir("cpu") / f"{stem}.json").read_text())
    assert "code_parts" in result, f"{stem}.json predates per-part code versions: rerun it"
    used = result["code_parts"].get("models", {})
    names = {name.split(" (")[1].rstrip(")") + "/" + value.split()[0] for name, value in used.items()}
    assert names <= committed_keys(), f"{stem} used models that are not committed: {sorted(names - committed_keys())}"
    local = sorted(name for name, value in used.items() if not value.split()[-1].startswith("committed:"))
    assert not local, f"{stem} ran on locally trained weights, not the committed ones: {local}"


def test_a_pending_checkpoint_needs_every_result_that_used_it_listed_stale(tmp_path, monkeypatch):
    """Negative control of the rule above: with no committed model every checkpoint is pending,
    and each result that used one is named until the ledger lists it."""
    monkeypatch.setenv("SPEC_LIB_MODELS", str(tmp_path / "none"))
    assert {f"{c.kind}/{c.key}" for c in store.pending("cpu")} == {
        f"{c.kind}/{c.key}" for c in store.profile_checkpoints("cpu")}
    unlisted = store.unlisted_users_of_pending("cpu", {})
    assert "11_packed_ss_greedy" in unlisted["cpu (models)"]
    assert "02_pathwise_dominance" not in sum(unlisted.values(), [])
    every = {stem: {} for stem in sum(unlisted.values(), [])}
    assert store.unlisted_users_of_pending("cpu", every) == {}


@pytest.fixture
def one_committed(tmp_path, monkeypatch):
    """A copy of the smallest committed checkpoint in a models folder of its own."""
    folder = min(store.committed_folders(), key=lambda p: sum(f.stat().st_size for f in p.rglob("*")))
    models = tmp_path / "models"
    shutil.copytree(folder, models / folder.parent.name / folder.name)
    monkeypatch.setenv("SPEC_LIB_MODELS", str(models))
    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setattr(cache, "_VERIFIED", set())
    return models / folder.parent.name / folder.name


def test_a_tampered_or_extra_file_is_caught_and_refused_at_load(one_committed):
    kind, key = one_committed.parent.name, one_committed.name
    assert cache.verify_checkpoint(one_committed) == []
    assert cache.checkpoint_dir(kind, key) == one_committed
    weights = sorted(one_committed.rglob("*.safetensors"))[0]
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    cache._VERIFIED.clear()
    problems = cache.verify_checkpoint(one_committed)
    assert len(problems) == 1 and "changed since it was committed" in problems[0]
    with pytest.raises(RuntimeError, match="does not match its manifest"):
        cache.checkpoint_dir(kind, key)
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    (one_committed / "notes.txt").write_text("x")
    assert cache.verify_checkpoint(one_committed) == ["not in the manifest: notes.txt"]


def test_a_retrain_bypasses_the_committed_models_which_are_never_written(one_committed, monkeypatch, tmp_path):
    kind, key = one_committed.parent.name, one_committed.name
    monkeypatch.setenv(cache.RETRAIN_ENV, "1")
    assert cache.checkpoint_dir(kind, key) == tmp_path / "artifacts" / kind / key
    monkeypatch.setenv(cache.RETRAIN_ENV, "yes")
    with pytest.raises(ValueError, match="SPEC_LIB_RETRAIN must be"):
        cache.checkpoint_dir(kind, key)
    with pytest.raises(RuntimeError, match="refusing to write into the committed models"):
        with cache.checkpoint_writer(one_committed):
            pass


def test_an_edited_trainer_makes_a_committed_key_stale(tmp_path, monkeypatch):
    """The manifest keys are checked against the keys the current code computes: after an edit
    of the training loss, the self-speculative checkpoints no longer match."""
    from spec_lib import provenance

    copy = tmp_path / "spec_lib"
    shutil.copytree(provenance.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "PACKAGE_DIR", copy)
    loss = copy / "training" / "dual_mode.py"
    loss.write_text(loss.read_text().replace("loss = ar + diffusion_weight * diffusion",
                                             "loss = ar + 2 * diffusion_weight * diffusion"))
    stale = {k for k, v in store.verify_all("cpu").items() if any("no checkpoint of profile" in p for p in v)}
    assert stale and all(not k.startswith("anyorder/") for k in stale), stale      # any-order has its own loss
    assert {f"models/{c.key}" for c in store.profile_checkpoints("cpu") if c.kind == "models"}.isdisjoint(
        committed_keys())


def test_commit_writes_a_manifest_and_float16_weights_that_load_as_float32(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from spec_lib.architectures import build_qwen3

    monkeypatch.setenv("SPEC_LIB_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(tmp_path / "artifacts"))
    model = build_qwen3(40, hidden_size=32, num_layers=1, num_heads=4, seed=0)
    with cache.checkpoint_writer(tmp_path / "artifacts" / "models" / "k0") as folder:
        model.save_pretrained(folder)
        (folder / "record.json").write_text(json.dumps({"train_seconds": 1.5}))
    checkpoint = store.Checkpoint("models", "k0", "smoke", "a test model", lambda: None)
    monkeypatch.setattr(store, "profile_checkpoints", lambda profile: [checkpoint])
    with pytest.raises(ValueError, match="dtype must be one of"):
        store.commit("smoke", "int8")
    [written] = store.commit("smoke", "float16")
    manifest = json.loads((written / cache.MANIFEST).read_text())
    assert manifest["key"] == "k0" and manifest["train_seconds"] == 1.5 and manifest["weights_dtype"] == "float16"
    assert manifest["trained_on"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert manifest["parameters"] == {".": sum(p.numel() for p in model.parameters())}    # tied: counted once
    assert cache.verify_checkpoint(written) == [] and store.status(checkpoint) == "committed"
    loaded = AutoModelForCausalLM.from_pretrained(cache.checkpoint_dir("models", "k0"), local_files_only=True)
    for (name, a), b in zip(loaded.state_dict().items(), model.state_dict().values()):
        assert a.dtype == torch.float32 and torch.equal(a, b.half().float()), name
    monkeypatch.setattr(store, "profile_checkpoints", lambda profile: [store.Checkpoint("models", "k1", "smoke", "",
                                                                                         lambda: None)])
    with pytest.raises(FileNotFoundError, match="not trained yet"):
        store.commit("smoke")
