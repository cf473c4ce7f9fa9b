"""Figures of the Packed-SS experiment notebooks 10-14 (seed 000, Sec. 4, App. F).  Each
function draws one figure from study tables and returns it."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns


def loss_curves(history: pd.DataFrame, objectives=("ar", "diffusion")):
    """Training (10-step mean) and held-out losses of each objective; stage boundaries marked."""
    fig, ax = plt.subplots(figsize=(9, 4))
    history = history.assign(global_step=_global_steps(history))
    train_rows = history[history["split"] == "train"]
    held = history[history["split"] == "heldout"]
    for objective, color in zip(objectives, ("tab:blue", "tab:orange", "tab:green")):
        ax.plot(train_rows["global_step"], train_rows[objective].rolling(10, min_periods=1).mean(), color=color,
                label=f"{objective} (train, 10-step mean)")
        ax.plot(held["global_step"], held[objective], "o--", color=color, label=f"{objective} (held-out)")
    for stage, part in train_rows.groupby("stage", sort=False):
        ax.axvline(part["global_step"].iloc[0], color="grey", lw=0.8, ls=":")
        ax.text(part["global_step"].iloc[0], ax.get_ylim()[1], f" {stage}", fontsize=8, va="top", color="grey")
    ax.set(xlabel="step", ylabel="cross-entropy (nats/token)", title="dual-mode training: AR and block-diffusion losses")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _global_steps(history: pd.DataFrame) -> pd.Series:
    """Steps counted across stages (each stage restarts its own step count)."""
    offsets, total = {}, 0
    for stage, part in history[history["split"] == "train"].groupby("stage", sort=False):
        offsets[stage] = total
        total += int(part["step"].max())
    return history["step"] + history["stage"].map(offsets)


def drafter_accuracy(accuracy: pd.DataFrame, n_prompts: int):
    """Offset-i accuracy of one drafting call and the share of prompts whose first i proposals
    are all correct, per slice and model."""
    fig, ax = plt.subplots(figsize=(9, 4))
    for (name, model), part in accuracy.groupby(["slice", "model"], sort=False):
        line, = ax.plot(part["offset"], part["accuracy"], "o-", ms=3, label=f"{name}, {model}: offset i correct")
        ax.plot(part["offset"], part["all_correct_up_to"], "s:", ms=3, color=line.get_color(),
                label=f"{name}, {model}: offsets 1..i all correct")
    ax.set(xlabel="offset i", ylabel="share of prompts", ylim=(0, 1.02),
           title=f"diffusion drafter vs AR greedy continuation ({n_prompts} prompts per slice)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def ratio_bars(ratios: pd.DataFrame, baseline: str, title: str):
    """Throughput, tokens/NFE and time/NFE of each method over the baseline, per slice, with
    the paired bootstrap intervals (Figures 3 and 4)."""
    metrics = [("throughput", "throughput"), ("tokens_per_nfe", "tokens / NFE"), ("time_per_nfe", "time / NFE")]
    shown = ratios[ratios["method"] != "ar"]
    methods = list(dict.fromkeys(shown["method"]))
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    step = 0.8 / max(1, len(methods))
    for ax, (key, label) in zip(axes, metrics):
        for k, method in enumerate(methods):
            part = shown[shown["method"] == method]
            x = np.arange(len(part)) + step * (k - (len(methods) - 1) / 2)
            err = np.vstack([part[f"{key}_ratio"] - part[f"{key}_ratio_low"],
                             part[f"{key}_ratio_high"] - part[f"{key}_ratio"]])
            ax.bar(x, part[f"{key}_ratio"], width=step, yerr=err, capsize=3, label=method)
        ax.axhline(1.0, color="black", lw=1)
        ax.set_xticks(np.arange(len(part)), part["slice"])
        ax.set(title=f"{label} relative to {baseline}", ylabel="ratio")
    axes[0].legend(fontsize=9)
    fig.suptitle(title, y=1.02)
    fig.tight_layout()
    return fig


def block_probe(probe: pd.DataFrame, n_prompts: int):
    """Throughput and tokens/NFE of each schedule by block size, AR as a reference line."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    spec = probe[probe["schedule"] != "ar"]
    for schedule, part in spec.groupby("schedule"):
        axes[0].plot(part["B"], part["throughput"], "o-", label=schedule)
        axes[1].plot(part["B"], part["tokens_per_nfe"], "o-", label=schedule)
    axes[0].axhline(probe.loc[probe["schedule"] == "ar", "throughput"].iloc[0], color="black", ls="--", lw=1,
                    label="AR")
    ticks = sorted(set(spec["B"]))
    for ax, label in zip(axes, ("tokens / s", "tokens / NFE")):
        ax.set(xscale="log", xlabel="block size B", ylabel=label)
        ax.minorticks_off()
        ax.set_xticks(ticks, [str(b) for b in ticks])
        ax.legend()
    axes[0].set_title(f"throughput, first {n_prompts} prompts")
    axes[1].set_title("token yield per forward call")
    fig.tight_layout()
    return fig


