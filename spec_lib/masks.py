"""Input layouts and attention masks for one model call of each LTR schedule.

References (seed 000, "One Call Ahead", Packed-SS):
  * App. D.1  Nemotron-style physical layout ``[last, D̄ | last, MASK^(B-1)]`` with
              mask ``[[T_B, 0], [0, J_B]]``; every row also sees the cached prefix.
  * App. D.3  Table 2: evaluated rows per iteration, 2B / B(B+1) / 2B.
  * Sec. 3.1  "Comparison": Quadratic-SS's selected branch excludes only the final
              verifier token.

A layout is the list of *new* rows of one forward call (the verified prefix except its
last token lives in the KV cache).  Rows belong to one of two kinds of segment:

  * the **causal stream** (segment 0): uncached verified tokens (``context``; only
    non-empty on the first call, when the prompt is processed), then ``last`` (the final
    verified token), then the draft tokens to verify, then MASK padding.  These rows
    run in AR mode and their logits are *shifted* (row i predicts position i + 1).
  * **proposal blocks** (segment j >= 1): rows that run in diffusion mode.  They see
    the verified context up to a per-block boundary (``sees_upto``), themselves
    bidirectionally, and nothing else.  Their MASK rows predict the token at their own
    position (*unshifted*).

One predicate, :func:`block_causal_visible`, covers every layout:

    visible(q, k) =  causal(q) & causal(k) & pos(k) <= pos(q)            # T  (AR verify)
                   | block(q)  & seg(k) == seg(q)                        # J  (bidirectional)
                   | block(q)  & causal(k) & pos(k) < sees_upto(q)       # block reads context

and every row additionally sees all cached rows.  :func:`additive_mask` turns it into the
float mask transformers needs (a boolean 4D mask is silently wrong with eager attention
in transformers 5.x: it is *added* as 0/1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Schedule call kinds understood by the builders (and by every model adapter).
CALL_KINDS = ("ar", "linear_draft", "linear_verify", "packed", "quadratic")

# Row roles, used for labels and heatmaps.
CONTEXT, LAST, DRAFT, PAD, ANCHOR, MASK = "context", "last", "draft", "pad", "anchor", "mask"


@dataclass(frozen=True)
class Layout:
    """The new rows of one forward call.

    Attributes:
        kind: one of :data:`CALL_KINDS`.
        input_ids: ``(rows,)`` token ids.
        position_ids: ``(rows,)`` textual positions (repeated positions allowed).
        segment: ``(rows,)`` 0 for the causal stream, j >= 1 for proposal block j.
        sees_upto: ``(rows,)`` a block row sees causal rows with position < this value.
        roles: per-row role names (``context``, ``last``, ``draft``, ``pad``,
            ``anchor``, ``mask``) for labels.
        target_rows: ``(m + 1,)`` rows whose shifted logits give p_target^(i),
            i = 1..m+1 (empty for a drafting-only call).
        draft_rows: ``(n_blocks, n_draft)`` rows whose unshifted logits give the
            drafter distributions (empty for verification-only calls).
        n_context: number of leading context rows (always kept in the cache).
        keep_rows: ``target_rows`` then the flattened ``draft_rows``: the only rows whose
            logits are computed (transformers' ``logits_to_keep``; an int k means the last
            k rows, used by pure-causal calls whose target rows end the layout).
        new_rows_mask: the memoised additive ``(rows, rows)`` mask of a template layout.
    """

    kind: str
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment: torch.Tensor
    sees_upto: torch.Tensor
    roles: tuple[str, ...]
    target_rows: torch.Tensor
    draft_rows: torch.Tensor
    n_context: int
    keep_rows: torch.Tensor | int               # target rows then draft rows: logits to compute
    new_rows_mask: torch.Tensor | None = None   # memoised additive (rows, rows) block, if any

    @property
    def rows(self) -> int:
        return int(self.input_ids.numel())

    @property
    def has_verify(self) -> bool:
        """Whether the call holds verify rows whose K/V may enter the cache."""
        return self.target_rows.numel() > 0

    def visible(self) -> torch.Tensor:
        """``(rows, rows)`` boolean visibility among the new rows (cache not shown)."""
        return block_causal_visible(self.segment, self.position_ids, self.sees_upto)


def block_causal_visible(segment: torch.Tensor, position: torch.Tensor,
                         sees_upto: torch.Tensor) -> torch.Tensor:
    """The one attention predicate of every layout, evaluated for all (query, key) pairs.

    Args:
        segment: ``(..., rows)`` 0 = causal stream (AR mode), j >= 1 = proposal block j.
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


