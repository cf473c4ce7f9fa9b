"""Seed 002's Table 2(b) editors (spec_lib.training.frozen_editors): the frozen proposer gets no
gradient, the loss is DEdit's own when the proposer is the editor itself, and the smoke pipeline
trains one editor per variant from DFlash's initial weights and caches them."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import torch

from spec_lib.drafters.feature_block import FeatureBlockDrafter
from spec_lib.studies import editing, frozen_editing
from spec_lib.training import block_edit
from spec_lib.training.block_drafters import DEDIT_PRESETS
from spec_lib.training.dedit import replace_block_size
from spec_lib.training.frozen_editor_drafters import FROZEN_EDITOR_PRESETS, load_frozen_editors
from spec_lib.training.frozen_editors import (VARIANTS, FrozenEditorConfig, frozen_edit_loss, save_frozen_editors,
                                              train_frozen_editors)

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
    loaded = load_frozen_editors("smoke", progress=False)
    config, history, record = loaded.config, loaded.history, loaded.record
    assert config == FROZEN_EDITOR_PRESETS["smoke"]
    assert set(loaded.editors) == set(VARIANTS) and record["steps"] == config.steps
    assert set(history["model"]) == set(VARIANTS)
    held = history[history["split"] == "heldout"]
    # Every editor reads the same frozen P1: its held-out accuracy is one number across variants and steps.
    assert held["p1_accuracy"].nunique() == 1
    assert held[held["model"] == "no_both"]["unmask"].isna().all() and held[held["model"] == "full"]["unmask"].notna().all()
    flat = {name: torch.cat([p.detach().flatten() for p in e.parameters()]) for name, e in loaded.editors.items()}
    assert not torch.equal(flat["full"], flat["no_joint"])             # L_unmask added or not: different editors
    # The selection variants reach ProposalMix: other ground-truth rates on the same P1.
    rates = held.groupby("model")["gt_selection"].mean()
    assert rates["select_low"] != rates["full"] and rates["rule_fraction"] != rates["full"]
    # A second call loads the cache instead of training.
    monkeypatch.setattr("spec_lib.training.frozen_editors.train_frozen_editors",
                        lambda *a, **k: pytest.fail("retrained cached editors"))
    assert save_frozen_editors(config, progress=False).name == record["checkpoint_key"]
    with pytest.raises(ValueError, match="preset must be one of"):
        load_frozen_editors("huge")


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
    with pytest.raises(ValueError, match="drafts blocks of 12, the editors are trained at W = 8"):
        train_frozen_editors(FrozenEditorConfig(dedit=smoke, proposer="dflash_w12"))     # before any training


# ----- Table 2(b)'s replay (spec_lib.studies.frozen_editing) -----------------------------------

def _greedy(target_hf, n=3, tokens=30):
    prompts = {"chain": [target_hf.chain.sample_sequences(1, 10, seed=400 + i)[0].tolist() for i in range(n)]}
    outputs = [target_hf.generate(torch.tensor([p]), max_new_tokens=tokens, do_sample=False, eos_token_id=None,
                                  pad_token_id=0)[0, len(p):].tolist() for p in prompts["chain"]]
    return prompts, pd.DataFrame({"method": "ar", "slice": "chain", "prompt": range(n), "output": outputs})


def test_an_editor_that_is_its_own_proposer_replays_as_dedit(trained_pair):
    """With the proposer as the editor, the two-network replay is DEdit's own P1 -> P2 replay,
    row for row; with the P1 network replaced the P1 rows are the replaced network's."""
    target_hf, network, _ = trained_pair
    prompts, greedy = _greedy(target_hf)
    ours = frozen_editing.replay_slices(target_hf, network, {"self": network}, greedy, prompts)["self"]
    reference = editing.replay_slices(target_hf, network, greedy, prompts, passes=2)
    pd.testing.assert_frame_equal(ours.reset_index(drop=True), reference[ours.columns].reset_index(drop=True),
                                  check_dtype=False)
    other = copy.deepcopy(network)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn_like(p))
    mixed = frozen_editing.replay_slices(target_hf, other, {"self": network}, greedy, prompts)["self"]
    p1_other = editing.replay_slices(target_hf, other, greedy, prompts, passes=1)
    pd.testing.assert_frame_equal(mixed[mixed["pass"] == 1].reset_index(drop=True),
                                  p1_other[mixed.columns].reset_index(drop=True), check_dtype=False)
    assert not mixed[mixed["pass"] == 2]["proposal"].reset_index(drop=True).equals(
        ours[ours["pass"] == 2]["proposal"].reset_index(drop=True))                # P2 edits the other P1


def test_ablation_table_is_tau_at_p2_relative_to_full():
    def rounds(accepted_p2):
        rows = []
        for anchor in range(0, 40):
            rows.append({"anchor": anchor, "pass": 1, "accepted": 1, "slice": "s", "prompt": 0})
            rows.append({"anchor": anchor, "pass": 2, "accepted": accepted_p2, "slice": "s", "prompt": 0})
        return pd.DataFrame(rows)

    table = frozen_editing.ablation_table({"full": rounds(3), "no_mix": rounds(1)}).set_index(["editor", "slice"])
    assert table.loc[("full", "s"), "tau_p2"] == 4 and table.loc[("no_mix", "s"), "tau_p2"] == 2
    assert table.loc[("no_mix", "macro"), "delta_tau"] == -2 and table.loc[("full", "macro"), "delta_tau"] == 0
    assert (table["tau_p1"] == 2).all()
    with pytest.raises(ValueError, match="reference must be one of"):
        frozen_editing.ablation_table({"no_mix": rounds(1)})


def test_replay_names_bad_networks(trained_pair, trained_heads):
    target_hf, network, _ = trained_pair
    domino = trained_heads[1]["domino"][0]
    with pytest.raises(TypeError, match="editor 'd' must be a FeatureBlockDrafter, got DominoNetwork"):
        frozen_editing.replay_rounds(target_hf, network, {"d": domino}, list(range(30)), 5)
    with pytest.raises(TypeError, match="proposer must be a FeatureBlockDrafter, got DominoNetwork"):
        frozen_editing.replay_rounds(target_hf, domino, {"e": network}, list(range(30)), 5)
    wider = FeatureBlockDrafter(replace_block_size(network.config, DEDIT_WIDTH + 2))
    with pytest.raises(ValueError, match="proposer and editor 'w' must share block_size"):
        frozen_editing.replay_rounds(target_hf, network, {"w": wider}, list(range(30)), 5)
    prompts, greedy = _greedy(target_hf, 1)
    with pytest.raises(ValueError, match="no responses of method 'deer'"):
        frozen_editing.replay_slices(target_hf, network, {"e": network}, greedy, prompts, method="deer")
