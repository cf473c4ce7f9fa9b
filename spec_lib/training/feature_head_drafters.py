"""The trained Medusa, Hydra and EAGLE-3 drafters, wrapped for decoding (seed 001's baselines).

:func:`load_feature_heads` trains a :data:`FEATURE_HEAD_PRESETS` entry on first use
(:func:`spec_lib.training.feature_heads.save_feature_heads`) and returns its networks;
:meth:`FeatureHeadDrafters.drafter` wraps one for a
:class:`~spec_lib.drafters.feature_target.FeatureTarget`, such as the DFlash / DEdit bundle's
target (:func:`spec_lib.training.block_drafters.load_block_drafters`), whose recorded layers
are the ones EAGLE-3 fuses and include the last one Medusa and Hydra read.  Kept apart from the
training pipeline so that decoding code does not enter the checkpoints' cache key.
"""

from __future__ import annotations

import json

import pandas as pd
import torch

from ..drafters.feature_drafting import Eagle3Drafter, FeatureHeadDrafter
from ..drafters.feature_heads import Eagle3Network, FeatureHeads
from ..drafters.feature_target import FeatureTarget
from .block_drafters import DEDIT_PRESETS
from .cache import TrainedNetworks, preset_config
from .feature_heads import FeatureHeadsConfig, feature_heads_cache_key, save_feature_heads

#: The presets, on the same DEdit preset's teacher set, batch size, steps and rate as DFlash
#: (``cpu``: 15 heads, DFlash's k at W = 16, enough for notebook 21's k = 8 too; EAGLE-3's
#: training-time test 4 deep).
FEATURE_HEAD_PRESETS: dict[str, FeatureHeadsConfig] = {
    "smoke": FeatureHeadsConfig(dedit=DEDIT_PRESETS["smoke"], num_heads=8, ttt_depth=2),   # 8: notebook 21's block
    "cpu": FeatureHeadsConfig(dedit=DEDIT_PRESETS["cpu"]),
}

#: the schedule each drafter decodes with: Medusa's heads propose in one pass, the others token by token
SCHEDULES = {"medusa": "drafted", "hydra": "ar_draft", "eagle3": "ar_draft"}


class FeatureHeadDrafters(TrainedNetworks):
    """The trained drafters of a preset (``networks``), their training history, record and config."""

    def drafter(self, target: FeatureTarget, kind: str):
        """A :class:`FeatureHeadDrafter` (``medusa``, ``hydra``) or :class:`Eagle3Drafter`
        (``eagle3``) on ``target``; decode it with ``SCHEDULES[kind]``."""
        network = self.network(kind)
        return Eagle3Drafter(target, network) if kind == "eagle3" else FeatureHeadDrafter(target, network)

    def target_for(self, model) -> FeatureTarget:
        """``model`` (a :class:`~spec_lib.models.DualModeLM`, such as DEER's or DEdit's target) as
        a :class:`FeatureTarget` recording the layers these drafters read (EAGLE-3's fused ones,
        which end with the last one Medusa and Hydra read); its outputs are ``model``'s."""
        layers = set()
        for kind, network in self.networks.items():
            layers |= set(network.config.target_layer_ids) if kind == "eagle3" else {network.config.feature_layer}
        layers = sorted(layers)
        return FeatureTarget(model.hf_model, model.mask_token_id, layers)


def load_feature_heads(preset: str = "cpu", *, progress: bool = True, device: str = "cpu") -> FeatureHeadDrafters:
    """The drafters of ``preset``: cached, or trained now and cached."""
    config = preset_config(FEATURE_HEAD_PRESETS, preset)
    path = save_feature_heads(config, progress)
    record = json.loads((path / "record.json").read_text())
    networks = {kind: (Eagle3Network if kind == "eagle3" else FeatureHeads)
                .from_pretrained(path / kind, local_files_only=True, dtype=torch.float32).to(device).eval()
                for kind in config.kinds}
    return FeatureHeadDrafters(networks, pd.read_csv(path / "history.csv"), record, config)


def feature_heads_key(preset: str) -> str:
    """The cache key the current code computes for a preset's drafters (what results record)."""
    return feature_heads_cache_key(FEATURE_HEAD_PRESETS[preset])
