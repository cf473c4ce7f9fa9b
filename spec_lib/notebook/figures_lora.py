"""Figures of notebook 17 (proposal-only LoRA, seed 000 App. F.2).  Each function draws one
figure from study tables and returns it."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def training_curves(trained):
    """The AR base's CE and the adapter's diffusion CE over training (``trained``, a
    :class:`~spec_lib.training.proposal_lora.TrainedLoRA`); for an adapter trained elsewhere
    (``trained`` None), a figure saying there is no training here to show."""
    if trained is not None:
        from .figures_packed import loss_curves

        return loss_curves(trained.history, objectives=("ce", "diffusion"))
    fig, ax = plt.subplots(figsize=(9, 1.2))
    ax.text(0.5, 0.5, "adapter trained elsewhere (adapter_path): no training curves in this run", ha="center",
            va="center")
    ax.set_axis_off()
    return fig


def table5(table: pd.DataFrame):
    """Model time per iteration (after the first call) per schedule and model, with the rows the
    adapter's update is computed for (evaluated) and applied to (selected) printed on each bar."""
    fig, ax = plt.subplots(figsize=(9, 4.2))
    schedules = list(dict.fromkeys(table["schedule"]))
    models = list(dict.fromkeys(table["lm"]))
    step = 0.8 / len(models)
    for k, model in enumerate(models):
        part = table[table["lm"] == model].set_index("schedule").loc[schedules]
        x = np.arange(len(schedules)) + step * (k - (len(models) - 1) / 2)
        ax.bar(x, part["model_ms_per_iteration"], width=step, label=model)
        for xi, (ms, sel, ev) in zip(x, part[["model_ms_per_iteration", "selected", "evaluated"]].to_numpy()):
            ax.text(xi, ms, f"{int(ev)}/{int(sel)}", ha="center", va="bottom", fontsize=7)
    labels = [f"{s} (B={int(table[table['schedule'] == s]['B'].iloc[0])})" for s in schedules]
    ax.set_xticks(np.arange(len(schedules)), labels)
    ax.set(ylabel="model ms per iteration", title="model time per iteration (Table 5); labels: adapter rows "
                                                  "evaluated / selected")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
