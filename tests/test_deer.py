"""DEER and the AR-drafter baseline (seed 001): lossless greedy decoding (float64, against
``generate``), batched decoding equal to batch-1 decoding, exact sampling with q conditioned
on the prefix only (chi-square against the exact law, with a negative control), bad input,
and the D2A training batches."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from spec_lib import decode, decode_batch
from spec_lib.drafters import (
    ARDrafter,
    DiffusionDrafter,
    ExactARDrafter,
    ExactDiffusionDrafter,
)
from spec_lib.toy import MarkovLM
from spec_lib.training import d2a

from .conftest import MASK_ID, SEP_ID, VOCAB, as_dual, prompts
from .test_lossless_greedy import references
from .test_sampling import ALPHA, PROMPT, N, exact_law

MAX_NEW = 24


def as_drafter(kind, hf_model, dtype=torch.float64):
    hf_model = copy.deepcopy(hf_model).to(dtype)
    return DiffusionDrafter(hf_model, MASK_ID, SEP_ID, context=16) if kind == "deer" else ARDrafter(hf_model)


@pytest.mark.parametrize("schedule", ["deer", "ar_draft"])
def test_greedy_outputs_match_generate_float64(schedule, trained_hf_model, drafters):
    model = as_dual(trained_hf_model)
    drafter = as_drafter(schedule, drafters[0] if schedule == "deer" else drafters[1])
    cases = references(model.hf_model, prompts(12, seed=31, chain=trained_hf_model.chain))
    accepted, rejected = 0, 0
    for prompt, eos, expected in cases:
        for k in (1, 4, 8):
            res = decode(model, prompt, schedule=schedule, width=k, max_new_tokens=MAX_NEW, eos_token_id=eos,
                         drafter=drafter)
            assert res.tokens == expected, (schedule, k, eos, prompt.tolist())
            assert sum(res.accepted) == len(res.tokens)
            assert res.nfe == len(res.accepted)                   # one target pass per cycle
            per_cycle = 1 if schedule == "deer" else k
            assert res.extras["drafter_nfe"] == per_cycle * len(res.accepted)
            accepted += sum(a > 1 for a in res.accepted)
            rejected += sum(a <= k for a in res.accepted[:-1])
    assert accepted > 20 and rejected > 20, (accepted, rejected)   # both paths ran


@pytest.mark.parametrize("batch", [1, 4, 8])
def test_batched_deer_equals_batch_one(batch, trained_hf_model, drafters):
    model = as_dual(trained_hf_model)
    drafter = as_drafter("deer", drafters[0])
    items = prompts(batch, seed=40 + batch, chain=trained_hf_model.chain, low=1, high=14)
    for eos in (None, 5):
        for schedule in ("ar", "deer"):
            use = drafter if schedule == "deer" else None
            results = decode_batch(model, items, schedule=schedule, width=6, max_new_tokens=MAX_NEW,
                                   drafter=use, eos_token_id=eos)
            assert results[0].extras["batch"]["tokens"] == sum(len(r.tokens) for r in results)
            for prompt, res in zip(items, results):
                single = decode(model, prompt, schedule=schedule, width=6, max_new_tokens=MAX_NEW,
                                eos_token_id=eos, drafter=use)
                assert res.tokens == single.tokens, (schedule, eos, prompt.tolist())
                assert (res.nfe, res.accepted) == (single.nfe, single.accepted), (schedule, eos, prompt.tolist())
                assert res.accepted == single.accepted


def test_batched_squeeze_and_leaving_sequences_keep_outputs(trained_hf_model, drafters):
    """Long outputs force slot squeezing; mixed EOS makes sequences leave mid-way."""
    model = as_dual(trained_hf_model)
    drafter = as_drafter("deer", drafters[0])
    items = prompts(6, seed=50, chain=trained_hf_model.chain)
    results = decode_batch(model, items, schedule="deer", width=8, max_new_tokens=120, drafter=drafter,
                           eos_token_id=7)
    for prompt, res in zip(items, results):
        single = decode(model, prompt, schedule="deer", width=8, max_new_tokens=120, eos_token_id=7, drafter=drafter)
        assert res.tokens == single.tokens


def p_value(schedule, drafter, temperature=0.6, **kwargs):
    from scipy import stats

    toy = MarkovLM(4, seed=7)
    law = exact_law(toy, temperature)
    counts = dict.fromkeys(law, 0)
    for i in range(N):
        res = decode(toy, PROMPT, schedule=schedule, width=3, max_new_tokens=3, temperature=temperature, seed=i,
                     drafter=drafter, **kwargs)
        counts[tuple(res.tokens)] += 1
    keys = list(law)
    return stats.chisquare(np.array([counts[k] for k in keys]), N * np.array([law[k] for k in keys])).pvalue


def _other_chain():
    """A different chain (seed 8) with noise: q is far from p, so rejections are frequent."""
    return MarkovLM(4, seed=8, draft_noise=0.3)


def test_deer_sampling_follows_the_target_at_temperature_0_6():
    assert p_value("deer", ExactDiffusionDrafter(_other_chain())) > ALPHA
    assert p_value("deer", ExactDiffusionDrafter(_other_chain()), draft_top_k=2) > ALPHA


def test_ar_draft_sampling_follows_the_target():
    assert p_value("ar_draft", ExactARDrafter(_other_chain())) > ALPHA


def test_deer_negative_control_is_caught():
    assert p_value("deer", ExactDiffusionDrafter(_other_chain()), ablation="no_residual") < 1e-6


def test_drafter_arguments_are_checked(trained_hf_model, drafters):
    model = as_dual(trained_hf_model)
    diffusion, ar = as_drafter("deer", drafters[0]), as_drafter("ar_draft", drafters[1])
    bad = [dict(schedule="deer"), dict(schedule="deer", drafter=ar), dict(schedule="ar_draft", drafter=diffusion),
           dict(schedule="packed", drafter=diffusion), dict(schedule="ar_draft", drafter=ar, draft_top_k=2),
           dict(schedule="deer", drafter=ExactDiffusionDrafter(MarkovLM(5)))]
    words = ["needs drafter", "needs a diffusion", "needs a ar", "only used by", "not supported", "vocab_size"]
    for kwargs, word in zip(bad, words):
        with pytest.raises(ValueError, match=word):
            decode(model, [1, 2], width=2, max_new_tokens=4, **kwargs)
    with pytest.raises(ValueError, match="decode_batch runs the schedules"):
        decode_batch(model, [[1, 2]], schedule="packed", width=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="needs drafter"):
        decode_batch(model, [[1, 2]], schedule="deer", width=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="sep_token_id"):
        DiffusionDrafter(drafters[0], MASK_ID, VOCAB + 3)


def test_stage_batches_follow_eq_1_to_4():
    gen = torch.Generator().manual_seed(0)
    prompts_, answers = torch.randint(4, 40, (64, 12)), torch.randint(4, 40, (64, 20))
    kwargs = dict(mask_token_id=1, sep_token_id=2, pad_token_id=3, generator=gen, context=10, min_context=4,
                  max_suffix=8, r_max=6, t_min=0.2, context_noise=0.0)
    one = d2a.continuation_batch(prompts_, answers, stage=1, **kwargs)
    full = torch.cat([prompts_, answers], 1)
    for b in range(64):
        cols = one.cols[one.rows == b]
        sep = int(cols.min()) - 1
        assert one.input_ids[b, sep] == 2 and (one.input_ids[b, cols] == 1).all()
        assert 1 <= cols.numel() <= 8
        ctx = one.input_ids[b, :sep]                               # the clean context ends where the suffix starts
        start = next(e for e in range(12, 32) if torch.equal(full[b, e - sep: e], ctx)
                     and torch.equal(full[b, e: e + cols.numel()], one.targets[one.rows == b]))
        assert 12 < start + cols.numel() <= 32
    w = one.weights[one.rows == 0]
    assert torch.allclose(w, w[0].expand_as(w)) and 1 <= float(w[0]) <= 5          # 1/t, t in [0.2, 1]
    two = d2a.continuation_batch(prompts_, answers, stage=2, alpha=1.5, **kwargs)
    for b in range(64):
        mine = two.rows == b
        r = int(mine.sum())
        assert 1 <= r <= 6
        sep = int(two.cols[mine].min()) - 1
        # Some answer end e: the R targets are answer[e - R: e] and the context ends right before them.
        assert any(torch.equal(answers[b, e - r: e], two.targets[mine])
                   and torch.equal(two.input_ids[b, :sep], full[b, 12 + e - r - sep: 12 + e - r]) for e in range(r + 1, 21))
        ratios = two.weights[mine][:-1] / two.weights[mine][1:]
        assert torch.allclose(ratios, torch.full_like(ratios, 1.5))                      # w_i = alpha^(R - i)
    mdlm = d2a.masked_diffusion_batch(full, mask_token_id=1, generator=gen, t_min=0.2)
    assert (mdlm.input_ids[mdlm.rows, mdlm.cols] == 1).all()
    assert torch.equal(mdlm.targets, full[mdlm.rows, mdlm.cols])
    with pytest.raises(ValueError, match="stage must be"):
        d2a.continuation_batch(prompts_, answers, stage=3, **kwargs)


def test_stage_batches_as_written():
    """Seed 001's objectives as written: Stage I reads the whole prefix (prompt + kept answer)
    and masks the whole rest of the answer; Stage II masks the answer's last R tokens; with
    kept tokens noised at level t, about t of the context is masked."""
    gen = torch.Generator().manual_seed(1)
    prompts_, answers = torch.randint(4, 40, (64, 12)), torch.randint(4, 40, (64, 20))
    kwargs = dict(mask_token_id=1, sep_token_id=2, pad_token_id=3, generator=gen, context=32, min_context=32,
                  max_suffix=None, r_max=19, t_min=0.2, stage2_cut="answer_end")
    full = torch.cat([prompts_, answers], 1)
    one = d2a.continuation_batch(prompts_, answers, stage=1, context_noise=0.0, **kwargs)
    for b in range(64):
        cols = one.cols[one.rows == b]
        sep = int(cols.min()) - 1
        kept = sep - 12                                             # the context is the whole prefix
        assert 1 <= kept <= 19 and cols.numel() == 20 - kept       # the whole rest is masked
        assert torch.equal(one.input_ids[b, :sep], full[b, :sep])
        assert torch.equal(one.targets[one.rows == b], answers[b, kept:])
    # Stage II as written: "only the refinement segment is masked", even at full context noise
    two = d2a.continuation_batch(prompts_, answers, stage=2, alpha=1.5, context_noise=1.0, stage2_noise=False, **kwargs)
    for b in range(64):
        mine = two.rows == b
        r = int(mine.sum())
        assert 1 <= r <= 19 and torch.equal(two.targets[mine], answers[b, 20 - r:])      # ends the answer
        assert torch.equal(two.input_ids[b, :32 - r], full[b, :32 - r])
    noisy_two = d2a.continuation_batch(prompts_, answers, stage=2, context_noise=1.0, **kwargs)   # cpu-scale: noised
    assert (noisy_two.input_ids == 1).sum() > noisy_two.rows.numel()
    noisy = d2a.continuation_batch(prompts_, answers, stage=1, context_noise=1.0, **kwargs)
    t = 1 / noisy.weights[torch.searchsorted(noisy.rows, torch.arange(64))]              # each row's t
    masked = [(noisy.input_ids[b, :int(noisy.cols[noisy.rows == b].min()) - 1] == 1).float().mean() for b in range(64)]
    assert abs(float(torch.stack(masked).mean() - t.mean())) < 0.06                        # context masked at level t
    for bad in ({"stage2_cut": "middle"}, {"max_suffix": 0}):
        with pytest.raises(ValueError, match="stage2_cut|max_suffix"):
            d2a.continuation_batch(prompts_, answers, stage=2, **{**kwargs, **bad})


def test_faithful_presets_are_the_objectives_as_written():
    from spec_lib.training import deer
    from spec_lib.training.teacher_sets import TEACHER_FIELDS

    for profile in ("smoke", "cpu"):
        scale, faithful = deer.D2A_PRESETS[profile], deer.D2A_PRESETS[f"{profile}-faithful"]
        assert deer.objectives(scale) == "cpu-scale" and deer.objectives(faithful) == "faithful"
        assert faithful.max_suffix is None and faithful.stage2_cut == "answer_end" and faithful.context_noise == 1.0
        assert not faithful.stage2_noise and scale.stage2_noise
        same = set(TEACHER_FIELDS) | {"pretrain_steps", "stage1_steps", "stage2_steps", "alphas", "hidden_size"}
        assert all(getattr(scale, f) == getattr(faithful, f) for f in same)       # only the objectives differ
    assert deer.D2A_PRESETS["cpu-faithful"].r_max == 96
    assert deer.deer_cache_key(deer.D2A_PRESETS["cpu"]) != deer.deer_cache_key(deer.D2A_PRESETS["cpu-faithful"])


def test_the_faithful_preset_reuses_the_pretrained_dllm_and_ar_drafter(tmp_path, monkeypatch):
    """``<profile>-faithful`` takes the pre-trained dLLM and the AR drafter of ``<profile>`` (they do
    not depend on the Stage I / II objectives) and trains its own Stage I / II from that dLLM;
    a config whose shared settings differ is refused."""
    import dataclasses

    from spec_lib.training import deer

    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(tmp_path))
    scale, _ = deer.load_or_train_deer(deer.D2A_PRESETS["smoke"], progress=False)
    faithful, _ = deer.load_or_train_deer(deer.D2A_PRESETS["smoke-faithful"], progress=False)

    def same(name):
        a, b = scale.hf_models[name].state_dict(), faithful.hf_models[name].state_dict()
        return all(torch.equal(a[k], b[k]) for k in a)

    assert same("pretrained") and same("ar_distilled") and not same("stage1")
    assert faithful.record["shared_from"] == {"preset": "smoke", "key": deer.deer_cache_key(deer.D2A_PRESETS["smoke"]),
                                              "drafters": ["pretrained", "ar_distilled"]}
    assert scale.record["shared_from"] is None
    assert set(faithful.history["model"]) >= {"pretrained", "ar_distilled", "stage1"}
    for bad, match in (({"shared_from": "nope"}, "shared_from must be one of"),
                       ({"pretrain_steps": 7}, "other settings")):
        with pytest.raises(ValueError, match=match):
            deer.deer_cache_key(dataclasses.replace(deer.D2A_PRESETS["smoke-faithful"], **bad))


def test_block_regeneration_fills_each_slot_once_most_confident_first():
    """Seed 001, Sec. 4.5: every slot of every block is filled exactly once, per_iteration at a
    time (so ceil(k / per_iteration) iterations a block), never with MASK or SEP, each iteration's
    slots the most confident of those still open; and agreement with the target's greedy tokens is
    measured, not 1 by construction (a random drafter against a random target agrees on fewer)."""
    from spec_lib.notebook.fingerprint import MASK_ID as FP_MASK, SEP_ID as FP_SEP, tiny_lm
    from spec_lib.studies import alignment

    drafter = tiny_lm("qwen3", seed=14, layers=1)
    rows = alignment.regenerate_blocks(drafter, FP_MASK, FP_SEP, [1, 2, 3], blocks=3, k=5, per_iteration=2)
    assert len(rows) == 15 and rows.groupby("block")["slot"].apply(sorted).tolist() == [list(range(5))] * 3
    assert rows.groupby("block")["iteration"].nunique().tolist() == [3, 3, 3]
    assert not rows["token"].isin([FP_MASK, FP_SEP]).any()
    for _, block in rows.groupby("block"):
        first = block[block["iteration"] == block["iteration"].min()]
        assert len(first) == 2
    one_pass = alignment.regenerate_blocks(drafter, FP_MASK, FP_SEP, [1, 2, 3], blocks=1, k=5, per_iteration=5)
    assert one_pass["iteration"].nunique() == 1
    with pytest.raises(ValueError, match="per_iteration must be an int >= 1"):
        alignment.regenerate_blocks(drafter, FP_MASK, FP_SEP, [1], blocks=1, k=2, per_iteration=0)
    _, summary = alignment.regeneration_agreement(tiny_lm("qwen3", seed=13), {"tiny": drafter}, {"s": [[1, 2, 3]]},
                                                  mask_token_id=FP_MASK, sep_token_id=FP_SEP, blocks=2, k=4,
                                                  per_iteration=2)
    assert 0.0 <= summary["agreement"].iloc[0] < 1.0 and summary["iterations_per_block"].iloc[0] == 2
