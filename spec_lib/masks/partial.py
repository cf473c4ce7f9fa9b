"""Partial-branch layouts: Packed-SS's call plus Quadratic-SS branches for a subset of outcomes.

Seed 000, Sec. 5 (Discussion) names the design and leaves it open: "preparing only a subset
of the continuation branches used by Quadratic-SS could provide intermediate designs between
Packed-SS and Quadratic-SS".  One call of the ``partial`` kind holds (B = W + 1, n = the
first output position, m = |D_{t-1}|):

    causal stream   [last, d1..dm, MASK^(W-m)]        Packed-SS's padded verify rows (App. D.1)
    anchor block    [last, MASK^W] at n-1..n+W-1        Packed-SS's drafting block
    branch k in S   B MASKs at n+k..n+k+W that see      Quadratic-SS's branch k (Sec. 3.1)
                    last, d1..dk

so it evaluates 2B + |S| B rows.  The drafted positions it returns are, per block, the W
positions after the context the block assumes: the anchor block's W masks (q_t(. | P_{t-1}),
as Packed-SS), and rows 1..W of branch k (row 0 of a branch sits at the position the
verifier fills, so its logits are not needed, as in Quadratic-SS).  Every mask comes from
:func:`spec_lib.masks.predicates.block_causal_visible`, through the Packed-SS builder of
:mod:`spec_lib.masks.layouts` plus appended branch blocks.

The registered kind ``partial`` is the worst case S = {0..m} (every outcome has a branch),
used for row limits and position reach; a call with a chosen S uses
:func:`partial_call_kind`, whose layouts have the same kind name.  Exact toy models answer
these calls through :func:`spec_lib.schedules.partial.partial_call`, which knows what each
block conditions on (:meth:`PartialCall.block_sources`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch

from .calls import register
from .layouts import MASK, Layout, LTRCall, build_layout


@dataclass(frozen=True)
class PartialCall(LTRCall):
    """The ``partial`` call kind: Packed-SS's rows plus branch blocks for the outcomes in S.

    Attributes:
        branches: the verification outcomes k (matched draft tokens) that get a branch, in
            increasing order; None means every outcome 0..m (the registered worst case).
    """

    branches: tuple[int, ...] | None = None

    def outcomes(self, m: int) -> tuple[int, ...]:
        """The branch set S for a call that verifies m draft tokens."""
        if self.branches is None:
            return tuple(range(m + 1))
        return self.branches

    def n_blocks(self, m: int) -> int:
        return 1 + len(self.outcomes(m))

    def drafted(self, width: int) -> int:
        return width                                   # W drafts per block (branch row 0 unused)

    def reach(self, width: int) -> int:
        return 2 * width + 1                           # branch k <= W ends at last + 1 + k + W

    def block_sources(self, m: int) -> tuple[tuple[int, int], ...]:
        """Per block, ``(k, skip)``: it drafts after (P_{t-1}, d1..dk), its returned rows
        starting ``skip`` positions after that context's end (anchor: (0, 0); branch k: (k, 1))."""
        return ((0, 0),) + tuple((k, 1) for k in self.outcomes(m))

    def build(self, *, context, last, draft, width, mask_token_id, start):
        m = int(draft.numel())
        outcomes = self.outcomes(m)
        if any(k > m for k in outcomes):
            raise ValueError(f"branches must be outcomes in [0, {m}] for a call verifying {m} draft tokens, "
                             f"got {list(outcomes)}")
        packed = build_layout("packed", context=context, last=last, draft=draft, width=width,
                              mask_token_id=mask_token_id, start=start)
        n = start + int(context.numel()) + 1                      # first output position
        block = width + 1
        device = last.device
        ids, pos, seg, upto, roles = ([packed.input_ids], [packed.position_ids], [packed.segment],
                                      [packed.sees_upto], list(packed.roles))
        rows = packed.rows
        draft_rows = [packed.draft_rows[0]]
        for j, k in enumerate(outcomes):                          # branch k: B masks after d1..dk
            ids.append(torch.full((block,), mask_token_id, dtype=last.dtype, device=device))
            pos.append(torch.arange(n + k, n + k + block, device=device))
            seg.append(torch.full((block,), 2 + j, dtype=torch.long, device=device))
            upto.append(torch.full((block,), n + k, dtype=torch.long, device=device))
            roles += [MASK] * block
            draft_rows.append(torch.arange(rows + 1, rows + block, device=device))
            rows += block
        draft_rows = torch.stack(draft_rows)                      # (1 + |S|, W)
        return replace(packed, kind=self.name, input_ids=torch.cat(ids), position_ids=torch.cat(pos),
                       segment=torch.cat(seg), sees_upto=torch.cat(upto), roles=tuple(roles),
                       draft_rows=draft_rows, keep_rows=torch.cat([packed.target_rows, draft_rows.reshape(-1)]))


PARTIAL = register(PartialCall("partial", True, "partial-branch (seed 000, Sec. 5): Packed-SS's call plus "
                               "Quadratic-SS branches for a subset S of outcomes (registered: every outcome)",
                               pads_to_width=True, blocks="anchor"))


@functools.lru_cache(maxsize=4096)
def partial_call_kind(branches: tuple[int, ...]) -> PartialCall:
    """The ``partial`` kind with branch set ``branches`` (sorted, distinct outcomes >= 0)."""
    if not isinstance(branches, tuple) or any(not isinstance(k, int) or isinstance(k, bool) or k < 0
                                              for k in branches):
        raise ValueError(f"branches must be a tuple of ints >= 0, got {branches!r}")
    if list(branches) != sorted(set(branches)):
        raise ValueError(f"branches must be sorted and distinct, got {branches!r}")
    return replace(PARTIAL, branches=branches)


def partial_layout(branches: tuple[int, ...], *, context: torch.Tensor, last: torch.Tensor, draft: torch.Tensor,
                   width: int, mask_token_id: int, start: int) -> Layout:
    """The layout of one ``partial`` call with branch set ``branches`` (see the module docstring)."""
    return partial_call_kind(branches).build(context=context, last=last, draft=draft, width=width,
                                             mask_token_id=mask_token_id, start=start)
