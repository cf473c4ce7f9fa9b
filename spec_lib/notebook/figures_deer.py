"""Figures of the DEER notebooks 20-22 (seed 001: Figure 6, Table 3, Figures 4, 7, 8, Table 5)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..studies.acceptance import length_column, tau_label


def stage_losses(history: pd.DataFrame, stages: list[str]):
    """Training (10-step mean) and held-out loss of each training stage, one panel each."""
    cols = min(3, len(stages))
    rows = -(-len(stages) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(stages):]:
        ax.axis("off")
    for ax, stage in zip(axes.flat, stages):
        part = history[history["model"] == stage]
        train_rows, held = part[part["split"] == "train"], part[part["split"] == "heldout"]
        ax.plot(train_rows["step"], train_rows["loss"].rolling(10, min_periods=1).mean(), label="train (10-step mean)")
        ax.plot(held["step"], held["loss"], "o-", label="held-out")
        ax.set(title=stage, xlabel="step", ylabel="loss")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def alpha_curves(variants: dict, name):
    """Stage II training loss and gradient norm per alpha (Figure 6), one row per objective
    variant (``{variant: DeerModels}``), with the first/last weight ratio alpha^(R_max - 1) each
    alpha spans."""
    fig, axes = plt.subplots(len(variants), 2, figsize=(12, 3.6 * len(variants)), squeeze=False)
    for row, (variant, trained) in zip(axes, variants.items()):
        history, r_max = trained.history, trained.config.r_max
        for alpha in trained.config.alphas:
            part = history[(history["model"] == name(alpha)) & (history["split"] == "train")]
            label = f"alpha = {alpha:g} (ratio {alpha ** (r_max - 1):.1f})"
            row[0].plot(part["step"], part["loss"].rolling(10, min_periods=1).mean(), label=label)
            row[1].plot(part["step"], part["grad_norm"].rolling(10, min_periods=1).mean(), label=label)
        row[0].set(title=f"{variant}: Stage II training loss (10-step mean), R_max = {r_max}", xlabel="step",
                   ylabel="weighted loss")
        row[1].set(title=f"{variant}: gradient norm before clipping (10-step mean)", xlabel="step", ylabel="norm")
        for ax in row:
            ax.legend(fontsize=8)
            ax.title.set_fontsize(10)
    fig.tight_layout()
    return fig


def ablation_bars(ablation: pd.DataFrame, labels: list[str], block: int):
    """tau per slice of each alignment stage (Table 3), in DEER's convention (seed 001)."""
    fig, ax = plt.subplots(figsize=(10, 4))
    ablation.set_index("slice")[labels].plot.bar(ax=ax, rot=0)
    ax.set(ylabel=f"{tau_label('deer')}, k = {block}", title="alignment stages: acceptance length per slice")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def tau_and_speedup(main: pd.DataFrame, block: int, convention: str):
    """tau (in ``convention``: :mod:`spec_lib.studies.acceptance`) and speedup over AR per
    slice, method and temperature (Tables 1-2)."""
    shown = main[main["method"] != "ar"].assign(run=lambda d: d["method"] + ", T=" + d["temperature"].astype(str))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, (key, label) in zip(axes, (("tau", tau_label(convention)), ("speedup", "speedup over AR"))):
        sns.barplot(data=shown, x="slice", y=key, hue="run", ax=ax)
        ax.set(ylabel=label, xlabel="")
        ax.legend(fontsize=8)
    axes[1].axhline(1.0, color="black", lw=1)
    axes[0].set_title(f"acceptance length, k = {block}")
    axes[1].set_title("throughput relative to AR decoding of the target")
    fig.tight_layout()
    return fig


def block_sweep(sweep: pd.DataFrame, blocks, n_prompts: int, convention: str):
    """tau (in ``convention``) and speedup by drafter block size k (Figure 8)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for schedule, part in sweep[sweep["schedule"] != "ar"].groupby("schedule"):
        axes[0].plot(part["width"], part["tau"], "o-", label=schedule)
        axes[1].plot(part["width"], part["speedup"], "o-", label=schedule)
    axes[1].axhline(1.0, color="black", lw=1)
    for ax, label in zip(axes, (tau_label(convention), "speedup over AR")):
        ax.set(xscale="log", xlabel="block size k", ylabel=label)
        ax.minorticks_off()
        ax.set_xticks(list(blocks), [str(k) for k in blocks])
        ax.legend()
    fig.suptitle(f"block size sweep, first {n_prompts} HumanEval prompts, greedy", y=1.02)
    fig.tight_layout()
    return fig


def length_histogram(hist: pd.DataFrame, k: int, convention: str):
    """Share of cycles by acceptance length in ``convention``'s units, log scale (Figure 7)."""
    fig, ax = plt.subplots(figsize=(9, 4))
    for method, part in hist.groupby("method"):
        ax.plot(part["length"], part["share"], "o-", label=method)
    xlabel = {"drafts_accepted": f"draft tokens accepted in a cycle (0..{k})",
              "accepted": f"tokens per round, drafts accepted + 1 (1..{k + 1})"}[length_column(convention)]
    ax.set(yscale="log", xlabel=xlabel, ylabel="share of cycles",
           title=f"acceptance-length distribution at k = {k} (complete cycles)")
    ax.legend()
    fig.tight_layout()
    return fig


def position_acceptance(positions: pd.DataFrame):
    """P(draft i accepted | drafts before i accepted) with Wilson bands."""
    fig, ax = plt.subplots(figsize=(9, 4))
    for method, part in positions.groupby("method"):
        ax.plot(part["position"], part["probability"], "o-", label=method)
        ax.fill_between(part["position"], part["low"], part["high"], alpha=0.2)
    ax.set(xlabel="draft position i", ylabel="P(i accepted | 1..i-1 accepted)", ylim=(0, 1.02),
           title="per-position acceptance (conditional), greedy")
    ax.legend()
    fig.tight_layout()
    return fig


