"""How long drafts survive verification: acceptance-length distributions and per-position
acceptance (seed 001, Sec. 5: Figure 4, Figure 7, Table 4, Figure 8, and the critical
assessment's "collapse of trust").

Inputs are :func:`spec_lib.bench.run_grid` tables, whose ``accepted`` column holds the
tokens appended per cycle (a = h + 1: h accepted drafts plus the correction or bonus).
The last cycle of each response may be cut short by the output limit or EOS, so it is left
out of every statistic here (its h is not observed).

The papers count acceptance length differently, so every function takes the ``convention``
of the paper it reproduces and reports the other quantity beside it:

* ``"deer"`` (seed 001, Sec. 4 and Fig. 7): tau is "the mean number of draft tokens
  accepted" per cycle, h in 0..k;
* ``"dedit"`` (seed 002): tau = E[A + 1] per round, the accepted drafts A plus the bonus,
  a in 1..k+1.

Tables carry ``tau`` (the convention's), ``accepted_drafts`` (mean h) and
``tokens_per_cycle`` (mean a = h + 1); lengths in histograms and resurgence bands are in the
convention's units.
"""

from __future__ import annotations

import pandas as pd
from scipy import stats

#: The column of :func:`cycles` that each paper's tau averages.
CONVENTIONS = {"deer": "drafts_accepted", "dedit": "accepted"}


def length_column(convention: str) -> str:
    """The :func:`cycles` column counted by ``convention`` (see the module docstring)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {sorted(CONVENTIONS)}, got {convention!r}")
    return CONVENTIONS[convention]


def tau_label(convention: str) -> str:
    """Axis label of tau in ``convention``'s units."""
    return {"drafts_accepted": "tau (draft tokens accepted per cycle)",
            "accepted": "tau (tokens per round, bonus included)"}[length_column(convention)]


def _tau_columns(grouped, column: str):
    return grouped.agg(tau=(column, "mean"), accepted_drafts=("drafts_accepted", "mean"),
                       tokens_per_cycle=("accepted", "mean"), cycles=(column, "size"))


