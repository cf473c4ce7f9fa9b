"""Figures of notebook 16 (the partial-branch schedule, seed 000 Sec. 5).  Each function draws
one figure from study tables and returns it."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from ..masks.partial import partial_layout
from .plotting import plot_layout


def layouts(block_size: int, branches: tuple[int, ...], mask_token_id: int = 99):
    """The mask of one partial-branch call at block size B with a draft one short of W,
    branches for the outcomes in ``branches``."""
    width = block_size - 1
    lay = partial_layout(branches, context=torch.empty(0, dtype=torch.long), last=torch.tensor([10]),
                         draft=torch.arange(11, 11 + width - 1), width=width, mask_token_id=mask_token_id, start=2)
    size = 0.2 * (lay.rows + 2) + 2.5
    fig, ax = plt.subplots(figsize=(size, size))
    plot_layout(lay, ax=ax, cache_len=2, title=f"partial-branch, B = {block_size}, S = {set(branches)}: "
                                                f"{lay.rows} rows = 2B + |S|B")
    ax.grid(False)
    fig.tight_layout()
    return fig


def labelled_bars(table: pd.DataFrame, ax, *, x: str, y: str, hue: str, labels) -> tuple[list, list]:
    """A seaborn bar per (``x``, ``hue``) in order of appearance, each labelled with
    ``labels(rows)`` (one string per bar, ``rows`` that hue's rows indexed by ``x``, in bar
    order); the orders of ``x`` and ``hue``.  Shared by notebook 16's and 17's figures."""
    order, hue_order = list(dict.fromkeys(table[x])), list(dict.fromkeys(table[hue]))
    sns.barplot(table, x=x, y=y, hue=hue, order=order, hue_order=hue_order, errorbar=None, ax=ax)
    for container, value in zip(ax.containers, hue_order):
        ax.bar_label(container, labels(table[table[hue] == value].set_index(x).loc[order]), fontsize=7)
    return order, hue_order


def pathwise(table: pd.DataFrame):
    """Median and minimum ratio NFE_partial / NFE_Packed to reach L tokens per (generator, W,
    policy), under Assumption 3.1; the violation count is printed on each bar."""
    fig, axes = plt.subplots(1, table["width"].nunique(), figsize=(4.2 * table["width"].nunique(), 3.8),
                             sharey=True, squeeze=False)
    for ax, (width, part) in zip(axes[0], table.groupby("width")):
        generators, policies = labelled_bars(part, ax, x="generator", y="nfe_ratio_median", hue="policy",
                                             labels=lambda rows: [str(int(v)) for v in rows["violations"]])
        for container, policy in zip(ax.containers, policies):
            rows = part[part["policy"] == policy].set_index("generator").loc[generators]
            x = [bar.get_x() + bar.get_width() / 2 for bar in container]
            ax.plot(x, rows["nfe_ratio_min"], "v", color="black", ms=5)   # inside its bar: black to be seen
        ax.get_legend().remove()
        ax.axhline(1.0, color="black", lw=1)
        ax.set(title=f"W = {width}", xlabel="", ylabel="", ylim=(0, 1.12))
    axes[0, 0].set_ylabel("NFE partial / NFE Packed-SS")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, ncol=len(labels), loc="lower center", bbox_to_anchor=(0.5, -0.02),
               title="policy: median bar, ▼ minimum over instances; numbers above = violations", title_fontsize=8)
    fig.suptitle("forward passes to reach L tokens, drafters satisfying Assumption 3.1", y=1.0)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def speed(agg: pd.DataFrame, calls: pd.DataFrame):
    """Left: tokens/NFE (all slices pooled) against rows per call, one labelled point per
    method; right: throughput relative to AR per slice."""
    pooled = agg.groupby("method", sort=False)[["tokens", "nfe"]].sum().reset_index().merge(
        calls[["method", "schedule", "rows_per_call"]], on="method")
    pooled = pooled[pooled["schedule"] != "ar"]
    colors = {"packed": "tab:blue", "quadratic": "tab:red", "partial": "tab:green"}
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4.8))
    for schedule, part in pooled.groupby("schedule", sort=False):
        axes[0].scatter(part["rows_per_call"], part["tokens"] / part["nfe"], color=colors.get(schedule, "grey"),
                        label=schedule, zorder=3)
    for row in pooled.itertuples():
        axes[0].annotate(row.method.replace(f"{row.schedule} ", "").replace("partial ", ""),
                         (row.rows_per_call, row.tokens / row.nfe), fontsize=7, xytext=(4, 3),
                         textcoords="offset points")
    axes[0].set(xlabel="rows per call (mean, prompt calls excluded)", ylabel="tokens / NFE (all slices)",
                title="token yield vs call size")
    axes[0].legend(fontsize=8)
    shown = agg[agg["schedule"] != "ar"]
    pivot = shown.pivot_table(index="method", columns="slice", values="throughput", sort=False)
    ar = agg[agg["schedule"] == "ar"].set_index("slice")["throughput"]
    (pivot / ar).plot.barh(ax=axes[1])
    axes[1].axvline(1.0, color="black", lw=1)
    axes[1].set(xlabel="throughput / AR's", ylabel="", title="throughput relative to AR (this machine)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def cost_model(predicted: pd.DataFrame, calibrations: dict[str, dict]):
    """Measured model time per call against each calibration's tau + delta n (lines, with the
    95% band of the fit)."""
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for (name, calibration), color in zip(calibrations.items(), ("grey", "tab:purple", "tab:olive")):
        ax.fill_between(calibration["grid"], 1e3 * calibration["band"][0], 1e3 * calibration["band"][1], alpha=0.2,
                        color=color)
        ax.plot(calibration["grid"], 1e3 * (calibration["tau"] + calibration["delta"] * calibration["grid"]),
                color=color, label=f"tau + delta n, {name}: {1e3 * calibration['tau']:.2f} ms + "
                                   f"{1e3 * calibration['delta']:.3f} ms/row")
    for schedule, part in predicted.groupby("schedule", sort=False):
        ax.scatter(part["rows_per_call"], part["model_ms_per_call"], label=f"{schedule} (measured median)", zorder=3)
    ax.set(xlabel="rows per call n", ylabel="model ms per call", title="cost model vs measured calls")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def regime(regimes: pd.DataFrame, marks: dict[str, float]):
    """Predicted throughput relative to the best method over tau/delta (log x): one line per
    method (shades of one colour per schedule, thick where it wins), the winner's schedule
    shaded along the axis, and ``marks`` as vertical lines (e.g. this machine, the A100)."""
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    maps = {"packed": plt.cm.Blues, "quadratic": plt.cm.Reds, "partial": plt.cm.Greens}
    shade = {"packed": "tab:blue", "quadratic": "tab:red", "partial": "tab:green"}
    methods = regimes.drop_duplicates("method")[["method", "schedule"]]
    for schedule, part in methods.groupby("schedule", sort=False):
        tones = maps.get(schedule, plt.cm.Greys)(np.linspace(0.45, 0.95, len(part)))
        for tone, method in zip(tones, part["method"]):
            line = regimes[regimes["method"] == method]
            ax.plot(line["tau_over_delta"], line["relative_throughput"], color=tone, lw=1.2, label=method)
            won = line["relative_throughput"].where(line["winner"])
            ax.plot(line["tau_over_delta"], won, color=tone, lw=4)
    winners = regimes[regimes["winner"]].sort_values("tau_over_delta")
    xs = winners["tau_over_delta"].to_numpy()
    for i, (x, schedule) in enumerate(zip(xs, winners["schedule"])):
        right = xs[i + 1] if i + 1 < len(xs) else x
        ax.axvspan(x, right, ymax=0.03, color=shade.get(schedule, "grey"), alpha=0.8, lw=0)
    placed = {name: x for name, x in marks.items() if np.isfinite(x) and x > 0}  # log axis: positive only
    for i, (name, x) in enumerate(placed.items()):
        ax.axvline(x, color="black", ls="--", lw=1)
        ax.text(x, 0.08 + 0.1 * i, f" {name}: tau/delta = {x:.0f}", fontsize=8, va="bottom",
                bbox={"facecolor": "white", "alpha": 0.8, "lw": 0})
    ax.set(xscale="log", xlabel="tau / delta (fixed cost of a call, in rows)", ylim=(0, 1.05),
           ylabel="throughput / best method's", title="predicted winner by hardware (measured tokens/NFE, "
                                                       "cost model; thick = fastest, bottom strip = its schedule)")
    ax.legend(fontsize=6, ncol=2, loc="center right")
    fig.tight_layout()
    return fig
