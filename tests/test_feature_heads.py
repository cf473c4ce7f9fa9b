"""Medusa, Hydra and EAGLE-3 (seed 001's feature-level baselines): training lowers each
objective, the decoding path gives the logits of the training path (EAGLE-3's training-time
test included), greedy outputs equal the target's own (float64, against ``generate``) with
multi-token acceptance exercised, sampling follows the target's law (with a negative
control), checkpoints round-trip, and bad arguments are named."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from scipy import stats

from spec_lib import decode
from spec_lib.drafters.feature_drafting import Eagle3Drafter, FeatureHeadDrafter
from spec_lib.drafters.feature_heads import Eagle3Network, FeatureHeads, build_eagle3, build_feature_heads
from spec_lib.drafters.feature_target import FeatureTarget
from spec_lib.training import feature_heads as training
from spec_lib.training.block_edit import IGNORE
from spec_lib.training.dedit import DEditConfig, target_features
from spec_lib.training.loop import fit
from spec_lib.training.teacher import greedy_continuations

from .conftest import MASK_ID, VOCAB

HEADS, DEPTH, PROMPT_LEN = 4, 3, 8
SCHEDULES = {"medusa": "drafted", "hydra": "ar_draft", "eagle3": "ar_draft"}


@pytest.fixture(scope="module")
def trained_feature_heads(trained_hf_model):
    """The tiny trained target (float64) and the three drafters trained briefly on its greedy
    continuations of chain prompts."""
    target_hf = copy.deepcopy(trained_hf_model).double().eval()
    for p in target_hf.parameters():
        p.requires_grad_(False)
    prompts = torch.as_tensor(trained_hf_model.chain.sample_sequences(256, PROMPT_LEN, seed=9), dtype=torch.long)
    answers = greedy_continuations(target_hf, prompts, 32, batch=256, pad_token_id=0, progress=False)
    embed, head = target_hf.get_input_embeddings(), target_hf.get_output_embeddings()
    layers = target_hf.config.num_hidden_layers
    trained = {}
    for kind in ("medusa", "hydra", "eagle3"):
        gen = torch.Generator().manual_seed(0)
        if kind == "eagle3":
            layer_ids = [0, layers - 1]
            network = build_eagle3(target_hf.config, layer_ids, seed=1).double()

            def loss(m, b):
                return training.eagle3_loss(m, embed, head, b, DEPTH, 0.8)
        else:
            layer_ids = [layers - 1]
            network = build_feature_heads(target_hf.config, kind, num_heads=HEADS, seed=1).double()

            def loss(m, b):
                return training.heads_loss(m, embed, head, b, 0.8)

        def make(step, gen=gen, layer_ids=layer_ids, kind=kind):
            pick = torch.randint(0, len(prompts), (16,), generator=gen)
            return training.feature_batch(target_hf, layer_ids, prompts[pick], answers[pick], 8,
                                          DEPTH if kind == "eagle3" else HEADS, gen)

        history = fit(network.train(), make, loss, steps=150, lr=3e-3, warmup=10, progress=False)
        trained[kind] = (network.eval(), history, layer_ids)
    return target_hf, trained


def _drafter(target_hf, trained, kind):
    network, _, layer_ids = trained[kind]
    target = FeatureTarget(target_hf, MASK_ID, [0, target_hf.config.num_hidden_layers - 1])
    if kind == "eagle3":
        return target, Eagle3Drafter(target, network)
    return target, FeatureHeadDrafter(target, network)


def _dense(logits):
    """A sampling rule that keeps q (the softmax), to read the logits a drafter used."""
    return logits.argmax(-1), logits.softmax(-1)


def test_training_lowers_each_objective(trained_feature_heads):
    _, trained = trained_feature_heads
    for kind, (_, history, _) in trained.items():
        first, last = history[0], history[-1]
        assert last["objective"] < 0.7 * first["objective"], kind
        assert last["accuracy_first"] > first["accuracy_first"], kind


def test_batch_labels_the_tokens_after_each_anchor(trained_feature_heads):
    target_hf, _ = trained_feature_heads
    sequences = torch.as_tensor(target_hf.chain.sample_sequences(3, 20, seed=2), dtype=torch.long)
    batch = training.feature_batch(target_hf, [1], sequences[:, :PROMPT_LEN], sequences[:, PROMPT_LEN:], 6, HEADS,
                                   torch.Generator().manual_seed(1))
    assert batch.anchors.min() >= PROMPT_LEN - 1 and batch.anchors.max() <= 18
    for b in range(3):
        for a, labels in zip(batch.anchors[b].tolist(), batch.labels[b].tolist()):
            expected = [int(sequences[b, a + 1 + i]) if a + 1 + i < 20 else IGNORE for i in range(1, HEADS + 1)]
            assert labels == expected
    torch.testing.assert_close(batch.features, target_features(target_hf, sequences, [1]))


def test_medusa_round_reads_the_last_verified_row(trained_feature_heads):
    """Head i's logits come from h at row n-2 (where the target produced x_{n-1}), recorded
    by the FeatureTarget during the decode, equal to a fresh forward's."""
    target_hf, trained = trained_feature_heads
    target, drafter = _drafter(target_hf, trained, "medusa")
    prompt = target_hf.chain.sample_sequences(1, 10, seed=5)[0].tolist()
    result = decode(target, prompt, schedule="drafted", width=HEADS, max_new_tokens=9, drafter=drafter)
    prefix = torch.tensor(prompt + result.tokens)
    logits = drafter.draft_logits(prefix, HEADS).logits
    network = trained["medusa"][0]
    h = target_features(target_hf, prefix[None], [target_hf.config.num_hidden_layers - 1])[0, -2]
    expected = target_hf.get_output_embeddings()(network(h))
    torch.testing.assert_close(logits, expected)


