"""A target that also hands its verified hidden states to a feature-conditioned drafter.

Reference: seed 002 (DEdit), Sec. 3: the drafter is conditioned on the target's features;
the public DFlash decoder refreshes them from the target's verify call ("ctx <- features of
block[:acc+1]"), so a round costs one target call plus the drafter's passes.

:class:`FeatureTarget` is a :class:`spec_lib.models.DualModeLM` whose transformers model is
called with ``output_hidden_states=True``; after each ``commit`` it keeps the hidden states
of exactly the rows whose K/V became verified (the verified prefix minus its last token,
the same rows as the target's KV cache).  Decoding is otherwise unchanged: any schedule
runs on it, and its outputs are the wrapped model's.
"""

from __future__ import annotations

import threading

import torch
from torch import nn

from ..models import DualModeLM


class _HiddenStateTap(nn.Module):
    """Calls the wrapped model with ``output_hidden_states=True`` and keeps, per thread, the
    concatenated outputs of ``layer_ids`` for the one sequence of the call."""

    def __init__(self, hf_model, layer_ids: list[int]) -> None:
        super().__init__()
        self.model = hf_model
        self.config = hf_model.config
        self.layer_ids = list(layer_ids)
        self._local = threading.local()

    def forward(self, **kwargs):
        out = self.model(**kwargs, output_hidden_states=True)
        self._local.features = torch.cat([out.hidden_states[i + 1][0] for i in self.layer_ids], dim=-1)
        return out

    def take(self) -> torch.Tensor | None:
        features, self._local.features = getattr(self._local, "features", None), None
        return features


class FeatureTarget(DualModeLM):
    """A decoding target that records its verified hidden states at ``layer_ids``.

    Args:
        hf_model: the target's transformers causal LM (as for :class:`DualModeLM`).
        mask_token_id: the MASK id (only Packed/Linear/Quadratic-SS calls use it).
        layer_ids: target layers whose outputs form a drafter's context
            (:func:`spec_lib.drafters.feature_block.target_layer_ids`).

    Attributes:
        lm: the wrapped transformers model (for ``generate`` and divergence checks).
    """

    def __init__(self, hf_model, mask_token_id: int, layer_ids: list[int]) -> None:
        layers = int(getattr(getattr(hf_model, "config", None), "num_hidden_layers", 0) or 0)
        if not layer_ids or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                for i in layer_ids):
            raise ValueError(f"layer_ids must be a non-empty list of ints in [0, {layers}) (the target's layers), "
                             f"got {layer_ids!r}")
        self.lm = hf_model
        self.layer_ids = list(layer_ids)
        self.tap = _HiddenStateTap(hf_model, layer_ids)
        super().__init__(self.tap, mask_token_id)

    @property
    def feature_size(self) -> int:
        return len(self.layer_ids) * int(self.config.hidden_size)

    def _new_state(self):
        session = super()._new_state()
        session.features = []          # verified chunks, (n_i, feature_size) each
        session.feature_rows = 0
        session.pending_features = None
        return session

    def call(self, kind: str, prefix: torch.Tensor, draft: torch.Tensor, width: int):
        out = super().call(kind, prefix, draft, width)
        self.state.pending_features = self.tap.take()
        return out

    def commit(self, n_appended: int) -> None:
        """Keep the K/V and the hidden states of the rows that became verified."""
        session = self.state
        before = session.verified.cache_len
        super().commit(n_appended)
        kept = session.verified.cache_len - before
        if kept:
            session.features.append(session.pending_features[:kept])
            session.feature_rows += kept
        session.pending_features = None

    @property
    def feature_rows(self) -> int:
        """Verified rows with recorded features (= the cache length)."""
        return self.state.feature_rows

    def features_from(self, start: int) -> torch.Tensor:
        """``(feature_rows - start, feature_size)``: the features of verified rows ``start..``."""
        session = self.state
        if not 0 <= start <= session.feature_rows:
            raise ValueError(f"start must be in [0, {session.feature_rows}], got {start!r}")
        chunks, have = [], session.feature_rows
        for chunk in reversed(session.features):
            if have <= start:
                break
            chunks.append(chunk[max(0, start - (have - chunk.shape[0])):])
            have -= chunk.shape[0]
        if not chunks:
            return torch.empty(0, self.feature_size, dtype=self.dtype, device=self.device)
        return torch.cat(chunks[::-1])
