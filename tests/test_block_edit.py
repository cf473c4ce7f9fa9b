"""DFlash / DEdit drafting (seed 002): the drafter's cached inference equals its training
forward, the target's recorded features equal a fresh forward's, greedy outputs of every
pass count equal the target's AR greedy output (float64, against ``generate``), seed 002's
stochastic rule follows the target's law (chi-square, with a negative control that the test
catches), and the objectives' pieces (weights, anchors, ProposalMix) do what they state."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from scipy import stats

from spec_lib import decode
from spec_lib.drafters.block_edit import BlockEditDrafter
from spec_lib.drafters.feature_block import FeatureBlockDrafter, target_layer_ids
from spec_lib.drafters.feature_target import FeatureTarget
from spec_lib.training import block_edit
from spec_lib.training.dedit import target_features

from .conftest import DEDIT_WIDTH as WIDTH
from .conftest import MASK_ID, VOCAB



def test_training_reduces_both_losses(trained_pair):
    history = trained_pair[2]
    first, last = history[0], history[-1]
    assert last["unmask"] < 0.8 * first["unmask"] and last["edit"] < 0.8 * first["edit"]


def test_cached_inference_equals_the_training_forward(trained_pair):
    """The decoding path (context K/V cached, no mask) gives the logits of the training path
    (one masked forward over all anchors) for every pass."""
    target_hf, network, _ = trained_pair
    target = FeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids)
    prompt = list(range(3, 15))
    drafter = BlockEditDrafter(target, network, passes=3)
    result = decode(target, prompt, schedule="deer", width=WIDTH - 1, max_new_tokens=12, drafter=drafter)
    prefix = torch.tensor(prompt + result.tokens)
    logits = drafter.draft_logits(prefix, WIDTH - 1).logits               # the next round, P3
    seq = prefix[None]
    features = target_features(target_hf, seq[:, :-1], network.config.target_layer_ids)
    a = prefix.numel() - 1
    block = torch.full((1, 1, WIDTH), MASK_ID)
    block[..., 0] = prefix[-1]
    batch = block_edit.AnchorBatch(features, torch.tensor([[a]]), block, None, torch.arange(a, a + WIDTH)[None],
                                   torch.ones(1, 1, WIDTH, a + WIDTH, dtype=torch.bool))
    embed, head = target_hf.get_input_embeddings(), target_hf.get_output_embeddings()
    inputs = block
    for _ in range(3):
        reference = block_edit.block_logits(network, embed, head, batch, inputs)[0, 0, 1:]
        inputs = torch.cat([block[..., :1], reference.argmax(-1)[None, None]], dim=-1)
    torch.testing.assert_close(logits, reference, rtol=1e-9, atol=1e-9)


def test_recorded_features_equal_a_fresh_forward(trained_pair):
    target_hf, network, _ = trained_pair
    target = FeatureTarget(target_hf, MASK_ID, [0, 1])
    prompt = list(range(5, 20))
    result = decode(target, prompt, schedule="deer", width=WIDTH - 1, max_new_tokens=20,
                    drafter=BlockEditDrafter(target, network, passes=2))
    verified = torch.tensor(prompt + result.tokens)[None, :-1]
    fresh = target_features(target_hf, verified, [0, 1])[0]
    torch.testing.assert_close(target.features_from(0), fresh, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(target.features_from(7), fresh[7:], rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="start must be in"):
        target.features_from(10_000)


@pytest.mark.parametrize("passes,early_exit", [(1, False), (2, False), (3, False), (4, True)])
def test_greedy_outputs_equal_generate(trained_pair, passes, early_exit):
    """Losslessness in float64: every pass count gives the target's own greedy output, and the
    trained drafter is accepted for several tokens per round (so acceptance is exercised)."""
    target_hf, network, _ = trained_pair
    target = FeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids)
    drafter = BlockEditDrafter(target, network, passes=passes, early_exit=early_exit)
    chain = target_hf.chain
    accepted = []
    for seed in range(4):
        prompt = chain.sample_sequences(1, 10, seed=100 + seed)[0].tolist()
        res = decode(target, prompt, schedule="deer", width=WIDTH - 1, max_new_tokens=30, drafter=drafter)
        ref = target_hf.generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)[0, len(prompt):].tolist()
        assert res.tokens == ref
        accepted += res.accepted
        assert res.extras["drafter_nfe"] == sum(drafter.passes_per_round)
        if not early_exit:
            assert set(drafter.passes_per_round) == {passes}
    assert sum(a >= 3 for a in accepted) >= 3, accepted            # multi-token acceptance happens


def test_concurrent_decodes_match_sequential(trained_pair):
    target_hf, network, _ = trained_pair
    target = FeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids)
    drafter = BlockEditDrafter(target, network, passes=2)
    prompts = [list(range(s, s + 9)) for s in range(3, 9)]
    expected = [decode(target, p, schedule="deer", width=WIDTH - 1, max_new_tokens=16, drafter=drafter).tokens
                for p in prompts]
    got = [None] * len(prompts)

    def work(i):
        got[i] = decode(target, prompts[i], schedule="deer", width=WIDTH - 1, max_new_tokens=16,
                        drafter=drafter).tokens

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected


def _moderate_prompt(target, drafter, chain):
    """A prompt whose first draft token d has target probability in [0.25, 0.75], so that
    drawing the correction from p instead of p without d shifts P(d) by p(d)(1 - p(d)) >= 0.19."""
    for seed in range(200):
        prompt = chain.sample_sequences(1, 8, seed=1000 + seed)[0].tolist()
        target.reset()
        drafter.reset()
        d = int(drafter.draft_logits(torch.tensor(prompt), WIDTH - 1).logits[0].argmax())
        with torch.no_grad():
            p = target.lm(torch.tensor([prompt])).logits[0, -1].softmax(-1).numpy()
        if 0.25 <= p[d] <= 0.75:
            return prompt, p, d
    raise AssertionError("no prompt with a moderately likely first draft token")


def _first_token_p_value(target, drafter, prompt, p, n, ablation=None):
    counts = np.zeros(VOCAB)
    for seed in range(n):
        res = decode(target, prompt, schedule="deer", width=WIDTH - 1, max_new_tokens=1, temperature=1.0, seed=seed,
                     drafter=drafter, ablation=ablation)
        counts[res.tokens[0]] += 1
    keep = p * n >= 5                                                    # chi-square cells with enough mass
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(p[keep], p[~keep].sum()) * n
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


def test_stochastic_argmax_rule_follows_the_target_law(trained_pair):
    """Seed 002's stochastic rule (argmax draft, point-mass stored Q, rejection sampling) gives
    the target's own law for the first token; drawing the correction from p instead of p with
    the draft removed (a wrong variant) is caught on the same prompt."""
    target_hf, network, _ = trained_pair
    target = FeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids)
    drafter = BlockEditDrafter(target, network, passes=2)
    prompt, p, d = _moderate_prompt(target, drafter, target_hf.chain)
    assert _first_token_p_value(target, drafter, prompt, p, 800) > 1e-3
    assert _first_token_p_value(target, drafter, prompt, p, 800, ablation="no_residual") < 1e-6


def test_position_weights_and_gamma():
    assert [block_edit.gamma_for(w) for w in (16, 24, 32)] == [7, 11, 15]
    w = block_edit.position_weights(16, 7.0)
    assert w[0] == 0 and w[1] == 1 and torch.isclose(w[8], torch.exp(torch.tensor(-1.0)))
    with pytest.raises(ValueError, match="gamma"):
        block_edit.position_weights(16, 0.0)


def test_anchor_blocks_see_context_before_the_anchor_and_their_own_block():
    seq = torch.arange(40)[None] % 30
    loss_mask = torch.zeros_like(seq, dtype=torch.bool)
    loss_mask[:, 10:] = True
    anchors, block, labels, positions, mask = block_edit.sample_anchors(
        seq, loss_mask, n_anchors=5, width=4, mask_token_id=99, generator=torch.Generator().manual_seed(1))
    assert torch.all(anchors[:, 1:] >= anchors[:, :-1]) and torch.all(anchors >= 9) and torch.all(anchors <= 36)
    assert torch.all(block[..., 0] == seq[0, anchors[0]]) and torch.all(block[..., 1:] == 99)
    assert torch.all(labels[..., 0] == block_edit.IGNORE)
    assert torch.equal(labels[0, :, 1:], seq[0, anchors[0, :, None] + torch.arange(1, 4)])
    assert torch.equal(positions[0].view(5, 4), anchors[0, :, None] + torch.arange(4))
    for i, a in enumerate(anchors[0].tolist()):
        row = mask[0, 0, i * 4 + 2]
        assert row[:40].nonzero().flatten().tolist() == list(range(a))
        assert row[40:].nonzero().flatten().tolist() == list(range(i * 4, i * 4 + 4))
    with pytest.raises(ValueError, match="eligible anchor"):
        block_edit.sample_anchors(seq, torch.zeros_like(loss_mask), n_anchors=2, width=4, mask_token_id=99,
                                  generator=torch.Generator())


def test_proposal_mix_selects_by_confidence():
    labels = torch.tensor([[[block_edit.IGNORE, 1, 2, 3, 4]]])
    logits = torch.full((1, 1, 5, 6), -10.0)
    logits[0, 0, 1, 1] = 10.0           # confident and right
    logits[0, 0, 2, 5] = 10.0           # confident and wrong
    logits[0, 0, 3, :] = 0.0            # unsure (argmax 0, wrong)
    logits[0, 0, 4, :] = 0.0
    logits[0, 0, 4, 4] = 0.5            # unsure and right
    anchor = torch.tensor([[7]])
    high, rates = block_edit.proposal_mix(logits, labels, anchor, eta=0.5, select="high")
    assert high.tolist() == [[[7, 1, 2, 0, 4]]]
    assert rates == {"gt_selection": 0.5, "overwrite": 0.25}
    low, rates = block_edit.proposal_mix(logits, labels, anchor, eta=0.5, select="low")
    assert low.tolist() == [[[7, 1, 5, 3, 4]]]
    assert rates == {"gt_selection": 0.5, "overwrite": 0.25}
    top, _ = block_edit.proposal_mix(logits, labels, anchor, eta=0.25, select="high", rule="fraction")
    assert (top[0, 0] != logits[0, 0].argmax(-1)).sum() <= 2 and top[0, 0, 0] == 7
    with pytest.raises(ValueError, match="select"):
        block_edit.proposal_mix(logits, labels, anchor, eta=0.5, select="mid")
    with pytest.raises(ValueError, match="eta"):
        block_edit.proposal_mix(logits, labels, anchor, eta=1.5)


def test_target_layer_ids():
    assert target_layer_ids(36, 5) == [1, 9, 17, 25, 33]                  # public DFlash, Qwen3-8B
    assert target_layer_ids(4, 3) == [0, 2, 3]
    with pytest.raises(ValueError, match="n_features"):
        target_layer_ids(4, 5)


def test_bad_arguments_are_named(random_hf_model, trained_pair):
    target_hf, network, _ = trained_pair
    target = FeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids)
    with pytest.raises(TypeError, match="FeatureTarget"):
        BlockEditDrafter(object(), network)
    with pytest.raises(TypeError, match="FeatureBlockDrafter"):
        BlockEditDrafter(target, random_hf_model)
    for kwargs, match in [({"passes": 0}, "passes"), ({"passes": True}, "passes"), ({"stochastic": "top"}, "stochastic")]:
        with pytest.raises(ValueError, match=match):
            BlockEditDrafter(target, network, **kwargs)
    with pytest.raises(ValueError, match="layer_ids"):
        BlockEditDrafter(FeatureTarget(target_hf, MASK_ID, [1]), network)
    with pytest.raises(ValueError, match="layer_ids"):
        FeatureTarget(target_hf, MASK_ID, [0, 9])
    other = FeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids)
    with pytest.raises(RuntimeError, match="same FeatureTarget"):
        decode(other, list(range(3, 12)), schedule="deer", width=WIDTH - 1, max_new_tokens=20,
               drafter=BlockEditDrafter(target, network))


def test_save_and_load_round_trip(tmp_path, trained_pair):
    network = trained_pair[1]
    network.save_pretrained(tmp_path / "drafter")
    loaded = FeatureBlockDrafter.from_pretrained(tmp_path / "drafter", local_files_only=True, dtype=torch.float64)
    assert loaded.config.target_layer_ids == network.config.target_layer_ids
    for (name, a), b in zip(network.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


# ----- the round-replay analysis (spec_lib.studies.editing) on a hand-made replay -------------------

def _replay_frame():
    """One response, anchors 3..9, two passes; P2 extends A at anchor 3 and shortens it at 7."""
    import pandas as pd

    a1 = {3: 2, 4: 0, 5: 1, 6: 0, 7: 3, 8: 0, 9: 1}
    a2 = {**a1, 3: 3, 7: 1}
    rows = [{"slice": "s", "prompt": 0, "anchor": a, "pass": p, "accepted": acc[a], "correct_after_reject": 0,
             "changed": 0, "proposal": [10 + a, 11 + a]} for p, acc in ((1, a1), (2, a2)) for a in a1]
    return pd.DataFrame(rows)


def test_decoded_path_follows_accepted_lengths():
    from spec_lib.studies import editing

    rounds = _replay_frame()
    assert editing.decoded_path(rounds, 1)["anchor"].tolist() == [3, 6, 7]          # 3 -> 3+2+1 -> 6+0+1 -> 7+3+1 = 11
    assert editing.decoded_path(rounds, 2)["anchor"].tolist() == [3, 7, 9]          # 3 -> 7 -> 7+1+1
    table = editing.tau_by_pass(rounds)
    tau = {(r["slice"], r["pass"]): r["tau"] for _, r in table.iterrows()}
    assert tau[("s", 1)] == pytest.approx(1 + (2 + 0 + 3) / 3) and tau[("s", 2)] == pytest.approx(1 + (3 + 1 + 1) / 3)
    assert tau[("macro", 2)] == tau[("s", 2)]
    effects = editing.edit_effects(rounds)                                           # over P2's rounds 3, 7, 9
    assert effects["rounds"] == 3 and effects["extends"] == pytest.approx(1 / 3)
    assert effects["shortens"] == pytest.approx(1 / 3) and effects["mean_gain"] == pytest.approx((1 - 2 + 0) / 3)


def test_most_improved_round_and_its_picture():
    from spec_lib.studies import editing

    rounds = _replay_frame()
    greedy = pytest.importorskip("pandas").DataFrame([{"slice": "s", "prompt": 0, "output": tuple(range(4, 20))}])
    rows, sequence, anchor = editing.most_improved_round(rounds, greedy, {"s": [[0, 1, 2, 3]]})
    assert anchor == 3 and sequence == list(range(20)) and set(rows["pass"]) == {1, 2}

    class Tokens:
        def decode(self, ids):
            return str(ids[0])

    picture = editing.round_picture(rows, sequence, anchor, Tokens())
    assert picture["target"].tolist() == ["4", "5"] and picture["P1"].tolist() == ["13", "14"]
    assert not picture["P1 ok"].any()
    with pytest.raises(ValueError, match="round_rows"):
        editing.round_picture(rounds, sequence, anchor, Tokens())


# ----- window expansion (seed 002, Sec. 4) ----------------------------------------------------------

def test_an_expanded_network_drafts_wider_blocks_losslessly(trained_pair):
    """The W-trained weights at block size W' = 2W - 1: proposals of W' - 1 slots, outputs still the
    target's greedy ones; the copy leaves the original config alone."""
    from spec_lib.training.dedit import replace_block_size

    target_hf, network, _ = trained_pair
    wide = FeatureBlockDrafter(replace_block_size(network.config, 2 * WIDTH - 1)).double()
    wide.load_state_dict(network.state_dict())
    assert network.config.block_size == WIDTH and wide.config.block_size == 2 * WIDTH - 1
    target = FeatureTarget(target_hf, MASK_ID, wide.config.target_layer_ids)
    drafter = BlockEditDrafter(target, wide.eval(), passes=2)
    prompt = target_hf.chain.sample_sequences(1, 10, seed=300)[0].tolist()
    res = decode(target, prompt, schedule="deer", width=2 * WIDTH - 2, max_new_tokens=30, drafter=drafter)
    ref = target_hf.generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(prompt):].tolist()
    assert res.tokens == ref and max(res.accepted) <= 2 * WIDTH - 1


