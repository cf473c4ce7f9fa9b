"""Resumable training (issue: training that spans sessions): a loop killed part-way and
started again continues to the same weights, bit for bit, as a run never stopped; a state
that belongs to another run is refused or gives other weights (negative controls)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from spec_lib.training import (any_order, baselines, cache, dedit, deer, frozen_editors, proposal_lora,
                               self_speculative)
from spec_lib.training.loop import Resume, fit
from spec_lib.training.presets import PRESETS


class Killed(RuntimeError):
    pass


def _tiny_fit(resume, kill_at=None, seed=0, generator_seed=1):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1))
    generator = torch.Generator().manual_seed(generator_seed)
    if resume is not None:
        resume.generators = (generator,)

    def batch(step):
        if step == kill_at:
            raise Killed(step)
        x = torch.randn(16, 4, generator=generator)
        return x, x.sum(1, keepdim=True)

    def loss(model, batch):
        value = torch.nn.functional.mse_loss(model(batch[0]), batch[1])
        return value, {"mse": float(value.detach())}

    history = fit(model, batch, loss, steps=12, lr=1e-2, warmup=2, progress=False, resume=resume)
    return model, history


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_a_killed_loop_resumes_to_the_same_weights(tmp_path):
    plain, plain_history = _tiny_fit(None)
    path = tmp_path / "stage.pt"
    with pytest.raises(Killed):
        _tiny_fit(Resume(path, every=1e-9), kill_at=7)
    assert torch.load(path, weights_only=False)["step"] == 7
    resumed, history = _tiny_fit(Resume(path, every=1e-9))
    assert _same(plain, resumed)
    assert [r["mse"] for r in history] == [r["mse"] for r in plain_history]
    # negative controls: the same save with a foreign batch-generator state, or a foreign
    # global RNG state (dropout), continues to other weights: the test sees a lost state
    for part, foreign in (("generators", [torch.Generator().manual_seed(5).get_state()]),
                          ("rng", torch.Generator().manual_seed(5).get_state())):
        with pytest.raises(Killed):
            _tiny_fit(Resume(tmp_path / f"{part}.pt", every=1e-9), kill_at=7)
        saved = torch.load(tmp_path / f"{part}.pt", weights_only=False)
        saved[part] = foreign
        torch.save(saved, tmp_path / f"{part}.pt")
        other, _ = _tiny_fit(Resume(tmp_path / f"{part}.pt", every=1e-9))
        assert not _same(plain, other), part


def test_a_state_from_another_run_is_refused(tmp_path):
    path = tmp_path / "stage.pt"
    _tiny_fit(Resume(path, every=1e-9))
    saved = torch.load(path, weights_only=False)
    saved["step"] = 99
    torch.save(saved, path)
    with pytest.raises(ValueError, match="past this run's 12 steps"):
        _tiny_fit(Resume(path, every=1e-9))
    with pytest.raises(ValueError, match="every must be > 0"):
        Resume(path, every=0)


def test_the_self_speculative_pipeline_resumes_both_stages(tmp_path, monkeypatch):
    """The smoke preset with the unlikelihood stage 2 and a refresh, killed inside stage 2
    (after the first refresh) and started again: identical weights and stage-2 history."""
    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setenv(cache.RESUME_EVERY_ENV, "1e-9")
    model_config, config = PRESETS["smoke"]
    config = type(config)(**{**config.__dict__, "steps": 6, "distill_steps": 6, "distill_refresh": 3,
                             "distill_unlikelihood": 1.0, "distill_prompts": 8, "eval_every": 3})
    plain = self_speculative.train(model_config, config, progress=False)
    real = self_speculative.make_dual_mode_batch
    calls = {"n": 0}

    def dying(*args, **kwargs):
        calls["n"] += kwargs.get("min_cut") is not None      # stage-2 batches only
        if calls["n"] == 5:                        # stage 2, step 4 (after the refresh at step 3)
            raise Killed("stage 2")
        return real(*args, **kwargs)

    monkeypatch.setattr(self_speculative, "make_dual_mode_batch", dying)
    with pytest.raises(Killed):
        self_speculative.train(model_config, config, progress=False, resume=True)
    monkeypatch.setattr(self_speculative, "make_dual_mode_batch", real)
    key = self_speculative.checkpoint_key(model_config, config)
    assert sorted(p.name for p in cache.partial_dir("models", key).iterdir()) == [
        "stage_1__dual-mode.pt", "stage_2__self-distillation.pt"]
    resumed = self_speculative.train(model_config, config, progress=False, resume=True)
    assert _same(plain.hf_model, resumed.hf_model)
    assert "unlikelihood" in plain.history and plain.history["unlikelihood"].notna().any()
    cols = ["stage", "step", "split", "ar", "diffusion", "unlikelihood"]
    assert plain.history[cols].equals(resumed.history[cols])
    assert resumed.record["train_seconds"] > 0


# ----- the pipelines: killed inside a later stage, started again, the same saved weights -----

def _spied(real, label: str | None = None, at: int | None = None, seen: dict | None = None):
    """``fit`` whose batch function raises at step ``at`` of the stage called ``label``, and
    records in ``seen`` the steps whose batches each stage draws."""
    def fit(model, make_batch, *args, **kwargs):
        def batch(step):
            if kwargs.get("label") == label and step == at:
                raise Killed(label)
            if seen is not None:
                seen.setdefault(kwargs.get("label"), []).append(step)
            return make_batch(step)
        return real(model, batch, *args, **kwargs)

    return fit


def _differing(networks: dict, path) -> list[str]:
    """The networks of ``networks`` that differ, in any tensor, from those saved at ``path/<name>/``."""
    from safetensors.torch import load_file

    differing = []
    for name, network in networks.items():
        saved, state = load_file(path / name / "model.safetensors"), network.state_dict()
        assert saved and set(saved) <= set(state), name
        if not all(torch.equal(saved[tensor], state[tensor]) for tensor in saved):
            differing.append(name)
    return differing


def _dedit_smoke():
    from spec_lib.training.block_drafters import DEDIT_PRESETS

    return dataclasses.replace(DEDIT_PRESETS["smoke"], variants=("dflash", "dedit"), steps=6, expansion_steps=4,
                               eval_every=3)


def _pipeline(name: str):
    """``(module, kind, key, plain run -> networks, resumable entry -> checkpoint folder, stage to kill)``."""
    if name == "deer":
        config = deer.D2A_PRESETS["smoke"]
        return (deer, "drafters", deer.deer_cache_key(config),
                lambda: deer.train_deer(config, progress=False).hf_models,
                lambda: deer.load_or_train_deer(config, progress=False)[1], "stage2_alpha1.02")
    if name == "dedit":
        config = _dedit_smoke()
        return (dedit, "dedit", dedit.dedit_cache_key(config),
                lambda: dedit.train_block_drafters(config, progress=False)[0],
                lambda: dedit.save_block_drafters(config, progress=False), "dflash_w12")
    if name == "baselines":
        config = baselines.BaselineConfig(dedit=_dedit_smoke(), gru_hidden=16, mlp_hidden=16, markov_rank=8,
                                          expansions=(("domino", 12),))
        return (baselines, "baselines", baselines.baseline_cache_key(config),
                lambda: baselines.train_baselines(config, progress=False)[0],
                lambda: baselines.save_baselines(config, progress=False), "domino_w12")
    config = frozen_editors.FrozenEditorConfig(dedit=_dedit_smoke(), variants=("full", "no_joint"), steps=6)
    return (frozen_editors, "frozen_editors", frozen_editors.frozen_editor_key(config),
            lambda: frozen_editors.train_frozen_editors(config, progress=False)[0],
            lambda: frozen_editors.save_frozen_editors(config, progress=False), "no_joint")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """One artifacts folder for the pipelines: the smoke target trains once, in the first test."""
    return tmp_path_factory.mktemp("artifacts")


@pytest.mark.parametrize("name", ["deer", "dedit", "baselines", "frozen_editors"])
def test_a_killed_pipeline_resumes_to_the_same_weights(name, artifacts, monkeypatch):
    """Killed at step 2 of a later stage (models copied after earlier stages, a generator shared
    across them), then started again: every saved network equals the uninterrupted run's."""
    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(artifacts))
    monkeypatch.setenv(cache.RESUME_EVERY_ENV, "1e-9")
    module, kind, key, plain, entry, stage = _pipeline(name)
    networks = plain()
    real_fit = module.fit
    monkeypatch.setattr(module, "fit", _spied(real_fit, stage, 2))
    with pytest.raises(Killed):
        entry()
    partial = cache.partial_dir(kind, key)
    assert torch.load(partial / f"{stage}.pt", weights_only=False)["step"] == 2
    finished = {p.stem for p in partial.iterdir()} - {stage}
    assert finished                                                 # the killed stage is a later one
    seen: dict = {}
    monkeypatch.setattr(module, "fit", _spied(real_fit, seen=seen))
    path = entry()
    assert not finished & set(seen) and seen[stage][0] == 2        # resumed, not trained again
    assert sorted(networks) == sorted(p.name for p in path.iterdir() if p.is_dir())
    assert _differing(networks, path) == []
    assert not partial.exists()
    assert json.loads((path / "record.json").read_text())["train_seconds"] > 0


