"""The one training loop of the project: every model trained here goes through :func:`fit`.

AdamW, linear warm-up then cosine decay to 10% of the base rate, gradient clipping at 1.0,
a tqdm bar showing the objective's parts, held-out evaluation every ``eval_every`` steps,
deterministic given the seeds of the batch function's generator and ``torch.manual_seed``.
With a :class:`Resume`, the loop saves its whole state every few minutes (atomically) and a
later call, in another process or session, continues from the last save to the same weights,
bit for bit, as a run that was never stopped.
Objectives (:mod:`~spec_lib.training.dual_mode`, :mod:`~spec_lib.training.d2a`,
:mod:`~spec_lib.training.next_token`) and pipelines (:mod:`~spec_lib.training.self_speculative`,
:mod:`~spec_lib.training.deer`) pass in what differs: the batches and the loss.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..io import atomic_write_bytes

#: loss_fn(model, batch) -> (loss tensor, {part name: float}); the parts are logged.
LossFn = Callable[[torch.nn.Module, object], tuple[torch.Tensor, dict[str, float]]]


@dataclass
class Resume:
    """Where and how :func:`fit` saves its state so that a killed run continues.

    The file holds the step, the weights, the optimizer and schedule, the history so far, the
    global RNG state, the states of ``generators`` (the batch function's own) and ``state``:
    tensors or plain values the caller keeps between steps (e.g. regenerated distillation
    text), restored into the same dict.  Written atomically every ``every`` seconds and when
    the last step is done; a later :func:`fit` with the same file starts where it stopped.

    Attributes:
        restored_seconds: after :func:`fit`, the training seconds spent before this process
            (0 for a fresh start), so that pipelines can report the whole training time.
    """

    path: Path
    generators: Sequence[torch.Generator] = ()
    state: dict = field(default_factory=dict)
    every: float = 300.0
    restored_seconds: float = 0.0

    def __post_init__(self):
        self.path = Path(self.path)
        if not self.every > 0:
            raise ValueError(f"every must be > 0 seconds, got {self.every!r}")

    def save(self, step: int, seconds: float, model, optimizer, schedule, history: list[dict]) -> None:
        buffer = io.BytesIO()
        torch.save({"step": step, "seconds": seconds, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "schedule": schedule.state_dict(), "history": history, "rng": torch.get_rng_state(),
                    "generators": [g.get_state() for g in self.generators], "state": dict(self.state)}, buffer)
        atomic_write_bytes(self.path, buffer.getvalue())

    def load(self, model, optimizer, schedule) -> tuple[int, float, list[dict]]:
        """Restore a saved run into these objects; ``(step, seconds, history)`` (0, 0, [] if none)."""
        if not self.path.exists():
            return 0, 0.0, []
        saved = torch.load(self.path, weights_only=False)
        if len(saved["generators"]) != len(self.generators):
            raise ValueError(f"{self.path} saved {len(saved['generators'])} generators, this run has "
                             f"{len(self.generators)}: it belongs to another training run")
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        torch.set_rng_state(saved["rng"])
        for generator, state in zip(self.generators, saved["generators"]):
            generator.set_state(state)
        self.state.update(saved["state"])
        self.restored_seconds = float(saved["seconds"])
        return int(saved["step"]), float(saved["seconds"]), list(saved["history"])


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
        progress: bool = True, extra: Callable[[int], dict] | None = None, resume: Resume | None = None) -> list[dict]:
    """Train ``model`` in place for ``steps`` steps; returns one history row per step (plus
    a ``split="heldout"`` row every ``eval_every`` steps and at the end).

    Args:
        make_batch: ``step -> batch`` (draws from its own seeded generator).
        loss_fn: ``(model, batch) -> (loss, parts)``.
        eval_batches: fixed held-out batches, scored with the same ``loss_fn``.
        autocast: ``torch.autocast("cpu", bfloat16)`` around the forward.
        label: the progress bar's and the history's ``stage`` name.
        extra: ``step -> dict`` of columns added to the step's history row.
        resume: save the loop's state there every few minutes, and continue from it when it
            exists (:class:`Resume`).
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
    first, before, history = resume.load(model, optimizer, schedule) if resume else (0, 0.0, [])
    if first > steps:
        raise ValueError(f"{resume.path} is at step {first}, past this run's {steps} steps: another run's state")
    started = time.perf_counter() - before
    saved = time.perf_counter()
    model.train()
    bar = tqdm(range(first, steps), desc=label, disable=not progress, leave=False, initial=first, total=steps)
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
        if resume and (step + 1 == steps or time.perf_counter() - saved >= resume.every):
            resume.save(step + 1, time.perf_counter() - started, model, optimizer, schedule, history)
            saved = time.perf_counter()
    model.eval()
    return history
