"""Figure of notebook 34 (seed 002, Figure 3(b)): DEdit's editor against Domino's causal
corrector on the same proposals, by the number of correct future tokens."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd


def advantage_by_future(table: pd.DataFrame):
    """Left: mean advantage A_editor - A_domino per correct-future-token count, with the
    response-bootstrap interval, one line per editor.  Right: how many rounds each count has."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [3, 2]})
    for editor, part in table.groupby("editor", sort=False):
        part = part.sort_values("future_correct")
        err = [part["advantage"] - part["ci_low"], part["ci_high"] - part["advantage"]]
        axes[0].errorbar(part["future_correct"], part["advantage"], yerr=err, fmt="o-", capsize=3, label=editor)
        axes[1].plot(part["future_correct"], part["rounds"], "o-", label=editor)
    axes[0].axhline(0, color="grey", lw=0.8)
    axes[0].set(xlabel="correct future tokens in the proposal (after its first mismatch)",
                ylabel="A(editor P2) - A(Domino)", title="Advantage over Domino's causal corrector (95% CI)")
    axes[1].set(xlabel="correct future tokens", ylabel="rounds", yscale="log", title="Rounds per count")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig
