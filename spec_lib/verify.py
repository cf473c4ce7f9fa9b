"""Verification of a draft against the target: greedy matching and exact rejection sampling.

References (seed 000):
  * Eq. 1-2, Algorithm 1 lines 3-6: greedy verification, h_t = number of leading draft
    tokens equal to the verifier's argmax, A_t = h_t + 1.
  * Sec. 3.2 and Algorithm 2 lines 5-7: accept d^(i) with probability
    min(1, p^(i)(d^(i)) / Q^(i)(d^(i))) using the **stored** drafter distribution Q that
    d^(i) was sampled from; at the first rejection draw a correction from
    [p^(i) - Q^(i)]_+ (normalised); after full acceptance draw a bonus from p^(m+1).
  * Sec. 3.2, last paragraph: Q may be stored sparsely (top-k / top-p support only).
  * Lemma B.3: the emitted token has law p whatever Q is.

All functions are vectorised over draft positions and vocabulary and never synchronise
with the host: they return 0-d tensors that the caller reads once per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SparseQ:
    """A drafter distribution stored on its support only (Sec. 3.2, last paragraph).

    Attributes:
        indices: ``(n, k)`` token ids of the support of each position.
        probs: ``(n, k)`` their probabilities (each row sums to 1; padding has prob 0).
        vocab_size: V, for densifying.
    """

    indices: torch.Tensor
    probs: torch.Tensor
    vocab_size: int

    def __len__(self) -> int:
        return self.indices.shape[0]

    def __getitem__(self, rows) -> "SparseQ":
        return SparseQ(self.indices[rows], self.probs[rows], self.vocab_size)

    def prob_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(n,)`` Q^(i)(tokens[i])."""
        hit = self.indices == tokens[:, None]                          # (n, k)
        return (self.probs * hit).sum(-1)

    def dense(self) -> torch.Tensor:
        """``(n, V)`` dense probabilities."""
        out = self.probs.new_zeros((self.indices.shape[0], self.vocab_size))
        return out.scatter_add_(1, self.indices, self.probs)

    def sample(self, generator: torch.Generator | None) -> torch.Tensor:
        """``(n,)`` one independent draw per position (Algorithm 2 line 12)."""
        pick = sample(self.probs, generator)                            # (n,)
        return self.indices.gather(1, pick[:, None])[:, 0]


def sample(weights: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of non-negative ``weights`` ``(..., V)`` by inverse CDF.

    Exact up to float rounding, like ``torch.multinomial``, but cheaper for many small
    calls; a zero-weight token is never drawn (u < total, and ties skip flat CDF steps).
    """
    cdf = weights.cumsum(-1)                                           # (..., V)
    u = torch.rand(weights.shape[:-1] + (1,), generator=generator, device=weights.device,
                   dtype=weights.dtype) * cdf[..., -1:]
    return (cdf <= u).sum(-1).clamp_(max=weights.shape[-1] - 1)


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / T): the tempered distribution used for both p_target and q_draft."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for probabilities, got {temperature}")
    return torch.softmax(logits / temperature, dim=-1)


def truncate(q_draft: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> SparseQ:
    """Restrict each row of ``q_draft`` (n, V) to its top-k and/or top-p support, renormalised.

    top-p keeps the smallest prefix of the sorted distribution whose mass reaches p
    (always at least one token).  The result is what the drafter samples from, so it is
    what verification must divide by.
    """
    n, vocab = q_draft.shape
    k = vocab if top_k is None else min(int(top_k), vocab)
    probs, indices = torch.topk(q_draft, k, dim=-1)                    # (n, k), sorted
    if top_p is not None:
        before = probs.cumsum(-1) - probs                              # mass strictly before
        probs = torch.where(before < top_p, probs, torch.zeros_like(probs))
    probs = probs / probs.sum(-1, keepdim=True)
    return SparseQ(indices, probs, vocab)


def greedy_verify(draft: torch.Tensor, target_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy matching, Eq. 1-2.

    Args:
        draft: ``(m,)`` draft tokens d^(1..m).
        target_logits: ``(m + 1, V)`` verifier logits; row i-1 gives p(. | P, d^(<i)).

    Returns:
        ``(h, emitted)``: h (0-d) = number of leading matches; ``emitted`` ``(m + 1,)``
        are the verifier argmaxes v^(1..m+1), so the accepted tokens C_t are
        ``emitted[:h + 1]`` (d^(<=h) equals v^(<=h)).
    """
    verifier = target_logits.max(-1).indices                           # v^(i), (m+1,)
    matches = (draft == verifier[: draft.numel()]).long()
    h = matches.cumprod(0).sum()
    return h, verifier


def rejection_verify(draft: torch.Tensor, q_stored: torch.Tensor | SparseQ | None, p_target: torch.Tensor,
                     generator: torch.Generator | None, *, residual: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact rejection sampling, Algorithm 2 lines 5-7.

    Args:
        draft: ``(m,)`` draft tokens, d^(i) ~ Q^(i).
        q_stored: ``(m, V)`` dense or :class:`SparseQ` stored drafter distributions.
        p_target: ``(m + 1, V)`` target probabilities p^(i) (already tempered).
        generator: source of the uniforms and of the correction draw.
        residual: ``False`` is a deliberately wrong ablation (a negative control): the
            correction is drawn from p instead of [p - Q]_+.

    Returns:
        ``(h, emitted)``: h (0-d) accepted draft tokens, and ``emitted`` ``(m + 1,)``
        equal to the draft with the correction/bonus token written at index h, so the
        accepted tokens C_t are ``emitted[:h + 1]``.
    """
    m = draft.numel()
    if q_stored is None:                                                # nothing to verify (m = 0)
        q_stored = p_target.new_zeros((0, p_target.shape[-1]))
    rows = torch.arange(m, device=draft.device)
    p_d = p_target[rows, draft]                                         # p^(i)(d^(i))
    if isinstance(q_stored, SparseQ):
        q_d = q_stored.prob_of(draft)
    else:
        q_d = q_stored[rows, draft]                                     # Q^(i)(d^(i)) > 0
    u = torch.rand(m, generator=generator, device=draft.device, dtype=p_target.dtype)
    accept = u < torch.clamp(p_d / q_d, max=1.0)                        # line 5
    h = accept.long().cumprod(0).sum()                                  # line 6

    # Line 7: correction from [p - Q]_+ at row h, or bonus from p^(m+1) when h = m.
    # Q is padded with a zero row so that row m gives the bonus distribution p^(m+1).
    p_row = p_target[h]
    if residual:
        q_dense = q_stored.dense() if isinstance(q_stored, SparseQ) else q_stored
        q_pad = torch.cat([q_dense, q_dense.new_zeros((1, p_target.shape[-1]))])
        weights = torch.clamp(p_row - q_pad[h], min=0.0)
        # If rounding leaves no positive mass (p == Q up to float error), fall back to p.
        weights = torch.where(weights.sum() > 0, weights, p_row)
    else:
        weights = p_row
    token = sample(weights, generator)                                  # 0-d
    emitted = torch.cat([draft, token[None]]).index_put((h,), token)
    return h, emitted
