"""The partial-branch schedule (seed 000, Sec. 5's open design; spec_lib.schedules.partial):
its layouts (2B + |S| B rows, Packed-SS rows plus Quadratic-SS branches), greedy identity to
AR, exact sampling with a negative control, the pathwise comparison with Packed-SS, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spec_lib import decode, masks
from spec_lib.masks.partial import partial_call_kind, partial_layout
from spec_lib.schedules.branches import BranchPolicy, branch_policy, outcome_probabilities
from spec_lib.schedules.partial import _template
from spec_lib.studies import partial_branch as pb
from spec_lib.toy import MarkovLM

from .conftest import as_dual, prompts
from .test_lossless_greedy import references

MASK = 99
POLICIES = ("full", "first:1", "first:3", "likely:2")


def build(kind_or_branches, width, m, n_ctx=0, start=5):
    args = dict(context=torch.arange(30, 30 + n_ctx), last=torch.tensor([7]), draft=torch.arange(20, 20 + m),
                width=width, mask_token_id=MASK, start=start)
    if isinstance(kind_or_branches, str):
        return masks.build_layout(kind_or_branches, **args)
    return partial_layout(kind_or_branches, **args)


@pytest.mark.parametrize("block", [2, 4, 8, 16])
def test_rows_per_call_are_2B_plus_S_B(block):
    width = block - 1
    for branches in [(), (width,), (0, 1), tuple(range(width + 1))]:
        branches = tuple(k for k in branches if k <= width)
        for n_ctx in (0, 3):
            lay = build(branches, width, width, n_ctx)
            assert lay.rows == n_ctx + 2 * block + len(branches) * block
            assert lay.rows == partial_call_kind(branches).rows(n_ctx, width, width)
            assert lay.draft_rows.shape == (1 + len(branches), width)
    # the registered worst case: every outcome has a branch
    assert masks.layout_rows("partial", 0, width, width) == 2 * block + block * block


def test_no_branch_is_packed_and_branch_k_is_quadratics_branch_k():
    width, m = 4, 3
    packed, quadratic = build("packed", width, m), build("quadratic", width, m)
    empty = build((), width, m)
    assert torch.equal(empty.input_ids, packed.input_ids) and torch.equal(empty.visible(), packed.visible())
    assert torch.equal(empty.draft_rows, packed.draft_rows)
    lay = build((0, 2, 3), width, m)
    vis, qvis = lay.visible(), quadratic.visible()
    verify_rows = torch.arange(1 + m)
    for j, k in enumerate((0, 2, 3)):
        rows = lay.draft_rows[1 + j]                             # rows 1..W of branch k
        block_first = int(rows[0]) - 1
        qrows = quadratic.draft_rows[k]                          # rows 0..W of quadratic's branch k
        assert lay.position_ids[block_first:block_first + width + 1].tolist() == quadratic.position_ids[qrows].tolist()
        assert torch.equal(vis[rows][:, verify_rows], qvis[qrows[1:]][:, verify_rows])
        assert vis[rows][:, : k + 1].all() and not vis[rows][:, k + 1: 1 + m].any()
        assert not vis[rows][:, packed.rows:block_first].any()  # no other block is visible
    assert torch.equal(lay.keep_rows, torch.cat([lay.target_rows, lay.draft_rows.reshape(-1)]))


def test_template_fill_equals_a_fresh_build():
    width, m, start = 5, 3, 17
    template = _template((1, 3), m, width, MASK, torch.device("cpu"), torch.float32)
    last, draft = torch.tensor([7]), torch.arange(20, 20 + m)
    filled = template.fill(last, draft, start)
    fresh = partial_layout((1, 3), context=last.new_empty(0), last=last, draft=draft, width=width,
                           mask_token_id=MASK, start=start)
    for field in ("input_ids", "position_ids", "segment", "draft_rows", "target_rows"):
        assert torch.equal(getattr(filled, field), getattr(fresh, field)), field
    blocks = fresh.segment > 0                                  # causal rows do not read sees_upto
    assert torch.equal(filled.sees_upto[blocks], fresh.sees_upto[blocks])
    assert torch.equal(filled.new_rows_mask == 0, fresh.visible())


def test_policies_choose_outcomes():
    alpha = torch.tensor([0.9, 0.9, 0.1, 0.5])
    probs = outcome_probabilities(alpha)
    assert torch.isclose(probs.sum(), torch.tensor(1.0, dtype=torch.float64))
    expected = torch.tensor([0.1, 0.9 * 0.1, 0.81 * 0.9, 0.81 * 0.1 * 0.5, 0.81 * 0.1 * 0.5], dtype=torch.float64)
    assert torch.allclose(probs, expected)
    assert BranchPolicy("likely", 2).select(4, alpha) == (0, 2)      # 0.729 and 0.1
    assert branch_policy("first:3").select(1, None) == (0, 1)
    assert branch_policy("full").select(4, None) == (4,)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_equals_ar_on_exact_models(seed):
    toy = MarkovLM(6, seed=seed, draft_noise=0.3, concentration=0.3, eos_token_id=5)
    hits = 0
    for eos in (None, 5):
        ref = decode(toy, [1, 2], schedule="ar", width=1, max_new_tokens=40, eos_token_id=eos).tokens
        for width in (1, 3, 6):
            for policy in POLICIES:
                res = decode(toy, [1, 2], schedule="partial", width=width, max_new_tokens=40, branches=policy,
                             eos_token_id=eos)
                assert res.tokens == ref, (width, policy, eos)
                assert sum(res.accepted) == len(res.tokens) and res.nfe == len(res.accepted)
                hits += res.extras["branch_hits"]
    assert hits > 0                                           # branch steps ran


def test_greedy_equals_generate_float64(trained_hf_model):
    """Greedy partial-branch output is token-identical to transformers' generate (float64)."""
    model = as_dual(trained_hf_model, torch.float64)
    cases = references(model.hf_model, prompts(4, seed=21, chain=trained_hf_model.chain))
    hits = multi = 0
    for prompt, eos, expected in cases:
        for width in (2, 8):
            for policy in ("full", "first:3", "likely:2"):
                res = decode(model, prompt, schedule="partial", width=width, max_new_tokens=24, branches=policy,
                             eos_token_id=eos)
                assert res.tokens == expected, (width, policy, eos, prompt.tolist())
                hits += res.extras["branch_hits"]
                multi += sum(a > 1 for a in res.accepted)
                sizes = res.extras["branches_per_call"]
                assert res.rows_per_call[1:] == [(2 + s) * (width + 1) for s in sizes[1:]]
    assert hits > 20 and multi > 20, (hits, multi)


