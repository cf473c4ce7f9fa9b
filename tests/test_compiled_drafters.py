"""The separate drafters on the compiled fast path (spec_lib.compiled.drafters) are as exact as
the eager ones: greedy ``deer`` and ``ar_draft`` outputs equal ``generate`` in float64 (seed 001,
lossless verification) with the static target and static drafters, compiled and not; the padded
diffusion drafter's draft logits equal the eager drafter's; the AR drafter's cache is reused and
rewound by a pointer; bad arguments are refused."""

from __future__ import annotations

import copy

import pytest
import torch

from spec_lib import decode
from spec_lib.compiled import StaticDualModeLM
from spec_lib.compiled.drafters import StaticARDrafter, StaticDiffusionDrafter
from spec_lib.drafters import ARDrafter, DiffusionDrafter

from .conftest import MASK_ID, SEP_ID, prompts
from .test_deer import MAX_NEW
from .test_lossless_greedy import references

CONTEXT = 16


def _copy(hf_model, dtype=torch.float64):
    return copy.deepcopy(hf_model).to(dtype)


def _static_drafter(kind, drafters, compile=False):        
    if kind == "deer":
        return StaticDiffusionDrafter(_copy(drafters[0]), MASK_ID, SEP_ID, context=CONTEXT, compile=compile)
    return StaticARDrafter(_copy(drafters[1]), max_cache_len=96, compile=compile)


@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("schedule", ["deer", "ar_draft"])
def test_greedy_outputs_match_generate_float64(schedule, compile, trained_hf_model, drafters):
    target = StaticDualModeLM(_copy(trained_hf_model), MASK_ID, max_cache_len=96, compile=compile)
    drafter = _static_drafter(schedule, drafters, compile)
    cases = references(target.hf_model, prompts(3 if compile else 6, seed=41, chain=trained_hf_model.chain))
    multi = 0
    for prompt, eos, expected in cases:
        for k in ((4,) if compile else (1, 4, 8)):
            res = decode(target, prompt, schedule=schedule, width=k, max_new_tokens=MAX_NEW, eos_token_id=eos,
                         drafter=drafter)
            assert res.tokens == expected, (schedule, k, eos, prompt.tolist())
            per_cycle = 1 if schedule == "deer" else k
            assert res.extras["drafter_nfe"] == per_cycle * len(res.accepted)
            multi += sum(a > 1 for a in res.accepted)
    assert multi >= (3 if compile else 10), multi             # drafts were accepted
    if compile:
        assert drafter.compile_seconds and all(s > 0 for s in drafter.compile_seconds.values())
        assert len(drafter.compile_seconds) == 1               # one shape: (deer, k) or (ar_draft, 1)


def test_padded_diffusion_logits_equal_the_eager_drafter(drafters):
    eager = DiffusionDrafter(_copy(drafters[0]), MASK_ID, SEP_ID, context=CONTEXT)
    static = StaticDiffusionDrafter(_copy(drafters[0]), MASK_ID, SEP_ID, context=CONTEXT)
    buckets = StaticDiffusionDrafter(_copy(drafters[0]), MASK_ID, SEP_ID, context=CONTEXT, bucket=4)
    assert [buckets.padded_length(n) for n in (1, 4, 5, 8, 9, 16, 40)] == [4, 4, 8, 8, 16, 16, 16]
    assert buckets.buckets() == [4, 8, 16] and static.buckets() == [CONTEXT]
    assert static.padded_length(1) == CONTEXT
    assert buckets.compile_buckets(6) == {}                    # eager: nothing to compile
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        buckets.compile_buckets(0)
    for n in (1, 5, CONTEXT - 1, CONTEXT, CONTEXT + 9):        # padded, exactly full, truncated
        prefix = torch.arange(n) % (SEP_ID - 1) + 1
        for k in (1, 6):
            a = eager.draft_logits(prefix, k)
            for drafter in (static, buckets):
                b = drafter.draft_logits(prefix, k)
                assert a.rows == b.rows
                torch.testing.assert_close(b.logits, a.logits, rtol=1e-10, atol=1e-10)
    # negative control: a padding key left visible changes the logits of a short prefix
    positions, mask = static._positions_and_mask(3, 6, torch.device("cpu"), torch.float64)
    broken = mask.clone()
    broken[..., 0] = 0
    ids = torch.full((1, CONTEXT + 7), MASK_ID)
    ids[0, CONTEXT - 3:CONTEXT] = torch.tensor([1, 2, 3])
    ids[0, CONTEXT] = SEP_ID
    with torch.inference_mode():
        good = static._forward(ids, positions, mask, 6)[0]
        bad = static._forward(ids, positions, broken, 6)[0]
    assert (good - bad).abs().max() > 1e-6


