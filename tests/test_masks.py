"""Layouts: row counts (App. D.3, Table 2), the [[T_B, 0], [0, J_B]] structure (App. D.1),
Quadratic-SS branch visibility (Sec. 3.1 "Comparison"), templates and heatmaps."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from spec_lib import masks
from spec_lib.masks.anyorder import AnyOrderCall
from spec_lib.notebook.plotting import plot_layout

MASK = 99


def layout(kind, width, m, n_ctx=0, start=5):
    last = torch.tensor([7])
    draft = torch.arange(20, 20 + m)
    context = torch.arange(30, 30 + n_ctx)
    return masks.build_layout(kind, context=context, last=last, draft=draft, width=width,
                              mask_token_id=MASK, start=start)


@pytest.mark.parametrize("block", [2, 4, 8, 32])
def test_rows_per_iteration_match_table2(block):
    width = block - 1
    linear = layout("linear_draft", width, 0).rows + layout("verify", width, width).rows
    quadratic = layout("quadratic", width, width).rows
    packed_full = layout("packed", width, width).rows
    packed_short = layout("packed", width, max(0, width - 3)).rows          # padded to 2B
    assert linear == 2 * block
    assert quadratic == block * (block + 1)
    assert packed_full == packed_short == 2 * block
    for kind, m in [("linear_draft", 0), ("verify", width), ("quadratic", width), ("packed", width - 1),
                    ("verify", 0)]:
        for n_ctx in (0, 6):
            assert layout(kind, width, m, n_ctx).rows == masks.layout_rows(kind, n_ctx, m, width)


def test_packed_mask_is_block_diagonal_T_and_J():
    width, block = 5, 6
    lay = layout("packed", width, 3)
    vis = lay.visible()
    tril = torch.tril(torch.ones(block, block, dtype=torch.bool))
    assert torch.equal(vis[:block, :block], tril)                            # T_B
    assert torch.equal(vis[block:, block:], torch.ones(block, block, dtype=torch.bool))   # J_B
    assert not vis[:block, block:].any() and not vis[block:, :block].any()   # zeros
    assert lay.roles == ("last", "draft", "draft", "draft", "pad", "pad", "anchor") + ("mask",) * width
    # Proposal block: copy of `last` at its own position, masks at the next W positions.
    assert lay.position_ids[block:].tolist() == list(range(5, 5 + block))
    assert lay.input_ids[block].item() == 7 and (lay.input_ids[block + 1:] == MASK).all()
    assert lay.target_rows.tolist() == [0, 1, 2, 3]
    assert lay.draft_rows.tolist() == [list(range(block + 1, 2 * block))]


def test_first_call_blocks_read_the_uncached_prompt():
    lay = layout("packed", 3, 0, n_ctx=4, start=0)
    vis = lay.visible()
    block_rows = (lay.segment == 1).nonzero()[:, 0]
    context_rows = torch.arange(4)
    last_row = 4
    assert vis[block_rows][:, context_rows].all()                             # prompt minus last
    assert not vis[block_rows, last_row].any()                                # last via own anchor
    assert (lay.segment == 0).sum() == 4 + 1 + 3                              # ctx, last, 3 pads


def test_quadratic_branch_k_sees_last_and_first_k_drafts():
    width, block, m = 3, 4, 3
    lay = layout("quadratic", width, m)
    vis = lay.visible()
    verify_rows = torch.arange(1 + m)
    for k in range(m + 1):
        rows = lay.draft_rows[k]
        seen = vis[rows][:, verify_rows]
        assert seen[:, : k + 1].all() and not seen[:, k + 1:].any()
        # Branch k drafts B positions starting right after P_{t-1}, d1..dk.
        assert lay.position_ids[rows].tolist() == list(range(6 + k, 6 + k + block))
        others = torch.ones(lay.rows, dtype=torch.bool)
        others[verify_rows] = False
        others[rows] = False
        assert not vis[rows][:, others].any()                                 # no other branch


def test_additive_mask_and_templates_agree_with_fresh_layouts():
    lay = layout("quadratic", 4, 4, start=9)
    add = masks.to_additive(lay.visible(), torch.float32, cache_len=9)[None, None]
    assert add.shape == (1, 1, lay.rows, 9 + lay.rows)
    assert (add[..., :9] == 0).all()
    assert torch.equal(add[0, 0, :, 9:] == 0, lay.visible())
    for kind, m in [("packed", 2), ("quadratic", 4), ("linear_draft", 0), ("verify", 4), ("verify", 0)]:
        fresh = layout(kind, 4, m, start=9)
        tmpl = masks.LayoutTemplate.build(kind, m, 4, MASK, torch.device("cpu"), torch.float32)
        filled = tmpl.fill(torch.tensor([7]), torch.arange(20, 20 + m), 9)
        assert torch.equal(filled.input_ids, fresh.input_ids), kind
        assert torch.equal(filled.position_ids, fresh.position_ids)
        assert torch.equal(filled.visible(), fresh.visible())
        assert torch.equal(filled.new_rows_mask == 0, fresh.visible())


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="kind must be one of"):
        layout("tree", 3, 0)
    with pytest.raises(ValueError, match="kind must be one of"):
        masks.layout_rows("tree", 0, 0, 3)


def test_heatmap_labels_every_row():
    lay = layout("packed", 3, 2)
    ax = plot_layout(lay, cache_len=2)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "last@5" and labels[-1] == "M@8 [b1]" and len(labels) == lay.rows
    assert len(ax.get_xticklabels()) == lay.rows + 2


def test_registry_describes_every_kind():
    """What adapters ask the registry agrees with the layouts the builders produce."""
    assert set(masks.call_kinds()) >= {"verify", "linear_draft", "packed", "quadratic"}
    for kind in masks.call_kinds():
        spec = masks.call_kind(kind)
        if isinstance(spec, AnyOrderCall):                    # built with an order (test_any_order)
            with pytest.raises(TypeError, match="build_any_order"):
                spec.build()
            continue
        for width in (1, 4, 9):
            m = width if spec.verifies else 0
            lay = layout(kind, width, m, start=20)
            assert lay.has_verify == spec.verifies
            assert spec.plain_causal == (lay.segment == 0).all().item()
            assert lay.draft_rows.shape[0] == spec.n_blocks(m)
            if spec.n_blocks(m):
                assert lay.draft_rows.shape[1] == spec.drafted(width)
            reach = int(lay.position_ids.max()) - (20 - 1 + 1)          # minus the last verified position
            assert reach <= spec.reach(width), (kind, width)


def test_unknown_kind_error_names_the_registered_kinds():
    with pytest.raises(ValueError, match=r"kind must be one of \['verify', 'linear_draft', 'packed', 'quadratic'"):
        masks.call_kind("linear_verify")


def test_to_additive_is_the_one_conversion():
    visible = torch.tensor([[True, False], [True, True]])
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        add = masks.to_additive(visible, dtype)
        assert add.dtype == dtype and (add[visible] == 0).all()
        assert (add[~visible] == torch.finfo(dtype).min).all()
    padded = masks.padded_visible(torch.tensor([2, 3]), 3)
    assert padded[0].tolist() == [[True, True, False], [True, True, False], [True, True, True]]
    left = masks.padded_visible(torch.tensor([1]), 3, left=True)
    assert left[0, 2].tolist() == [False, False, True] and left[0, 0].tolist() == [True, False, True]
