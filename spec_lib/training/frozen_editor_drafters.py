"""The trained Table 2(b) editors and their frozen proposer, loaded for analysis (seed 002).

:func:`load_frozen_editors` trains a :data:`FROZEN_EDITOR_PRESETS` entry on first use
(:func:`spec_lib.training.frozen_editors.save_frozen_editors`, which trains the DEdit preset's
drafters first when they are not cached).  Kept apart from the training pipeline so that the
presets do not enter one another's cache keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd
import torch

from ..drafters.feature_block import FeatureBlockDrafter
from .block_drafters import DEDIT_PRESETS
from .cache import preset_config
from .frozen_editors import FrozenEditorConfig, frozen_editor_key, load_proposer, save_frozen_editors

#: ``smoke`` checks the pipeline in seconds; ``cpu`` trains the six editors (Table 2(b)'s four and
#: two ProposalMix selections) on notebook 30's cpu DFlash for 400 steps each, about half of the main drafters' 750, on the same teacher set: a
#: choice of this project's cpu budget (seed 002's Table 2(b) instead trains on a separate,
#: smaller "100K" corpus).
FROZEN_EDITOR_PRESETS: dict[str, FrozenEditorConfig] = {
    "smoke": FrozenEditorConfig(dedit=DEDIT_PRESETS["smoke"], steps=40),
    "cpu": FrozenEditorConfig(dedit=DEDIT_PRESETS["cpu"], steps=400),
}


@dataclass
class FrozenEditors:
    """The frozen proposer (P1), one editor per variant, the training history and record."""

    proposer: FeatureBlockDrafter
    editors: dict
    history: pd.DataFrame
    record: dict = field(default_factory=dict)
    config: FrozenEditorConfig | None = None


def load_frozen_editors(preset: str = "cpu", *, progress: bool = True, device: str = "cpu") -> FrozenEditors:
    """The editors of ``preset``: cached, or trained now and cached."""
    config = preset_config(FROZEN_EDITOR_PRESETS, preset)
    path = save_frozen_editors(config, progress)
    editors = {name: FeatureBlockDrafter.from_pretrained(path / name, local_files_only=True, dtype=torch.float32)
               .to(device).eval() for name in config.variants}
    return FrozenEditors(load_proposer(config, progress).to(device), editors, pd.read_csv(path / "history.csv"),
                         json.loads((path / "record.json").read_text()), config)


def editors_key(preset: str) -> str:
    """The cache key the current code computes for a preset's editors (what results record)."""
    return frozen_editor_key(FROZEN_EDITOR_PRESETS[preset])