def test_ar_drafter_cache_is_reused_and_rewound(trained_hf_model, drafters):
    target = StaticDualModeLM(_copy(trained_hf_model), MASK_ID, max_cache_len=96)
    drafter = StaticARDrafter(_copy(drafters[1]), max_cache_len=96)
    eager = ARDrafter(_copy(drafters[1]))
    prompt = prompts(1, seed=7, chain=trained_hf_model.chain)[0]
    res = decode(target, prompt, schedule="ar_draft", width=4, max_new_tokens=MAX_NEW, drafter=drafter)
    keys = drafter.state.cache.layers[0].keys
    assert keys.shape[2] == 96
    assert any(a <= 4 for a in res.accepted[:-1])               # a rejection rewound the drafter's cache
    again = decode(target, prompt, schedule="ar_draft", width=4, max_new_tokens=MAX_NEW, drafter=drafter)
    assert again.tokens == res.tokens
    assert drafter.state.cache.layers[0].keys.data_ptr() == keys.data_ptr()
    # the drafts themselves equal the eager drafter's, pass for pass
    ref = decode(target, prompt, schedule="ar_draft", width=4, max_new_tokens=MAX_NEW, drafter=eager)
    assert ref.accepted == res.accepted and ref.extras["drafter_nfe"] == res.extras["drafter_nfe"]


def test_bad_arguments_are_refused(drafters):
    with pytest.raises(ValueError, match="context must be an int"):
        StaticDiffusionDrafter(_copy(drafters[0]), MASK_ID, SEP_ID, context=None)
    with pytest.raises(ValueError, match="context must be None or an int"):
        StaticDiffusionDrafter(_copy(drafters[0]), MASK_ID, SEP_ID, context=0)
    with pytest.raises(ValueError, match="context must leave room"):
        StaticDiffusionDrafter(_copy(drafters[0]), MASK_ID, SEP_ID, context=10**6)
    with pytest.raises(ValueError, match="bucket must be an int >= 1"):
        StaticDiffusionDrafter(_copy(drafters[0]), MASK_ID, SEP_ID, context=CONTEXT, bucket=0)
    with pytest.raises(TypeError, match="compile must be a bool"):
        StaticDiffusionDrafter(_copy(drafters[0]), MASK_ID, SEP_ID, context=CONTEXT, compile=1)
    with pytest.raises(ValueError, match="mode must be one of"):
        StaticARDrafter(_copy(drafters[1]), compile=True, mode="fastest")
    with pytest.raises(ValueError, match="max_cache_len"):
        StaticARDrafter(_copy(drafters[1]), max_cache_len=10**6)
    with pytest.raises(TypeError, match="hf_model"):
        StaticARDrafter("not a model")
    small = StaticARDrafter(_copy(drafters[1]), max_cache_len=8)
    with pytest.raises(ValueError, match="max_cache_len=8 is too small"):
        small.draft(torch.arange(1, 10), 4, lambda logits: (logits.argmax(-1), None))


# ----- DFlash / DEdit (seed 002) on static context buffers ------------------------------------

from spec_lib.compiled.drafters import StaticBlockEditDrafter, StaticFeatureTarget  # noqa: E402
from spec_lib.drafters.block_edit import BlockEditDrafter  # noqa: E402
from spec_lib.drafters.feature_target import FeatureTarget  # noqa: E402