def test_expansion_settings_are_checked():
    from spec_lib.training.dedit import DEditConfig, _check, network_names

    config = DEditConfig()
    assert network_names(config) == ["dflash", "dedit", "dedit_no_mix", "dflash_w32", "dedit_w24", "dedit_w32"]
    assert block_edit.gamma_for(24) == 11 and block_edit.gamma_for(32) == 15        # seed 002's gammas
    for bad in ((("dedit_low", 32),), (("dedit", 16),), (("dedit", 200),)):
        with pytest.raises(ValueError, match="expansions must be"):
            _check(DEditConfig(expansions=bad))


@pytest.mark.parametrize("passes", [1, 2])
def test_replayed_rounds_are_the_real_decode(trained_pair, passes):
    """Notebook 32's replay (every anchor of a greedy output, one batched pass per editing pass)
    predicts, in float64, the accepted drafts of every round a real P_K decode visits after its
    first; a replay that is one token off is caught; prompt positions get no anchor."""
    import pandas as pd

    from spec_lib.studies import editing

    target_hf, network, _ = trained_pair
    target = FeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids)
    prompts = {"chain": [target_hf.chain.sample_sequences(1, 10, seed=500 + i)[0].tolist() for i in range(3)]}
    outputs = [decode(target, p, schedule="ar", width=1, max_new_tokens=30).tokens for p in prompts["chain"]]
    greedy = pd.DataFrame({"method": "ar", "slice": "chain", "prompt": range(3), "output": outputs})
    rounds = editing.replay_slices(target_hf, network, greedy, prompts, passes=passes)
    assert rounds["anchor"].min() == len(prompts["chain"][0]) - 1
    assert rounds.groupby(["prompt", "pass"]).size().eq(len(outputs[0]) - WIDTH + 2).all()
    drafter = BlockEditDrafter(target, network, passes=passes)
    assert editing.replay_agrees_with_decoding(target, drafter, rounds, greedy, prompts, min_share=1.0)
    off = rounds.assign(accepted=rounds["accepted"] + 1)
    assert not editing.replay_agrees_with_decoding(target, drafter, off, greedy, prompts, min_share=1.0)


