"""SetDLM-form layouts of the any-order schedules (seed 000, App. C and D.2).

An any-order model (SetDLM) represents a position twice: a *token row* holding the token
and a *mask row* (MASK) that predicts the token at its own position, both with the textual
position id.  Token rows are causal in the generation order; a mask row sees only tokens
earlier in that order and itself (seed 000, App. D.2 "Duplicate masks").  A decoding call
over the cache (prompt and accepted tokens, in acceptance order; every row sees all of it)
holds four regions, in this physical order:

  * ``N``: the correction token(s) accepted last iteration but not yet processed (p rows;
    p <= 1 for the speculative schedules, the tokens committed last step for the native
    decoder), causal among themselves;
  * ``O``: the previous draft D_{t-1} in verification order pi_t (MASK where a rank has no
    draft token);
  * ``M``: one verifier mask per rank;
  * ``R``: draft masks (one block of u for Packed/Linear/native; u blocks of u for
    Quadratic-SS, branch k assuming ranks 1..k accepted).

With K_r = {s < r : rank s holds a draft token} (App. D.2)::

    O_r <- N, O_{K_r}, O_r        M_r <- N, O_{K_r}, M_r        R_r <- N, R_r
    R^(k)_r <- N, O_{s <= k, s in K}, R^(k)_r   (Quadratic-SS, branch k = 0..u-1)

and the three rows of rank r share pi_t(r)'s position id.  Only N and the accepted O rows
(the first p + h rows: N, then O in rank order) enter the cache ("Cache update").

Every layout comes from one predicate, :func:`any_order_visible`, over per-row attributes.
Row counts (Table 2, SetDLM columns): Packed p + 3u, Linear (p + u) + 2u in two calls,
Quadratic p + 2u + u^2; at u = W, p = 1: 25 / 25 / 81 (W = 8) and 49 / 49 / 289 (W = 16).
The four call kinds are registered in the call-kind registry for their row formulas
(``n_context`` standing for p, ``width`` for u); their layouts are built by
:func:`build_any_order`, which takes the verification order.

Layouts and masks are built once per shape (Algorithm 3 makes one or two such calls per
iteration, and their shape repeats): everything but the tokens, the position ids and which
ranks hold a draft token is a function of (kind, p, u, ablation, MASK id, device) alone
(Table 2's row formulas; App. D.2's rules use only region, rank and reach), so it is built
once, memoised (:func:`layout_cache_info`, :func:`clear_layout_cache`), and shared by every
call of that shape, together with the additive mask of the all-drafts case per model dtype.
A call only writes its tokens and position ids (vectorised ``where`` / ``cat``), prepends
the cache columns to the additive mask and hides the O columns of the ranks without a draft
(one ``masked_fill_``: every rule that lets a row see an O row other than itself requires
that row to hold a draft token).  The shared tensors (``region``, ``rank``, ``o_reach``,
``verify_rows``, ``draft_rows``, ``keep_rows``, ``holds_draft`` of a call without O rows,
and ``visible()`` when every rank holds a draft) are read-only by convention: callers must
not write into them.  ``build_any_order(..., cache=False)`` builds everything
afresh, the reference the cached path is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import torch

from .calls import CallKind, register
from .predicates import over_cache, to_additive

#: region codes of the rows (also the physical order of the regions)
NEW, OLD, VERIFY, DRAFT = 0, 1, 2, 3
REGION_NAMES = ("N", "O", "M", "R")
#: the any-order call kinds (seed 000, App. D.2 / D.3)
KINDS = ("ao_packed", "ao_linear_draft", "ao_linear_verify", "ao_quadratic", "ao_native")


#: deliberately wrong masks, for negative controls: a verifier mask that sees its own draft
#: token, and draft masks that see the draft tokens of earlier ranks (tentative context)
ABLATIONS = (None, "m_sees_own_o", "r_sees_o")


def any_order_visible(region: torch.Tensor, rank: torch.Tensor, o_reach: torch.Tensor,
                      holds_draft: torch.Tensor, ablation: str | None = None) -> torch.Tensor:
    """The predicate of every SetDLM-form layout, for all (query, key) pairs of one call.

    Args:
        region: ``(rows,)`` :data:`NEW`, :data:`OLD`, :data:`VERIFY` or :data:`DRAFT`.
        rank: ``(rows,)`` verification rank (0-based) for O / M / R rows; for N rows the
            index among the N rows (they are causal among themselves).
        o_reach: ``(rows,)`` a non-N row sees the O rows of ranks ``< o_reach`` that hold a
            draft token (O_r and M_r: ``r``; R rows of Quadratic-SS's branch k: ``k``;
            other R rows: 0).
        holds_draft: ``(rows,)`` True on O rows that hold a draft token (not MASK).
        ablation: one of :data:`ABLATIONS` (None: App. D.2's rules).

    Returns:
        ``(rows, rows)`` bool, ``[q, k]`` True when row q may attend to row k; every row sees
        itself (the cache, seen by every row, is not part of it).
    """
    region_q, region_k = region[:, None], region[None, :]
    new_q, new_k = region_q == NEW, region_k == NEW
    new_causal = new_q & new_k & (rank[None, :] <= rank[:, None])
    reads_new = ~new_q & new_k
    reads_drafts = (~new_q & (region_k == OLD) & holds_draft[None, :]
                    & (rank[None, :] < o_reach[:, None]))
    itself = torch.eye(region.numel(), dtype=torch.bool, device=region.device)
    visible = new_causal | reads_new | reads_drafts | itself
    if ablation == "m_sees_own_o":
        visible |= (region_q == VERIFY) & (region_k == OLD) & (rank[None, :] == rank[:, None]) & holds_draft[None, :]
    elif ablation == "r_sees_o":
        visible |= (region_q == DRAFT) & (region_k == OLD) & holds_draft[None, :] & (rank[None, :] < rank[:, None])
    elif ablation is not None:
        raise ValueError(f"ablation must be one of {list(ABLATIONS)}, got {ablation!r}")
    return visible


@dataclass(frozen=True)
class AnyOrderLayout:
    """The new rows of one any-order call.

    Attributes:
        kind: one of :data:`KINDS`.
        input_ids, position_ids: ``(rows,)``.
        region, rank, o_reach, holds_draft: the per-row attributes of
            :func:`any_order_visible`.
        verify_rows: ``(u,)`` the M row of each rank (empty for a drafting-only call).
        draft_rows: ``(n_branches, u)`` the R rows of each branch and rank (empty for a
            verification-only call).
        n_new: p, the number of N rows (they come first).
        ablation: a deliberately wrong mask (:data:`ABLATIONS`) or None.
        template: the memoised shape-only part (:func:`build_any_order` with ``cache=True``),
            None for a layout built afresh.
    """

    kind: str
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    region: torch.Tensor
    rank: torch.Tensor
    o_reach: torch.Tensor
    holds_draft: torch.Tensor
    verify_rows: torch.Tensor
    draft_rows: torch.Tensor
    n_new: int
    ablation: str | None = None
    template: "_Template | None" = field(default=None, repr=False, compare=False)

    @property
    def rows(self) -> int:
        return int(self.input_ids.numel())

    @property
    def keep_rows(self) -> torch.Tensor:
        """Rows whose logits are used: the M rows, then the flattened R rows (shared when
        memoised: do not write into it)."""
        if self.template is not None:
            return self.template.keep_rows
        return torch.cat([self.verify_rows, self.draft_rows.reshape(-1)])

    @property
    def roles(self) -> tuple[str, ...]:
        if self.template is not None:
            return self.template.roles
        return tuple(REGION_NAMES[int(r)] for r in self.region)

    def _hidden(self) -> torch.Tensor | None:
        """``(rows, u)`` True where a row may not see the O row of a rank without a draft
        (every row but that O row itself); None when every rank holds a draft."""
        t = self.template
        if not t.has_o:
            return None
        missing = ~self.holds_draft[t.p: t.p + t.u]
        if not bool(missing.any()):
            return None
        return t.o_not_self & missing

    def visible(self) -> torch.Tensor:
        """``(rows, rows)`` bool visibility among the new rows (:func:`any_order_visible`).

        Memoised per shape: when every rank holds a draft the shared tensor itself is
        returned (do not write into it); otherwise a copy with the O columns of the ranks
        without a draft hidden."""
        t = self.template
        if t is None:
            return any_order_visible(self.region, self.rank, self.o_reach, self.holds_draft, self.ablation)
        hidden = self._hidden()
        if hidden is None:
            return t.visible_all
        visible = t.visible_all.clone()
        visible[:, t.p: t.p + t.u] &= ~hidden
        return visible

    def additive(self, dtype: torch.dtype, cache_len: int = 0, device=None) -> torch.Tensor:
        """``(1, 1, rows, cache_len + rows)``: the float mask a transformers model takes,
        ``cache_len`` always-visible cache columns first; equal to
        ``to_additive(self.visible(), dtype, cache_len)[None, None]``.

        The ``(rows, rows)`` block of the all-drafts case is memoised per (shape, dtype,
        device); a call allocates only its output and hides the O columns of the ranks
        without a draft.  A fresh tensor each call (the caller may keep or modify it).

        Args:
            dtype: the model's floating dtype.
            cache_len: cached tokens, which every row sees.
            device: where the mask is wanted (default: the layout's device).
        """
        t = self.template
        if t is None:
            mask = to_additive(self.visible(), dtype, cache_len)[None, None]
            return mask if device is None else mask.to(device)
        device = torch.device(t.device if device is None else device)
        out = over_cache(_additive_block(t.key, dtype, str(device)), cache_len)
        hidden = self._hidden()
        if hidden is not None:
            start = cache_len + t.p
            out[0, 0, :, start: start + t.u].masked_fill_(hidden.to(device), torch.finfo(dtype).min)
        return out


@dataclass(frozen=True)
class AnyOrderCall(CallKind):
    """Row formula of an any-order call kind (Table 2's SetDLM column); ``n_context`` is p,
    ``width`` is u (the ``m`` argument is not used: O and M always hold u rows)."""

    regions: tuple[str, ...] = ()
    branches: bool = False

    def n_blocks(self, m: int) -> int:
        return 0 if "R" not in self.regions else 1

    def block_rows(self, width: int) -> int:
        return width * width if self.branches else width

    def drafted(self, width: int) -> int:
        return width

    def causal_rows(self, n_context: int, m: int, width: int) -> int:
        return (n_context if "N" in self.regions else 0) + width * sum(r in self.regions for r in "OM")

    def reach(self, width: int) -> int:
        return width

    def build(self, **_):
        raise TypeError(f"{self.name} layouts depend on the verification order: build them with "
                        "spec_lib.masks.anyorder.build_any_order")


PACKED = register(AnyOrderCall("ao_packed", True, "any-order Packed-SS [N | O | M | R] (App. D.2)",
                               regions=("N", "O", "M", "R")))
LINEAR_DRAFT = register(AnyOrderCall("ao_linear_draft", False, "any-order Linear-SS drafting call [N | R]",
                                     regions=("N", "R")))
LINEAR_VERIFY = register(AnyOrderCall("ao_linear_verify", True, "any-order Linear-SS verify call [O | M]",
                                      regions=("O", "M")))
QUADRATIC = register(AnyOrderCall("ao_quadratic", True, "any-order Quadratic-SS [N | O | M | R^(0..u-1)]",
                                  regions=("N", "O", "M", "R"), branches=True))
NATIVE = register(AnyOrderCall("ao_native", False, "SetDLM's native decoder: [committed tokens | window masks]",
                               regions=("N", "R")))


def any_order_rows(kind: str, p: int, u: int) -> int:
    """Evaluated rows of one call (seed 000, Table 2's SetDLM column)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    from .calls import call_kind

    return call_kind(kind).rows(p, u, u)


def build_any_order(kind: str, *, new_ids: torch.Tensor, new_positions: torch.Tensor,
                    order_positions: torch.Tensor, draft_ids: torch.Tensor, mask_token_id: int,
                    ablation: str | None = None, cache: bool = True) -> AnyOrderLayout:
    """The layout of one any-order call (see the module docstring; seed 000, App. D.2, the
    calls of Algorithm 3, with Table 2's row counts).

    The shape-only part is built once per (kind, p, u, ablation, MASK id, device) and shared
    (see the module docstring); this call writes the tokens, the position ids and which ranks
    hold a draft token.  The result is identical to ``cache=False``'s, field by field, mask
    by mask.

    Args:
        kind: one of :data:`KINDS`.
        new_ids, new_positions: ``(p,)`` the N tokens and their position ids (empty when none).
        order_positions: ``(u,)`` position ids of pi_t(1..u), in verification order.
        draft_ids: ``(u,)`` the draft token at each rank, ``-1`` where there is none (it
            becomes MASK in O); ignored by calls without O rows.
        mask_token_id: the MASK id.
        ablation: a deliberately wrong mask (:data:`ABLATIONS`), for negative controls.
        cache: False builds every tensor afresh and the masks on demand (the reference).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    if ablation not in ABLATIONS:
        raise ValueError(f"ablation must be one of {list(ABLATIONS)}, got {ablation!r}")
    if not cache or not order_positions.numel():
        return _build_fresh(kind, new_ids=new_ids, new_positions=new_positions, order_positions=order_positions,
                            draft_ids=draft_ids, mask_token_id=mask_token_id, ablation=ablation)
    u = int(order_positions.numel())
    p = int(new_ids.numel()) if "N" in _SPECS[kind].regions else 0
    t = _template(kind, p, u, ablation, int(mask_token_id), str(order_positions.device))
    ids, positions, holds = [t.mask_tail], [order_positions.to(torch.long)] * t.blocks, t.no_drafts
    if t.has_o:                                   # O holds the drafts, MASK where a rank has none
        o = draft_ids >= 0
        ids.insert(0, torch.where(o, draft_ids, mask_token_id).to(torch.long))
        holds = torch.cat([t.holds_before, o, t.holds_after])
    if p:
        ids.insert(0, new_ids.to(torch.long))
        positions.insert(0, new_positions.to(torch.long))
    ids, positions = torch.cat(ids), torch.cat(positions)       # every u-row group has pi_t's positions
    return AnyOrderLayout(kind, ids, positions, t.region, t.rank, t.o_reach, holds, t.verify_rows, t.draft_rows, p,
                          ablation, t)


_SPECS = {"ao_packed": PACKED, "ao_linear_draft": LINEAR_DRAFT, "ao_linear_verify": LINEAR_VERIFY,
          "ao_quadratic": QUADRATIC, "ao_native": NATIVE}


@dataclass(frozen=True, eq=False)
class _Template:
    """The shape-only part of an any-order layout, built once per :attr:`key`.

    ``visible_all`` is the mask when every rank holds a draft token; ``o_not_self`` ``(rows,
    u)`` marks, per O column, every row but that O row itself (the rows a rank without a
    draft is hidden from); ``blocks`` counts the u-row groups after N (O, M, R branches),
    each with the order's position ids."""

    key: tuple
    p: int
    u: int
    has_o: bool
    blocks: int
    device: str
    region: torch.Tensor
    rank: torch.Tensor
    o_reach: torch.Tensor
    verify_rows: torch.Tensor
    draft_rows: torch.Tensor
    keep_rows: torch.Tensor
    roles: tuple[str, ...]
    mask_tail: torch.Tensor
    holds_before: torch.Tensor
    holds_after: torch.Tensor
    no_drafts: torch.Tensor
    visible_all: torch.Tensor
    o_not_self: torch.Tensor


#: memoised templates and additive blocks (small: a decode meets a handful of shapes)
TEMPLATE_CACHE_SIZE, MASK_CACHE_SIZE = 1024, 1024


@lru_cache(maxsize=TEMPLATE_CACHE_SIZE)
def _template(kind: str, p: int, u: int, ablation: str | None, mask_token_id: int, device: str) -> _Template:
    """Built by the reference builder from placeholder tokens (every rank holding a draft),
    so the shared structure is the reference's by construction."""
    dev = torch.device(device)
    ref = _build_fresh(kind, new_ids=torch.zeros(p, dtype=torch.long, device=dev),
                       new_positions=torch.arange(p, device=dev), order_positions=torch.arange(u, device=dev),
                       draft_ids=torch.zeros(u, dtype=torch.long, device=dev), mask_token_id=mask_token_id,
                       ablation=ablation)
    has_o = "O" in _SPECS[kind].regions
    rows = ref.rows
    n_o = u if has_o else 0
    o_not_self = torch.ones(rows, u, dtype=torch.bool, device=dev)
    if has_o:
        o_not_self[p + torch.arange(u, device=dev), torch.arange(u, device=dev)] = False
    return _Template(
        key=(kind, p, u, ablation, mask_token_id, device), p=p, u=u, has_o=has_o, blocks=(rows - p) // max(u, 1),
        device=device, region=ref.region, rank=ref.rank, o_reach=ref.o_reach, verify_rows=ref.verify_rows,
        draft_rows=ref.draft_rows, keep_rows=ref.keep_rows, roles=ref.roles, mask_tail=ref.input_ids[p + n_o:].clone(),
        holds_before=torch.zeros(p, dtype=torch.bool, device=dev),
        holds_after=torch.zeros(rows - p - n_o, dtype=torch.bool, device=dev),
        no_drafts=torch.zeros(rows, dtype=torch.bool, device=dev), visible_all=ref.visible(), o_not_self=o_not_self)


@lru_cache(maxsize=MASK_CACHE_SIZE)
def _additive_block(key: tuple, dtype: torch.dtype, device: str) -> torch.Tensor:
    """``(rows, rows)`` additive mask of a template's all-drafts case, on ``device``."""
    return to_additive(_template(*key).visible_all.to(device), dtype)


def layout_cache_info() -> dict:
    """``{"templates": ..., "masks": ...}``: :func:`functools.lru_cache` statistics of the
    memoised layouts and additive mask blocks (a miss is a build)."""
    return {"templates": _template.cache_info(), "masks": _additive_block.cache_info()}


def clear_layout_cache() -> None:
    """Forget every memoised layout and mask block (and reset the statistics)."""
    _template.cache_clear()
    _additive_block.cache_clear()


def _build_fresh(kind: str, *, new_ids: torch.Tensor, new_positions: torch.Tensor, order_positions: torch.Tensor,
                 draft_ids: torch.Tensor, mask_token_id: int, ablation: str | None) -> AnyOrderLayout:
    """Every tensor of one layout built afresh (the reference; :func:`build_any_order` with
    ``cache=False``)."""
    spec = _SPECS[kind]
    device = order_positions.device
    u, p = int(order_positions.numel()), int(new_ids.numel()) if "N" in spec.regions else 0
    ranks = torch.arange(u, device=device)
    masks_u = torch.full((u,), mask_token_id, dtype=torch.long, device=device)
    none = torch.zeros(u, dtype=torch.bool, device=device)
    parts = []                                   # (ids, positions, region, rank, o_reach, holds_draft)
    if p:
        parts.append((new_ids, new_positions, NEW, torch.arange(p, device=device),
                      torch.zeros(p, dtype=torch.long, device=device), torch.zeros(p, dtype=torch.bool, device=device)))
    if "O" in spec.regions:
        holds = draft_ids >= 0
        parts.append((torch.where(holds, draft_ids, masks_u), order_positions, OLD, ranks, ranks, holds))
        parts.append((masks_u, order_positions, VERIFY, ranks, ranks, none))
    if "R" in spec.regions:
        n_branches = u if spec.branches else 1
        branch = torch.arange(n_branches, device=device).repeat_interleave(u)     # R^(k) for k = 0..
        parts.append((masks_u.repeat(n_branches), order_positions.repeat(n_branches), DRAFT, ranks.repeat(n_branches),
                      branch, none.repeat(n_branches)))
    ids = torch.cat([x[0].to(torch.long) for x in parts])
    region = torch.cat([torch.full((x[0].numel(),), x[2], dtype=torch.long, device=device) for x in parts])
    layout_rank = torch.cat([x[3] for x in parts])
    o_reach = torch.cat([x[4] for x in parts])
    positions = torch.cat([x[1].to(torch.long) for x in parts])
    holds = torch.cat([x[5] for x in parts])
    first_m = p + u if "O" in spec.regions else None
    verify_rows = ranks + first_m if first_m is not None else ranks[:0]
    first_r = p + (2 * u if "O" in spec.regions else 0)
    draft_rows = ((first_r + torch.arange((u if spec.branches else 1) * u, device=device)).reshape(-1, u)
                  if "R" in spec.regions else ranks.new_empty((0, u)))
    return AnyOrderLayout(kind, ids, positions, region, layout_rank, o_reach, holds, verify_rows, draft_rows, p,
                          ablation)
