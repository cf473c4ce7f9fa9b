"""spec_lib: speculative decoding with diffusion drafting (Packed-SS, DEER, DEdit).

Public entry points:
  * :func:`decode` and :class:`DecodeResult` (``spec_lib.schedules``)
  * :class:`spec_lib.models.DualModeLM`: shared-weight AR + diffusion adapter
  * :class:`spec_lib.toy.MarkovLM`: exact toy model
  * ``spec_lib.masks``: layouts and attention masks; ``spec_lib.verify``: verification
"""

from .schedules import SCHEDULES, DecodeResult, decode

__all__ = ["decode", "DecodeResult", "SCHEDULES"]
__version__ = "0.1.0"
