"""Masks and layouts of model calls.

* :mod:`~spec_lib.masks.predicates`: every attention mask as a predicate over (query, key),
  and the one boolean-to-additive conversion;
* :mod:`~spec_lib.masks.calls`: the call-kind registry (what a kind verifies, drafts, costs);
* :mod:`~spec_lib.masks.layouts`: the left-to-right layouts of seed 000 and their templates.
"""

from .calls import CallKind, call_kind, call_kinds, register
from .layouts import (
    ANCHOR,
    CONTEXT,
    DRAFT,
    LAST,
    MASK,
    PAD,
    Layout,
    LayoutTemplate,
    LTRCall,
    build_layout,
    layout_rows,
)
from .predicates import (
    block_causal_visible,
    causal_visible,
    over_cache,
    padded_visible,
    slot_visible,
    to_additive,
)

__all__ = ["ANCHOR", "CONTEXT", "DRAFT", "LAST", "MASK", "PAD", "CallKind", "LTRCall", "Layout", "LayoutTemplate",
           "block_causal_visible", "build_layout", "call_kind", "call_kinds", "causal_visible", "layout_rows",
           "over_cache", "padded_visible", "register", "slot_visible", "to_additive"]