def test_sampling_is_exact_and_the_negative_control_is_caught():
    configs = [dict(branches=b, width=2, n=2000, temperature=1.0, draft_noise=0.5, chain_seed=3, sample_seed=i)
               for i, b in enumerate(("full", "first:2", "likely:2"))]
    configs.append(dict(branches="first:3", width=2, n=2000, temperature=1.0, draft_noise=0.5, chain_seed=3,
                        sample_seed=9, ablation="branch_argmax"))
    fits = pb.exactness_fits(configs, vocab_size=4, eos_token_id=0, prompt=[1], length=4, workers=1, progress=False)
    correct = fits[fits["role"] == "correct"]
    assert (correct["chi2_p"] > 1e-3).all() and (correct["g_p"] > 1e-3).all(), fits
    control = fits[fits["role"] == "negative control"]
    assert (control["chi2_p"] < 1e-6).all(), fits


def test_dominates_packed_under_assumption_but_not_without_it():
    table = pb.pathwise_study([2, 3], ["full", "first:2"], instances=8, length=16, progress=False)
    assert (table["violations"] == 0).all() and table["instances_better"].sum() > 0
    search, found = pb.counterexample_search([3], ["first:2"], instances=60, length=12, progress=False)
    assert found is not None and found.nfe_partial > found.nfe_packed and not found.satisfies_assumption


def test_bad_input_is_rejected_before_any_call():
    toy = MarkovLM(4, seed=0)
    cases = [(dict(branches="some"), "branches must be"), (dict(branches="likely:0"), "branches size"),
             (dict(branches="first"), "branches must be"), (dict(branches=3), "branches must be"),
             (dict(ablation="fresh_q"), "ablation must be one of"), (dict(width=0), "width must be"),
             (dict(width=200, branches="first:60"), "rows per call")]
    for kwargs, message in cases:
        args = dict(width=3, max_new_tokens=8, branches="full") | kwargs
        with pytest.raises(ValueError, match=message):
            decode(toy, [1], schedule="partial", **args)
    with pytest.raises(TypeError, match="model must implement spec_lib.models.SpecModel"):
        decode(object(), [1], schedule="partial", width=3, max_new_tokens=8)
    with pytest.raises(ValueError, match="branches must be outcomes"):
        build((4,), 5, 3)
    with pytest.raises(ValueError, match="sorted and distinct"):
        partial_call_kind((2, 1))
    with pytest.raises(ValueError, match="method|branches"):
        pb.PartialMethod("partial", 3, "nope")


def test_winners_at_reads_the_grid_and_names_an_unmeasured_calibration():
    """The winner at a mark is the grid's nearest point's; a calibration whose tau/delta is not
    positive (short noisy runs) is reported as not measured, without a numpy warning."""
    import warnings

    import pandas as pd

    agg = pd.DataFrame({"method": ["packed B=4", "quadratic B=4"], "tokens": [300, 400], "nfe": [100, 100]})
    calls = pd.DataFrame({"method": ["packed B=4", "quadratic B=4"], "schedule": ["packed", "quadratic"],
                          "rows_per_call": [8.0, 20.0]})
    regimes = pb.regime_map(agg, calls, np.logspace(0, 4, 41))
    # packed: 3 / (x + 8), quadratic: 4 / (x + 20); quadratic wins once x > 28
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        winners = pb.winners_at(regimes, {"small": 2.0, "large": 5000.0, "failed": -3.0, "nan": float("nan")})
    assert winners["small"] == "packed B=4" and winners["large"] == "quadratic B=4"
    assert winners["failed"].startswith("not measured") and winners["nan"].startswith("not measured")
