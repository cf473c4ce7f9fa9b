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


def block_probe_by_path(probe: pd.DataFrame, n_prompts: int):
    """Throughput of each schedule by block size on each execution path (solid: eager, dashed:
    compiled), each path's AR as a horizontal line of the same style (seed 000, App. F.1)."""
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    styles = {path: ls for path, ls in zip(dict.fromkeys(probe["path"]), ("-", "--", ":"))}
    colors = {s: plt.cm.tab10(i) for i, s in enumerate(sorted(set(probe["schedule"]) - {"ar"}))}
    for path, part in probe.groupby("path", sort=False):
        for schedule, rows in part[part["schedule"] != "ar"].groupby("schedule"):
            rows = rows.sort_values("B")
            ax.plot(rows["B"], rows["throughput"], "o", ls=styles[path], color=colors[schedule],
                    label=f"{schedule} ({path})")
        ar = part.loc[part["schedule"] == "ar", "throughput"]
        if len(ar):
            ax.axhline(ar.iloc[0], color="black", ls=styles[path], lw=1, label=f"AR ({path})")
    ticks = sorted(set(probe.loc[probe["schedule"] != "ar", "B"]))
    ax.set(xscale="log", xlabel="block size B", ylabel="tokens / s",
           title=f"block-size probe on each execution path, first {n_prompts} prompts")
    ax.minorticks_off()
    ax.set_xticks(ticks, [str(b) for b in ticks])
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def regime_by_path(costs: pd.DataFrame, block: int):
    """Seed 000's cost model on each execution path: the predicted Packed/Linear throughput
    over tau/delta (Sec. 1; a curve per path at that path's measured tokens/NFE ratio, with
    Table 2's B and 2B rows per call), each path's fitted tau/delta with the observed ratio and
    the one predicted from its calls' own rows (a shorter last draft has fewer), and the paper's A100
    calibration (App. F.2).  A path that lowers tau more than delta moves this machine left,
    where Packed-SS's doubled rows cost relatively more."""
    from ..studies import costmodel

    a100 = costmodel.paper_a100_tau_delta()["tau_over_delta"]
    x = np.logspace(0, 3.5, 200)
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    for j, row in enumerate(costs.itertuples()):
        color = plt.cm.tab10(j)
        ax.plot(x, costmodel.throughput_ratio(x, row.tokens_per_nfe_ratio, block), color=color, lw=1.5,
                label=f"{row.path}: Table 2's B and 2B rows per call, tokens/NFE ratio {row.tokens_per_nfe_ratio:.2f}")
        ax.plot([row.tau_over_delta], [row.predicted_throughput_ratio], "o", color=color, mfc="white", ms=8)
        ax.plot([row.tau_over_delta], [row.observed_throughput_ratio], "o", color=color, mec="black", ms=8,
                label=f"{row.path}: tau/delta = {row.tau_over_delta:.0f} rows, observed "
                      f"{row.observed_throughput_ratio:.2f}x (hollow: predicted from the calls' own rows)")
    ax.axvline(a100, color="gray", ls=":", lw=1.5, label=f"paper's A100 (App. F.2): tau/delta = {a100:.0f}")
    ax.axhline(1.0, color="black", ls="--", lw=1)
    ax.set(xscale="log", xlabel="tau / delta (rows)", ylabel="throughput Packed-SS / Linear-SS",
           title=f"regime map on each execution path, B = {block}")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def regime_map_by_path(fits: dict, block: int = 32):
    """Notebook 01's regime map (:func:`spec_lib.notebook.figures_proofs.regime_map`, drawn at
    the first path's tau/delta) with every further path's fitted tau/delta marked too."""
    from .figures_proofs import regime_map

    paths = list(fits)
    fig = regime_map(fits[paths[0]], block=block)
    ax = fig.axes[0]
    for j, path in enumerate(paths[1:]):
        x = fits[path]["tau"] / fits[path]["delta"]
        ax.axvline(x, color=plt.cm.Dark2(j + 3), lw=2, ls="--", label=f"this CPU, {path} path: tau/delta = {x:.0f} rows")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def ratios_by_path(ratios: pd.DataFrame):
    """Paired-bootstrap throughput ratios with their 95% intervals over prompts
    (:func:`spec_lib.studies.compiled_path.path_ratios`): one panel per comparison (a method
    over its baseline on each path; each method compiled over eager), slices along x, a bar
    per method: one colour per method in every panel, hatched on the compiled path."""
    comparisons = list(dict.fromkeys(ratios["comparison"]))
    bases = list(dict.fromkeys(name.split(" (")[0] for name in ratios["method"]))
    fig, axes = plt.subplots(1, len(comparisons), figsize=(5.5 * len(comparisons), 4.8), squeeze=False)
    for ax, comparison in zip(axes[0], comparisons):
        part = ratios[ratios["comparison"] == comparison]
        slices, methods = list(dict.fromkeys(part["slice"])), list(dict.fromkeys(part["method"]))
        width = 0.8 / len(methods)
        for j, method in enumerate(methods):
            rows = part[part["method"] == method].set_index("slice").reindex(slices)
            x = np.arange(len(slices)) + (j - (len(methods) - 1) / 2) * width
            err = np.vstack([rows["throughput_ratio"] - rows["throughput_ratio_low"],
                             rows["throughput_ratio_high"] - rows["throughput_ratio"]])
            ax.bar(x, rows["throughput_ratio"], width, yerr=err, capsize=3, label=method,
                   color=plt.cm.tab10(bases.index(method.split(" (")[0])), edgecolor="white",
                   hatch="//" if " (" in method else None)
        ax.axhline(1.0, color="black", ls="--", lw=1)
        ax.set_xticks(np.arange(len(slices)), slices)
        ax.set(ylabel="throughput ratio (95% paired bootstrap CI)", title=f"throughput: {comparison}")
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=min(3, len(methods)))
    fig.tight_layout()
    return fig
