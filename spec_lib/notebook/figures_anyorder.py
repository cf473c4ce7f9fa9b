"""Figures of notebooks 04 and 15: SetDLM-form layouts, and speed against accuracy per schedule."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from ..masks.anyorder import build_any_order


def _labels(layout) -> list[str]:
    out = []
    for role, pos, rank, reach in zip(layout.roles, layout.position_ids.tolist(), layout.rank.tolist(),
                                      layout.o_reach.tolist()):
        tag = f"{role}@{pos}" if role == "N" else f"{role}{rank + 1}@{pos}"
        out.append(tag + (f" [k={reach}]" if layout.kind == "ao_quadratic" and role == "R" else ""))
    return out


def plot_any_order_layout(layout, ax, title: str) -> None:
    """A layout's visibility among its new rows (the cache, seen by every row, not drawn);
    red lines separate the N / O / M / R regions."""
    visible = layout.visible().numpy().astype(float)
    labels = _labels(layout)
    ax.imshow(visible, cmap="Greys", vmin=0, vmax=1.25, interpolation="nearest", aspect="equal")
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_xticks(range(len(labels)), labels, fontsize=6, rotation=90)
    for b in np.flatnonzero(np.diff(layout.region.numpy())) + 0.5:
        ax.axhline(b, color="tab:red", lw=0.8)
        ax.axvline(b, color="tab:red", lw=0.8)
    ax.set_title(f"{title}: {layout.rows} rows", fontsize=9)
    ax.set_xlabel("key row")
    ax.set_ylabel("query row")


def layouts(order_positions=(15, 14, 16), drafts=(4, 5, -1), new_position: int = 13):
    """Packed-SS, Linear-SS's two calls and Quadratic-SS for one iteration (App. D.2's example:
    pi = (2, 1, 3), a draft missing at rank 3, one correction token N)."""
    order = torch.tensor(order_positions)
    draft = torch.tensor(drafts)
    kw = {"new_ids": torch.tensor([7]), "new_positions": torch.tensor([new_position]), "order_positions": order,
          "mask_token_id": 99}
    panels = [("Packed-SS [N|O|M|R]", build_any_order("ao_packed", draft_ids=draft, **kw)),
              ("Linear-SS call 1 [N|R]", build_any_order("ao_linear_draft", draft_ids=draft * 0 - 1, **kw)),
              ("Linear-SS call 2 [O|M]", build_any_order("ao_linear_verify", draft_ids=draft.abs(), **kw)),
              ("Quadratic-SS [N|O|M|R^(0..u-1)]", build_any_order("ao_quadratic", draft_ids=draft, **kw))]
    fig, axes = plt.subplot_mosaic([["0", "1", "2"], ["3", "3", "3"]], figsize=(11, 11),
                                   gridspec_kw={"width_ratios": [p[1].rows for p in panels[:3]],
                                                "height_ratios": [panels[0][1].rows, panels[3][1].rows]})
    for i, (title, lay) in enumerate(panels):                     # Packed and Linear above, Quadratic below
        plot_any_order_layout(lay, axes[str(i)], title)
    fig.tight_layout()
    return fig


def speed_accuracy(agg: pd.DataFrame, accuracy: pd.DataFrame, vs_linear: pd.DataFrame | None = None):
    """Per checkpoint: throughput (bars, with the paired CI of the ratio to Linear-SS LTR scaled to
    tokens/s where available) and accuracy (dots, right axis) of every method."""
    merged = agg.merge(accuracy, on=["slice", "method"])
    slices = list(dict.fromkeys(merged["slice"]))
    fig, axes = plt.subplots(len(slices), 1, figsize=(9, 4.2 * len(slices)), squeeze=False)
    for ax, name in zip(axes[:, 0], slices):
        part = merged[merged["slice"] == name]
        x = np.arange(len(part))
        colors = ["tab:blue" if "ltr" in m else "tab:orange" if "confidence" in m else "tab:gray"
                  for m in part["method"]]
        ax.bar(x, part["throughput"], color=colors, alpha=0.8)
        if vs_linear is not None:
            ci = vs_linear[vs_linear["slice"] == name].set_index("method")
            base = float(part.loc[part["method"] == "linear/ltr", "throughput"].iloc[0])
            for i, m in enumerate(part["method"]):
                if m in ci.index:
                    lo, hi = ci.loc[m, "throughput_ratio_low"] * base, ci.loc[m, "throughput_ratio_high"] * base
                    ax.plot([i, i], [lo, hi], color="black", lw=1.2)
        ax.set_xticks(x, part["method"], rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("throughput (tokens/s)")
        ax.set_title(name, fontsize=10)
        right = ax.twinx()
        right.plot(x, 100 * part["accuracy"], "o", color="tab:green")
        right.set_ylabel("accuracy (%)", color="tab:green")
        right.set_ylim(0, 100)
    fig.suptitle("Any-order schedules on the math slice\n(blue: LTR order, orange: confidence, grey: native; "
                 "bars: throughput with the paired 95% CI of the ratio to Linear-SS LTR; dots: accuracy)", fontsize=9)
    fig.tight_layout()
    return fig