from .conftest import DEDIT_WIDTH as WIDTH  # noqa: E402


@pytest.mark.parametrize("passes,early_exit,compile,static_target",
                         [(1, False, False, False), (3, False, False, False), (4, True, False, False),
                          (3, False, False, True), pytest.param(3, False, True, False, marks=pytest.mark.slow),
                          pytest.param(1, False, True, True, marks=pytest.mark.slow)])
def test_block_edit_greedy_outputs_equal_generate(trained_pair, passes, early_exit, compile, static_target):
    """Losslessness in float64 with the static drafter (on the eager target, or with the target
    on the static path too, compiled with the drafter), and its proposals equal the eager
    drafter's on the eager target round for round (same accepted lengths, same passes per round)."""
    target_hf, network, _ = trained_pair
    eager_target = FeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids)
    target = (StaticFeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids, max_cache_len=64,
                                  compile=compile) if static_target else eager_target)
    static = StaticBlockEditDrafter(target, network, passes=passes, early_exit=early_exit, max_context=64,
                                    compile=compile)
    eager = BlockEditDrafter(eager_target, network, passes=passes, early_exit=early_exit)
    accepted = []
    for seed in range(2 if compile else 3):
        prompt = target_hf.chain.sample_sequences(1, 10, seed=100 + seed)[0].tolist()
        res = decode(target, prompt, schedule="deer", width=WIDTH - 1, max_new_tokens=30, drafter=static)
        ref = target_hf.generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)[0, len(prompt):].tolist()
        assert res.tokens == ref
        static_passes = static.passes_per_round
        again = decode(eager_target, prompt, schedule="deer", width=WIDTH - 1, max_new_tokens=30, drafter=eager)
        assert again.accepted == res.accepted and eager.passes_per_round == static_passes
        accepted += res.accepted
    assert sum(a >= 3 for a in accepted) >= 2, accepted
    if compile:
        assert {k for _, _, k in static.compile_seconds} == {WIDTH - 1}
        assert {w for _, w, _ in static.compile_seconds} <= {32, 64}          # buckets of <= 50 rows
    if compile and static_target:                                         # verification of W drafts: one shape
        assert set(target.compile_seconds) == {("verify", WIDTH)}, target.compile_seconds


class _WrongRows(StaticFeatureTarget):
    """Negative control: keeps the features of the call's rows in reverse order, so a commit
    records rows that did not become verified."""

    def _received(self, extras):
        super()._received((extras[0].flip(0),))


@pytest.mark.parametrize("cls,compile", [(StaticFeatureTarget, False), (_WrongRows, False),
                                         pytest.param(StaticFeatureTarget, True, marks=pytest.mark.slow)])
def test_static_feature_target_records_the_eager_targets_features(trained_pair, cls, compile):
    """After the same decode the static target (compiled or not) holds the eager target's
    features of every verified row (float64); one that keeps the wrong rows' features is caught."""
    target_hf, network, _ = trained_pair
    layer_ids = network.config.target_layer_ids
    eager = FeatureTarget(target_hf, MASK_ID, layer_ids)
    static = cls(target_hf, MASK_ID, layer_ids, max_cache_len=64, compile=compile)
    prompt = target_hf.chain.sample_sequences(1, 10, seed=7)[0].tolist()
    for schedule, drafter in (("packed", None), ("deer", BlockEditDrafter(eager, network, passes=2))):
        a = decode(eager, prompt, schedule=schedule, width=WIDTH - 1, max_new_tokens=20, drafter=drafter)
        static_drafter = None if drafter is None else StaticBlockEditDrafter(static, network, passes=2, max_context=64)
        b = decode(static, prompt, schedule=schedule, width=WIDTH - 1, max_new_tokens=20, drafter=static_drafter)
        assert a.tokens == b.tokens and eager.feature_rows == static.feature_rows == len(prompt) + 19
        # compiled: the model normalises in float32 (RMSNorm casts), and inductor does not round
        # at those casts (it does not emulate precision casts), so float32-sized gaps remain
        gap = (static.features_from(0) - eager.features_from(0)).abs().max().item()
        same = gap <= (1e-5 if compile else 1e-9)
        assert same is (cls is StaticFeatureTarget), schedule
    assert static.features_from(5).shape == (len(prompt) + 14, static.feature_size)
    if compile:                                                 # the steady calls ran compiled
        assert set(static.compile_seconds) == {("packed", 2 * WIDTH), ("verify", WIDTH)}, static.compile_seconds
    with pytest.raises(ValueError, match="layer_ids must be a non-empty list"):
        StaticFeatureTarget(target_hf, MASK_ID, [99], max_cache_len=64)
    with pytest.raises(ValueError, match="max_cache_len must be an int >= 2"):
        StaticFeatureTarget(target_hf, MASK_ID, layer_ids, max_cache_len=1)


