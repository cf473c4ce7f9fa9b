"""Seed 002's Table 2(b) editors (spec_lib.training.frozen_editors): the frozen proposer gets no
gradient, the loss is DEdit's own when the proposer is the editor itself, and the smoke pipeline
trains one editor per variant from DFlash's initial weights and caches them."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from spec_lib.training import block_edit
from spec_lib.training.block_drafters import DEDIT_PRESETS
from spec_lib.training.frozen_editors import (VARIANTS, FrozenEditorConfig, frozen_edit_loss, load_frozen_editors,
                                              save_frozen_editors, train_frozen_editors)

from .conftest import DEDIT_WIDTH, _dedit_batch


@pytest.fixture(scope="module")
def batch_and_nets(trained_pair, trained_hf_model):
    """The tiny float64 target, its briefly trained DEdit network and one batch of anchor blocks."""
    target_hf, network, _ = trained_pair
    rows = torch.as_tensor(trained_hf_model.chain.sample_sequences(4, 40, seed=11), dtype=torch.long)
    batch = _dedit_batch(target_hf, list(network.config.target_layer_ids), rows, 8, torch.Generator().manual_seed(5))
    return target_hf, network, batch, block_edit.position_weights(DEDIT_WIDTH, 2.0).double()


@pytest.mark.parametrize("options", list(VARIANTS.values()), ids=list(VARIANTS))
def test_with_the_editor_as_its_own_proposer_the_loss_is_dedits(batch_and_nets, options):
    target_hf, network, batch, weights = batch_and_nets
    embed, head = target_hf.get_input_embeddings(), target_hf.get_output_embeddings()
    ours, parts = frozen_edit_loss(network, network, embed, head, batch, weights, **options)
    theirs, reference = block_edit.dedit_loss(network, embed, head, batch, weights, **options)
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), rel=1e-12)
    for key in ("edit", "p1_accuracy", "p2_accuracy", "gt_selection", "overwrite"):
        assert parts[key] == pytest.approx(reference[key], rel=1e-12)


def test_the_proposer_stays_frozen_and_the_editor_learns_from_its_proposals(batch_and_nets):
    target_hf, network, batch, weights = batch_and_nets
    embed, head = target_hf.get_input_embeddings(), target_hf.get_output_embeddings()
    proposer, editor = copy.deepcopy(network), copy.deepcopy(network)
    with torch.no_grad():
        for p in editor.parameters():
            p.add_(0.01 * torch.randn_like(p))
    loss, parts = frozen_edit_loss(editor, proposer, embed, head, batch, weights, joint=True, mix=True)
    loss.backward()
    assert all(p.grad is None for p in proposer.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in editor.parameters() if p.requires_grad)
    assert float(loss.detach()) == pytest.approx(parts["unmask"] + parts["edit"], rel=1e-12)
    # P1 is the proposer's: its accuracy does not move when only the editor changes.
    _, same = frozen_edit_loss(copy.deepcopy(network), proposer, embed, head, batch, weights, joint=False, mix=False)
    assert same["p1_accuracy"] == parts["p1_accuracy"] and "unmask" not in same


def test_smoke_pipeline_trains_one_editor_per_variant_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(tmp_path))
    config = FrozenEditorConfig(dedit=DEDIT_PRESETS["smoke"], steps=10)
    proposer, editors, history, record = load_frozen_editors(config, progress=False)
    assert set(editors) == set(VARIANTS) and record["steps"] == 10
    assert set(history["model"]) == set(VARIANTS)
    held = history[history["split"] == "heldout"]
    # Every editor reads the same frozen P1: its held-out accuracy is one number across variants and steps.
    assert held["p1_accuracy"].nunique() == 1
    assert held[held["model"] == "no_both"]["unmask"].isna().all() and held[held["model"] == "full"]["unmask"].notna().all()
    flat = {name: torch.cat([p.detach().flatten() for p in e.parameters()]) for name, e in editors.items()}
    assert not torch.equal(flat["full"], flat["no_joint"])             # L_unmask added or not: different editors
    # A second call loads the cache instead of training.
    monkeypatch.setattr("spec_lib.training.frozen_editors.train_frozen_editors",
                        lambda *a, **k: pytest.fail("retrained cached editors"))
    assert save_frozen_editors(config, progress=False).name == record["checkpoint_key"]
    with pytest.raises(ValueError, match="drafts blocks of 12, the editors are trained at W = 8"):
        train_frozen_editors(dataclasses.replace(config, proposer="dflash_w12"), progress=False)


def test_bad_configs_are_named():
    smoke = DEDIT_PRESETS["smoke"]
    with pytest.raises(TypeError, match="config must be a FrozenEditorConfig"):
        save_frozen_editors(smoke)
    with pytest.raises(ValueError, match="proposer must be a DFlash network of config.dedit"):
        save_frozen_editors(FrozenEditorConfig(dedit=smoke, proposer="dedit"))
    with pytest.raises(ValueError, match="variants must be a non-empty subset"):
        save_frozen_editors(FrozenEditorConfig(dedit=smoke, variants=("full", "nope")))
    with pytest.raises(ValueError, match="steps must be None or an int >= 1"):
        save_frozen_editors(FrozenEditorConfig(dedit=smoke, steps=0))
