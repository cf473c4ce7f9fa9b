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
import torch
from scipy import stats
from tqdm.auto import tqdm

from ..decoding import decode
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


def _argmax_drafts(model, kind: str, prefix: list[int], draft: list[int], width: int) -> np.ndarray:
    """Greedy proposals of one drafting call from a fresh cache: ``(blocks, rows)``."""
    model.reset()
    out = model.call(kind, torch.as_tensor(prefix, device=model.device),
                     torch.as_tensor(draft, dtype=torch.long, device=model.device), width)
    model.commit(0)
    return out.draft_logits.argmax(-1).cpu().numpy()


def branch_block_hits(model, prompt: list[int], width: int) -> dict[str, np.ndarray]:
    """Offset-i hits of the two query shapes that draft the same positions from the same tokens.

    With g the AR greedy continuation of ``prompt`` and k = 0..W: Quadratic-SS's branch k is
    a block of B = W + 1 MASK rows that reads ``last, g_1..g_k`` from the causal stream (seed
    000, Sec. 1; App. D.3), and Linear- and Packed-SS draft after the same tokens with
    ``[g_k, MASK^W]``, the anchor inside the block.  Row j of either predicts g_{k+1+j}.
    Returns ``{"linear": hits, "quadratic_branch": hits}``, each ``(W + 1 branches, W offsets)``.
    """
    greedy = decode(model, prompt, schedule="ar", width=1, max_new_tokens=2 * width).tokens
    if len(greedy) < 2 * width:
        raise ValueError(f"the AR continuation stopped after {len(greedy)} of {2 * width} tokens "
                         f"(max_positions {model.max_positions}); use shorter prompts")
    target = np.array([greedy[k:k + width] for k in range(width + 1)])                  # (W+1, W)
    branches = _argmax_drafts(model, "quadratic", prompt, greedy[:width], width)[:, :width]
    linear = np.stack([_argmax_drafts(model, "linear_draft", prompt + greedy[:k], [], width)[0]
                       for k in range(width + 1)])
    return {"linear": linear == target, "quadratic_branch": branches == target}


def branch_block_accuracy(model, prompts: dict[str, list[list[int]]], width: int, *, n_resamples: int = 20_000,
                          seed: int = 0, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Do Quadratic-SS's branch blocks draft as well as the Linear/Packed block?

    The dual-mode training samples blocks shaped ``[anchor, MASK...]``; Quadratic-SS's
    branches put every drafted row behind tokens read from the causal stream, a shape the
    training sees less often.  :func:`branch_block_hits` compares both on the same positions
    with the same visible tokens.  Returns ``(by_offset, summary)``: accuracy per slice,
    shape, branch k = 0..W and offset (mean over prompts), and per slice each shape's
    mean accuracy with the paired difference (branch minus linear, per prompt) and its 95%
    bootstrap interval over prompts (scipy, ``n_resamples``).
    """
    by_offset, summary = [], []
    for slice_, items in prompts.items():
        hits = [branch_block_hits(model, prompt, width)
                for prompt in tqdm(items, desc=f"branch blocks: {slice_}", disable=not progress)]
        for shape in ("linear", "quadratic_branch"):
            stacked = np.stack([h[shape] for h in hits])                               # (prompts, W+1, W)
            branch, offset = np.meshgrid(np.arange(width + 1), np.arange(1, width + 1), indexing="ij")
            by_offset.append(pd.DataFrame({"slice": slice_, "shape": shape, "branch": branch.ravel(),
                                           "offset": offset.ravel(), "accuracy": stacked.mean(0).ravel(),
                                           "all_correct_up_to": np.cumprod(stacked, -1).mean(0).ravel()}))
        per_prompt = {shape: np.array([h[shape].mean() for h in hits]) for shape in ("linear", "quadratic_branch")}
        diff = per_prompt["quadratic_branch"] - per_prompt["linear"]
        low = high = float(diff.mean())                 # every prompt the same: no spread to resample
        if np.ptp(diff) > 0:
            interval = stats.bootstrap((diff,), np.mean, n_resamples=n_resamples, method="percentile",
                                       random_state=np.random.default_rng(seed)).confidence_interval
            low, high = float(interval.low), float(interval.high)
        summary.append({"slice": slice_, "prompts": len(items), "linear": per_prompt["linear"].mean(),
                        "quadratic_branch": per_prompt["quadratic_branch"].mean(), "difference": diff.mean(),
                        "difference_low": low, "difference_high": high})
    return pd.concat(by_offset, ignore_index=True), pd.DataFrame(summary)


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