def test_a_resume_without_the_shared_generator_gives_other_weights(artifacts, monkeypatch):
    """Negative control: DEER's stages share one batch generator; with Resumes that leave it out,
    a run killed in Stage I continues from the generator's first state: other Stage I weights."""
    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(artifacts))
    monkeypatch.setenv(cache.RESUME_EVERY_ENV, "1e-9")
    config = dataclasses.replace(deer.D2A_PRESETS["smoke"], alphas=(1.01,))      # its own key, the same teacher
    networks = deer.train_deer(config, progress=False).hf_models
    real_resume, real_fit = deer.stage_resume, deer.fit
    monkeypatch.setattr(deer, "stage_resume", lambda kind, key, stage, generators=(), state=None:
                        real_resume(kind, key, stage, (), state))
    monkeypatch.setattr(deer, "fit", _spied(real_fit, "stage1", 3))
    with pytest.raises(Killed):
        deer.load_or_train_deer(config, progress=False)
    monkeypatch.setattr(deer, "fit", real_fit)
    path = deer.load_or_train_deer(config, progress=False)[1]
    assert _differing(networks, path) == ["stage1", "stage2_alpha1.01", "ar_distilled"]


def _saved_tensors(path) -> dict:
    """Every tensor of every ``*.safetensors`` file under ``path``, by relative file and name."""
    from safetensors.torch import load_file

    return {(f.relative_to(path).as_posix(), name): tensor for f in sorted(path.rglob("*.safetensors"))
            for name, tensor in load_file(f).items()}


