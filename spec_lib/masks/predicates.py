"""Attention masks as pure predicates over (query row, key row), and the one conversion to
the additive float masks transformers needs.

References:
  * seed 000, App. D.1: the Nemotron-style layout ``[last, D̄ | last, MASK^(B-1)]`` with
    mask ``[[T_B, 0], [0, J_B]]``; every row also sees the cached verified prefix.
  * seed 001, Sec. 3.4: the DEER drafter attends bidirectionally over
    ``[prefix][SEP][MASK]*k`` (no causal mask).

Every mask in the project is written here once, as a predicate that returns a boolean
``(..., queries, keys)`` tensor (True = may attend), in the manner of bd3lms'
``block_diff_mask``:

  * :func:`block_causal_visible`: the dual-mode layouts (decoding calls and training rows);
  * :func:`causal_visible`: plain causal attention among rows;
  * :func:`padded_visible`: bidirectional attention over the real (non-padding) keys;
  * :func:`slot_visible`: batched decoding, valid cache slots plus the new rows' own mask.

:func:`to_additive` is the only place a boolean mask becomes a float mask.  Pass float masks
to transformers: with eager attention a *boolean* 4D mask is silently wrong in transformers
5.x (it is added as 0/1 instead of 0/-inf).
"""

from __future__ import annotations

import torch


def block_causal_visible(segment: torch.Tensor, position: torch.Tensor,
                         sees_upto: torch.Tensor) -> torch.Tensor:
    """The predicate of every dual-mode layout, for all (query, key) pairs of one call.

    Rows belong to the causal stream (segment 0, AR mode: verification) or to a proposal
    block (segment j >= 1, diffusion mode: drafting)::

        visible(q, k) =  causal(q) & causal(k) & pos(k) <= pos(q)       # T: AR verification
                       | block(q)  & seg(k) == seg(q)                   # J: bidirectional block
                       | block(q)  & causal(k) & pos(k) < sees_upto(q)  # the block reads context

    Args:
        segment: ``(..., rows)`` 0 = causal stream, j >= 1 = proposal block j.
        position: ``(..., rows)`` textual position ids.
        sees_upto: ``(..., rows)`` for block rows, causal keys with position < sees_upto
            are visible (the verified context the block drafts from).

    Returns:
        ``(..., rows, rows)`` bool, ``[q, k]`` True when query row q may attend to key row k.
    """
    seg_q, seg_k = segment[..., :, None], segment[..., None, :]  # (..., rows, 1), (..., 1, rows)
    pos_q, pos_k = position[..., :, None], position[..., None, :]
    causal_q, causal_k = seg_q == 0, seg_k == 0
    verify = causal_q & causal_k & (pos_k <= pos_q)               # T_B: AR verification
    own_block = ~causal_q & (seg_k == seg_q)                      # J_B: bidirectional block
    reads_context = ~causal_q & causal_k & (pos_k < sees_upto[..., :, None])
    return verify | own_block | reads_context


def causal_visible(rows: int, device=None) -> torch.Tensor:
    """``(rows, rows)``: row q sees rows k <= q."""
    steps = torch.arange(rows, device=device)
    return steps[:, None] >= steps[None, :]


def padded_visible(lengths: torch.Tensor, padded_len: int, *, left: bool = False,
                   causal: bool = False) -> torch.Tensor:
    """``(N, T, T)`` for N sequences padded to ``padded_len`` = T.

    A query sees every real key of its own sequence (bidirectional), or only real keys at or
    before itself when ``causal``.  Real tokens sit at the front (right padding) or, with
    ``left``, at the back.  Padding queries still see themselves, so that no row of the
    softmax is empty (an all-masked row gives NaN with SDPA).
    """
    cols = torch.arange(padded_len, device=lengths.device)
    if left:
        real = cols[None, :] >= (padded_len - lengths)[:, None]                  # (N, T)
    else:
        real = cols[None, :] < lengths[:, None]
    visible = real[:, None, :].expand(-1, padded_len, -1)                       # (N, T, T)
    if causal:
        visible = visible & causal_visible(padded_len, lengths.device)[None]
    return visible | torch.eye(padded_len, dtype=torch.bool, device=lengths.device)[None]


def slot_visible(valid_slots: torch.Tensor, new_visible: torch.Tensor) -> torch.Tensor:
    """Batched decoding over a shared slot cache (seed 001, Sec. 4.4).

    Args:
        valid_slots: ``(N, slots)`` which cache slots hold verified tokens of each sequence.
        new_visible: ``(N, n, n)`` visibility among the n new rows of each sequence.

    Returns:
        ``(N, n, slots + n)``: each new row sees its own sequence's valid slots, then the
        new rows as ``new_visible`` says.
    """
    n = new_visible.shape[-1]
    return torch.cat([valid_slots[:, None, :].expand(-1, n, -1), new_visible], dim=2)


def to_additive(visible: torch.Tensor, dtype: torch.dtype, cache_len: int = 0) -> torch.Tensor:
    """The float mask transformers expects: 0 where visible, the dtype's minimum elsewhere.

    Args:
        visible: ``(..., queries, keys)`` boolean.
        dtype: the model's floating dtype.
        cache_len: prepend this many always-visible key columns (the cached verified
            prefix, which every row of a decoding call sees, App. D.1).

    Returns:
        ``(queries, cache_len + keys)`` for a 2-D input, else ``(..., queries, cache_len + keys)``.
    """
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    if cache_len:
        cached = mask.new_zeros(visible.shape[:-1] + (cache_len,))
        mask = torch.cat([cached, mask], dim=-1)
    return mask


def over_cache(additive: torch.Tensor, cache_len: int) -> torch.Tensor:
    """``(1, 1, rows, cache_len + rows)``: a memoised additive ``(rows, rows)`` block with
    ``cache_len`` visible cache columns prepended, batched for one sequence."""
    rows = additive.shape[0]
    return torch.cat([additive.new_zeros((rows, cache_len)), additive], dim=1)[None, None]
