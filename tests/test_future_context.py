"""Seed 002's Figure 3(b): DEdit's editor against Domino's causal corrector on the same
proposals (spec_lib.studies.future_context): the replay is Domino's real decode, the editor
reads Domino's backbone proposal slot for slot, and the stratified slope recovers a known
effect where the pooled slope does not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from spec_lib import decode
from spec_lib.drafters.feature_target import FeatureTarget
from spec_lib.drafters.head_block import HeadBlockDrafter
from spec_lib.studies import editing, future_context
from spec_lib.studies.editing import anchor_blocks
from spec_lib.training import block_edit

from .conftest import MASK_ID


@pytest.fixture(scope="module")
def replayed(trained_heads, trained_pair):
    """Domino (W = 5) and the tiny DEdit editor (W = 6) replayed on the target's greedy outputs
    of four chain prompts, as a benchmark grid would hold them."""
    target_hf, trained, _ = trained_heads
    domino, editor = trained["domino"][0], trained_pair[1]
    prompts = {"chain": [target_hf.chain.sample_sequences(1, 10, seed=300 + i)[0].tolist() for i in range(4)]}
    outputs = [decode(FeatureTarget(target_hf, MASK_ID, domino.config.target_layer_ids), p, schedule="ar", width=1,
                      max_new_tokens=40).tokens for p in prompts["chain"]]
    greedy = pd.DataFrame({"method": "ar", "slice": "chain", "prompt": range(4), "output": outputs})
    rounds = future_context.replay_slices(target_hf, domino, {"dedit": editor}, greedy, prompts)["dedit"]
    return target_hf, domino, editor, greedy, prompts, rounds


def test_replayed_rounds_are_dominos_real_decode(replayed):
    """Every round a float64 Domino decode visits after its first (which has no target
    features yet) accepts exactly the replayed A; a replay that is one token off is caught."""
    target_hf, domino, _, greedy, prompts, rounds = replayed
    drafter = HeadBlockDrafter(FeatureTarget(target_hf, MASK_ID, domino.config.target_layer_ids), domino)
    assert editing.replay_agrees_with_decoding(drafter.target, drafter, rounds, greedy, prompts, min_share=1.0)
    off = rounds.assign(accepted=rounds["accepted"] + 1)
    assert not editing.replay_agrees_with_decoding(drafter.target, drafter, off, greedy, prompts, min_share=1.0)
    assert len(future_context.visited(rounds)) < len(rounds)                  # the walk skips accepted anchors
    assert (rounds["accepted"] >= 2).any()                                    # multi-token rounds occur


def test_rounds_compare_the_same_proposal_over_the_same_slots(replayed):
    """The proposal's and both corrections' A are leading matches with the target's tokens over
    m = min(W_domino, W_editor - 1) slots; the future count is the proposal's correct slots after
    its first mismatch."""
    target_hf, domino, editor, greedy, prompts, rounds = replayed
    m = min(domino.config.block_size, editor.config.block_size - 1)
    for row in rounds.itertuples():
        sequence = prompts[row.slice][row.prompt] + greedy["output"][row.prompt]
        target = np.array(sequence[row.anchor + 1: row.anchor + 1 + m])
        lead = {name: int(np.cumprod(np.array(tokens[:m]) == target).sum())
                for name, tokens in (("p", row.backbone), ("d", row.proposal), ("e", row.edited))}
        assert (lead["p"], lead["d"], lead["e"]) == (row.accepted_proposal, row.accepted_domino, row.accepted_editor)
        assert row.future_correct == int((np.array(row.backbone[:m]) == target)[lead["p"] + 1:].sum())
        assert row.advantage == row.accepted_editor - row.accepted_domino
        # The corrector over the proposal reads what Domino's own loop reads until their first
        # difference, so their tokens agree through it (teacher-forced and looped heads agree).
        differ = [j for j, (a, b) in enumerate(zip(row.proposal, row.backbone)) if a != b]
        k = differ[0] if differ else len(row.proposal) - 1
        assert row.corrector[: k + 1] == row.proposal[: k + 1]
        assert row.accepted_corrector == int(np.cumprod(np.array(row.corrector[:m]) == target).sum())
        assert row.advantage_over_corrector == row.accepted_editor - row.accepted_corrector
    assert (rounds["accepted_corrector"] != rounds["accepted_domino"]).any()    # the two comparisons differ


def test_editor_reads_dominos_proposal_at_the_same_anchor():
    block = torch.tensor([[7, 0, 0, 0], [8, 0, 0, 0], [9, 0, 0, 0]])           # editor W = 4, MASK = 0
    proposal = torch.tensor([[11, 12, 13, 14, 15], [21, 22, 23, 24, 25]])       # Domino W = 5 at anchors 5, 3
    inputs = future_context.editor_inputs(block, torch.tensor([3, 4, 5]), torch.tensor([5, 3]), proposal)
    assert inputs.tolist() == [[7, 21, 22, 23], [8, 0, 0, 0], [9, 11, 12, 13]]
    with pytest.raises(ValueError, match="the editor needs 3"):
        future_context.editor_inputs(block, torch.tensor([3, 4, 5]), torch.tensor([5, 3]), proposal[:, :2])


def test_edited_tokens_are_the_editors_pass_on_that_anchors_proposal(replayed):
    """Recomputed one anchor at a time on a sequence cut right after the anchor's block (so the
    anchors, and their batch indices, differ from the replay's): the editor's pass on
    ``[y_a, backbone_1 .. backbone_{W_e - 1}]`` gives the row's ``edited`` tokens."""
    target_hf, domino, editor, greedy, prompts, rounds = replayed
    width = editor.config.block_size
    embed, head = target_hf.get_input_embeddings(), target_hf.get_output_embeddings()
    checked = 0
    for row in future_context.visited(rounds).itertuples():
        prompt = prompts[row.slice][row.prompt]
        sequence = torch.tensor(prompt + greedy["output"][row.prompt])[: row.anchor + width + 1][None]
        batch = anchor_blocks(target_hf, editor, sequence, len(prompt))
        i = batch.anchors[0].tolist().index(row.anchor)
        inputs = batch.block.clone()
        inputs[0, i, 1:] = torch.tensor(row.backbone[: width - 1])
        with torch.no_grad():
            edited = block_edit.block_logits(editor, embed, head, batch, inputs).argmax(-1)[0, i, 1:]
        assert edited.tolist() == row.edited
        checked += 1
    assert checked >= 8