def _same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_proposal_lora_pipeline_resumes_in_the_adapter_stage(tmp_path, monkeypatch):
    """Killed inside the adapter's stage (peft wraps the AR base in place after the first stage):
    the saved base and adapter equal the uninterrupted run's."""
    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setenv(cache.RESUME_EVERY_ENV, "1e-9")
    model_config, train_config, lora_config = proposal_lora.LORA_PRESETS["smoke"]
    monkeypatch.setitem(proposal_lora.LORA_PRESETS, "smoke", (model_config, train_config, dataclasses.replace(
        lora_config, base_steps=6, steps=6, eval_every=3)))
    plain = _saved_tensors(proposal_lora.train("smoke", tmp_path / "plain", progress=False))
    real_fit, key, seen = proposal_lora.fit, proposal_lora.lora_key("smoke"), {}
    monkeypatch.setattr(proposal_lora, "fit", _spied(real_fit, "proposal LoRA", 2))
    with pytest.raises(Killed):
        proposal_lora.load_or_train("smoke", progress=False)
    assert sorted(p.name for p in cache.partial_dir("lora", key).iterdir()) == ["AR_base.pt", "proposal_LoRA.pt"]
    monkeypatch.setattr(proposal_lora, "fit", _spied(real_fit, seen=seen))
    trained = proposal_lora.load_or_train("smoke", progress=False)
    assert seen == {"proposal LoRA": [2, 3, 4, 5]}                  # resumed, the AR base not trained again
    resumed = _saved_tensors(trained.adapter_path.parent)
    assert any(f.startswith("adapter/") for f, _ in plain) and _same_tensors(plain, resumed)
    assert not cache.partial_dir("lora", key).exists()
    assert trained.record["adapter_seconds"] > 0


def test_the_any_order_pipeline_resumes_the_continued_preset(tmp_path, monkeypatch):
    """smax32 continues smax16: killed inside smax32's training (smax16 then saved, loaded from
    disk on the restart), the two checkpoints equal those of an uninterrupted run."""
    monkeypatch.setenv(cache.RESUME_EVERY_ENV, "1e-9")
    monkeypatch.setitem(any_order.CONFIGS, "smoke", {name: dataclasses.replace(config, steps=6, eval_every=3)
                                                     for name, config in any_order.CONFIGS["smoke"].items()})
    keys = [any_order.checkpoint_key("smoke", name) for name in ("smax16", "smax32")]
    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(tmp_path / "plain"))
    any_order.train("smoke", "smax32", progress=False)                 # trains smax16 first, in this process
    plain = [_saved_tensors(cache.checkpoint_dir("anyorder", key)) for key in keys]
    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(tmp_path / "resumed"))
    real_fit, seen = any_order.fit, {}
    monkeypatch.setattr(any_order, "fit", _spied(real_fit, "any-order smax32", 2))
    with pytest.raises(Killed):
        any_order.load_or_train("smoke", "smax32", progress=False)
    assert (cache.partial_dir("anyorder", keys[1]) / "any-order_smax32.pt").is_file()
    monkeypatch.setattr(any_order, "fit", _spied(real_fit, seen=seen))
    trained = any_order.load_or_train("smoke", "smax32", progress=False)
    assert seen == {"any-order smax32": [2, 3, 4, 5]}               # resumed; smax16 loaded, not trained
    for key, tensors in zip(keys, plain):
        assert tensors and _same_tensors(tensors, _saved_tensors(cache.checkpoint_dir("anyorder", key))), key
        assert not cache.partial_dir("anyorder", key).exists()
    assert trained.record["seconds"] > 0