def decomposition(table: pd.DataFrame, baseline: str, slices):
    """Model and non-model time over the baseline's total (App. F.3, Figure 5)."""
    shown = table[table["method"] != "ar"].set_index("method")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(shown.index, shown["model_norm"], label="model execution")
    ax.bar(shown.index, shown["non_model_norm"], bottom=shown["model_norm"], label="non-model decoder time")
    ax.axhline(1.0, color="black", ls="--", lw=1)
    for i, (_, row) in enumerate(shown.iterrows()):
        ax.text(i, row["total_norm"] + 0.01, f"{row['total_norm']:.3f}", ha="center", va="bottom", fontsize=9)
    ax.set(ylabel=f"time / {baseline} total (slice-averaged)",
           title=f"timing decomposition, greedy, {', '.join(slices)} slices")
    ax.legend()
    fig.tight_layout()
    return fig


def acceptance_vs_repetition(table: pd.DataFrame):
    """Tokens per iteration on fresh and on repeated text, per slice and method (methods with no
    iterations to split, plain AR in :func:`spec_lib.studies.repetition.repetition_report`, left out)."""
    split = ["fresh_tokens_per_iteration", "repeated_tokens_per_iteration"]
    table = table.dropna(subset=split, how="all")
    long = table.melt(id_vars=["slice", "method"], value_vars=["fresh_tokens_per_iteration",
                                                                "repeated_tokens_per_iteration"],
                      var_name="text", value_name="tokens per iteration")
    long["text"] = long["text"].str.replace("_tokens_per_iteration", "")
    grid = sns.catplot(long, x="slice", y="tokens per iteration", hue="text", col="method", kind="bar", height=3.2,
                       aspect=1.1)
    grid.figure.suptitle("acceptance on fresh text and on text that repeats an earlier 4-gram", y=1.04)
    return grid.figure


def recipe_ablation(ablation: pd.DataFrame):
    """Linear-SS tokens per iteration and the repetition share of the outputs, per model and slice."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, (key, label) in zip(axes, (("linear_tokens_per_iteration", "Linear-SS tokens / iteration"),
                                       ("repetition", "repetition share of the outputs"))):
        sns.barplot(ablation, x="slice", y=key, hue="model", ax=ax)
        ax.set(xlabel="", ylabel=label)
        ax.legend(fontsize=7)
    axes[1].set_ylim(0, 1)
    fig.suptitle("recipe ablations on held-out prompts (greedy)", y=1.02)
    fig.tight_layout()
    return fig


def branch_block_accuracy(by_offset: pd.DataFrame, summary: pd.DataFrame):
    """Offset-i accuracy (mean over branches k) of the Linear/Packed block and of Quadratic-SS's
    branch blocks on the same positions, per slice, with the paired difference of their means
    in each title."""
    slices = list(dict.fromkeys(by_offset["slice"]))
    fig, axes = plt.subplots(1, len(slices), figsize=(12, 3.6), sharey=True, squeeze=False)
    labels = {"linear": "[last, MASK^W] (Linear, Packed)", "quadratic_branch": "B MASKs after last, d1..dk (Quadratic)"}
    for ax, slice_ in zip(axes[0], slices):
        part = by_offset[by_offset["slice"] == slice_].groupby(["shape", "offset"], as_index=False)["accuracy"].mean()
        for shape, label in labels.items():
            rows = part[part["shape"] == shape]
            ax.plot(rows["offset"], rows["accuracy"], "o-", ms=3, label=label)
        row = summary.set_index("slice").loc[slice_]
        ax.set(xlabel="offset i", title=f"{slice_}: branch - linear = {row['difference']:+.3f}\n"
                                        f"[{row['difference_low']:+.3f}, {row['difference_high']:+.3f}]", ylim=(0, 1.02))
        ax.title.set_fontsize(9)
    axes[0][0].set_ylabel("proposal = AR greedy token")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("same positions, same visible tokens: does the query shape matter?", y=1.02)
    fig.tight_layout()
    return fig
