"""Input layouts of one model call for the left-to-right schedules of seed 000.

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

Visibility is :func:`spec_lib.masks.predicates.block_causal_visible`.  The four kinds
registered here (B = W + 1, n = position of the first output token after the prefix):

    verify        [context | last, d1..dm]                            causal (Linear-SS, DEER, AR)
    linear_draft  [context] + block [last, MASK^W] at n-1..n+W-1       Linear-SS's drafting call
    packed        [context | last, d1..dm, MASK^(W-m)] + block [last, MASK^W]
    quadratic     [context | last, d1..dm] + for k = 0..m a block of B MASKs at
                  positions n+k..n+k+W that sees last, d1..dk (Quadratic-SS branch k)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

import torch

from .calls import CallKind, call_kind, register
from .predicates import block_causal_visible, to_additive

# Row roles, used for labels and heatmaps.
CONTEXT, LAST, DRAFT, PAD, ANCHOR, MASK = "context", "last", "draft", "pad", "anchor", "mask"


@dataclass(frozen=True)
class Layout:
    """The new rows of one forward call.

    Attributes:
        kind: a registered call kind (:func:`spec_lib.masks.call_kinds`).
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
            k rows, used by plain causal calls whose target rows end the layout).
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
    keep_rows: torch.Tensor | int
    new_rows_mask: torch.Tensor | None = None

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


@dataclass(frozen=True)
class LTRCall(CallKind):
    """A left-to-right call of seed 000: a causal stream plus zero or more proposal blocks.

    Attributes:
        pads_to_width: the verify region is padded with MASK to W drafts (Packed-SS's
            fixed 2B-row call, App. D.1).
        blocks: ``"none"``; ``"anchor"``: one block ``[last, MASK^W]`` drafting the W
            positions after P_{t-1} (Linear-SS / Packed-SS); ``"branches"``: for every
            outcome k = 0..m a block of B MASKs drafting after (P_{t-1}, d1..dk)
            (Quadratic-SS).
    """

    pads_to_width: bool = False
    blocks: str = "none"

    def n_blocks(self, m: int) -> int:
        return {"none": 0, "anchor": 1, "branches": m + 1}[self.blocks]

    def block_rows(self, width: int) -> int:
        return width + 1                                           # B: anchor + W masks, or B masks

    def drafted(self, width: int) -> int:
        return width if self.blocks == "anchor" else width + 1     # the anchor row drafts nothing

    def causal_rows(self, n_context: int, m: int, width: int) -> int:
        if not self.verifies:
            return n_context
        return n_context + 1 + (width if self.pads_to_width else m)

    def reach(self, width: int) -> int:
        # verify rows end at last + W (a padded or full draft); an anchor block at last + W;
        # branch k at last + 1 + k + W with k <= W.
        return {"none": width, "anchor": width, "branches": 2 * width + 1}[self.blocks]

    def build(self, *, context, last, draft, width, mask_token_id, start):
        return _build_ltr(self, context=context, last=last, draft=draft, width=width,
                          mask_token_id=mask_token_id, start=start)


VERIFY = register(LTRCall("verify", True, "plain causal verification of d1..dm after P "
                          "(Linear-SS's second call; DEER and the AR drafter's target call; AR with m = 0)"))
LINEAR_DRAFT = register(LTRCall("linear_draft", False, "Linear-SS drafting call: [last, MASK^W] from P",
                                blocks="anchor"))
PACKED = register(LTRCall("packed", True, "Packed-SS: verify D_{t-1} (padded to W) and draft W positions "
                          "from P_{t-1}", pads_to_width=True, blocks="anchor"))
QUADRATIC = register(LTRCall("quadratic", True, "Quadratic-SS: verify, and draft B positions after "
                             "(P, d1..dk) for every k = 0..m", blocks="branches"))


def layout_rows(kind: str, n_context: int, n_draft_tokens: int, width: int) -> int:
    """Rows evaluated by a call, without building it (App. D.3, Table 2 when n_context = 0).

    ``n_draft_tokens`` is m, the number of draft tokens verified; B = width + 1.
    """
    return call_kind(kind).rows(n_context, n_draft_tokens, width)


def build_layout(kind: str, *, context: torch.Tensor, last: torch.Tensor, draft: torch.Tensor,
                 width: int, mask_token_id: int, start: int) -> Layout:
    """Build the rows of one call of a registered kind.

    Args:
        kind: a registered call kind (see the module docstring).
        context: ``(n_ctx,)`` verified tokens not yet cached, except the last one
            (the prompt minus its last token on the first call, else empty).
        last: ``(1,)`` the final verified token P_{t-1}^(n).
        draft: ``(m,)`` draft tokens d^(1..m) to verify (ignored by drafting-only calls).
        width: speculative width W; the block size is B = W + 1.
        mask_token_id: id of the MASK token.
        start: position id of ``context[0]`` (= number of cached tokens).
    """
    return call_kind(kind).build(context=context, last=last, draft=draft, width=width,
                                 mask_token_id=mask_token_id, start=start)


