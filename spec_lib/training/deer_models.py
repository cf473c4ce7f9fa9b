"""DEER's frozen target and trained drafters, wrapped for decoding (notebooks 20-21).

Kept apart from :mod:`spec_lib.training.checkpoints`: the notebooks that load only the
self-speculative model do not import DEER's training code, so changing it leaves their
committed results current.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..drafters import ARDrafter, DiffusionDrafter
from ..models import DualModeLM
from .cache import preset_config
from .checkpoints import _dtype
from .deer import D2A_PRESETS, D2AConfig, load_or_train_deer, stage2_name
from .presets import PRESETS
from .self_speculative import load_or_train


@dataclass
class DeerModels:
    """A frozen target (wrapped for decoding), its tokenizer and the trained drafters."""

    target: DualModeLM
    tokenizer: object
    hf_models: dict
    history: pd.DataFrame
    record: dict = field(default_factory=dict)
    config: D2AConfig | None = None
    path: Path | None = None

    def diffusion_drafter(self, name: str | None = None) -> DiffusionDrafter:
        """The DEER drafter ``name`` (default: Stage II at ``config.alpha``)."""
        name = name or stage2_name(self.config.alpha)
        if name not in self.hf_models or name.startswith("ar_"):
            raise ValueError(f"name must be one of {[n for n in self.hf_models if not n.startswith('ar_')]}, "
                             f"got {name!r}")
        return DiffusionDrafter(self.hf_models[name], self.tokenizer.mask_token_id, self.tokenizer.sep_token_id,
                                context=self.config.context)

    def ar_drafter(self) -> ARDrafter:
        return ARDrafter(self.hf_models["ar_distilled"])


def load_deer(preset: str = "cpu", *, dtype: str = "float32", device: str = "cpu",
              progress: bool = True) -> DeerModels:
    """The target and drafters of a :data:`~spec_lib.training.deer.D2A_PRESETS` entry: cached,
    or trained now and cached (``dtype`` a name, as every loader takes it)."""
    config = preset_config(D2A_PRESETS, preset)
    dtype = _dtype(dtype)
    drafters, path = load_or_train_deer(config, progress=progress, dtype=dtype, device=device)
    target = load_or_train(*PRESETS[config.target_preset], progress=progress)
    return DeerModels(DualModeLM(target.hf_model.to(device=device, dtype=dtype).eval(), target.mask_token_id),
                      target.tokenizer, drafters.hf_models, drafters.history, drafters.record, config, path)
