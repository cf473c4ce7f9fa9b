"""The trained DFlash / DEdit drafters, wrapped for decoding (seed 002).

:func:`load_block_drafters` trains a :data:`DEDIT_PRESETS` entry on
first use (:func:`spec_lib.training.dedit.save_block_drafters`) and returns the frozen target
as a :class:`~spec_lib.drafters.feature_target.FeatureTarget` (it records the hidden states the
drafters read) with every trained network; :meth:`BlockDrafters.drafter` makes a
:class:`~spec_lib.drafters.block_edit.BlockEditDrafter` at any number of passes.  Kept apart
from the training pipeline so that neither decoding code nor the other presets enter a
checkpoint's cache key (the key hashes the config itself and the pipeline's source).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd
import torch

from ..drafters.block_edit import BlockEditDrafter
from ..drafters.feature_block import FeatureBlockDrafter
from ..drafters.feature_target import FeatureTarget
from .cache import preset_config
from .dedit import VARIANTS, DEditConfig, dedit_cache_key, load_target, network_names, save_block_drafters

#: The presets: ``smoke`` checks the pipeline in seconds; ``cpu`` trains DFlash, DEdit and DEdit
#: without ProposalMix for 750 steps each at W = 16 on the cpu target's answers, then continues
#: DFlash at W = 32 and DEdit at W = 24 and 32 for 150 steps each (window expansion).
DEDIT_PRESETS: dict[str, DEditConfig] = {
    "smoke": DEditConfig(target_preset="smoke", num_layers=1, n_features=2, width=8, gamma=3.0, teacher_prompts=32,
                         heldout_prompts=8, prompt_len=24, answer_len=16, n_anchors=4, batch_size=8, steps=40,
                         lr=3e-3, warmup=5, eval_every=20, variants=tuple(VARIANTS), max_files=20,
                         expansions=(("dflash", 12), ("dedit", 12)), expansion_steps=40),
    "cpu": DEditConfig(),
}


@dataclass
class BlockDrafters:
    """The frozen target (wrapped to record features), its tokenizer and the trained drafters."""

    target: FeatureTarget
    tokenizer: object
    networks: dict
    history: pd.DataFrame
    record: dict = field(default_factory=dict)
    config: DEditConfig | None = None

    def width_of(self, name: str) -> int:
        """The block size W that network ``name`` was trained at (an anchor + W - 1 drafted slots)."""
        if name not in self.networks:
            raise ValueError(f"name must be one of {list(self.networks)}, got {name!r}")
        return int(self.networks[name].config.block_size)

    def widest(self, variant: str) -> str:
        """The network of ``variant`` (itself or one of its window expansions) with the largest W."""
        names = [n for n in self.networks if n == variant or n.startswith(f"{variant}_w")]
        if not names:
            raise ValueError(f"variant must be one of {list(self.config.variants)}, got {variant!r}")
        return max(names, key=self.width_of)

    def drafter(self, name: str = "dedit", passes: int = 1, **options) -> BlockEditDrafter:
        """A :class:`BlockEditDrafter` of network ``name`` running ``passes`` passes (P_K);
        ``options``: ``early_exit``, ``stochastic``."""
        if name not in self.networks:
            raise ValueError(f"name must be one of {list(self.networks)}, got {name!r}")
        return BlockEditDrafter(self.target, self.networks[name], passes=passes, **options)


def load_block_drafters(preset: str = "cpu", *, progress: bool = True, device: str = "cpu") -> BlockDrafters:
    """The target and drafters of ``preset``: cached, or trained now and cached."""
    config = preset_config(DEDIT_PRESETS, preset)
    path = save_block_drafters(config, progress)
    record = json.loads((path / "record.json").read_text())
    target = load_target(config.target_preset, progress)
    networks = {name: FeatureBlockDrafter.from_pretrained(path / name, local_files_only=True, dtype=torch.float32)
                .to(device).eval() for name in network_names(config)}
    wrapped = FeatureTarget(target.hf_model.to(device).eval(), target.mask_token_id, record["layer_ids"])
    return BlockDrafters(wrapped, target.tokenizer, networks, pd.read_csv(path / "history.csv"), record, config)


def drafter_key(preset: str) -> str:
    """The cache key the current code computes for a preset's drafters (what results record)."""
    return dedit_cache_key(DEDIT_PRESETS[preset])
