"""The one training loop of the project: every model trained here goes through :func:`fit`.

AdamW, linear warm-up then cosine decay to 10% of the base rate, gradient clipping at 1.0,
a tqdm bar showing the objective's parts, held-out evaluation every ``eval_every`` steps,
deterministic given the seeds of the batch function's generator and ``torch.manual_seed``.
Objectives (:mod:`~spec_lib.training.dual_mode`, :mod:`~spec_lib.training.d2a`,
:mod:`~spec_lib.training.next_token`) and pipelines (:mod:`~spec_lib.training.self_speculative`,
:mod:`~spec_lib.training.deer`) pass in what differs: the batches and the loss.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

#: loss_fn(model, batch) -> (loss tensor, {part name: float}); the parts are logged.
LossFn = Callable[[torch.nn.Module, object], tuple[torch.Tensor, dict[str, float]]]


def warmup_cosine(optimizer: torch.optim.Optimizer, warmup: int, total_steps: int):
    """Linear warm-up over ``warmup`` steps, then cosine decay to 10% of the base rate."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        done = (step - warmup) / max(1, total_steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@torch.no_grad()
def evaluate(model: torch.nn.Module, loss_fn: LossFn, batches: Sequence, autocast: bool = False) -> dict[str, float]:
    """Mean of each logged part of ``loss_fn`` over fixed batches, in eval mode."""
    was_training = model.training
    model.eval()
    parts = []
    for batch in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            parts.append(loss_fn(model, batch)[1])
    model.train(was_training)
    return {k: float(np.mean([p[k] for p in parts])) for k in parts[0]}


def fit(model: torch.nn.Module, make_batch: Callable[[int], object], loss_fn: LossFn, *, steps: int, lr: float,
        warmup: int = 30, weight_decay: float = 0.01, betas: tuple[float, float] = (0.9, 0.95),
        eval_batches: Sequence = (), eval_every: int = 50, autocast: bool = False, label: str = "training",
        progress: bool = True, extra: Callable[[int], dict] | None = None) -> list[dict]:
    """Train ``model`` in place for ``steps`` steps; returns one history row per step (plus
    a ``split="heldout"`` row every ``eval_every`` steps and at the end).

    Args:
        make_batch: ``step -> batch`` (draws from its own seeded generator).
        loss_fn: ``(model, batch) -> (loss, parts)``.
        eval_batches: fixed held-out batches, scored with the same ``loss_fn``.
        autocast: ``torch.autocast("cpu", bfloat16)`` around the forward.
        label: the progress bar's and the history's ``stage`` name.
        extra: ``step -> dict`` of columns added to the step's history row.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    history: list[dict] = []
    if steps == 0:
        return history
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=betas)
    schedule = warmup_cosine(optimizer, warmup, steps)
    started = time.perf_counter()
    model.train()
    bar = tqdm(range(steps), desc=label, disable=not progress, leave=False)
    for step in bar:
        batch = make_batch(step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss, parts = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        optimizer.step()
        schedule.step()
        row = {"stage": label, "step": step + 1, "split": "train", **parts, "grad_norm": grad_norm,
               "lr": schedule.get_last_lr()[0], "seconds": time.perf_counter() - started,
               **(extra(step) if extra else {})}
        history.append(row)
        if eval_batches and ((step + 1) % eval_every == 0 or step + 1 == steps):
            history.append({**row, "split": "heldout", **evaluate(model, loss_fn, eval_batches, autocast)})
        bar.set_postfix({k: f"{v:.3f}" for k, v in parts.items()})
    model.eval()
    return history
