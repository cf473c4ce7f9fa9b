"""Figures: one saver with deterministic metadata, and the attention-mask heatmap.

``save_figure`` writes PNG and SVG with fixed metadata (no dates, a fixed SVG hash salt)
so that re-running a notebook does not churn the committed figures.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from . import masks
from .results import atomic_write_bytes, figures_dir

ROLE_LABELS = {masks.CONTEXT: "ctx", masks.LAST: "last", masks.DRAFT: "d", masks.PAD: "pad",
               masks.ANCHOR: "last'", masks.MASK: "M"}


def save_figure(fig, notebook: str, profile: str, name: str, dpi: int = 150) -> list[Path]:
    """Save ``fig`` as ``figures/<profile>/<notebook>_<name>.png`` and ``.svg`` atomically."""
    out = []
    with matplotlib.rc_context({"svg.hashsalt": "spec-lib", "svg.fonttype": "none"}):
        for ext, metadata in (("png", {"Software": None}), ("svg", {"Date": None, "Creator": None})):
            buffer = io.BytesIO()
            fig.savefig(buffer, format=ext, dpi=dpi, bbox_inches="tight", metadata=metadata)
            out.append(atomic_write_bytes(figures_dir(profile) / f"{notebook}_{name}.{ext}", buffer.getvalue()))
    return out


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