def cycles(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per complete cycle: slice, method, width k, prompt, sample, accepted a, drafts h."""
    rows = runs[["slice", "method", "width", "prompt", "sample", "accepted"]].copy()
    rows["accepted"] = [list(a[:-1]) for a in rows["accepted"]]          # drop the possibly cut last cycle
    out = rows.explode("accepted").dropna(subset=["accepted"])
    out["accepted"] = out["accepted"].astype(int)
    out["drafts_accepted"] = out["accepted"] - 1
    return out.reset_index(drop=True)


def length_distribution(runs: pd.DataFrame, *, convention: str, long_at: int = 8) -> pd.DataFrame:
    """Per method: tau (in ``convention``) with both counts beside it, the share of cycles of
    length at least ``long_at`` (Figure 4), the maximum length (Table 4), cycles; lengths
    in ``convention``'s units."""
    column = length_column(convention)
    c = cycles(runs)
    g = c.groupby(["slice", "method"], sort=False)
    out = _tau_columns(g, column).reset_index()
    out["max_length"] = g[column].max().to_numpy()
    out["width"] = g["width"].first().to_numpy()
    out[f"share_ge_{long_at}"] = g[column].apply(lambda a: float((a >= long_at).mean())).to_numpy()
    return out


def histogram(runs: pd.DataFrame, *, convention: str) -> pd.DataFrame:
    """Frequency of each acceptance ``length`` (in ``convention``'s units) per method
    (Figure 7, log scale in the notebook)."""
    column = length_column(convention)
    c = cycles(runs)
    counts = c.groupby(["method", column]).size().rename("count").reset_index().rename(columns={column: "length"})
    counts["share"] = counts["count"] / counts.groupby("method")["count"].transform("sum")
    return counts


def position_acceptance(runs: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """P(draft i accepted | drafts < i accepted) for i = 1..k per method, with Wilson
    intervals: the direct measurement of how fast trust in a draft decays with depth."""
    c = cycles(runs)
    out = []
    for method, part in c.groupby("method", sort=False):
        k = int(part["width"].iloc[0])
        h = part["drafts_accepted"].to_numpy()
        for i in range(1, k + 1):
            reached = int((h >= i - 1).sum())
            passed = int((h >= i).sum())
            if reached == 0:
                break
            ci = stats.binomtest(passed, reached).proportion_ci(confidence, method="wilson")
            out.append({"method": method, "position": i, "reached": reached, "accepted": passed,
                        "probability": passed / reached, "low": ci.low, "high": ci.high})
    return pd.DataFrame(out)


def resurgence_test(runs: pd.DataFrame, method: str, *, convention: str, band: int = 4) -> dict:
    """Is there a "long-block resurgence" (seed 001, Figure 7)?  Compares the frequency of
    the top ``band`` acceptance lengths (up to full acceptance: k drafts in the ``"deer"``
    convention, k + 1 tokens in ``"dedit"``) with the frequency of the ``band`` lengths just
    below them.  Under the usual monotone decay the top band is rarer; a resurgence makes it
    more frequent.  One-sided binomial test of the top band's share of the two bands' cycles
    against 1/2."""
    column = length_column(convention)
    c = cycles(runs)
    part = c[c["method"] == method]
    if part.empty:
        raise ValueError(f"method {method!r} not in runs; have {sorted(c['method'].unique())}")
    top_len = int(part["width"].iloc[0]) + (1 if column == "accepted" else 0)
    top = part[column].between(top_len - band + 1, top_len)
    below = part[column].between(top_len - 2 * band + 1, top_len - band)
    n_top, n_below = int(top.sum()), int(below.sum())
    p = stats.binomtest(n_top, n_top + n_below, 0.5, alternative="greater").pvalue if n_top + n_below else float("nan")
    return {"method": method, "convention": convention, "top_band": [top_len - band + 1, top_len],
            "below_band": [top_len - 2 * band + 1, top_len - band], "cycles_top": n_top, "cycles_below": n_below,
            "p_value": float(p), "resurgence": bool(n_top > n_below and p < 0.05)}


def tau_by(runs: pd.DataFrame, keys=("slice", "method"), *, convention: str) -> pd.DataFrame:
    """tau in ``convention`` (with ``accepted_drafts`` and ``tokens_per_cycle`` beside it)
    over complete cycles, by ``keys`` (Tables 1-3)."""
    column = length_column(convention)
    return _tau_columns(cycles(runs).groupby(list(keys), sort=False), column).reset_index()


def paired_speedup(runs: pd.DataFrame, baseline: str = "ar", n_resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Throughput of each method over ``baseline`` per slice with a paired bootstrap over
    prompts (the speedup columns of Tables 1-2)."""
    from .bench import paired_bootstrap

    out = paired_bootstrap(runs, baseline, n_resamples=n_resamples, seed=seed)
    return out[["slice", "method", "prompts", "throughput_ratio", "throughput_ratio_low", "throughput_ratio_high"]] \
        .rename(columns={"throughput_ratio": "speedup", "throughput_ratio_low": "speedup_low",
                         "throughput_ratio_high": "speedup_high"})



def run_by_temperature(target, prompts: dict, methods: list, temperatures, **kwargs) -> dict:
    """One :func:`spec_lib.studies.bench.run_grid` per temperature, on the same prompts and methods."""
    from .bench import run_grid

    return {t: run_grid(target, prompts, methods, temperature=t, **kwargs) for t in temperatures}


def tau_speedup_table(runs_by_temperature: dict, n_resamples: int, seed: int, *, convention: str,
                      baseline: str = "ar") -> pd.DataFrame:
    """Tables 1-2: per temperature, slice and method, throughput, tokens/NFE, tau in
    ``convention`` (with the repetition share of the outputs) and the paired speedup over
    the baseline."""
    from .bench import aggregate

    tables = []
    for temperature, grid in runs_by_temperature.items():
        absolute = aggregate(grid)[["slice", "method", "throughput", "tokens_per_nfe", "repetition"]]
        table = (absolute.merge(tau_by(grid, convention=convention), on=["slice", "method"], how="left")
                 .merge(paired_speedup(grid, baseline, n_resamples=n_resamples, seed=seed), on=["slice", "method"],
                        how="left"))
        table.insert(0, "temperature", temperature)
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def block_sweep(runs: pd.DataFrame, *, convention: str, reference: str = "ar") -> pd.DataFrame:
    """Figure 8: per method of a block-size sweep, throughput, tokens/NFE, the acceptance-length
    statistics in ``convention`` and the speedup over the reference."""
    from .bench import aggregate

    table = aggregate(runs, by=("method",))[["method", "schedule", "throughput", "tokens_per_nfe", "repetition"]] \
        .merge(length_distribution(runs, convention=convention).drop(columns=["slice"]), on="method", how="left")
    table["speedup"] = table["throughput"] / table.loc[table["method"] == reference, "throughput"].iloc[0]
    return table


def resurgence_table(runs: pd.DataFrame, *, convention: str, band: int = 4) -> pd.DataFrame:
    """:func:`resurgence_test` of every drafter method in ``runs``."""
    methods = [m for m in dict.fromkeys(runs["method"]) if m != "ar"]
    return pd.DataFrame([resurgence_test(runs, m, convention=convention, band=band) for m in methods])


def depth_acceptance(positions: pd.DataFrame, from_position: int = 2) -> pd.Series:
    """Mean conditional acceptance over positions >= ``from_position``, per method."""
    return positions[positions["position"] >= from_position].groupby("method")["probability"].mean()


def tau_above(sweep: pd.DataFrame, first: str, second: str, min_k: int = 8) -> dict[int, bool]:
    """Per block size k >= ``min_k``: is ``first``'s tau above ``second``'s (seed 001's claim)?"""
    tau = sweep.set_index("method")["tau"]
    widths = sorted({int(w) for w in sweep["width"].dropna() if w >= min_k})
    return {k: bool(tau[f"{first} k={k}"] > tau[f"{second} k={k}"]) for k in widths
            if f"{first} k={k}" in tau and f"{second} k={k}" in tau}
