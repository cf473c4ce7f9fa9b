"""Training loops.  Dual-mode training of one shared-weight model (AR + block diffusion).

Reference: seed 000, Sec. 2.2 (joint AR and diffusion objectives, as in
Nemotron-Labs-Diffusion); the loss and its layout are in :mod:`spec_lib.losses`.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from .losses import dual_mode_loss, make_dual_mode_batch


def fit_dual_mode(hf_model, sequences: torch.Tensor, *, steps: int, batch_size: int, width: int,
                  mask_token_id: int, n_blocks: int = 4, lr: float = 3e-3, seed: int = 0,
                  progress: bool = True) -> list[dict[str, float]]:
    """Train ``hf_model`` in place on rows of ``sequences`` ``(N, L)``; returns the loss history.

    Each step samples ``batch_size`` rows, lays each out with ``n_blocks`` drafting blocks
    of width W (:func:`spec_lib.losses.make_dual_mode_batch`) and takes one AdamW step on
    AR CE + diffusion CE.
    """
    if steps < 0 or batch_size < 1:
        raise ValueError(f"steps must be >= 0 and batch_size >= 1, got steps={steps}, batch_size={batch_size}")
    generator = torch.Generator().manual_seed(seed)
    dtype = next(hf_model.parameters()).dtype
    optimizer = torch.optim.AdamW(hf_model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))
    hf_model.train()
    history = []
    bar = tqdm(range(steps), desc="dual-mode training", disable=not progress, leave=False)
    for _ in bar:
        rows = torch.randint(0, sequences.shape[0], (batch_size,), generator=generator)
        batch = make_dual_mode_batch(sequences[rows], width=width, n_blocks=n_blocks,
                                     mask_token_id=mask_token_id, generator=generator, dtype=dtype)
        loss, parts = dual_mode_loss(hf_model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf_model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        history.append(parts)
        bar.set_postfix(ar=f"{parts['ar']:.3f}", diffusion=f"{parts['diffusion']:.3f}")
    hf_model.eval()
    return history