def additive_mask(visible: torch.Tensor, cache_len: int, dtype: torch.dtype) -> torch.Tensor:
    """``(1, 1, rows, cache_len + rows)`` float mask: 0 where visible, dtype-min elsewhere.

    Every row sees every cached row (the cache holds only verified tokens, App. D.1).
    """
    rows = visible.shape[0]
    mask = torch.zeros((rows, cache_len + rows), dtype=dtype, device=visible.device)
    mask[:, cache_len:].masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None]                                       # (1, 1, rows, cache+rows)


def extend_over_cache(new_rows_mask: torch.Tensor, cache_len: int) -> torch.Tensor:
    """Prepend ``cache_len`` visible (zero) columns to an additive ``(rows, rows)`` block."""
    rows = new_rows_mask.shape[0]
    cache_cols = new_rows_mask.new_zeros((rows, cache_len))
    return torch.cat([cache_cols, new_rows_mask], dim=1)[None, None]   # (1, 1, rows, cache+rows)


@dataclass(frozen=True)
class LayoutTemplate:
    """A steady-state layout (no context rows) built once per (kind, m, width).

    Relative visibility does not depend on where the call starts, so a call only has to
    write its tokens into the slots and shift the positions (decoder time stays small).
    """

    layout: Layout
    last_slots: torch.Tensor      # rows holding `last` (the verify row and the block anchor)
    draft_slots: torch.Tensor     # rows holding d^(1..m)

    @classmethod
    def build(cls, kind: str, m: int, width: int, mask_token_id: int, device, dtype) -> "LayoutTemplate":
        last = torch.tensor([-1], device=device)
        draft = -2 - torch.arange(m, device=device)                   # distinct placeholders
        layout = build_layout(kind, context=last.new_empty(0), last=last, draft=draft, width=width,
                              mask_token_id=mask_token_id, start=0)
        block = additive_mask(layout.visible(), 0, dtype)[0, 0]       # (rows, rows)
        ids = layout.input_ids
        draft_slots = torch.stack([(ids == -2 - i).nonzero()[0, 0] for i in range(m)]) if m \
            else ids.new_empty(0)
        layout = Layout(**{**layout.__dict__, "new_rows_mask": block})
        return cls(layout, (ids == -1).nonzero()[:, 0], draft_slots)

    def fill(self, last: torch.Tensor, draft: torch.Tensor, start: int) -> Layout:
        """The layout for a call starting at position ``start`` with these tokens."""
        if self.layout.kind in ("ar", "linear_verify"):          # pure causal: [last, d^(1..m)]
            ids = torch.cat([last, draft]) if draft.numel() else last
        else:
            ids = self.layout.input_ids.clone()
            ids[self.last_slots] = last
            ids[self.draft_slots] = draft
        # Block rows read causal keys below sees_upto: shift it with the positions.  Pure
        # causal calls have no block rows, so their (unused) sees_upto is left as is.
        sees_upto = self.layout.sees_upto if self.layout.kind in ("ar", "linear_verify") \
            else self.layout.sees_upto + start
        return Layout(self.layout.kind, ids, self.layout.position_ids + start, self.layout.segment,
                      sees_upto, self.layout.roles, self.layout.target_rows,
                      self.layout.draft_rows, 0, self.layout.keep_rows, self.layout.new_rows_mask)


def layout_rows(kind: str, n_context: int, n_draft_tokens: int, width: int) -> int:
    """Rows evaluated by a call, without building it (App. D.3, Table 2 when n_context = 0).

    ``n_draft_tokens`` is m, the number of draft tokens verified; B = width + 1.
    """
    block = width + 1
    m = n_draft_tokens
    if kind == "ar":
        return n_context + 1
    if kind == "linear_verify":
        return n_context + 1 + m
    if kind == "linear_draft":
        return n_context + block
    if kind == "packed":
        return n_context + 2 * block                              # verify region padded to B
    if kind == "quadratic":
        return n_context + (1 + m) + (1 + m) * block              # B(B+1) when m = W
    raise ValueError(f"kind must be one of {list(CALL_KINDS)}, got {kind!r}")