@pytest.mark.parametrize("kind", ["hydra", "eagle3"])
def test_drafting_path_equals_the_training_path(trained_feature_heads, kind):
    """The cached, token-by-token drafting gives the logits of the training forward forced on
    the same drafts: Hydra's teacher-forced heads, EAGLE-3's unrolled training-time test
    (depth s of the chain from row n-2)."""
    target_hf, trained = trained_feature_heads
    target, drafter = _drafter(target_hf, trained, kind)
    network, _, layer_ids = trained[kind]
    prompt = target_hf.chain.sample_sequences(1, 10, seed=6)[0].tolist()
    result = decode(target, prompt, schedule="ar_draft", width=HEADS, max_new_tokens=9, drafter=drafter)
    prefix = torch.tensor(prompt + result.tokens)
    out = drafter.draft(prefix, HEADS, _dense)
    sequence = torch.cat([prefix, out.tokens])[None]
    embed, head = target_hf.get_input_embeddings(), target_hf.get_output_embeddings()
    n = prefix.numel()
    if kind == "hydra":
        h = target_features(target_hf, sequence, layer_ids)[0, n - 2]
        expected = torch.stack([head(network.head(i, h, embed(sequence[0, n - 1: n + i]))) for i in range(HEADS)])
    else:
        features = target_features(target_hf, sequence, layer_ids)
        next_embeds = embed(torch.cat([sequence[:, 1:], sequence[:, -1:]], 1))
        normed = network.unrolled(features, next_embeds, HEADS)
        expected = torch.stack([head(normed[0, s, n - 2 + s]) for s in range(HEADS)])
    torch.testing.assert_close(out.q, expected.softmax(-1))


@pytest.mark.parametrize("kind", ["medusa", "hydra", "eagle3"])
def test_greedy_outputs_equal_generate(trained_feature_heads, kind):
    """Losslessness in float64, with multi-token acceptance exercised."""
    target_hf, trained = trained_feature_heads
    target, drafter = _drafter(target_hf, trained, kind)
    accepted = []
    for seed in range(4):
        prompt = target_hf.chain.sample_sequences(1, 10, seed=100 + seed)[0].tolist()
        res = decode(target, prompt, schedule=SCHEDULES[kind], width=HEADS, max_new_tokens=30, drafter=drafter)
        ref = target_hf.generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)[0, len(prompt):].tolist()
        assert res.tokens == ref
        accepted += res.accepted
    assert sum(a >= 3 for a in accepted) >= 3, accepted


def _second_token_p_value(target_hf, trained, kind, prompt, n, ablation=None):
    """Chi-square of the second token's law given the most likely first one: round 2 drafts
    from real features and verifies against the drafter's own q."""
    target, drafter = _drafter(target_hf, trained, kind)
    with torch.no_grad():
        first = int(target_hf(torch.tensor([prompt])).logits[0, -1].argmax())
        p = target_hf(torch.tensor([prompt + [first]])).logits[0, -1].softmax(-1).numpy()
    counts = np.zeros(VOCAB)
    for seed in range(n):
        res = decode(target, prompt, schedule=SCHEDULES[kind], width=HEADS, max_new_tokens=2, temperature=1.0,
                     seed=seed, drafter=drafter, ablation=ablation)
        if res.tokens[0] == first:
            counts[res.tokens[1]] += 1
    total = counts.sum()
    assert total >= 200, total
    keep = p * total >= 5
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(p[keep], p[~keep].sum()) * total
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


