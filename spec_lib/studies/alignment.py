"""DEER's alignment stages read from their training history and from decoding (seed 001,
Sec. 3.4; Figure 6: alpha sensitivity of Stage II; Table 3: the Stage II ablation)."""

from __future__ import annotations

import pandas as pd

from .acceptance import tau_by


def final_heldout(history: pd.DataFrame) -> pd.DataFrame:
    """The last held-out row of every trained model (step, loss, CE, accuracy)."""
    held = history[history["split"] == "heldout"]
    return held.groupby("model", sort=False).last()[["step", "loss", "ce", "accuracy"]].reset_index()


def alpha_sensitivity(history: pd.DataFrame, alphas, r_max: int, name) -> pd.DataFrame:
    """Per Stage II alpha: the first/last weight ratio alpha^(R_max - 1), first and last
    held-out loss, late-training loss spread and trend, and the largest gradient norm
    (``name(alpha)`` is the model's name in the history)."""
    rows = []
    for alpha in alphas:
        part = history[(history["model"] == name(alpha)) & (history["split"] == "train")]
        held = history[(history["model"] == name(alpha)) & (history["split"] == "heldout")]
        late = part["loss"].iloc[len(part) // 2:]
        quarter = max(1, len(late) // 4)
        rows.append({"alpha": alpha, "weight_ratio_first_last": alpha ** (r_max - 1),
                     "first_heldout_loss": float(held["loss"].iloc[0]), "last_heldout_loss": float(held["loss"].iloc[-1]),
                     "last_heldout_ce": float(held["ce"].iloc[-1]), "late_train_loss_std": float(late.std()),
                     "late_train_loss_trend": float(late.iloc[-quarter:].mean() - late.iloc[:quarter].mean()),
                     "max_grad_norm": float(part["grad_norm"].max())})
    return pd.DataFrame(rows)


def every_stage_trained(history: pd.DataFrame, names) -> bool:
    """Whether the history holds every named model."""
    return set(names) <= set(history["model"])


def stage2_ablation(runs: pd.DataFrame, labels: list[str], stage1: str, stage2: str) -> pd.DataFrame:
    """tau per slice of each drafter (columns in ``labels`` order) and Stage II's gain over Stage I,
    tau in DEER's convention (seed 001: draft tokens accepted per cycle)."""
    table = tau_by(runs, convention="deer").pivot(index="slice", columns="method", values="tau")[labels]
    table["stage2_gain"] = table[stage2] - table[stage1]
    return table.reset_index()
