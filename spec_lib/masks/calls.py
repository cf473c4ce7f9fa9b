"""The call-kind registry: one record per kind of model call.

A schedule describes each forward call logically, by a kind name ("verify these draft
tokens", "verify and draft W positions from the verified prefix", ...); model adapters and
studies ask the registry what that kind is instead of comparing strings:

  * ``verifies``: the call's causal stream holds ``[last, d1..dm]`` whose shifted logits
    give p_target, and whose K/V may enter the cache;
  * ``plain_causal``: no proposal blocks, so the model's own causal mask serves;
  * ``n_blocks(m)`` / ``block_rows(W)`` / ``drafted(W)``: the proposal blocks (how many,
    their rows, how many positions each one drafts);
  * ``rows(n_context, m, W)``: evaluated rows, padding and duplicates included (seed 000,
    App. D.3, Table 2);
  * ``reach(W)``: how far past the last verified position the call's position ids go
    (for checking a model's position limit before decoding);
  * ``build(...)``: the :class:`~spec_lib.masks.layouts.Layout` of one call.

The left-to-right kinds of seed 000 are registered by :mod:`spec_lib.masks.layouts`; a new
family of layouts (e.g. SetDLM's any-order layouts, seed 000 App. D.2) is one new module
that subclasses :class:`CallKind` and calls :func:`register`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallKind:
    """Base record of a call kind; subclasses give the row formula and the builder."""

    name: str
    verifies: bool
    description: str

    @property
    def plain_causal(self) -> bool:
        """No proposal blocks: the call is an ordinary causal forward over the cache."""
        return self.n_blocks(0) == 0 and self.n_blocks(1) == 0

    def n_blocks(self, m: int) -> int:
        """Proposal blocks of a call that verifies m draft tokens."""
        raise NotImplementedError

    def block_rows(self, width: int) -> int:
        """Rows of one proposal block."""
        raise NotImplementedError

    def drafted(self, width: int) -> int:
        """Positions one proposal block drafts (its rows whose logits are returned)."""
        raise NotImplementedError

    def causal_rows(self, n_context: int, m: int, width: int) -> int:
        """Rows of the causal stream (uncached context, last, drafts, padding)."""
        raise NotImplementedError

    def rows(self, n_context: int, m: int, width: int) -> int:
        """Evaluated rows of the call (App. D.3); Table 2's numbers when n_context = 0."""
        return self.causal_rows(n_context, m, width) + self.n_blocks(m) * self.block_rows(width)

    def reach(self, width: int) -> int:
        """Largest position id of the call minus the position of the last verified token."""
        raise NotImplementedError

    def build(self, *, context, last, draft, width: int, mask_token_id: int, start: int):
        """The :class:`~spec_lib.masks.layouts.Layout` of one call."""
        raise NotImplementedError


_REGISTRY: dict[str, CallKind] = {}


def register(kind: CallKind) -> CallKind:
    """Add a call kind; a name can be registered once."""
    if kind.name in _REGISTRY and _REGISTRY[kind.name] is not kind:
        raise ValueError(f"call kind {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind
    return kind


def call_kind(name: str) -> CallKind:
    """The registered record of ``name``; a clear error for an unknown kind."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"kind must be one of {list(_REGISTRY)}, got {name!r}") from None


def call_kinds() -> tuple[str, ...]:
    """Names of every registered call kind."""
    return tuple(_REGISTRY)