def test_repair_corruption_and_gain_by_future_count_what_app_a4_counts():
    """Seed 002, App. A.4 on a hand-made replay: P1 rejects slot 1 with two correct slots after it;
    bidirectional P2 repairs it and accepts all four; causal P2 repairs slot 1 but breaks slot 0
    (a corruption: A falls from 1 to 0); the gain is 4 at two correct future tokens."""
    import pandas as pd

    from spec_lib.studies import editing

    prompts = {"code": [[1, 2, 3]]}
    greedy = pd.DataFrame([{"slice": "code", "prompt": 0, "method": "ar", "output": [10, 11, 12, 13, 14]}])

    def frame(p2_accepted, p2_proposal):
        base = {"slice": "code", "prompt": 0, "anchor": 2, "changed": 0}
        return pd.DataFrame([{**base, "pass": 1, "accepted": 1, "correct_after_reject": 2, "proposal": [10, 99, 12, 13]},
                             {**base, "pass": 2, "accepted": p2_accepted, "correct_after_reject": 0,
                              "proposal": p2_proposal}])

    bidirectional, causal = frame(4, [10, 11, 12, 13]), frame(0, [98, 11, 12, 13])
    table = editing.repair_and_corruption(bidirectional, causal, greedy, prompts, passes=(2,)).set_index("attention")
    assert table.loc["bidirectional", ["repairs", "corrupts"]].tolist() == [1.0, 0.0]
    assert table.loc["causal", ["repairs", "corrupts"]].tolist() == [1.0, 1.0]
    causal_wrong = frame(0, [98, 97, 12, 13])                    # negative control: slot 1 still wrong
    table = editing.repair_and_corruption(bidirectional, causal_wrong, greedy, prompts, passes=(2,)).set_index("attention")
    assert table.loc["causal", "repairs"] == 0.0
    gain = editing.gain_by_future(bidirectional, causal, passes=(2,))
    assert gain[["correct_future_tokens", "delta", "rounds", "pass"]].values.tolist() == [[2, 4.0, 1, "P2"]]
