"""How long drafts survive verification: acceptance-length distributions and per-position
acceptance (seed 001, Sec. 5: Figure 4, Figure 7, Table 4, Figure 8, and the critical
assessment's "collapse of trust").

Inputs are :func:`spec_lib.bench.run_grid` tables, whose ``accepted`` column holds the
tokens appended per cycle (a = h + 1: h accepted drafts plus the correction or bonus).
The last cycle of each response may be cut short by the output limit or EOS, so it is left
out of every statistic here (its h is not observed).
"""

from __future__ import annotations

import pandas as pd
from scipy import stats


def cycles(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per complete cycle: slice, method, width k, prompt, sample, accepted a, drafts h."""
    rows = runs[["slice", "method", "width", "prompt", "sample", "accepted"]].copy()
    rows["accepted"] = [list(a[:-1]) for a in rows["accepted"]]          # drop the possibly cut last cycle
    out = rows.explode("accepted").dropna(subset=["accepted"])
    out["accepted"] = out["accepted"].astype(int)
    out["drafts_accepted"] = out["accepted"] - 1
    return out.reset_index(drop=True)


def length_distribution(runs: pd.DataFrame, long_at: int = 8) -> pd.DataFrame:
    """Per method: tau (mean tokens per cycle, bonus included), the share of cycles with at
    least ``long_at`` tokens (Figure 4), the maximum accepted length (Table 4), cycles."""
    c = cycles(runs)
    g = c.groupby(["slice", "method"], sort=False)
    out = g.agg(cycles=("accepted", "size"), tau=("accepted", "mean"), max_accepted=("accepted", "max"),
                width=("width", "first")).reset_index()
    out[f"share_ge_{long_at}"] = g["accepted"].apply(lambda a: float((a >= long_at).mean())).to_numpy()
    return out


def histogram(runs: pd.DataFrame) -> pd.DataFrame:
    """Frequency of each accepted length a per method (Figure 7, log scale in the notebook)."""
    c = cycles(runs)
    counts = c.groupby(["method", "accepted"]).size().rename("count").reset_index()
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


def resurgence_test(runs: pd.DataFrame, method: str, band: int = 4) -> dict:
    """Is there a "long-block resurgence" (seed 001, Figure 7)?  Compares the frequency of
    the top ``band`` accepted lengths (up to k + 1, full acceptance) with the frequency of the
    ``band`` lengths just below them, per length.  Under the usual monotone decay the top
    band is rarer; a resurgence makes it more frequent.  One-sided binomial test of the top
    band's share of the two bands' cycles against 1/2."""
    c = cycles(runs)
    part = c[c["method"] == method]
    if part.empty:
        raise ValueError(f"method {method!r} not in runs; have {sorted(c['method'].unique())}")
    top_len = int(part["width"].iloc[0]) + 1
    top = part["accepted"].between(top_len - band + 1, top_len)
    below = part["accepted"].between(top_len - 2 * band + 1, top_len - band)
    n_top, n_below = int(top.sum()), int(below.sum())
    p = stats.binomtest(n_top, n_top + n_below, 0.5, alternative="greater").pvalue if n_top + n_below else float("nan")
    return {"method": method, "top_band": [top_len - band + 1, top_len], "below_band": [top_len - 2 * band + 1, top_len - band],
            "cycles_top": n_top, "cycles_below": n_below, "p_value": float(p),
            "resurgence": bool(n_top > n_below and p < 0.05)}


def tau_by(runs: pd.DataFrame, keys=("slice", "method")) -> pd.DataFrame:
    """tau = mean tokens per cycle over complete cycles, by ``keys`` (Tables 1-3)."""
    c = cycles(runs)
    return c.groupby(list(keys), sort=False)["accepted"].agg(tau="mean", cycles="size").reset_index()


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


def tau_speedup_table(runs_by_temperature: dict, n_resamples: int, seed: int, baseline: str = "ar") -> pd.DataFrame:
    """Tables 1-2: per temperature, slice and method, throughput, tokens/NFE, tau (with the
    repetition share of the outputs) and the paired speedup over the baseline."""
    from .bench import aggregate

    tables = []
    for temperature, grid in runs_by_temperature.items():
        absolute = aggregate(grid)[["slice", "method", "throughput", "tokens_per_nfe", "repetition"]]
        table = (absolute.merge(tau_by(grid), on=["slice", "method"], how="left")
                 .merge(paired_speedup(grid, baseline, n_resamples=n_resamples, seed=seed), on=["slice", "method"],
                        how="left"))
        table.insert(0, "temperature", temperature)
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def block_sweep(runs: pd.DataFrame, reference: str = "ar") -> pd.DataFrame:
    """Figure 8: per method of a block-size sweep, throughput, tokens/NFE, the acceptance-length
    statistics and the speedup over the reference."""
    from .bench import aggregate

    table = aggregate(runs, by=("method",))[["method", "schedule", "throughput", "tokens_per_nfe", "repetition"]] \
        .merge(length_distribution(runs).drop(columns=["slice"]), on="method", how="left")
    table["speedup"] = table["throughput"] / table.loc[table["method"] == reference, "throughput"].iloc[0]
    return table


def resurgence_table(runs: pd.DataFrame, band: int = 4) -> pd.DataFrame:
    """:func:`resurgence_test` of every drafter method in ``runs``."""
    methods = [m for m in dict.fromkeys(runs["method"]) if m != "ar"]
    return pd.DataFrame([resurgence_test(runs, m, band) for m in methods])


def depth_acceptance(positions: pd.DataFrame, from_position: int = 2) -> pd.Series:
    """Mean conditional acceptance over positions >= ``from_position``, per method."""
    return positions[positions["position"] >= from_position].groupby("method")["probability"].mean()


def tau_above(sweep: pd.DataFrame, first: str, second: str, min_k: int = 8) -> dict[int, bool]:
    """Per block size k >= ``min_k``: is ``first``'s tau above ``second``'s (seed 001's claim)?"""
    tau = sweep.set_index("method")["tau"]
    widths = sorted({int(w) for w in sweep["width"].dropna() if w >= min_k})
    return {k: bool(tau[f"{first} k={k}"] > tau[f"{second} k={k}"]) for k in widths
            if f"{first} k={k}" in tau and f"{second} k={k}" in tau}