def test_the_bootstrap_resamples_whole_responses():
    clusters = np.array(["a"] * 3 + ["b"] * 5 + ["c"] * 2)
    weights = future_context._cluster_weights(clusters, n_resamples=200, seed=0)
    assert (weights[0] == 1).all()                                            # row 0: the sample itself
    for name in "abc":
        part = weights[1:, clusters == name]
        assert (part == part[:, :1]).all()                                    # one draw count per response
    firsts = weights[1:, [0, 3, 8]]
    assert (firsts.sum(1) == 3).all() and len(np.unique(weights[1:, 0])) > 1  # 3 responses drawn per resample


def _synthetic(slope: float, seed: int, responses: int = 40, per: int = 30) -> pd.DataFrame:
    """Rounds where the proposal's accepted length s confounds the future count x: x and the
    advantage both grow with s, and within a stratum the advantage grows by ``slope`` per x."""
    rng = np.random.default_rng(seed)
    n = responses * per
    s = rng.integers(0, 6, n)
    x = rng.binomial(10 - s, 0.3) + s // 2
    advantage = np.round(slope * x - 0.5 * s + rng.normal(0, 0.5, n)).astype(int) if slope else \
        np.round(-0.5 * s + rng.normal(0, 0.5, n)).astype(int)
    return pd.DataFrame({"slice": "synthetic", "prompt": np.repeat(np.arange(responses), per),
                         "future_correct": x, "accepted_proposal": s, "advantage": advantage})


def test_stratified_slope_recovers_the_effect_the_pooled_slope_misses():
    rounds = _synthetic(0.4, seed=1)
    fit = future_context.future_slope(rounds, n_resamples=1000, seed=0)
    assert fit["slope_low"] < 0.4 < fit["slope_high"] and fit["slope_high"] - fit["slope_low"] < 0.2
    pooled = np.polyfit(rounds["future_correct"], rounds["advantage"], 1)[0]
    assert not fit["slope_low"] < pooled < fit["slope_high"]                  # the confounder biases the pooled fit
    null = future_context.future_slope(_synthetic(0.0, seed=2), n_resamples=1000, seed=0)
    assert null["slope_low"] < 0 < null["slope_high"]
    assert fit["wins"] + fit["ties"] + fit["losses"] == pytest.approx(1.0)


def test_advantage_by_future_count_is_each_groups_mean():
    rounds = _synthetic(0.4, seed=3)
    table = future_context.advantage_by_future(rounds, n_resamples=500, seed=0)
    means = rounds.groupby("future_correct")["advantage"].mean()
    assert table.set_index("future_correct")["advantage"].to_dict() == pytest.approx(means.to_dict())
    assert (table["ci_low"] <= table["advantage"]).all() and (table["advantage"] <= table["ci_high"]).all()
    assert table["rounds"].sum() == len(rounds)


def test_bad_arguments_are_named(replayed, trained_heads):
    target_hf, domino, editor, greedy, prompts, rounds = replayed
    dspark = trained_heads[1]["dspark"][0]
    with pytest.raises(TypeError, match="domino must be a DominoNetwork, got DSparkNetwork"):
        future_context.replay_rounds(target_hf, dspark, {"e": editor}, prompts["chain"][0], 3)
    with pytest.raises(TypeError, match="editor 'e' must be a DEdit FeatureBlockDrafter"):
        future_context.replay_rounds(target_hf, domino, {"e": dspark}, prompts["chain"][0], 3)
    with pytest.raises(TypeError, match="editors must be a non-empty"):
        future_context.replay_rounds(target_hf, domino, editor, prompts["chain"][0], 3)
    with pytest.raises(ValueError, match="prompt_len must be an int"):
        future_context.replay_rounds(target_hf, domino, {"e": editor}, prompts["chain"][0], 0)
    with pytest.raises(ValueError, match="no responses of method 'deer'"):
        future_context.replay_slices(target_hf, domino, {"e": editor}, greedy, prompts, method="deer")
    with pytest.raises(ValueError, match="editors must be a non-empty subset of"):
        future_context.select({"dedit": editor}, ["dedit", "nope"])
    assert list(future_context.select({"a": 1, "b": 2}, ["b", "a"])) == ["b", "a"]
    with pytest.raises(ValueError, match="against must be one of"):
        future_context.future_slope(rounds, n_resamples=100, against="dspark")
    with pytest.raises(ValueError, match=r"level must be a number in \(0, 1\)"):
        future_context.future_slope(rounds, n_resamples=100, level=95)
    with pytest.raises(ValueError, match="n_resamples must be an int >= 100"):
        future_context.future_slope(rounds, n_resamples=10)
    with pytest.raises(ValueError, match="missing columns"):
        future_context.advantage_by_future(rounds.drop(columns="future_correct"))
    with pytest.raises(ValueError, match="no replayed rounds"):
        future_context.future_slope(rounds.iloc[:0])
    short = future_context.replay_rounds(target_hf, domino, {"e": editor}, prompts["chain"][0][:8], 7)["e"]
    assert short.empty and list(short.columns) == future_context.COLUMNS
