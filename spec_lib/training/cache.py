"""Checkpoint caches: where trained models live and the keys that name them.

A checkpoint is saved with ``save_pretrained`` under ``artifacts/<kind>/<key>/`` and loaded
with ``from_pretrained(local_files_only=True)``.  Its key hashes the configuration, the data
fingerprint and the source of every ``spec_lib`` module the training pipeline imports
(:func:`spec_lib.provenance.code_key`): changing a loss or the loop retrains, adding an
inference-only layout does not.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..io import output_root
from ..provenance import code_key


def artifacts_dir() -> Path:
    """Where checkpoints are cached: ``SPEC_LIB_ARTIFACTS`` or ``<output root>/artifacts``."""
    return Path(os.environ.get("SPEC_LIB_ARTIFACTS", output_root() / "artifacts")).resolve()


def cache_key(pipeline_module: str, **parts) -> str:
    """Key of a checkpoint trained by ``pipeline_module`` with these JSON-able ``parts``
    (configs, data fingerprint, keys of the models it starts from)."""
    return code_key([pipeline_module], json.dumps(parts, sort_keys=True, default=str))
