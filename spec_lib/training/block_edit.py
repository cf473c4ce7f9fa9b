"""Training objectives of the feature-conditioned block drafters: DFlash's position-weighted CE
over sampled anchor blocks, and DEdit's joint unmask + edit passes with ProposalMix.

References:
  * seed 002 (DEdit), Sec. 3: "position-weighted token CE to every valid position in both
    trained passes"; "trained with both L_unmask and L_edit"; "ProposalMix supplies
    ground-truth tokens at positions selected using first-pass confidence and retains draft
    predictions elsewhere", eta = 0.5; "Without ProposalMix, the editor receives unmodified
    DFlash proposals"; gamma = 7 / 11 / 15 at W = 16 / 24 / 32.
  * The equations are lost from the seed's text; the project's reconstruction (stated in
    README "DEdit: what seed 002 leaves open") follows the public DFlash training code:
    anchors a sampled per sequence where the loss mask allows, block ``[x_a, MASK x (W-1)]``,
    slot k predicts x_{a+k}, slot 0 carries no loss, weights w_k = exp(-(k - 1) / gamma);
    a block query sees context strictly before its anchor and its own block only.

Every function is vectorised over (batch, anchors, slots); the loss functions take the
frozen target's embedding and head from the batch so that :func:`spec_lib.training.loop.fit`
can drive them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE = -100
SELECT = ("high", "low")
RULES = ("threshold", "fraction")


def gamma_for(width: int) -> float:
    """Seed 002's decay: gamma = 7, 11, 15 at W = 16, 24, 32, i.e. W / 2 - 1."""
    return width / 2 - 1


def position_weights(width: int, gamma: float, device=None) -> torch.Tensor:
    """``(W,)``: w_0 = 0 (the anchor slot), w_k = exp(-(k - 1) / gamma) for k >= 1."""
    if not gamma > 0:
        raise ValueError(f"gamma must be > 0, got {gamma!r}")
    k = torch.arange(width, dtype=torch.float32, device=device)
    return torch.where(k == 0, torch.zeros_like(k), torch.exp(-(k - 1) / gamma))


@dataclass
class AnchorBatch:
    """Sampled anchor blocks over a batch of sequences, with the target's features.

    Attributes:
        features: ``(B, L, n_features * H)`` frozen target hidden states of the sequences.
        anchors: ``(B, A)`` sorted anchor positions a.
        block: ``(B, A, W)`` P1 inputs ``[x_a, MASK x (W - 1)]``.
        labels: ``(B, A, W)`` x_{a+k} where supervised, ``IGNORE`` elsewhere (slot 0 always).
        positions: ``(B, A * W)`` absolute positions a + k of the block rows.
        mask: ``(B, 1, A * W, L + A * W)`` boolean, True where a block row may attend
            (context strictly before its anchor; its own block).
    """

    features: torch.Tensor
    anchors: torch.Tensor
    block: torch.Tensor
    labels: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor


