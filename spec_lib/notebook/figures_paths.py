"""Figures of the timing notebooks' two execution paths (:mod:`spec_lib.studies.compiled_path`):
the eager model and its compiled static-cache twin.  Each function draws one figure and returns it."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def decomposition_by_path(table: pd.DataFrame, runs: pd.DataFrame, baseline: str, slices):
    """Model and non-model time over ``baseline``'s total (seed 000, App. F.3, Figure 5), one
    group per method, AR included (the reference a faster path moves too), with a bar per
    execution path; ``runs`` maps method names to their path."""
    names = runs.drop_duplicates("method").set_index("method")
    shown = table.copy()
    shown["base"] = [name.split(" (")[0] for name in shown["method"]]
    shown["path"] = shown["method"].map(names["path"])
    bases, paths = list(dict.fromkeys(shown["base"])), list(dict.fromkeys(shown["path"]))
    width = 0.8 / len(paths)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for j, path in enumerate(paths):
        part = shown[shown["path"] == path].set_index("base").reindex(bases)
        x = np.arange(len(bases)) + (j - (len(paths) - 1) / 2) * width
        ax.bar(x, part["model_norm"], width, color=plt.cm.tab10(j), label=f"{path}: model execution")
        ax.bar(x, part["non_model_norm"], width, bottom=part["model_norm"], color=plt.cm.tab10(j), alpha=0.45,
               hatch="//", label=f"{path}: non-model decoder time")
        for xi, total in zip(x, part["total_norm"]):
            ax.text(xi, total + 0.01, f"{total:.2f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="black", ls="--", lw=1)
    ax.set_xticks(np.arange(len(bases)), bases)
    ax.set(ylabel=f"time / {baseline} (eager) total", title=f"timing decomposition by execution path, greedy, "
                                                              f"{', '.join(slices)} slices")
    ax.set_ylim(0, 1.3 * float(shown["total_norm"].max()))        # room for the legend above the bars
    ax.legend(fontsize=8, ncol=len(paths), loc="upper left")
    fig.tight_layout()
    return fig
