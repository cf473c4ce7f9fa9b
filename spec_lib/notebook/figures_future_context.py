"""Figure of notebook 34 (seed 002, Figure 3(b)): DEdit's editor against Domino's causal
corrector on the same proposals, by the number of correct future tokens."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd


def advantage_by_future(table: pd.DataFrame):
    """One panel per comparison (``against``: Domino's real draft, its corrector run once over the
    proposal): mean advantage A_editor - A_other per correct-future-token count, with the
    response-bootstrap interval, one line per editor; the last panel: rounds per count."""
    kinds = list(dict.fromkeys(table["against"]))
    fig, axes = plt.subplots(1, len(kinds) + 1, figsize=(4.2 * len(kinds) + 3.4, 4),
                             gridspec_kw={"width_ratios": [3] * len(kinds) + [2]})
    titles = {"domino": "vs Domino's draft (its own loop)", "corrector": "vs Domino's corrector on the proposal"}
    for ax, kind in zip(axes, kinds):
        for editor, part in table[table["against"] == kind].groupby("editor", sort=False):
            part = part.sort_values("future_correct")
            err = [part["advantage"] - part["ci_low"], part["ci_high"] - part["advantage"]]
            ax.errorbar(part["future_correct"], part["advantage"], yerr=err, fmt="o-", capsize=3, label=editor)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set(xlabel="correct future tokens in the proposal", ylabel="A(editor P2) - A(other)",
               title=titles.get(kind, kind))
        ax.legend(fontsize=8)
    first = table[table["against"] == kinds[0]]
    for editor, part in first.groupby("editor", sort=False):
        part = part.sort_values("future_correct")
        axes[-1].plot(part["future_correct"], part["rounds"], "o-", label=editor)
    axes[-1].set(xlabel="correct future tokens", ylabel="rounds", yscale="log", title="Rounds per count")
    fig.tight_layout()
    return fig
