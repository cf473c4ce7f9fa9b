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
carry their clean token (standard masked-diffusion denoising).  The diffusion CE is
averaged over masked rows (no 1/t weight, as in block-diffusion SFT of dual-mode models).
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


def make_dual_mode_batch(sequences: torch.Tensor, *, width: int, n_blocks: int, mask_token_id: int,
                         generator: torch.Generator, p_full: float = 0.5, p_branch: float = 0.25,
                         dtype: torch.dtype = torch.float32) -> DualModeBatch:
    """Lay out clean sequences ``(b, L)`` with ``n_blocks`` random drafting blocks each."""
    b, length = sequences.shape
    block = width + 1
    if length < 3:
        raise ValueError(f"sequences must have length >= 3, got {length}")
    ids_rows, pos_rows, vis_rows, ar_rows, dif_rows = [], [], [], [], []
    causal_pos = torch.arange(length)
    for row in range(b):
        x = sequences[row]
        ids, pos = [x], [causal_pos]
        seg, upto = [torch.zeros(length, dtype=torch.long)], [torch.zeros(length, dtype=torch.long)]
        ar = torch.full((length,), -100, dtype=torch.long)
        ar[:-1] = x[1:]                                                # shifted next-token labels
        dif = [torch.full((length,), -100, dtype=torch.long)]
        for j in range(1, n_blocks + 1):
            n = int(torch.randint(1, length - 1, (1,), generator=generator))   # cut point
            branch = bool(torch.rand((), generator=generator) < p_branch)
            first = n if branch else n - 1
            positions = torch.arange(first, first + block)             # may run past L
            in_range = positions < length
            targets = torch.where(in_range, x[positions.clamp(max=length - 1)], torch.tensor(-100))
            rate = 1.0 if torch.rand((), generator=generator) < p_full else \
                float(torch.rand((), generator=generator)) * 0.999 + 0.001
            masked = (torch.rand(block, generator=generator) < rate) | ~in_range   # nothing past L
            if not branch:
                masked[0] = False                                     # anchor x_{n-1} stays clean
            block_ids = torch.where(masked, torch.tensor(mask_token_id), targets.clamp(min=0))
            ids.append(block_ids)
            pos.append(positions)
            seg.append(torch.full((block,), j, dtype=torch.long))
            upto.append(torch.full((block,), n if branch else n - 1, dtype=torch.long))
            dif.append(torch.where(masked & in_range, targets, torch.tensor(-100)))
        ar = torch.cat([ar, torch.full((n_blocks * block,), -100, dtype=torch.long)])
        ids_rows.append(torch.cat(ids))
        pos_rows.append(torch.cat(pos))
        vis_rows.append(masks.block_causal_visible(torch.cat(seg), torch.cat(pos), torch.cat(upto)))
        ar_rows.append(ar)
        dif_rows.append(torch.cat(dif))
    visible = torch.stack(vis_rows)                                    # (b, rows, rows)
    attention_mask = torch.zeros(visible.shape, dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min)
    return DualModeBatch(torch.stack(ids_rows), torch.stack(pos_rows), attention_mask[:, None],
                         torch.stack(ar_rows), torch.stack(dif_rows))


def dual_mode_loss(hf_model, batch: DualModeBatch, *, diffusion_weight: float = 1.0
                   ) -> tuple[torch.Tensor, dict[str, float]]:
    """AR next-token CE on causal rows + diffusion CE on masked block rows, one forward.

    Returns ``(loss, {"ar": ..., "diffusion": ...})``.
    """
    out = hf_model(input_ids=batch.input_ids, position_ids=batch.position_ids,
                   attention_mask=batch.attention_mask, use_cache=False)
    logits = out.logits.float()                                        # (b, rows, V)
    vocab = logits.shape[-1]
    ar = F.cross_entropy(logits.reshape(-1, vocab), batch.ar_labels.reshape(-1), ignore_index=-100)
    diffusion = F.cross_entropy(logits.reshape(-1, vocab), batch.diffusion_labels.reshape(-1),
                                ignore_index=-100)
    loss = ar + diffusion_weight * diffusion
    return loss, {"ar": float(ar.detach()), "diffusion": float(diffusion.detach())}
