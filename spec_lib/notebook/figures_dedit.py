"""Figures of the DEdit notebooks 30-35 (seed 002: training curves, Table 6, Table 2(a) and (b),
Figure 3(a) and (b), Table 3, Figure 4); Table 1's bars are
:func:`spec_lib.notebook.figures_deer.tau_and_speedup`."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns


def training_curves(history: pd.DataFrame, variants: list[str]):
    """Held-out first-pass (unmask) and editing-pass losses, and P1 / P2 token accuracy."""
    held = history[history["split"] == "heldout"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for variant in variants:
        part = held[held["model"] == variant]
        axes[0].plot(part["step"], part["unmask"], "o-", label=f"{variant}: L_unmask (P1)")
        axes[1].plot(part["step"], part["p1_accuracy"], "o-", label=f"{variant}: P1")
        if part["edit"].notna().any():
            axes[0].plot(part["step"], part["edit"], "s--", label=f"{variant}: L_edit (P2)")
            axes[1].plot(part["step"], part["p2_accuracy"], "s--", label=f"{variant}: P2")
    axes[0].set(title="held-out position-weighted CE", xlabel="step", ylabel="loss")
    axes[1].set(title="held-out token accuracy of the trained passes", xlabel="step", ylabel="accuracy")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def proposal_mix_rates(rates: pd.DataFrame):
    """Table 6 analogue: ProposalMix's ground-truth selection and overwrite rates by step."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(rates["step"], rates["gt_selection"], "o-", label="GT selection")
    ax.plot(rates["step"], rates["overwrite"], "s-", label="overwrite")
    ax.set(xlabel="training step", ylabel="share of supervised slots", ylim=(0, 1),
           title="ProposalMix inputs on held-out blocks (eta = 0.5)")
    ax.legend()
    fig.tight_layout()
    return fig


def tau_by_pass(table: pd.DataFrame):
    """Table 2(a) analogue: replayed tau by number of passes, per drafter and block size W
    (macro average over slices)."""
    macro = table[table["slice"] == "macro"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (drafter, width), part in macro.groupby(["drafter", "W"]):
        ax.plot(part["pass"], part["tau"], "o-" if "_w" not in drafter else "s--", label=f"{drafter} (W = {width})")
    ax.set(xlabel="passes K (P_K is verified)", ylabel="replayed tau (macro average)", xticks=sorted(macro["pass"].unique()),
           title="editing passes by block size W")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def edit_effects(effects: pd.DataFrame):
    """Figure 3(a): how the first edit (P1 -> P2) changes the accepted prefix."""
    parts = ["shortens", "keeps", "extends"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    left = np.zeros(len(effects))
    for part, color in zip(parts, ("tab:red", "tab:gray", "tab:green")):
        ax.barh(effects["drafter"], effects[part], left=left, color=color, label=part)
        left += effects[part].to_numpy()
    for y, (_, row) in enumerate(effects.iterrows()):
        ax.text(1.01, y, f"gain {row['mean_gain']:+.2f}, >= 5: {row['extends_by_5_or_more']:.1%}", va="center", fontsize=8)
    ax.set(xlim=(0, 1), xlabel="share of rounds", title="first edit versus the P1 proposal (accepted prefix A)")
    ax.legend(ncol=3, fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig


def visibility(table: pd.DataFrame):
    """Table 3: bidirectional versus lower-triangular attention inside the proposal."""
    long = table.melt(id_vars=["slice", "pass"], value_vars=["bidirectional", "causal"], var_name="attention",
                      value_name="A")
    grid = sns.catplot(data=long, x="slice", y="A", hue="attention", col="pass", kind="bar", height=3.6, aspect=1.3)
    grid.set_axis_labels("", "mean accepted draft tokens A")
    grid.figure.suptitle("same weights and P1; only the mask inside the proposal differs", y=1.03)
    return grid.figure


def gain_by_future(table: pd.DataFrame):
    """Figure 5 analogue: what bidirectional attention inside the proposal adds to A, by P1's
    correct tokens after its first rejection (the last point pools that many or more)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    sns.lineplot(table, x="correct_future_tokens", y="delta", hue="pass", marker="o", ax=ax)
    for _, r in table.iterrows():
        ax.annotate(str(int(r["rounds"])), (r["correct_future_tokens"], r["delta"]), textcoords="offset points",
                    xytext=(0, 5), ha="center", fontsize=7)
    ax.axhline(0.0, color="black", lw=1)
    cap = int(table["correct_future_tokens"].max())
    ax.set_xticks(range(cap + 1), [*map(str, range(cap)), f"{cap}+"])
    ax.set(xlabel="P1's correct tokens after its first rejected slot", ylabel="A bidirectional - A causal",
           title="future context and repair (numbers: rounds)")
    fig.tight_layout()
    return fig


def round_picture(picture: pd.DataFrame):
    """Figure 4 analogue: one round, slot by slot; green where a pass matches the target."""
    passes = [c for c in picture.columns if c.startswith("P") and not c.endswith(" ok")]
    match = picture[[f"{p} ok" for p in passes]].to_numpy()
    fig, ax = plt.subplots(figsize=(1.6 * (len(passes) + 1), 0.32 * len(picture) + 1))
    ax.imshow(np.column_stack([np.ones(len(picture)), match]).astype(float), cmap="RdYlGn", vmin=0, vmax=1,
              aspect="auto", alpha=0.5)
    for i in range(len(picture)):
        for j, column in enumerate(["target", *passes]):
            ax.text(j, i, repr(picture[column].iloc[i])[1:-1][:12], ha="center", va="center", fontsize=7,
                    family="monospace")
    ax.set_xticks(range(len(passes) + 1), ["target", *passes])
    ax.set_yticks(range(len(picture)), picture.index)
    ax.set(ylabel="slot k", title="one verification round (green: equals the target's token)")
    fig.tight_layout()
    return fig


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
