"""Figures of the proof-checking notebooks 01-03 (seed 000: Sec. 1 cost model, Table 2,
Theorems 3.2 and 3.3).  Each function draws one figure from study results and returns it;
notebooks save it with :func:`spec_lib.notebook.plotting.save_figure`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..studies import costmodel, exactness, paper

SCHEDULE_COLORS = {"linear": "tab:blue", "quadratic": "tab:orange", "packed": "tab:green", "ar": "tab:grey"}


# ----- notebook 01: the cost model -------------------------------------------------------------------

def cost_fit(timings: pd.DataFrame, fit: dict, cache_len: int):
    """Single calls, medians per row count, the fitted tau + delta n with its band, residuals."""
    fig, (ax, ax_res) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot(timings["rows"], 1e3 * timings["seconds"], ".", color="grey", alpha=0.4, label="single calls")
    ax.plot(fit["rows"], 1e3 * fit["median_seconds"], "o", color="tab:blue", label="median per n")
    ax.plot(fit["grid"], 1e3 * (fit["tau"] + fit["delta"] * fit["grid"]), color="tab:red",
            label=f"tau + delta n: {1e3 * fit['tau']:.2f} ms + {1e3 * fit['delta']:.3f} ms x n")
    ax.fill_between(fit["grid"], 1e3 * fit["band"][0], 1e3 * fit["band"][1], color="tab:red", alpha=0.2,
                    label="95% band")
    ax.set(ylabel="ms per forward call", title=f"cost of one call with n new rows ({cache_len} cached tokens)")
    ax.legend()
    ax_res.axhline(0, color="black", lw=0.8)
    ax_res.plot(fit["rows"], 1e3 * fit["residuals"], "o", color="tab:blue")
    ax_res.set(xlabel="new rows n", ylabel="residual (ms)")
    fig.tight_layout()
    return fig


def iteration_cost(predicted: pd.DataFrame, measured: pd.DataFrame):
    """Predicted (our layouts, solid; the paper's approximation, dashed) and measured model
    time per steady-state iteration."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for schedule, group in predicted.groupby("schedule"):
        color = SCHEDULE_COLORS[schedule]
        ax.plot(group["W"], 1e3 * group["layout"], color=color, label=f"{schedule}: model, our layout")
        ax.plot(group["W"], 1e3 * group["paper"], color=color, ls="--", lw=1)
        points = measured[measured["schedule"] == schedule]
        ax.plot(points["W"], 1e3 * points["seconds_per_iteration"], "o", color=color, ms=7,
                label=f"{schedule}: measured")
    ax.set(xlabel="speculative width W", ylabel="model ms per iteration", yscale="log",
           title="per-iteration cost: tau + delta x rows (dashed: paper's approximation)")
    ax.yaxis.set_major_formatter(plt.matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(plt.matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def regime_map(fit: dict, block: int = 32):
    """Predicted Packed/Linear throughput over (tau/delta, tokens/NFE ratio), this machine's
    tau/delta and the paper's setting under both calibrations (App. F.2; Sec. 4.1):
    :func:`spec_lib.studies.costmodel.paper_calibrations`."""
    x = np.logspace(0, 3.5, 200)
    r = np.linspace(0.9, 1.6, 200)
    ratio = costmodel.throughput_ratio(x[None, :], r[:, None], block)
    fig, ax = plt.subplots(figsize=(9, 5))
    mesh = ax.pcolormesh(x, r, ratio, cmap="RdBu", vmin=0.6, vmax=1.4, shading="auto")
    ax.contour(x, r, ratio, levels=[1.0], colors="black", linewidths=1.5)
    fig.colorbar(mesh, ax=ax, label="predicted throughput Packed / Linear")
    cpu_x = fit["tau"] / fit["delta"]
    ax.axvline(cpu_x, color="tab:green", lw=2, label=f"this CPU: tau/delta = {cpu_x:.0f} rows")
    low, high = paper.TOKENS_PER_NFE_GAIN
    for (_, row), marker, color in zip(costmodel.paper_calibrations().iterrows(), "sD", ("gold", "violet")):
        x_low, x_high = row["tau_over_delta_low"], row["tau_over_delta_high"]
        ax.errorbar([(x_low + x_high) / 2], [(low + high) / 2], xerr=[[(x_high - x_low) / 2]],
                    yerr=[[(high - low) / 2]], fmt=marker, color=color, mec="black", ms=8, capsize=4,
                    label=f"paper, {row['calibration']}: tau/delta = {x_low:.0f}" +
                          (f"-{x_high:.0f}" if x_high > x_low + 0.5 else ""))
    ax.set(xscale="log", xlabel="tau / delta (rows)", ylabel="tokens/NFE ratio Packed / Linear",
           title=f"regime map at B = {block} (black: break-even)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


# ----- notebook 02: pathwise dominance ---------------------------------------------------------------

def dominance_boxes(samples: dict, length: int, instances: int):
    """NFE ratios and dominance margins c_2t - l_t per generator and width."""
    ratios = pd.DataFrame([{"generator": g, "W": w, "NFE_Packed / NFE_Linear": r}
                           for (g, w), s in samples.items() for r in s["nfe_ratio"]])
    margins = pd.DataFrame([{"generator": g, "W": w, "c_2t - l_t": m}
                            for (g, w), s in samples.items() for m in s["margin"]])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    sns.boxplot(ratios, x="W", y="NFE_Packed / NFE_Linear", hue="generator", ax=axes[0], fliersize=1, legend=False)
    axes[0].axhline(1.0, color="black", lw=1, ls="--")
    axes[0].set_title(f"passes to reach L = {length} tokens ({instances} instances per box)")
    sns.boxplot(margins, x="W", y="c_2t - l_t", hue="generator", ax=axes[1], fliersize=1)
    axes[1].axhline(0, color="tab:red", lw=1.2)
    axes[1].set_title("dominance margin at every t before Linear-SS finishes (Theorem 3.2: >= 0)")
    axes[1].legend(title="thresholds", loc="upper left", fontsize=9)
    fig.tight_layout()
    return fig


def counterexample(counter: dict):
    """The correctness table of a counterexample and both schedules' trajectories."""
    table = counter["table"].astype(int)
    size = counter["length"] + counter["width"] + 2
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 1.3]})
    relevant = np.zeros_like(table, dtype=float)
    for k in range(1, size):
        for c in range(max(0, k - counter["width"]), k):
            relevant[k, c] = 1 + table[k, c]
    sns.heatmap(relevant[1:size, : size - 1], ax=axes[0], cmap=["white", "tab:red", "tab:green"], cbar=False,
                linewidths=0.5, linecolor="lightgrey", yticklabels=range(1, size), xticklabels=range(size - 1))
    axes[0].set(xlabel="context c (verified tokens)", ylabel="position k", title="drafter correct (green) / wrong (red)")
    packed_steps = counter["packed"][: counter["nfe_packed"] + 1]
    linear_steps = counter["linear"][: counter["nfe_linear"] // 2 + 1]
    axes[1].step(range(len(packed_steps)), packed_steps, where="post", marker="o", label="Packed-SS, per pass")
    axes[1].step(2 * np.arange(len(linear_steps)), linear_steps, where="post", marker="s",
                 label="Linear-SS, per 2 passes")
    axes[1].axhline(counter["length"], color="black", ls="--", lw=1, label=f"L = {counter['length']}")
    axes[1].set(xlabel="forward passes", ylabel="verified output tokens", title="the counterexample")
    axes[1].legend()
    fig.tight_layout()
    return fig


# ----- notebook 03: exact sampling -------------------------------------------------------------------

def residual_panels(fits: pd.DataFrame, raw: list, n_samples: int, length: int, cols: int = 3):
    """Standardised residual per outcome of every configuration (negative controls in red)."""
    rows = int(np.ceil(len(fits) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.6 * rows), sharex=True, squeeze=False)
    for ax, (i, row) in zip(axes.flat, fits.reset_index(drop=True).iterrows()):
        exact, z = exactness.standardized_residuals(*raw[i])
        bad = row["role"] == "negative control"
        ax.axhspan(-3, 3, color="tab:green", alpha=0.12, lw=0)
        ax.semilogx(exact, z, ".", ms=3, color="tab:red" if bad else "tab:blue")
        ax.set_title(f"{row['label']}\nchi2 p = {row['chi2_p']:.2g}, TV = {row['tv']:.3f}", fontsize=9,
                     color="tab:red" if bad else "black")
    for ax in axes.flat[len(fits):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("exact probability")
    for ax in axes[:, 0]:
        ax.set_ylabel("standardised residual z")
    fig.suptitle(f"stopped continuations (L = {length}, EOS), {n_samples} samples each: z per outcome "
                 f"(green band: |z| < 3); red: negative controls", y=1.0)
    fig.tight_layout()
    return fig


def p_value_strip(summary: pd.DataFrame, alpha_pass: float, alpha_fail: float):
    """-log10 p of every configuration, grouped (main, repeats, negative controls)."""
    fig, ax = plt.subplots(figsize=(11, 4))
    sns.stripplot(summary, x="label", y="-log10 p (chi-square)", hue="group", ax=ax, size=6, jitter=0.15)
    ax.axhline(-np.log10(alpha_pass), color="tab:green", ls="--", lw=1, label=f"pass: p > {alpha_pass:g}")
    ax.axhline(-np.log10(alpha_fail), color="tab:red", ls="--", lw=1, label=f"fail: p < {alpha_fail:g}")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("")
    ax.tick_params(axis="x", rotation=20)
    ax.legend(fontsize=8)
    ax.set_title("goodness of fit of every configuration (higher = stronger evidence against the exact law; "
                 "p = 0 at 300)")
    fig.tight_layout()
    return fig


def null_histogram(null: np.ndarray):
    """p-values of the test on exact draws: uniform when the test is calibrated."""
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist(null, bins=20, range=(0, 1), color="tab:grey", edgecolor="white")
    ax.set(xlabel="chi-square p-value of exact draws", ylabel="replicates", title="the test under the null: uniform")
    fig.tight_layout()
    return fig
