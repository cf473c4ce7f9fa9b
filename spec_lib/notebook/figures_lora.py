"""Figures of notebook 17 (proposal-only LoRA, seed 000 App. F.2).  Each function draws one
figure from study tables and returns it."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from .figures_partial import labelled_bars


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
    schedules, _ = labelled_bars(table, ax, x="schedule", y="model_ms_per_iteration", hue="lm",
                                 labels=lambda rows: [f"{int(ev)}/{int(sel)}"
                                                      for ev, sel in rows[["evaluated", "selected"]].to_numpy()])
    blocks = table.groupby("schedule")["B"].first()
    ax.set_xticks(range(len(schedules)), [f"{s} (B={int(blocks[s])})" for s in schedules])
    ax.set(xlabel="", ylabel="model ms per iteration", title="model time per iteration (Table 5); labels: adapter rows "
                                                              "evaluated / selected")
    ax.legend(fontsize=8, title="")
    fig.tight_layout()
    return fig