def _build_ltr(spec: LTRCall, *, context, last, draft, width, mask_token_id, start) -> Layout:
    device = last.device
    block = spec.block_rows(width)
    n_ctx = int(context.numel())
    n = start + n_ctx + 1                                         # first output position
    if not spec.verifies or draft is None:
        draft = last.new_empty(0)
    m = int(draft.numel())
    n_pad = spec.causal_rows(n_ctx, m, width) - n_ctx - 1 - m if spec.verifies else 0
    if n_pad < 0:
        raise ValueError(f"{spec.name} call got {m} draft tokens for width {width}")
    mask_tok = torch.full((max(block, 1),), mask_token_id, dtype=last.dtype, device=device)

    # Causal stream: context, then (for a verifying call) last, the drafts and MASK padding.
    causal = [context]
    roles: list[str] = [CONTEXT] * n_ctx
    if spec.verifies:
        causal += [last, draft, mask_tok[:n_pad]]
        roles += [LAST] + [DRAFT] * m + [PAD] * n_pad
    causal_ids = torch.cat(causal)
    n_causal = int(causal_ids.numel())
    ids = [causal_ids]
    pos = [torch.arange(start, start + n_causal, device=device)]
    seg = [torch.zeros(n_causal, dtype=torch.long, device=device)]
    upto = [torch.zeros(n_causal, dtype=torch.long, device=device)]
    target_rows = (torch.arange(n_ctx, n_ctx + m + 1, device=device) if spec.verifies
                   else torch.empty(0, dtype=torch.long, device=device))

    def add_block(block_ids: torch.Tensor, first_pos: int, sees: int, block_roles: list[str]) -> int:
        row0 = sum(int(t.numel()) for t in ids)
        ids.append(block_ids)
        pos.append(torch.arange(first_pos, first_pos + block_ids.numel(), device=device))
        seg.append(torch.full((block_ids.numel(),), len(seg), dtype=torch.long, device=device))
        upto.append(torch.full((block_ids.numel(),), sees, dtype=torch.long, device=device))
        roles.extend(block_roles)
        return row0

    draft_rows = torch.empty((0, 0), dtype=torch.long, device=device)
    if spec.blocks == "anchor":
        # Nemotron drafting block: a copy of `last` (output unused) and W masks, seeing
        # the cached prefix (and, on the first call, the uncached context) only.
        row0 = add_block(torch.cat([last, mask_tok[:width]]), n - 1, n - 1, [ANCHOR] + [MASK] * width)
        draft_rows = torch.arange(row0 + 1, row0 + 1 + width, device=device)[None]   # (1, W)
    elif spec.blocks == "branches":
        # Branch k assumes d1..dk are accepted: B masks drafting positions n+k..n+k+W.
        firsts = [add_block(mask_tok[:block], n + k, n + k, [MASK] * block) for k in range(spec.n_blocks(m))]
        draft_rows = (torch.tensor(firsts, device=device)[:, None]
                      + torch.arange(block, device=device)[None])                   # (m+1, B)

    return Layout(kind=spec.name, input_ids=torch.cat(ids), position_ids=torch.cat(pos),
                  segment=torch.cat(seg), sees_upto=torch.cat(upto), roles=tuple(roles),
                  target_rows=target_rows, draft_rows=draft_rows, n_context=n_ctx,
                  keep_rows=(m + 1 if spec.plain_causal
                             else torch.cat([target_rows, draft_rows.reshape(-1)])))


class _Piece(Enum):
    """Markers in :attr:`LayoutTemplate.pieces`: the slot of ``last``, and all of d^(1..m) in
    order.  Enum members stay the same objects through pickling (a model and its cached templates
    are sent to Dask workers), so :meth:`LayoutTemplate.fill` can compare them with ``is``."""

    LAST = "last"
    DRAFT = "draft"


_LAST, _DRAFT = _Piece.LAST, _Piece.DRAFT