def test_block_edit_logits_equal_the_eager_drafter_and_buffers_are_reused(trained_pair):
    target_hf, network, _ = trained_pair
    target = FeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids)
    static = StaticBlockEditDrafter(target, network, passes=3, max_context=64)
    eager = BlockEditDrafter(target, network, passes=3)
    prompt = list(range(3, 15))
    result = decode(target, prompt, schedule="deer", width=WIDTH - 1, max_new_tokens=12, drafter=static)
    buffer = static.state.kv[0][0]
    prefix = torch.tensor(prompt + result.tokens)
    a = static.draft_logits(prefix, WIDTH - 1).logits                     # the next round, P3
    decode(target, prompt, schedule="deer", width=WIDTH - 1, max_new_tokens=12, drafter=eager)
    b = eager.draft_logits(prefix, WIDTH - 1).logits
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    decode(target, prompt, schedule="deer", width=WIDTH - 1, max_new_tokens=12, drafter=static)
    assert static.state.kv[0][0].data_ptr() == buffer.data_ptr()          # reused, not reallocated
    # the buffers are read only up to the pointer: garbage behind it changes nothing, the same
    # garbage in a written row (the negative control) changes the logits
    decode(target, prompt, schedule="deer", width=WIDTH - 1, max_new_tokens=12, drafter=static)
    same = static.draft_logits(prefix, WIDTH - 1).logits
    state = static.state                                                  # this decode's (rows = prefix - 1)
    assert state.rows == prefix.numel() - 1
    for k_buf, v_buf in state.kv:
        k_buf[:, :, state.rows:] = 1e3
        v_buf[:, :, state.rows:] = 1e3
    behind = static.draft_logits(prefix, WIDTH - 1).logits
    torch.testing.assert_close(behind, same, rtol=1e-9, atol=1e-9)
    for k_buf, v_buf in state.kv:
        k_buf[:, :, 0] = 1e3
        v_buf[:, :, 0] = 1e3
    written = static.draft_logits(prefix, WIDTH - 1).logits
    assert (written - same).abs().max() > 1e-3


def test_block_edit_bad_arguments(trained_pair):
    target_hf, network, _ = trained_pair
    target = FeatureTarget(target_hf, MASK_ID, network.config.target_layer_ids)
    with pytest.raises(ValueError, match="max_context must be an int >= 2"):
        StaticBlockEditDrafter(target, network, max_context=1)
    with pytest.raises(TypeError, match="compile must be a bool"):
        StaticBlockEditDrafter(target, network, compile="yes")
    with pytest.raises(ValueError, match="bucket must be an int >= 1"):
        StaticBlockEditDrafter(target, network, bucket=0)
    with pytest.raises(ValueError, match="passes must be an int"):
        StaticBlockEditDrafter(target, network, passes=0)
    small = StaticBlockEditDrafter(target, network, max_context=8)
    with pytest.raises(ValueError, match="max_context=8 is too small"):
        decode(target, list(range(3, 20)), schedule="deer", width=WIDTH - 1, max_new_tokens=12, drafter=small)