def build_layout(kind: str, *, context: torch.Tensor, last: torch.Tensor, draft: torch.Tensor,
                 width: int, mask_token_id: int, start: int) -> Layout:
    """Build the rows of one call.

    Args:
        kind: one of :data:`CALL_KINDS`.
        context: ``(n_ctx,)`` verified tokens not yet cached, except the last one
            (the prompt minus its last token on the first call, else empty).
        last: ``(1,)`` the final verified token P_{t-1}^(n).
        draft: ``(m,)`` draft tokens d^(1..m) to verify (ignored by ``linear_draft``).
        width: speculative width W; the block size is B = W + 1.
        mask_token_id: id of the MASK token.
        start: position id of ``context[0]`` (= number of cached tokens).

    Layouts (B = W + 1, n = position of the first output token after the prefix):
        ar            [context | last]                                   causal
        linear_verify [context | last, d1..dm]                           causal
        linear_draft  [context] + block [last, MASK^W] at n-1..n+W-1      (Linear-SS draft)
        packed        [context | last, d1..dm, MASK^(W-m)] + block [last, MASK^W]
        quadratic     [context | last, d1..dm] + for k = 0..m a block of B MASKs at
                      positions n+k..n+k+W that sees last, d1..dk (Quadratic-SS branch k)
    """
    if kind not in CALL_KINDS:
        raise ValueError(f"kind must be one of {list(CALL_KINDS)}, got {kind!r}")
    device = last.device
    block = width + 1
    n_ctx = int(context.numel())
    n = start + n_ctx + 1                                         # first output position
    if kind == "linear_draft":
        draft = draft.new_empty(0) if draft is not None else last.new_empty(0)
    m = int(draft.numel())
    mask_tok = torch.full((max(block, 1),), mask_token_id, dtype=last.dtype, device=device)

    # Causal stream: context, then (except for a drafting-only call) last and the drafts,
    # then MASK padding for packed.
    causal = [context]
    roles: list[str] = [CONTEXT] * n_ctx
    if kind != "linear_draft":
        causal += [last, draft]
        roles += [LAST] + [DRAFT] * m
    if kind == "packed":
        n_pad = width - m
        if n_pad < 0:
            raise ValueError(f"packed call got {m} draft tokens for width {width}")
        causal.append(mask_tok[:n_pad])
        roles += [PAD] * n_pad
    causal_ids = torch.cat(causal)
    n_causal = int(causal_ids.numel())
    ids = [causal_ids]
    pos = [torch.arange(start, start + n_causal, device=device)]
    seg = [torch.zeros(n_causal, dtype=torch.long, device=device)]
    upto = [torch.zeros(n_causal, dtype=torch.long, device=device)]
    target_rows = (torch.arange(n_ctx, n_ctx + m + 1, device=device)
                   if kind != "linear_draft" else torch.empty(0, dtype=torch.long, device=device))

    def add_block(block_ids: torch.Tensor, first_pos: int, sees: int, block_roles: list[str]) -> int:
        row0 = sum(int(t.numel()) for t in ids)
        ids.append(block_ids)
        pos.append(torch.arange(first_pos, first_pos + block_ids.numel(), device=device))
        seg.append(torch.full((block_ids.numel(),), len(seg), dtype=torch.long, device=device))
        upto.append(torch.full((block_ids.numel(),), sees, dtype=torch.long, device=device))
        roles.extend(block_roles)
        return row0

    draft_rows = torch.empty((0, 0), dtype=torch.long, device=device)
    if kind in ("linear_draft", "packed"):
        # Nemotron drafting block: a copy of `last` (output unused) and W masks, seeing
        # the cached prefix (and, on the first call, the uncached context) only.
        row0 = add_block(torch.cat([last, mask_tok[:width]]), n - 1, n - 1,
                         [ANCHOR] + [MASK] * width)
        draft_rows = torch.arange(row0 + 1, row0 + 1 + width, device=device)[None]   # (1, W)
    elif kind == "quadratic":
        # Branch k assumes d1..dk are accepted: B masks drafting positions n+k..n+k+W.
        firsts = []
        for k in range(m + 1):
            firsts.append(add_block(mask_tok[:block], n + k, n + k, [MASK] * block))
        draft_rows = (torch.tensor(firsts, device=device)[:, None]
                      + torch.arange(block, device=device)[None])                   # (m+1, B)

    return Layout(kind=kind, input_ids=torch.cat(ids), position_ids=torch.cat(pos),
                  segment=torch.cat(seg), sees_upto=torch.cat(upto), roles=tuple(roles),
                  target_rows=target_rows, draft_rows=draft_rows, n_context=n_ctx,
                  keep_rows=(m + 1 if kind in ("ar", "linear_verify")
                             else torch.cat([target_rows, draft_rows.reshape(-1)])))
