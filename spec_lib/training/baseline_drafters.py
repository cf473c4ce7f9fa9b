"""The trained Domino and DSpark baselines, wrapped for decoding (seed 002).

:func:`load_baselines` trains a :data:`BASELINE_PRESETS` entry on first use
(:func:`spec_lib.training.baselines.save_baselines`) and returns its networks;
:meth:`Baselines.drafter` wraps one for a :class:`~spec_lib.drafters.feature_target.FeatureTarget`
(the DFlash / DEdit bundle's target, :func:`spec_lib.training.block_drafters.load_block_drafters`,
whose layers the heads read too).  Kept apart from the training pipeline so that decoding
code does not enter the checkpoints' cache key.
"""

from __future__ import annotations

import json

import pandas as pd
import torch

from ..drafters.domino import DominoNetwork
from ..drafters.dspark import DSparkNetwork
from ..drafters.feature_target import FeatureTarget
from ..drafters.head_block import HeadBlockDrafter
from .baselines import BaselineConfig, baseline_cache_key, network_names, save_baselines
from .block_drafters import DEDIT_PRESETS
from .cache import TrainedNetworks, preset_config

#: The presets, on the same DEdit preset's data, backbone, W and steps (``smoke``: seconds).
BASELINE_PRESETS: dict[str, BaselineConfig] = {
    "smoke": BaselineConfig(dedit=DEDIT_PRESETS["smoke"], gru_hidden=16, mlp_hidden=16, markov_rank=8,
                            expansions=(("domino", 12),)),
    "cpu": BaselineConfig(dedit=DEDIT_PRESETS["cpu"]),
}

_CLASSES = {"domino": DominoNetwork, "dspark": DSparkNetwork}


class Baselines(TrainedNetworks):
    """The trained heads of a preset (``networks``), their training history, record and config."""

    def drafter(self, target: FeatureTarget, kind: str, **options) -> HeadBlockDrafter:
        """A :class:`HeadBlockDrafter` of ``kind`` (a head, or ``<head>_w<W'>`` for a window
        expansion) on ``target``; ``options``: ``confidence_threshold``."""
        return HeadBlockDrafter(target, self.network(kind), **options)


def load_baselines(preset: str = "cpu", *, progress: bool = True, device: str = "cpu") -> Baselines:
    """The baselines of ``preset``: cached, or trained now and cached."""
    config = preset_config(BASELINE_PRESETS, preset)
    path = save_baselines(config, progress)
    record = json.loads((path / "record.json").read_text())
    networks = {name: _CLASSES[name.split("_w")[0]].from_pretrained(path / name, local_files_only=True,
                                                                   dtype=torch.float32).to(device).eval()
                for name in network_names(config)}
    return Baselines(networks, pd.read_csv(path / "history.csv"), record, config)


def baseline_key(preset: str) -> str:
    """The cache key the current code computes for a preset's baselines (what results record)."""
    return baseline_cache_key(BASELINE_PRESETS[preset])