@pytest.mark.parametrize("kind", ["medusa", "eagle3"])
def test_sampling_follows_the_target_law(trained_feature_heads, kind):
    """The second token's law given the first equals the target's; drawing the correction from
    p instead of the residual is caught (the same prompt and draws)."""
    target_hf, trained = trained_feature_heads
    prompt = target_hf.chain.sample_sequences(1, 8, seed=1003)[0].tolist()
    assert _second_token_p_value(target_hf, trained, kind, prompt, 900) > 1e-3
    assert _second_token_p_value(target_hf, trained, kind, prompt, 900, ablation="no_residual") < 1e-4


@pytest.mark.parametrize("kind", ["medusa", "hydra", "eagle3"])
def test_save_and_load_round_trip(tmp_path, trained_feature_heads, kind):
    _, trained = trained_feature_heads
    network = trained[kind][0]
    network.save_pretrained(tmp_path / kind)
    cls = Eagle3Network if kind == "eagle3" else FeatureHeads
    loaded = cls.from_pretrained(tmp_path / kind, local_files_only=True, dtype=torch.float64)
    for (name, a), (_, b) in zip(network.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_new_heads_start_as_the_target_next_token_prediction(trained_hf_model):
    """Medusa's initialisation: zero residual blocks, so each head is RMSNorm then the LM head."""
    heads = build_feature_heads(trained_hf_model.config, "medusa", num_heads=3, seed=0)
    assert all(torch.count_nonzero(b.linear.weight) == 0 for b in heads.blocks)
    hydra = build_feature_heads(trained_hf_model.config, "hydra", num_heads=3, seed=0)
    size = trained_hf_model.config.hidden_size
    assert torch.allclose(hydra.inputs[2].weight[:, :size], torch.eye(size), atol=0.05)


def test_bad_arguments_are_named(trained_feature_heads, random_hf_model):
    target_hf, trained = trained_feature_heads
    medusa = trained["medusa"][0]
    with pytest.raises(TypeError, match="FeatureTarget"):
        FeatureHeadDrafter(target_hf, medusa)
    with pytest.raises(ValueError, match="does not record"):
        FeatureHeadDrafter(FeatureTarget(target_hf, MASK_ID, [0]), medusa)
    with pytest.raises(ValueError, match=r"target_layer_ids .*missing \[0\]"):
        Eagle3Drafter(FeatureTarget(target_hf, MASK_ID, [1]), trained["eagle3"][0])
    with pytest.raises(TypeError, match="Eagle3Network"):
        Eagle3Drafter(FeatureTarget(target_hf, MASK_ID, [0, 1]), medusa)
    other = FeatureTarget(random_hf_model, MASK_ID, [1])
    with pytest.raises(ValueError, match="vocabulary and hidden size"):
        FeatureHeadDrafter(other, medusa)
    target, drafter = _drafter(target_hf, trained, "medusa")
    with pytest.raises(ValueError, match=r"width \(k\) must be in \[1, 4\]"):
        decode(target, [1, 2, 3], schedule="drafted", width=HEADS + 1, max_new_tokens=4, drafter=drafter)
    with pytest.raises(ValueError, match="needs a ar drafter|needs a diffusion drafter"):
        decode(target, [1, 2, 3], schedule="ar_draft", width=2, max_new_tokens=4, drafter=drafter)
    with pytest.raises(ValueError, match="kinds must be distinct"):
        training._check(training.FeatureHeadsConfig(kinds=("medusa", "medusa")))
    with pytest.raises(ValueError, match="ttt_depth"):
        training._check(training.FeatureHeadsConfig(ttt_depth=0))
    with pytest.raises(ValueError, match="head_decay"):
        training._check(training.FeatureHeadsConfig(head_decay=0.0))
    with pytest.raises(TypeError, match="DEditConfig"):
        training._check(training.FeatureHeadsConfig(dedit=None))
    assert training.FeatureHeadsConfig(dedit=DEditConfig(width=16)).heads == 15