def batch_throughput(pivot: pd.DataFrame, block: int, uncached: pd.DataFrame | None = None):
    """Tokens/s of batched AR and DEER decoding by batch size (Table 5), with the KV cache and,
    when ``uncached`` (the same pivot) is given, without one (dashed: the paper's setting)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for method, colour in (("ar", "tab:blue"), ("deer", "tab:orange")):
        ax.plot(pivot.index, pivot[method], "o-", color=colour, label=f"{method}, KV cache")
        if uncached is not None:
            ax.plot(uncached.index, uncached[method], "s--", color=colour, label=f"{method}, no KV cache")
    ax.set(xscale="log", yscale="log" if uncached is not None else "linear", xlabel="batch size", ylabel="tokens / s",
           title=f"batched greedy decoding, k = {block}")
    ax.minorticks_off()
    ax.set_xticks(list(pivot.index), [str(b) for b in pivot.index])
    ax.legend()
    fig.tight_layout()
    return fig


def observed_vs_exact(fits: pd.DataFrame, raw: list, temperatures, n_samples: int, top: int = 40):
    """Observed frequency against the exact probability of the most likely continuations."""
    fig, axes = plt.subplots(1, len(temperatures), figsize=(6 * len(temperatures), 4.5), squeeze=False)
    for ax, temperature in zip(axes[0], temperatures):
        for i, row in fits.reset_index(drop=True).iterrows():
            if row["temperature"] != temperature or pd.notna(row["draft_top_k"]):     # truncated q: not drawn
                continue
            counts, law = raw[i]
            keys = sorted(law, key=law.get, reverse=True)[:top]
            expected = np.array([law[k] for k in keys])
            observed = np.array([counts.get(k, 0) for k in keys]) / n_samples
            ax.plot(expected, observed, "o" if row["role"] == "correct" else "x", ms=4, label=row["label"])
        lim = [0, ax.get_xlim()[1]]
        ax.plot(lim, lim, color="black", lw=1)
        ax.set(xlabel="exact AR probability of the continuation", ylabel="observed frequency",
               title=f"T = {temperature:g}: {top} most likely continuations")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def speedup_by_pass(table):
    """Seed 002's Figure 6 analogue: tokens per round and speedup over AR by the number of passes
    P_K, early exit as its own point."""
    rows = table[table["method"] != "ar"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, column, label in ((axes[0], "tokens_per_round", "tokens per round"),
                              (axes[1], "speedup", "throughput / AR (mean over slices)")):
        sns.barplot(rows, x="method", y=column, ax=ax, color="tab:blue")
        ax.set(xlabel="", ylabel=label)
        ax.tick_params(axis="x", rotation=30)
    axes[1].axhline(1.0, color="black", lw=1)
    fig.suptitle("editing passes: what each adds and what it costs (greedy)")
    fig.tight_layout()
    return fig


def round_time_by_pass(table):
    """Seed 002's Figure 7 axes on this machine: per method of the pass grid, each round's target
    time, drafter time and the rest (the decoder's own work and the gaps between calls), stacked."""
    rows = table[table["method"] != "ar"].set_index("method")
    parts = rows[["target_ms_per_round", "drafter_ms_per_round", "other_ms_per_round"]]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    parts.rename(columns={"target_ms_per_round": "target", "drafter_ms_per_round": "drafter",
                          "other_ms_per_round": "other (decoder, gaps)"}).plot.bar(stacked=True, ax=ax)
    ax.set(xlabel="", ylabel="ms per round", title="where a round's time goes, by editing passes")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    return fig


def regeneration(tokens: pd.DataFrame, summary: pd.DataFrame, tokenizer, drafter: str):
    """Seed 001's Figure 5 analogue.  Left: agreement of each drafter's regenerated blocks with the
    target's greedy text (all tokens; bars per slice).  Right: the first prompt's blocks by
    ``drafter``, one row per block, each slot's token coloured by the iteration that filled it
    (darker: later), green-edged where it equals the target's token."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.6), gridspec_kw={"width_ratios": [1, 1.6]})
    sns.barplot(summary, x="drafter", y="agreement", hue="slice", ax=left)
    left.set(xlabel="", ylabel="share of tokens = target's greedy", title="block regeneration")
    left.tick_params(axis="x", rotation=20)
    first = tokens[(tokens["drafter"] == drafter)]
    first = first[(first["slice"] == first["slice"].iloc[0]) & (first["prompt"] == 0)]
    k = int(first["slot"].max()) + 1
    per_block = first.groupby("block")["iteration"].transform(lambda s: s - s.min())
    grid = np.full((int(first["block"].max()) + 1, k), np.nan)
    grid[first["block"], first["slot"]] = per_block
    right.imshow(grid, cmap="Blues", vmin=-1, vmax=max(1.0, float(np.nanmax(grid))), aspect="auto")
    for _, r in first.iterrows():
        right.text(r["slot"], r["block"], repr(tokenizer.decode([int(r["token"])]))[1:-1][:8], ha="center",
                   va="center", fontsize=7, family="monospace",
                   bbox={"edgecolor": "green" if r["agrees"] else "none", "facecolor": "none", "pad": 1})
    right.set(xlabel="slot", ylabel="block", title=f"{drafter}: tokens by the iteration that filled them")
    right.set_xticks(range(k))
    right.set_yticks(range(grid.shape[0]))
    right.grid(False)
    fig.tight_layout()
    return fig
