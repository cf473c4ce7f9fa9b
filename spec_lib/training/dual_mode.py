"""The dual-mode objective of one shared-weight model: AR next-token CE plus block-diffusion CE.

References:
  * seed 000, Sec. 2.2 "Shared-weight drafting and verification": the AR and diffusion
    modes differ only by the attention mask (Nemotron-Labs-Diffusion, TiDAR).
  * seed 000, App. D.1: the drafting block ``[last, MASK^(B-1)]`` sees the clean prefix
    and itself bidirectionally; MASK rows predict the token at their own position.

Each training row is laid out like a decoding call, with the same predicate
(:func:`spec_lib.masks.predicates.block_causal_visible`)::

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

The forward runs in **two passes** with identical results to one masked pass over all
rows: the causal stream first (the model's own causal mask), whose K/V are kept in a cache,
then the blocks over that cache.  Blocks never attend to each other or to later causal
rows, so nothing is lost, and attention costs O(L^2 / 2 + blocks x L) instead of
O((L + blocks)^2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..masks.predicates import block_causal_visible, to_additive
from .unlikelihood import unlikelihood


@dataclass(frozen=True)
class DualModeBatch:
    """Inputs and labels of one dual-mode training step (b rows of L tokens, blocks of B rows).

    Attributes:
        input_ids: ``(b, L)`` the causal stream (clean tokens).
        ar_labels: ``(b, L)`` next token of each causal row, -100 where not scored.
        block_ids: ``(b, n_blocks * B)`` block tokens (MASK at the noised positions).
        block_positions: ``(b, n_blocks * B)`` their position ids.
        block_mask: ``(b, 1, n_blocks * B, L + n_blocks * B)`` additive: what each block row
            sees of [causal stream | blocks].
        diffusion_labels: ``(b, n_blocks * B)`` own token of masked block rows, -100 elsewhere.
        diffusion_weights: ``(b, n_blocks * B)`` weight of each diffusion label (0 elsewhere).
        teacher_rows: ``(b, n_blocks * B)`` for block rows whose AR teacher is known, the causal
            row predicting the same position (position - 1), else -1 (see :func:`dual_mode_loss`).
        ul_labels: ``(b, L)`` for causal rows whose next token is an unlikelihood candidate
            (:mod:`spec_lib.training.unlikelihood`), that token; -100 elsewhere.
    """

    input_ids: torch.Tensor
    ar_labels: torch.Tensor
    block_ids: torch.Tensor
    block_positions: torch.Tensor
    block_mask: torch.Tensor
    diffusion_labels: torch.Tensor
    diffusion_weights: torch.Tensor
    teacher_rows: torch.Tensor
    ul_labels: torch.Tensor | None = None


def make_dual_mode_batch(sequences: torch.Tensor, *, width: int, n_blocks: int, mask_token_id: int,
                         generator: torch.Generator, p_full: float = 0.5, p_branch: float = 0.25,
                         decay: float | None = None, min_cut: torch.Tensor | None = None,
                         ar_rows: torch.Tensor | None = None, own_rows: torch.Tensor | None = None,
                         unlikely: torch.Tensor | None = None, dtype: torch.dtype = torch.float32) -> DualModeBatch:
    """Lay out clean sequences ``(b, L)`` with ``n_blocks`` random drafting blocks each.

    For each block a cut point n ~ U{min_cut..L-2} (``min_cut`` per row, default 1); an
    ``anchor`` block sits at positions n-1..n+W and keeps x_{n-1} clean, a ``branch`` block
    (probability ``p_branch``) at n..n+W; a fraction r ~ U(0, 1] of its targets is masked
    (all of them with probability ``p_full``).  ``ar_rows`` ``(b,)`` bool: rows whose AR
    loss counts (default all); the self-distillation stage trains only the drafter on the
    model's own text.  ``own_rows`` ``(b,)`` bool: rows that are the model's own greedy text,
    where the AR teacher is known at every offset (elsewhere only at offset 1).
    ``unlikely`` ``(b, L)`` bool: tokens that are unlikelihood candidates; the causal row
    before each becomes an unlikelihood row (``ul_labels``) and is not also a next-token target.
    """
    b, length = sequences.shape
    block = width + 1
    if length < 3:
        raise ValueError(f"sequences must have length >= 3, got {length}")
    shape = (b, n_blocks)
    low = torch.ones(b, dtype=torch.long) if min_cut is None else min_cut.clamp(1, length - 2)
    low = low[:, None].expand(shape)
    cut = low + (torch.rand(shape, generator=generator) * (length - 1 - low)).long()    # n in [low, L-2]
    branch = torch.rand(shape, generator=generator) < p_branch
    first = torch.where(branch, cut, cut - 1)                                      # first block position
    rate = torch.where(torch.rand(shape, generator=generator) < p_full, torch.ones(shape),
                       torch.rand(shape, generator=generator) * 0.999 + 0.001)
    positions = first[..., None] + torch.arange(block)                             # (b, n_blocks, B)
    in_range = positions < length
    targets = sequences.gather(1, positions.clamp(max=length - 1).reshape(b, -1)).reshape(positions.shape)
    masked = (torch.rand(positions.shape, generator=generator) < rate[..., None]) | ~in_range
    masked[..., 0] &= branch                                                       # anchors stay clean
    block_ids = torch.where(masked, torch.full_like(targets, mask_token_id), targets)
    labels = torch.where(masked & in_range, targets, torch.full_like(targets, -100))
    sees = torch.where(branch, cut, cut - 1)[..., None].expand(positions.shape)    # context below
    segment = torch.arange(1, n_blocks + 1)[None, :, None].expand(positions.shape)

    # What block rows see of [causal stream | blocks]: the one layout predicate.
    causal_pos = torch.arange(length).expand(b, length)
    all_pos = torch.cat([causal_pos, positions.reshape(b, -1)], dim=1)
    all_seg = torch.cat([torch.zeros(b, length, dtype=torch.long), segment.reshape(b, -1)], dim=1)
    all_upto = torch.cat([torch.zeros(b, length, dtype=torch.long), sees.reshape(b, -1)], dim=1)
    visible = block_causal_visible(all_seg, all_pos, all_upto)[:, length:]        # (b, blocks*B, L + blocks*B)
    ar_labels = torch.full_like(sequences, -100)
    ar_labels[:, : length - 1] = sequences[:, 1:]                                  # shifted next token
    if ar_rows is not None:
        ar_labels[~ar_rows] = -100
    ul_labels = None
    if unlikely is not None:
        if unlikely.shape != sequences.shape:
            raise ValueError(f"unlikely must have the shape of sequences {tuple(sequences.shape)}, "
                             f"got {tuple(unlikely.shape)}")
        ul_labels = torch.full_like(sequences, -100)
        pushed = unlikely[:, 1:]
        ul_labels[:, : length - 1] = torch.where(pushed, sequences[:, 1:], ul_labels[:, : length - 1])
        ar_labels[:, : length - 1][pushed] = -100
    # k = how many positions after the block's context a row drafts (1 = the next token).
    k = positions - cut[..., None] + 1                                             # (b, n_blocks, B)
    weight = torch.ones(k.shape) if decay is None else torch.exp(-(k - 1).float() / decay)
    weight = torch.where(labels >= 0, weight, torch.zeros(()))
    # The AR teacher of position p is the causal row p - 1 (it predicts x_p from x_<p).  It is
    # what verification compares a draft with when the draft's own prefix is the verified one:
    # at offset 1 always, and at every offset of the model's own greedy text.
    own = torch.zeros(b, dtype=torch.bool) if own_rows is None else own_rows
    known = ((k == 1) | own[:, None, None]) & (labels >= 0) & (positions >= 1)
    teacher = torch.where(known, positions - 1, torch.full_like(positions, -1))
    return DualModeBatch(sequences, ar_labels, block_ids.reshape(b, -1), positions.reshape(b, -1),
                         to_additive(visible, dtype)[:, None], labels.reshape(b, -1), weight.reshape(b, -1),
                         teacher.reshape(b, -1), ul_labels)


def dual_mode_loss(hf_model, batch: DualModeBatch, *, diffusion_weight: float = 1.0, teacher_weight: float = 0.0,
                   unlikelihood_weight: float = 0.0) -> tuple[torch.Tensor, dict[str, float]]:
    """AR next-token CE on causal rows + weighted diffusion CE on masked block rows, plus, with
    ``teacher_weight`` > 0, the weighted KL(p_AR || q) of block rows to the AR mode's own
    distribution where it is known (``batch.teacher_rows``; the teacher is detached): the
    drafter is pulled towards what verification accepts.  With ``unlikelihood_weight`` > 0,
    plus that weight times the unlikelihood of ``batch.ul_labels`` at their causal rows
    (:func:`spec_lib.training.unlikelihood.unlikelihood`, Welleck et al. 2020).

    Two passes over one cache (see the module docstring).  Returns
    ``(loss, {"ar": ..., "diffusion": ...[, "teacher": ...]})``; "diffusion" is the weighted mean.
    """
    from transformers import DynamicCache

    device = next(hf_model.parameters()).device
    b, length = batch.input_ids.shape
    cache = DynamicCache(config=hf_model.config)
    positions = torch.arange(length, device=device).expand(b, length)
    logits = hf_model(input_ids=batch.input_ids.to(device), position_ids=positions, cache=cache,
                      use_cache=True).logits.float()                                # (b, L, V)
    vocab = logits.shape[-1]
    ar_labels = batch.ar_labels.to(device).reshape(-1)
    ar = F.cross_entropy(logits.reshape(-1, vocab), ar_labels, ignore_index=-100, reduction="sum") \
        / (ar_labels >= 0).sum().clamp(min=1)
    hidden = hf_model.base_model(input_ids=batch.block_ids.to(device), position_ids=batch.block_positions.to(device),
                                 attention_mask=batch.block_mask.to(device, hf_model.dtype), cache=cache,
                                 use_cache=True).last_hidden_state                 # (b, blocks*B, H)
    labels = batch.diffusion_labels.to(device)
    scored = labels >= 0
    student_logits = hf_model.get_output_embeddings()(hidden[scored]).float()         # (M, V)
    per_row = F.cross_entropy(student_logits, labels[scored], reduction="none")
    weights = batch.diffusion_weights.to(device)[scored]
    diffusion = (weights * per_row).sum() / weights.sum().clamp(min=1e-8)
    loss = ar + diffusion_weight * diffusion
    parts = {"ar": float(ar.detach()), "diffusion": float(diffusion.detach())}
    if teacher_weight > 0:
        rows = batch.teacher_rows.to(device)[scored]                                 # (M,)
        known = rows >= 0
        batch_index = torch.arange(b, device=device)[:, None].expand_as(labels)[scored][known]
        teacher = F.log_softmax(logits[batch_index, rows[known]].detach(), dim=-1)      # (K, V)
        student = F.log_softmax(student_logits[known], dim=-1)
        kl = F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1)     # (K,)
        w = weights[known]
        teacher_term = (w * kl).sum() / w.sum().clamp(min=1e-8)
        loss = loss + teacher_weight * teacher_term
        parts["teacher"] = float(teacher_term.detach())
    if unlikelihood_weight > 0 and batch.ul_labels is not None:
        ul = unlikelihood(logits, batch.ul_labels.to(device))
        loss = loss + unlikelihood_weight * ul
        parts["unlikelihood"] = float(ul.detach())
    return loss, parts
