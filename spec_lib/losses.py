"""Training losses.  Dual-mode (AR + block diffusion) loss for one shared-weight model.

References:
  * seed 000, Sec. 2.2 "Shared-weight drafting and verification": the AR and diffusion
    modes differ only by the attention mask (Nemotron-Labs-Diffusion, TiDAR).
  * seed 000, App. D.1: the drafting block ``[last, MASK^(B-1)]`` sees the clean prefix
    and itself bidirectionally; MASK rows predict the token at their own position.

One forward pass trains both modes.  Each training row is laid out exactly like a
decoding call (:func:`spec_lib.masks.block_causal_visible`):

    [ x_0 ... x_{L-1}              (causal stream: AR loss, shifted next-token CE)
    | block 1 | block 2 | ... ]    (diffusion blocks: CE on masked rows, unshifted)

A block with cut point n drafts positions n..n+W-1 from the clean prefix x_{<n}.  Two block
forms are trained, matching the two drafting queries of the schedules:

  * ``anchor``: ``[x_{n-1}, MASK^W]`` at positions n-1..n+W-1 seeing x_{<n-1}
    (Linear-SS / Packed-SS drafting, App. D.1);
  * ``branch``: ``[MASK^B]`` at positions n..n+W seeing x_{<n} (Quadratic-SS branches).

Inside a block each target position is masked with probability r ~ U(0, 1], and with
probability ``p_full`` the block is fully masked (the drafting case); revealed positions
carry their clean token (standard masked-diffusion denoising).  The diffusion CE is a
weighted mean over masked rows with weight exp(-(k - 1) / decay) for the k-th position
after the context (no 1/t weight): speculative acceptance is made of leading positions, so
near offsets matter most (the DFlash family weights its block loss the same way).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import masks


@dataclass(frozen=True)
class DualModeBatch:
    """Inputs and labels of one dual-mode training step (batch of equal-length rows)."""

    input_ids: torch.Tensor        # (b, rows)
    position_ids: torch.Tensor     # (b, rows)
    attention_mask: torch.Tensor   # (b, 1, rows, rows) additive float
    ar_labels: torch.Tensor        # (b, rows) next token for causal rows, -100 elsewhere
    diffusion_labels: torch.Tensor  # (b, rows) own token for masked block rows, -100 elsewhere
    diffusion_weights: torch.Tensor  # (b, rows) weight of each diffusion label (0 elsewhere)


def make_dual_mode_batch(sequences: torch.Tensor, *, width: int, n_blocks: int, mask_token_id: int,
                         generator: torch.Generator, p_full: float = 0.5, p_branch: float = 0.25,
                         decay: float | None = None, dtype: torch.dtype = torch.float32) -> DualModeBatch:
    """Lay out clean sequences ``(b, L)`` with ``n_blocks`` random drafting blocks each.

    Rows: the L causal rows, then block j = 1..n_blocks of B = W + 1 rows.  For each block a
    cut point n ~ U{1..L-2}; an ``anchor`` block sits at positions n-1..n+W and keeps x_{n-1}
    clean, a ``branch`` block (probability ``p_branch``) at n..n+W; a fraction r ~ U(0, 1]
    of its targets is masked (all of them with probability ``p_full``).
    """
    b, length = sequences.shape
    block = width + 1
    if length < 3:
        raise ValueError(f"sequences must have length >= 3, got {length}")
    shape = (b, n_blocks)
    cut = torch.randint(1, length - 1, shape, generator=generator)                 # n
    branch = torch.rand(shape, generator=generator) < p_branch
    first = torch.where(branch, cut, cut - 1)                                      # first block position
    rate = torch.where(torch.rand(shape, generator=generator) < p_full, torch.ones(shape),
                       torch.rand(shape, generator=generator) * 0.999 + 0.001)
    offsets = torch.arange(block)
    positions = first[..., None] + offsets                                         # (b, n_blocks, B)
    in_range = positions < length
    targets = sequences.gather(1, positions.clamp(max=length - 1).reshape(b, -1)).reshape(positions.shape)
    masked = (torch.rand(positions.shape, generator=generator) < rate[..., None]) | ~in_range
    masked[..., 0] &= branch                                                       # anchors stay clean
    block_ids = torch.where(masked, torch.full_like(targets, mask_token_id), targets)
    labels = torch.where(masked & in_range, targets, torch.full_like(targets, -100))
    sees = torch.where(branch, cut, cut - 1)[..., None].expand(positions.shape)    # context below
    segment = torch.arange(1, n_blocks + 1)[None, :, None].expand(positions.shape)

    causal_pos = torch.arange(length).expand(b, length)
    input_ids = torch.cat([sequences, block_ids.reshape(b, -1)], dim=1)            # (b, rows)
    position_ids = torch.cat([causal_pos, positions.reshape(b, -1)], dim=1)
    segments = torch.cat([torch.zeros(b, length, dtype=torch.long), segment.reshape(b, -1)], dim=1)
    sees_upto = torch.cat([torch.zeros(b, length, dtype=torch.long), sees.reshape(b, -1)], dim=1)
    visible = masks.block_causal_visible(segments, position_ids, sees_upto)       # (b, rows, rows)
    attention_mask = torch.zeros(visible.shape, dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min)
    ar_labels = torch.full_like(input_ids, -100)
    ar_labels[:, : length - 1] = sequences[:, 1:]                                  # shifted next token
    diffusion_labels = torch.cat([torch.full((b, length), -100, dtype=torch.long), labels.reshape(b, -1)], dim=1)
    # k = how many positions after the block's context a row drafts (1 = the next token).
    k = positions - cut[..., None] + 1                                             # (b, n_blocks, B)
    weight = torch.ones(k.shape) if decay is None else torch.exp(-(k - 1).float() / decay)
    weight = torch.where(labels >= 0, weight, torch.zeros(()))
    diffusion_weights = torch.cat([torch.zeros(b, length), weight.reshape(b, -1)], dim=1)
    return DualModeBatch(input_ids, position_ids, attention_mask[:, None], ar_labels, diffusion_labels,
                         diffusion_weights)


def dual_mode_loss(hf_model, batch: DualModeBatch, *, diffusion_weight: float = 1.0
                   ) -> tuple[torch.Tensor, dict[str, float]]:
    """AR next-token CE on causal rows + weighted diffusion CE on masked block rows, one forward.

    Returns ``(loss, {"ar": ..., "diffusion": ...})``; "diffusion" is the weighted mean.
    """
    out = hf_model(input_ids=batch.input_ids, position_ids=batch.position_ids,
                   attention_mask=batch.attention_mask, use_cache=False)
    logits = out.logits.float()                                        # (b, rows, V)
    vocab = logits.shape[-1]
    ar = F.cross_entropy(logits.reshape(-1, vocab), batch.ar_labels.reshape(-1), ignore_index=-100)
    per_row = F.cross_entropy(logits.reshape(-1, vocab), batch.diffusion_labels.reshape(-1),
                              ignore_index=-100, reduction="none")     # (b * rows,), 0 where ignored
    weights = batch.diffusion_weights.reshape(-1)
    diffusion = (weights * per_row).sum() / weights.sum().clamp(min=1e-8)
    loss = ar + diffusion_weight * diffusion
    return loss, {"ar": float(ar.detach()), "diffusion": float(diffusion.detach())}