@dataclass(frozen=True)
class LayoutTemplate:
    """A steady-state layout (no context rows) built once per (kind, m, width).

    Relative visibility does not depend on where the call starts, so a call only has to
    write its tokens into the slots and shift the positions (decoder time stays small).
    :meth:`fill` builds the call's :class:`Layout` directly from pieces precomputed here:
    the input ids are one ``torch.cat`` of the template's constant runs (MASK padding and
    masks, App. D.1) with ``last`` and the draft in their slots, the positions one add, and
    every other field is the template's own tensor.

    Attributes:
        layout: the template layout, at start 0 with placeholder tokens in the slots and its
            additive ``new_rows_mask`` memoised.
        last_slots: rows holding ``last`` (the verify row and the block anchor).
        draft_slots: rows holding d^(1..m), in order.
        pieces: (derived) the input ids as runs in row order: ``_Piece.LAST``, ``_Piece.DRAFT`` (all of
            d^(1..m)), a ``slice`` of the draft, or a constant tensor of the template's ids.
        plain: (derived) the kind is plain causal (``[last, d^(1..m)]``, no block rows).
    """

    layout: Layout
    last_slots: torch.Tensor      # rows holding `last` (the verify row and the block anchor)
    draft_slots: torch.Tensor     # rows holding d^(1..m)
    pieces: tuple = field(init=False, repr=False, compare=False)
    plain: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = self.layout.input_ids
        m = int(self.draft_slots.numel())
        slot: list = [None] * int(ids.numel())                     # None: a constant row of the template
        for row in self.last_slots.tolist():
            slot[row] = _LAST
        for i, row in enumerate(self.draft_slots.tolist()):
            slot[row] = i
        pieces, row = [], 0
        while row < len(slot):                                     # once per shape, not per call
            end = row + 1
            if slot[row] is None:
                while end < len(slot) and slot[end] is None:
                    end += 1
                pieces.append(ids[row:end].clone())
            elif slot[row] is _LAST:
                pieces.append(_LAST)
            else:                                                  # a run d^(i+1..j) in consecutive rows
                first = slot[row]
                while end < len(slot) and isinstance(slot[end], int) and slot[end] == first + end - row:
                    end += 1
                run = (first, first + end - row)
                pieces.append(_DRAFT if run == (0, m) else slice(*run))
            row = end
        object.__setattr__(self, "pieces", tuple(pieces))
        object.__setattr__(self, "plain", call_kind(self.layout.kind).plain_causal)

    @classmethod
    def build(cls, kind: str, m: int, width: int, mask_token_id: int, device, dtype) -> "LayoutTemplate":
        last = torch.tensor([-1], device=device)
        draft = -2 - torch.arange(m, device=device)                   # distinct placeholders
        layout = build_layout(kind, context=last.new_empty(0), last=last, draft=draft, width=width,
                              mask_token_id=mask_token_id, start=0)
        ids = layout.input_ids
        draft_slots = torch.stack([(ids == -2 - i).nonzero()[0, 0] for i in range(m)]) if m \
            else ids.new_empty(0)
        layout = replace(layout, new_rows_mask=to_additive(layout.visible(), dtype))
        return cls(layout, (ids == -1).nonzero()[:, 0], draft_slots)

    def fill(self, last: torch.Tensor, draft: torch.Tensor, start: int) -> Layout:
        """The layout for a call starting at position ``start`` with these tokens.

        ``last`` is ``(1,)``, ``draft`` the ``(m,)`` tokens of the template's draft slots (empty
        for a drafting-only kind).  Equal, field by field, to :meth:`fill_generic`.
        """
        if draft.numel() != self.draft_slots.numel():
            raise ValueError(f"this {self.layout.kind} template has {self.draft_slots.numel()} draft slots, "
                             f"got {draft.numel()} draft tokens")
        t = self.layout
        pieces = self.pieces
        if len(pieces) == 1 and pieces[0] is _LAST:                # [last]: AR's call, as it is
            ids = last
        else:
            ids = torch.cat([last if p is _LAST else draft if p is _DRAFT
                             else draft[p] if isinstance(p, slice) else p for p in pieces])
            if not self.plain and ids.dtype != t.input_ids.dtype:  # block layouts keep the template's dtype
                ids = ids.to(t.input_ids.dtype)
        # Block rows read causal keys below sees_upto: shift it with the positions.  Plain
        # causal calls have no block rows, so their (unused) sees_upto is left as is.
        sees_upto = t.sees_upto if self.plain else t.sees_upto + start
        return Layout(kind=t.kind, input_ids=ids, position_ids=t.position_ids + start, segment=t.segment,
                      sees_upto=sees_upto, roles=t.roles, target_rows=t.target_rows, draft_rows=t.draft_rows,
                      n_context=0, keep_rows=t.keep_rows, new_rows_mask=t.new_rows_mask)

    def fill_generic(self, last: torch.Tensor, draft: torch.Tensor, start: int) -> Layout:
        """:meth:`fill` by generic means (the slots written by index, the layout copied with
        ``dataclasses.replace``): the reference :meth:`fill` is tested against."""
        if self.plain:                                             # [last, d^(1..m)]
            ids = torch.cat([last, draft]) if draft.numel() else last
        else:
            ids = self.layout.input_ids.clone()
            ids[self.last_slots] = last
            ids[self.draft_slots] = draft
        sees_upto = self.layout.sees_upto if self.plain else self.layout.sees_upto + start
        return replace(self.layout, input_ids=ids, position_ids=self.layout.position_ids + start,
                       sees_upto=sees_upto, n_context=0)
