"""What every drafter pipeline on the frozen DEdit target starts from (seed 002's shared setup:
the same target, teacher data and initial backbone for every drafter compared).

:func:`setup` loads the frozen target, its teacher set (:func:`spec_lib.training.dedit.teacher_set`),
and builds the initial :class:`~spec_lib.drafters.feature_block.FeatureBlockDrafter` from the
config's seed, so that every network trained from it starts from DFlash's initial weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..drafters.feature_block import FeatureBlockDrafter, build_feature_block_drafter
from .dedit import DEditConfig, load_target, teacher_set


@dataclass
class DrafterSetup:
    """The frozen target (``hf_model`` in eval mode), its teacher set and DFlash's initial weights."""

    target: object
    teacher: dict
    hf_model: torch.nn.Module
    mask_id: int
    embed: torch.nn.Module
    head: torch.nn.Module
    initial: FeatureBlockDrafter
    layer_ids: list[int]


def setup(config: DEditConfig, progress: bool = True) -> DrafterSetup:
    """The frozen target of ``config.target_preset``, the teacher set of ``config`` and the
    initial backbone (seeded ``config.seed``) at block size ``config.width``."""
    target = load_target(config.target_preset, progress)
    teacher = teacher_set(config, target, progress)
    hf_model, mask_id = target.hf_model.eval(), target.tokenizer.mask_token_id
    initial = build_feature_block_drafter(hf_model.config, num_layers=config.num_layers, n_features=config.n_features,
                                          block_size=config.width, mask_token_id=mask_id, seed=config.seed)
    return DrafterSetup(target, teacher, hf_model, mask_id, hf_model.get_input_embeddings(),
                        hf_model.get_output_embeddings(), initial, list(initial.config.target_layer_ids))
