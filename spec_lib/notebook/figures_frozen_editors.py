"""Figure of notebook 35 (seed 002, Table 2(b)): editors trained on a frozen DFlash's proposals."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns


def ablation_bars(table: pd.DataFrame):
    """tau at P2 per editor and slice (macro included), the frozen proposer's P1 tau as a dashed
    line per slice group."""
    fig, ax = plt.subplots(figsize=(10, 4))
    sns.barplot(data=table, x="slice", y="tau_p2", hue="editor", ax=ax)
    p1 = table.groupby("slice", sort=False)["tau_p1"].first()
    for i, name in enumerate(ax.get_xticklabels()):
        ax.hlines(p1[name.get_text()], i - 0.4, i + 0.4, colors="black", linestyles="--",
                  label="frozen DFlash P1" if i == 0 else None)
    ax.set(ylabel="tau at P2 (tokens per round)", title="Editors of a frozen DFlash proposal (Table 2(b))")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    return fig
