"""Tables of the DFlash / DEdit notebooks (seed 002): training summaries, ProposalMix input
rates (Table 6), Table 1's decodes and macro average, and the drafter's share of decoding time."""

from __future__ import annotations

import pandas as pd

from .acceptance import paired_speedup, run_by_temperature
from .bench import Method, run_grid


def training_summary(history: pd.DataFrame) -> pd.DataFrame:
    """Per variant: first and final held-out losses and accuracies of the trained passes."""
    held = history[history["split"] == "heldout"].sort_values("step")
    columns = [c for c in ("unmask", "edit", "p1_accuracy", "p2_accuracy") if c in held]
    first = held.groupby("model")[columns].first().add_prefix("first_")
    last = held.groupby("model")[columns].last().add_prefix("final_")
    steps = held.groupby("model")["step"].max().rename("steps")
    seconds = history[history["split"] == "train"].groupby("model")["seconds"].max().rename("train_seconds")
    return pd.concat([steps, seconds, first, last], axis=1).reset_index().rename(columns={"model": "variant"})


def mix_rates(history: pd.DataFrame, variant: str = "dedit") -> pd.DataFrame:
    """Table 6 analogue: ProposalMix's GT-selection and overwrite rates on the held-out
    blocks at every evaluation step of ``variant`` (each checkpoint is its own P1)."""
    held = history[(history["split"] == "heldout") & (history["model"] == variant)]
    if held.empty:
        raise ValueError(f"variant {variant!r} has no held-out rows; have {sorted(history['model'].unique())}")
    return held[["step", "gt_selection", "overwrite", "p1_accuracy", "p2_accuracy"]].reset_index(drop=True)


def decode_by_temperature(target, prompts: dict, methods: list, temperatures, *, stochastic_prompts: int = 0,
                          **kwargs) -> dict:
    """Table 1's decodes: ``{temperature: grid}``
    (:func:`spec_lib.studies.acceptance.run_by_temperature`), greedy (T = 0) on every prompt and
    every T > 0 on the first ``stochastic_prompts`` prompts of each slice (0: every prompt).
    Seed 002's stochastic setting accepts so little on a small target that each round costs about
    as much as greedy's longest; fewer prompts keep its decodes within the notebooks' budget."""
    if isinstance(stochastic_prompts, bool) or not isinstance(stochastic_prompts, int) or stochastic_prompts < 0:
        raise ValueError(f"stochastic_prompts must be an int >= 0 (0: every prompt), got {stochastic_prompts!r}")
    if stochastic_prompts == 0:
        return run_by_temperature(target, prompts, methods, temperatures, **kwargs)
    fewer = {name: items[:stochastic_prompts] for name, items in prompts.items()}
    return {t: run_by_temperature(target, fewer if t > 0 else prompts, methods, [t], **kwargs)[t]
            for t in temperatures}


def with_macro_average(main: pd.DataFrame) -> pd.DataFrame:
    """Table 1 layout: per temperature and method, every slice plus ``macro`` (the mean of the
    per-slice tau and speedup, as seed 002's "Avg." over suites)."""
    macro = (main.groupby(["temperature", "method"], as_index=False, sort=False)[["tau", "speedup"]].mean()
             .assign(slice="macro"))
    return pd.concat([main, macro], ignore_index=True)


def drafting_time(runs: pd.DataFrame) -> pd.DataFrame:
    """Per method: drafter passes per round, drafter and target time per round (ms), the rest of
    each round's wall time (``other_ms_per_round``: the decoder's own work and the gaps between
    calls), the drafter's share of model time and the decoder's own (non-model) share of wall time."""
    rows = []
    for method, group in runs.groupby("method", sort=False):
        rounds = group["iterations"].sum()
        drafter = group["drafter_seconds"].sum()
        rows.append({"method": method, "passes_per_round": group["drafter_nfe"].sum() / rounds,
                     "drafter_ms_per_round": 1e3 * drafter / rounds,
                     "target_ms_per_round": 1e3 * (group["model"].sum() - drafter) / rounds,
                     "other_ms_per_round": 1e3 * (group["wall"].sum() - group["model"].sum()) / rounds,
                     "drafter_share_of_model": drafter / group["model"].sum(),
                     "non_model_share_of_wall": 1 - group["model"].sum() / group["wall"].sum()})
    return pd.DataFrame(rows)


def pass_methods(bundle, name: str, max_passes: int) -> list[Method]:
    """Seed 002's Figure 6 grid: AR, then network ``name`` of ``bundle`` (a
    :class:`~spec_lib.training.block_drafters.BlockDrafters`) verifying P1, P2, ..., P_``max_passes``,
    and P_``max_passes`` with early exit (editing stops once a pass changes no token)."""
    if isinstance(max_passes, bool) or not isinstance(max_passes, int) or max_passes < 1:
        raise ValueError(f"max_passes must be an int >= 1, got {max_passes!r}")
    k = bundle.width_of(name) - 1
    methods = [Method("ar", 1)]
    methods += [Method("deer", k, drafter=bundle.drafter(name, p), label=f"{name} P{p}") for p in range(1, max_passes + 1)]
    methods.append(Method("deer", k, drafter=bundle.drafter(name, max_passes, early_exit=True),
                          label=f"{name} P{max_passes} early exit"))
    return methods


def speedup_by_pass(target, prompts: dict, methods: list[Method], *, n_resamples: int, seed: int, **kwargs
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Greedy decodes of ``methods`` (:func:`pass_methods`) on every prompt: ``(runs, table)``, the
    table per method with the drafting time (:func:`drafting_time`), tokens per round and the mean
    paired speedup over AR across slices (Figure 6)."""
    runs = run_grid(target, prompts, methods, seed=seed, **kwargs)
    speed = (paired_speedup(runs, n_resamples=n_resamples, seed=seed).groupby("method", as_index=False)["speedup"]
             .mean())
    per_round = (runs.groupby("method", sort=False)[["tokens", "iterations"]].sum()
                 .assign(tokens_per_round=lambda f: f["tokens"] / f["iterations"])[["tokens_per_round"]].reset_index())
    return runs, drafting_time(runs).merge(per_round, on="method").merge(speed, on="method", how="left")
