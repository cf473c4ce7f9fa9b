"""A steady-state call's layout built directly from its template equals the generic build.

:meth:`spec_lib.masks.LayoutTemplate.fill` is the per-call work of every steady-state call (the
decoder time of AR on the compiled path): one ``torch.cat`` of precomputed pieces, one add for
the positions, a plain ``Layout(...)``.  Here it is compared field by field with
:meth:`~spec_lib.masks.LayoutTemplate.fill_generic` (slots written by index, ``dataclasses.replace``)
and with a fresh :func:`spec_lib.masks.build_layout` (the layouts of seed 000, App. D.1; rows
per call as Table 2, App. D.3), for every left-to-right call kind, several widths, draft
lengths and cache offsets.  No model and no compile.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from spec_lib import masks
from spec_lib.masks import Layout, LayoutTemplate, LTRCall, call_kind, call_kinds
from spec_lib.masks.partial import partial_layout
from spec_lib.schedules.partial import _template as partial_template

MASK = 5
CPU = torch.device("cpu")


def assert_same_layout(a: Layout, b: Layout, fields=None) -> None:
    """Every field of ``a`` and ``b`` (or those named) equal: tensors in dtype, shape and value."""
    for name in fields or [f.name for f in dataclasses.fields(Layout)]:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor), name
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), name
        else:
            assert type(x) is type(y) and x == y, name


def ltr_kinds() -> list[str]:
    kinds = [k for k in call_kinds() if isinstance(call_kind(k), LTRCall)]
    assert {"verify", "linear_draft", "packed", "quadratic", "partial"} <= set(kinds), kinds
    return kinds


def cases():
    gen = torch.Generator().manual_seed(0)
    for kind in ltr_kinds():
        spec = call_kind(kind)
        for width in (1, 3, 8):
            for m in (range(width + 1) if spec.verifies else [0]):
                for start in (0, 1, 17):
                    tokens = torch.randint(MASK + 1, 50, (m + 1,), generator=gen)
                    yield kind, width, m, start, tokens[:1], tokens[1:]


def test_fill_equals_the_generic_fill_and_a_fresh_build_for_every_call_kind():
    n = 0
    for kind, width, m, start, last, draft in cases():
        template = LayoutTemplate.build(kind, m, width, MASK, CPU, torch.float32)
        filled = template.fill(last, draft, start)
        assert_same_layout(filled, template.fill_generic(last, draft, start))
        fresh = masks.build_layout(kind, context=last.new_empty(0), last=last, draft=draft, width=width,
                                   mask_token_id=MASK, start=start)
        assert_same_layout(filled, fresh, ["kind", "input_ids", "position_ids", "segment", "roles", "target_rows",
                                           "draft_rows", "n_context", "keep_rows"])
        blocks = fresh.segment > 0                       # causal rows do not read sees_upto
        assert torch.equal(filled.sees_upto[blocks], fresh.sees_upto[blocks])
        assert torch.equal(filled.visible(), fresh.visible())
        assert torch.equal(filled.new_rows_mask == 0, fresh.visible())
        assert filled.rows == masks.layout_rows(kind, 0, m, width)            # Table 2's rows
        n += 1
    assert n > 100, n


def test_fill_of_partial_branch_templates_equals_the_generic_fill():
    width, last = 4, torch.tensor([7])
    for m in range(width + 1):
        draft = torch.arange(20, 20 + m)
        for size in range(m + 2):
            for branches in itertools.combinations(range(m + 1), size):
                template = partial_template(branches, m, width, MASK, CPU, torch.float32)
                for start in (0, 9):
                    filled = template.fill(last, draft, start)
                    assert_same_layout(filled, template.fill_generic(last, draft, start))
                    fresh = partial_layout(branches, context=last.new_empty(0), last=last, draft=draft, width=width,
                                           mask_token_id=MASK, start=start)
                    assert torch.equal(filled.input_ids, fresh.input_ids)
                    assert torch.equal(filled.position_ids, fresh.position_ids)


def test_the_comparison_catches_a_shifted_or_changed_layout():
    """Negative control: a layout off by one position, token, block boundary or row is told apart."""
    template = LayoutTemplate.build("packed", 2, 4, MASK, CPU, torch.float32)
    filled = template.fill(torch.tensor([7]), torch.tensor([8, 9]), 11)
    assert_same_layout(filled, template.fill_generic(torch.tensor([7]), torch.tensor([8, 9]), 11))
    changed = [dataclasses.replace(filled, position_ids=filled.position_ids + 1),
               dataclasses.replace(filled, sees_upto=filled.sees_upto - 1),
               dataclasses.replace(filled, input_ids=filled.input_ids.roll(1)),
               dataclasses.replace(filled, input_ids=filled.input_ids.int()),
               dataclasses.replace(filled, keep_rows=filled.keep_rows[:-1]),
               dataclasses.replace(filled, n_context=1)]
    for other in changed:
        with pytest.raises(AssertionError):
            assert_same_layout(filled, other)
    # the generic fill one position off is caught too
    with pytest.raises(AssertionError, match="position_ids"):
        assert_same_layout(filled, template.fill_generic(torch.tensor([7]), torch.tensor([8, 9]), 12))


def test_fill_refuses_a_draft_of_the_wrong_length():
    template = LayoutTemplate.build("verify", 3, 4, MASK, CPU, torch.float32)
    with pytest.raises(ValueError, match="3 draft slots, got 2"):
        template.fill(torch.tensor([7]), torch.tensor([8, 9]), 0)


def test_ar_call_passes_its_last_token_through():
    """AR's steady call ([last] at the cache's end): no copy of the token, one position."""
    template = LayoutTemplate.build("verify", 0, 1, MASK, CPU, torch.float32)
    prefix = torch.arange(30, 40)
    filled = template.fill(prefix[-1:], prefix[:0], 9)
    assert filled.input_ids.data_ptr() == prefix[-1:].data_ptr()
    assert filled.position_ids.tolist() == [9] and filled.n_context == 0


def test_a_pickled_template_fills_like_the_original():
    """A model carries its cached templates to Dask workers by pickle: the copy's markers must
    still be recognised, so its fill equals the original's (it raised a TypeError when the
    markers were strings, compared by identity)."""
    import pickle

    n = 0
    for kind, width, m, start, last, draft in cases():
        if width != 3 or start != 17:
            continue
        template = LayoutTemplate.build(kind, m, width, MASK, CPU, torch.float32)
        copied = pickle.loads(pickle.dumps(template))
        assert_same_layout(copied.fill(last, draft, start), template.fill(last, draft, start))
        n += 1
    assert n >= 5, n
