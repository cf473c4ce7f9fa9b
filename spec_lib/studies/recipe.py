"""How well the self-speculative model drafts, and for what reason (notebook 10).

Seed 000 measures acceptance on held-out benchmarks; a small model's greedy text loops,
and drafts that continue a loop are accepted almost always.  So every acceptance figure of
the training recipe is read beside the repetition share of the text it was measured on
(:mod:`spec_lib.studies.repetition`), and the model after self-distillation is compared with
the same model before it (stage 1): the recipe must raise acceptance without making the
verifier's own text loopier.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import bench


def heldout_summary(history: pd.DataFrame) -> dict:
    """Last held-out AR and diffusion cross-entropy of a training history, and the AR perplexity."""
    final = history[history["split"] == "heldout"].iloc[-1]
    return {"heldout_ar_ce": float(final["ar"]), "heldout_perplexity": float(np.exp(final["ar"])),
            "heldout_diffusion_ce": float(final["diffusion"])}


def drafter_accuracy(models: dict, prompts: dict[str, list[list[int]]], width: int) -> pd.DataFrame:
    """:func:`spec_lib.studies.bench.drafter_accuracy` per model and slice."""
    parts = [bench.drafter_accuracy(model, items, width).assign(model=name, slice=slice_)
             for name, model in models.items() for slice_, items in prompts.items()]
    return pd.concat(parts, ignore_index=True)


def expected_leading(accuracy: pd.DataFrame) -> pd.DataFrame:
    """Expected number of correct leading proposals of one fresh draft, per model and slice."""
    return accuracy.groupby(["model", "slice"], sort=False)["all_correct_up_to"].sum() \
        .rename("expected_correct_leading").reset_index()


def acceptance_and_repetition(models: dict, prompts: dict, *, width: int, max_new_tokens: int, eos_token_id: int,
                              seed: int = 0, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Greedy AR and Linear-SS at width W for every model on the same prompts: per (model,
    slice) Linear-SS's tokens per iteration, the repetition share of the (identical) outputs,
    and the model's tokens per second over AR.  Returns ``(table, runs)``."""
    methods = [bench.Method("ar", 1), bench.Method("linear", width)]
    tables, all_runs = [], []
    for name, model in models.items():
        runs = bench.run_grid(model, prompts, methods, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                              seed=seed, progress=progress)
        agg = bench.speedups(bench.aggregate(runs))
        linear = agg[agg["schedule"] == "linear"]
        tables.append(pd.DataFrame({"model": name, "slice": linear["slice"], "width": width,
                                    "linear_tokens_per_iteration": linear["tokens_per_iteration"],
                                    "repetition": linear["repetition"], "linear_speedup_over_ar": linear["speedup"]}))
        all_runs.append(runs.assign(variant=name))     # ("model" is the runs' model-seconds column)
    return pd.concat(tables, ignore_index=True), pd.concat(all_runs, ignore_index=True)


def loss_decreased(history: pd.DataFrame, objective: str, window: int = 5) -> bool:
    """Whether an objective's training loss ended lower than it started (mean of the first and
    last ``window`` steps of the first stage's start and the last stage's end)."""
    train_rows = history[history["split"] == "train"][objective]
    return bool(train_rows.iloc[-window:].mean() < train_rows.iloc[:window].mean())
