"""The compiled fast path: the same decoders on static caches and fixed shapes, optionally
through ``torch.compile`` (seed 000, App. D.1 "Cache update" on a preallocated cache; seed 002's
CUDA-graph drafting).

* :mod:`~spec_lib.compiled.target`: :class:`StaticDualModeLM`, the target behind the same model
  seam on a ``StaticCache`` (verified-only updates move a length pointer), its compiled
  regions and :func:`warm_up`;
* :mod:`~spec_lib.compiled.drafters`: the separate drafters' twins (DEER's, the AR drafter,
  DFlash / DEdit's block editor) and the feature-recording target, each overriding only the
  pass it runs on static buffers.

Every class here returns what its eager counterpart returns (greedy outputs equal
``generate`` in float64; ``tests/test_compiled.py``, ``tests/test_compiled_drafters.py``).
"""

from .drafters import StaticARDrafter, StaticBlockEditDrafter, StaticDiffusionDrafter, StaticFeatureTarget
from .target import (COMPILE_MODES, CompiledRegions, MaskStrips, StaticDualModeLM, model_signature, skipped_guards,
                     static_mask, thread_static_cache, warm_up)

__all__ = ["COMPILE_MODES", "CompiledRegions", "MaskStrips", "StaticARDrafter", "StaticBlockEditDrafter",
           "StaticDiffusionDrafter", "StaticDualModeLM", "StaticFeatureTarget", "model_signature", "skipped_guards",
           "static_mask", "thread_static_cache", "warm_up"]
