"""Any-order layouts and masks built once per shape (seed 000, App. D.2, Algorithm 3; Table 2's
row counts): the memoised path equals the path that builds every layout afresh (layouts, masks,
decoded tokens, NFE, accepted lengths, rows per call), a second decode of the same shapes
builds nothing (with a different width as the negative control), and a decode does not
write into the shared tensors."""

from __future__ import annotations

import functools

import pytest
import torch

import spec_lib.schedules.anyorder as schedules
from spec_lib.anyorder_models import AnyOrderLM, ExactAnyOrderLM
from spec_lib.architectures import build_qwen3
from spec_lib.masks.anyorder import (ABLATIONS, KINDS, _additive_block, build_any_order, clear_layout_cache,
                                     layout_cache_info)
from spec_lib.masks.predicates import to_additive
from spec_lib import decode

SCHEDULES = ("linear", "packed", "quadratic", "native")
FIELDS = ("kind", "input_ids", "position_ids", "region", "rank", "o_reach", "holds_draft", "verify_rows",
          "draft_rows", "n_new", "ablation", "keep_rows", "roles", "rows")


def random_policy(seed: int):
    gen = torch.Generator().manual_seed(seed)

    def policy(positions, scores):
        return positions[torch.randperm(positions.numel(), generator=gen)]
    return policy


def assert_same_layout(a, b, dtype=torch.float64):
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        if torch.is_tensor(x):
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), name
        else:
            assert x == y, name
    assert torch.equal(a.visible(), b.visible())
    for cache_len in (0, 5):
        assert torch.equal(a.additive(dtype, cache_len), b.additive(dtype, cache_len))
        assert torch.equal(a.additive(dtype, cache_len), to_additive(b.visible(), dtype, cache_len)[None, None])


def recording(model):
    """Wrap ``model.call`` to keep every layout it is given."""
    layouts = []
    call = type(model).call

    def wrapped(self, layout):
        layouts.append(layout)
        return call(self, layout)
    model.call = wrapped.__get__(model)
    return layouts


def outcome(result):
    return (result.tokens, result.nfe, result.accepted, result.rows_per_call, result.extras["call_kinds"],
            result.extras["cache_rebuilds"], result.extras["trace"])


def decode_both(model, monkeypatch, make_order=lambda: "ltr", **kwargs):
    """The same decode with memoised layouts and with every layout built afresh (``make_order``
    gives each its own order policy: a seeded random policy draws from its own generator)."""
    out = []
    for cache in (True, False):
        monkeypatch.setattr(schedules, "build_any_order", functools.partial(build_any_order, cache=cache))
        layouts = recording(model)
        out.append((decode(model, trace=True, order=make_order(), **kwargs), layouts))
        del model.call
    monkeypatch.undo()
    return out


@pytest.fixture(scope="module")
def float64_model():
    return AnyOrderLM(build_qwen3(12, hidden_size=32, num_layers=2, num_heads=2, max_positions=96, seed=3,
                                  dtype=torch.float64), mask_token_id=11)


# ----- (a) identical with and without the cache -------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ablation", ABLATIONS)
def test_memoised_builds_equal_fresh_builds(kind, ablation):
    """Every field and both masks, for N rows or none, windows of 1 to 8 and drafts missing
    anywhere (also in the middle of the order)."""
    gen = torch.Generator().manual_seed(0)
    for p in (0, 1, 3):
        for u in (1, 3, 8):
            for _ in range(3):
                kwargs = dict(new_ids=torch.randint(0, 9, (p,), generator=gen),
                              new_positions=torch.randint(0, 20, (p,), generator=gen),
                              order_positions=torch.randperm(u, generator=gen) + 20,
                              draft_ids=torch.randint(-1, 9, (u,), generator=gen), mask_token_id=99, ablation=ablation)
                cached = build_any_order(kind, **kwargs)
                fresh = build_any_order(kind, cache=False, **kwargs)
                assert cached.template is not None and fresh.template is None
                assert_same_layout(cached, fresh)
                assert_same_layout(cached, fresh, torch.float32)


@pytest.mark.parametrize("schedule, order", [(s, o) for s in SCHEDULES[:3] for o in ("ltr", "confidence", "random")]
                         + [("native", "ltr")])
def test_decodes_equal_with_and_without_the_cache_on_the_toy(schedule, order, monkeypatch):
    """Tokens, NFE, accepted lengths, rows per call, the trace and every layout and mask, in
    every order (a seeded random order stands for sampled orders: the decoders are greedy)."""
    for seed in range(2):
        model = ExactAnyOrderLM(8, 64, seed=seed, sharpness=1.0)        # EOS early: cache rebuilds too
        for width in (3, 6):
            (cached, lay_c), (fresh, lay_f) = decode_both(
                model, monkeypatch, lambda: random_policy(seed) if order == "random" else order,
                prompt_ids=torch.tensor([seed + 1, 2]), schedule=schedule, width=width, max_new_tokens=30,
                eos_token_id=0, **({"threshold": 0.5} if schedule == "native" else {}))
            assert outcome(cached) == outcome(fresh)
            assert len(lay_c) == len(lay_f) and lay_c
            for a, b in zip(lay_c, lay_f):
                assert_same_layout(a, b)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_decodes_equal_with_and_without_the_cache_on_a_transformers_model(float64_model, schedule, monkeypatch):
    """The masks the transformers model receives (ids, positions and the additive mask over
    the cache) and its logits are identical, call by call."""
    inputs = []

    def hook(module, args, kwargs):
        inputs.append({k: kwargs[k].clone() for k in ("input_ids", "position_ids", "attention_mask")})
    handle = float64_model.hf_model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        (cached, _), (fresh, _) = decode_both(float64_model, monkeypatch, lambda: random_policy(3),
                                              prompt_ids=torch.tensor([1, 5, 7]), schedule=schedule, width=4,
                                              max_new_tokens=16,
                                              **({"threshold": 0.3} if schedule == "native" else {}))
    finally:
        handle.remove()
    assert outcome(cached) == outcome(fresh)
    half = len(inputs) // 2
    assert half == cached.nfe
    for a, b in zip(inputs[:half], inputs[half:]):
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