def sample_anchors(sequences: torch.Tensor, loss_mask: torch.Tensor, *, n_anchors: int, width: int,
                   mask_token_id: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """``(anchors, block, labels, positions, mask)`` of :class:`AnchorBatch` (no features).

    Anchor p is eligible when its first label x_{p+1} is supervised and the block fits
    (p + W <= L); up to ``n_anchors`` are drawn uniformly without replacement per sequence
    (fewer eligible: the extra anchors repeat eligible ones with their labels ignored).
    """
    batch, length = sequences.shape
    if width < 2 or width > length:
        raise ValueError(f"width must be in [2, {length}] (the sequence length), got {width!r}")
    p = torch.arange(length, device=sequences.device)
    first_label = torch.zeros_like(loss_mask)
    first_label[:, :-1] = loss_mask[:, 1:]
    eligible = first_label & (p + width <= length)[None]
    if not bool(eligible.any(1).all()):
        raise ValueError("every sequence needs at least one eligible anchor (a supervised token after it and room "
                         f"for a block of {width})")
    scores = torch.rand(batch, length, generator=generator).to(sequences.device).masked_fill(~eligible, -1.0)
    top = scores.topk(min(n_anchors, length), dim=1)
    anchors, real = top.indices, top.values >= 0
    anchors = torch.where(real, anchors, anchors[:, :1])                 # repeat an eligible anchor
    anchors, order = anchors.sort(dim=1)
    real = real.gather(1, order)
    k = torch.arange(width, device=sequences.device)
    at = (anchors[..., None] + k).clamp(max=length - 1)                   # (B, A, W)
    tokens = sequences.gather(1, at.flatten(1)).view_as(at)
    supervised = loss_mask.gather(1, at.flatten(1)).view_as(at) & (k > 0) & real[..., None]
    labels = torch.where(supervised, tokens, torch.full_like(tokens, IGNORE))
    block = torch.full_like(tokens, mask_token_id)
    block[..., 0] = tokens[..., 0]
    n_anchor = anchors.shape[1]
    key_pos = torch.arange(length, device=sequences.device)
    context_visible = key_pos[None, None, :] < anchors[..., None]         # (B, A, L)
    block_id = torch.arange(n_anchor, device=sequences.device).repeat_interleave(width)
    same_block = block_id[:, None] == block_id[None, :]                   # (A W, A W)
    mask = torch.cat([context_visible.repeat_interleave(width, dim=1),
                      same_block[None].expand(batch, -1, -1)], dim=2)[:, None]
    return anchors, block, labels, at.flatten(1), mask


def weighted_ce(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_k w_k CE(logits_k, y_k) / sum_k w_k over supervised slots (``labels != IGNORE``)."""
    ce = F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten().clamp(min=0), reduction="none")
    w = weights.expand_as(labels).flatten() * (labels.flatten() != IGNORE)
    return (ce * w).sum() / w.sum().clamp(min=1e-8)


def proposal_mix(p1_logits: torch.Tensor, labels: torch.Tensor, anchor_tokens: torch.Tensor, *, eta: float,
                 select: str = "high", rule: str = "threshold") -> tuple[torch.Tensor, dict[str, float]]:
    """The P2 input of DEdit's ProposalMix, and its input rates (seed 002, Table 6).

    ``s_k = max softmax(P1_k)``, ``z_k = argmax P1_k`` (both detached).  Ground truth is fed
    at the selected supervised slots, z_k elsewhere: ``select="high"`` picks confident slots
    (s_k >= eta under ``rule="threshold"``, the top eta share of each block's slots under
    ``rule="fraction"``), ``"low"`` the opposite.  Slot 0 is the anchor.

    Returns ``(inputs (B, A, W), {"gt_selection": share of supervised slots fed ground truth,
    "overwrite": share whose token the ground truth changed})``.
    """
    if select not in SELECT:
        raise ValueError(f"select must be one of {list(SELECT)}, got {select!r}")
    if rule not in RULES:
        raise ValueError(f"rule must be one of {list(RULES)}, got {rule!r}")
    if not 0 <= eta <= 1:
        raise ValueError(f"eta must be in [0, 1], got {eta!r}")
    with torch.no_grad():
        probs = p1_logits.detach().float().softmax(-1)
        confidence, predicted = probs.max(-1)
        slot = torch.arange(labels.shape[-1], device=labels.device)
        supervised = (labels != IGNORE) & (slot > 0)                 # the anchor slot is never chosen
        if rule == "threshold":
            chosen = confidence >= eta if select == "high" else confidence < eta
        else:
            key = (confidence if select == "high" else -confidence).masked_fill(slot == 0, -math.inf)
            ranks = key.argsort(-1, descending=True).argsort(-1)
            chosen = ranks < round(eta * (labels.shape[-1] - 1))
        chosen &= supervised
        inputs = torch.where(chosen, labels, predicted)
        inputs[..., 0] = anchor_tokens
        n = supervised.sum().clamp(min=1)
        rates = {"gt_selection": float(chosen.sum() / n), "overwrite": float((chosen & (predicted != labels)).sum() / n)}
    return inputs, rates


def block_logits(network, embed, head, batch: AnchorBatch, block_tokens: torch.Tensor) -> torch.Tensor:
    """``(B, A, W, V)`` drafter logits for block inputs ``block_tokens`` ``(B, A, W)``."""
    batch_size, length = batch.features.shape[:2]
    context_positions = torch.arange(length, device=block_tokens.device)[None].expand(batch_size, -1)
    kv = network.context_kv(batch.features, context_positions)
    hidden = network(embed(block_tokens.flatten(1)), batch.positions, kv, attention_mask=batch.mask)
    return head(hidden).view(*block_tokens.shape, -1)


def unmask_loss(network, embed, head, batch: AnchorBatch, weights: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """DFlash / DEdit's first pass: L_unmask = weighted CE of P1 (the DFlash objective)."""
    logits = block_logits(network, embed, head, batch, batch.block)
    loss = weighted_ce(logits, batch.labels, weights)
    return loss, {"unmask": float(loss.detach()), "p1_accuracy": _accuracy(logits, batch.labels)}


def dedit_loss(network, embed, head, batch: AnchorBatch, weights: torch.Tensor, *, joint: bool = True,
               mix: bool = True, eta: float = 0.5, select: str = "high", rule: str = "threshold"
               ) -> tuple[torch.Tensor, dict]:
    """L = L_unmask + L_edit (``joint``) or L_edit alone; the P2 input is ProposalMix's
    (``mix``) or the unmodified P1 proposal.  L_edit covers every supervised slot, including
    those fed ground truth (it supervises keeping correct tokens)."""
    p1 = block_logits(network, embed, head, batch, batch.block)
    if mix:
        inputs, rates = proposal_mix(p1, batch.labels, batch.block[..., 0], eta=eta, select=select, rule=rule)
    else:
        inputs = p1.detach().argmax(-1)
        inputs[..., 0] = batch.block[..., 0]
        rates = {"gt_selection": 0.0, "overwrite": 0.0}
    p2 = block_logits(network, embed, head, batch, inputs)
    unmask, edit = weighted_ce(p1, batch.labels, weights), weighted_ce(p2, batch.labels, weights)
    loss = unmask + edit if joint else edit
    return loss, {"unmask": float(unmask.detach()), "edit": float(edit.detach()), "p1_accuracy": _accuracy(p1, batch.labels),
                  "p2_accuracy": _accuracy(p2, batch.labels), **rates}


def _accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    supervised = labels != IGNORE
    hits = (logits.detach().argmax(-1) == labels) & supervised
    return float(hits.sum() / supervised.sum().clamp(min=1))

