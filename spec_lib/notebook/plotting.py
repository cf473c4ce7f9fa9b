"""Figures: one saver with deterministic metadata, and the attention-mask heatmap.

``save_figure`` writes PNG and SVG with fixed metadata (no dates, a fixed SVG hash salt)
so that re-running a notebook does not churn the committed figures.
"""

from __future__ import annotations

import io

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from .. import masks
from .results import stage_bytes

ROLE_LABELS = {masks.CONTEXT: "ctx", masks.LAST: "last", masks.DRAFT: "d", masks.PAD: "pad",
               masks.ANCHOR: "last'", masks.MASK: "M"}


def save_figure(fig, notebook: str, profile: str, name: str, dpi: int = 150) -> None:
    """Stage ``fig`` as ``figures/<profile>/<notebook>_<name>.png`` and ``.svg`` (published with
    the run's other outputs by :func:`spec_lib.notebook.results.save_results`).  Returns
    nothing, so a notebook cell that ends with it shows the figure and no stray value."""
    with matplotlib.rc_context({"svg.hashsalt": "spec-lib", "svg.fonttype": "none"}):
        for ext, metadata in (("png", {"Software": None}), ("svg", {"Date": None, "Creator": None})):
            buffer = io.BytesIO()
            fig.savefig(buffer, format=ext, dpi=dpi, bbox_inches="tight", metadata=metadata)
            stage_bytes(notebook, profile, "figures", f"{notebook}_{name}.{ext}", buffer.getvalue())


def row_labels(layout: masks.Layout) -> list[str]:
    """``role@position`` per row, e.g. ``d@12`` or ``M@14`` (block rows carry their segment)."""
    labels = []
    for role, pos, seg in zip(layout.roles, layout.position_ids.tolist(), layout.segment.tolist()):
        tag = ROLE_LABELS.get(role, role)
        labels.append(f"{tag}@{pos}" + (f" [b{seg}]" if seg else ""))
    return labels


def plot_layout(layout: masks.Layout, ax=None, title: str | None = None, cache_len: int = 0):
    """Draw a layout's attention mask as a labelled heatmap (rows = queries, cols = keys).

    Dark cells are visible keys.  ``cache_len`` > 0 prepends that many cached columns
    (grey, always visible, left of the blue line) to show that every row reads the
    verified prefix.
    """
    visible = layout.visible().cpu().numpy().astype(float)             # (rows, rows)
    labels = row_labels(layout)
    if cache_len:                                                      # cached keys drawn in grey
        visible = np.concatenate([np.full((visible.shape[0], cache_len), 0.5), visible], axis=1)
    if ax is None:
        size = max(3.0, 0.22 * visible.shape[1] + 1.5)
        _, ax = plt.subplots(figsize=(size, max(3.0, 0.22 * visible.shape[0] + 1.0)))
    ax.imshow(visible, cmap="Greys", vmin=0, vmax=1.25, interpolation="nearest", aspect="equal")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    col_labels = [f"cache{i}" for i in range(cache_len)] + labels
    ax.set_xticks(range(len(col_labels)), col_labels, fontsize=7, rotation=90)
    # Separate segments (causal stream, then each proposal block).
    bounds = np.flatnonzero(np.diff(layout.segment.cpu().numpy())) + 0.5
    for b in bounds:
        ax.axhline(b, color="tab:red", lw=0.8)
        ax.axvline(b + cache_len, color="tab:red", lw=0.8)
    if cache_len:
        ax.axvline(cache_len - 0.5, color="tab:blue", lw=1.0)
    ax.set_xlabel("key row")
    ax.set_ylabel("query row")
    ax.set_title(title or f"{layout.kind}: {layout.rows} rows")
    return ax


def example_layouts(block_size: int, mask_token_id: int = 99) -> dict[str, masks.Layout]:
    """The calls of one iteration of each schedule at block size B, for drawing: Linear-SS's
    two calls, Packed-SS with a draft one short of W (so the padding shows), Quadratic-SS."""
    import torch

    width = block_size - 1
    last, draft, none = torch.tensor([10]), torch.arange(11, 11 + width), torch.empty(0, dtype=torch.long)
    common = dict(context=none, last=last, width=width, mask_token_id=mask_token_id, start=2)
    return {"Linear-SS draft call": masks.build_layout("linear_draft", draft=none, **common),
            "Linear-SS verify call": masks.build_layout("verify", draft=draft, **common),
            "Packed-SS (|D| = W - 1, padded)": masks.build_layout("packed", draft=draft[:-1], **common),
            "Quadratic-SS": masks.build_layout("quadratic", draft=draft, **common)}


def rows_by_title(layouts: dict[str, masks.Layout]) -> dict[str, int]:
    """Evaluated rows of each layout."""
    return {title: layout.rows for title, layout in layouts.items()}


def layout_gallery(layouts: dict[str, masks.Layout], cache_len: int = 2):
    """Every layout's mask, one under the other, each panel sized to its rows: the figure is as
    wide as the largest mask alone, so its 7-pt row labels stay legible at notebook width."""
    sizes = [layout.rows + cache_len for layout in layouts.values()]
    fig, axes = plt.subplots(len(layouts), 1, figsize=(0.2 * max(sizes) + 2.5, 0.2 * sum(sizes) + 1.6 * len(layouts)),
                             gridspec_kw={"height_ratios": sizes}, squeeze=False)
    for ax, (title, layout) in zip(axes[:, 0], layouts.items()):
        plot_layout(layout, ax=ax, title=f"{title}: {layout.rows} rows", cache_len=cache_len)
    fig.tight_layout()
    return fig


def accepted_per_iteration(results_by_model: dict[str, dict], title: str = ""):
    """Tokens appended per iteration (A_t) of each schedule, one panel per model."""
    fig, axes = plt.subplots(1, len(results_by_model), figsize=(5.5 * len(results_by_model), 3.2), sharey=True,
                             squeeze=False)
    for ax, (name, results) in zip(axes[0], results_by_model.items()):
        for schedule, res in results.items():
            ax.step(range(1, len(res.accepted) + 1), res.accepted, where="mid", marker="o", ms=3, alpha=0.8,
                    label=f"{schedule}: NFE {res.nfe}")
        ax.set(title=name, xlabel="iteration t", ylabel="tokens appended $A_t$")
        ax.xaxis.get_major_locator().set_params(integer=True)                # iterations are whole
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8, title=title, title_fontsize=8)
    fig.tight_layout()
    return fig