# ----- (b) built once per shape ------------------------------------------------------------------------

def misses():
    info = layout_cache_info()
    return info["templates"].misses, info["masks"].misses


def test_a_second_decode_of_the_same_shapes_builds_nothing(float64_model):
    clear_layout_cache()
    for schedule in ("linear", "packed", "quadratic"):
        decode(float64_model, [1, 5, 7], schedule=schedule, width=4, max_new_tokens=16, order="confidence")
    built = misses()
    assert built[0] > 0 and built[1] > 0
    hits = layout_cache_info()["templates"].hits
    for schedule in ("linear", "packed", "quadratic"):
        decode(float64_model, [1, 5, 7], schedule=schedule, width=4, max_new_tokens=16, order="confidence")
    assert misses() == built                                       # nothing new built
    assert layout_cache_info()["templates"].hits > hits
    # negative control: another width is another shape
    decode(float64_model, [1, 5, 7], schedule="packed", width=5, max_new_tokens=16, order="confidence")
    after = misses()
    assert after[0] > built[0] and after[1] > built[1]


def test_one_template_per_shape_within_a_decode():
    """A decode builds at most one template per distinct (kind, p, u) it meets, however many
    calls it makes."""
    clear_layout_cache()
    model = ExactAnyOrderLM(8, 64, seed=1)
    layouts = recording(model)
    result = decode(model, [1, 2], schedule="packed", width=4, max_new_tokens=40, order="confidence")
    del model.call
    shapes = {(lay.kind, lay.n_new, lay.verify_rows.numel()) for lay in layouts}
    assert result.nfe > len(shapes) + 1
    assert layout_cache_info()["templates"].misses == len(shapes)
    assert len({id(lay.template) for lay in layouts}) == len(shapes)


# ----- (c) the shared tensors are never written ----------------------------------------------------------

def snapshot(templates, dtypes=(torch.float64,)):
    out = {}
    for t in templates:
        for name in ("region", "rank", "o_reach", "verify_rows", "draft_rows", "keep_rows", "mask_tail",
                     "holds_before", "holds_after", "no_drafts", "visible_all", "o_not_self"):
            out[(t.key, name)] = getattr(t, name).clone()
        for dtype in dtypes:
            out[(t.key, dtype)] = _additive_block(t.key, dtype, "cpu").clone()
    return out


def test_decodes_do_not_write_into_the_cached_tensors(float64_model):
    clear_layout_cache()
    toy = ExactAnyOrderLM(8, 64, seed=2, sharpness=1.0)
    runs = [(model, schedule, order) for model in (toy, float64_model) for schedule in SCHEDULES
            for order in ("confidence", "ltr")]
    layouts = []
    for model, schedule, order in runs:                           # fill the cache
        calls = recording(model)
        decode(model, [1, 2, 3], schedule=schedule, width=4, max_new_tokens=16, order=order, eos_token_id=0)
        del model.call
        layouts += calls
    templates = list({id(lay.template): lay.template for lay in layouts}.values())
    assert len(templates) >= 10 and {lay.kind for lay in layouts} == set(KINDS)
    before = snapshot(templates)
    built = misses()
    for model, schedule, order in runs:                           # decode again over the same cache
        decode(model, [1, 2, 3], schedule=schedule, width=4, max_new_tokens=16, order=order, eos_token_id=0)
    assert misses() == built
    after = snapshot(templates)
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert torch.equal(value, after[key]), key
    # negative control: a caller that writes into a shared mask is caught by the same comparison
    full = next(lay for lay in layouts if lay.visible() is lay.template.visible_all)
    full.visible()[0, -1] ^= True
    try:
        changed = snapshot(templates)
        assert not all(torch.equal(value, changed[key]) for key, value in before.items())
    finally:
        clear_layout_cache()                                      # never leave a poisoned cache behind


def test_per_call_tensors_are_fresh_and_the_shared_ones_shared():
    """Tokens, positions, the drafts' flags and the additive mask are new tensors each call
    (a caller may keep or modify them); the structure is the template's."""
    kwargs = dict(new_ids=torch.tensor([7]), new_positions=torch.tensor([13]),
                  order_positions=torch.tensor([15, 14, 16]), mask_token_id=99)
    full = build_any_order("ao_packed", draft_ids=torch.tensor([4, 5, 6]), **kwargs)
    holey = build_any_order("ao_packed", draft_ids=torch.tensor([4, -1, 6]), **kwargs)
    t = full.template
    assert holey.template is t and full.region is t.region and full.keep_rows is t.keep_rows
    assert full.visible() is t.visible_all                         # every rank holds a draft: shared
    assert holey.visible().data_ptr() != t.visible_all.data_ptr()  # a rank without one: a copy
    for lay in (full, holey):
        assert lay.input_ids.data_ptr() != t.mask_tail.data_ptr()
        mask = lay.additive(torch.float32, 0)
        assert mask.data_ptr() != _additive_block(t.key, torch.float32, "cpu").data_ptr()
    assert not holey.visible()[6, 2] and full.visible()[6, 2]       # M of rank 3 sees O of rank 2 only if drafted
    assert holey.visible()[2, 2]                                    # an O row always sees itself
