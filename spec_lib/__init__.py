"""spec_lib: speculative decoding with diffusion drafting (Packed-SS, DEER, DEdit).

Layers (the decoding core never imports ``training``, ``studies`` or ``notebook``; a test
checks the imports):

  * core: :mod:`~spec_lib.masks` (predicates, call kinds, layouts), :mod:`~spec_lib.verify`,
    :mod:`~spec_lib.models` (the model seam), :mod:`~spec_lib.architectures`,
    :mod:`~spec_lib.toy` (exact models), :mod:`~spec_lib.schedules` (:func:`decode`),
    :mod:`~spec_lib.drafters`, :mod:`~spec_lib.batch`;
  * :mod:`~spec_lib.training`: data, objectives, the loop, pipelines, checkpoints;
  * :mod:`~spec_lib.studies`: the experiments and proof checks behind the notebooks;
  * :mod:`~spec_lib.notebook`: parameters, results, figures and the runner.

Public entry points (:mod:`spec_lib.decoding`): :func:`decode`, the one decoder of every
schedule, order and drafter (``SCHEDULES``: the self-speculative ones, which need only the model;
:data:`spec_lib.schedules.SCHEDULE_SPECS` is the whole registry), and
:func:`decode_batch`, the same for several prompts at once; both return :class:`DecodeResult`.
Models (:mod:`spec_lib.training.registry`): :func:`load` ``(kind, preset)``, the one loader of
every model kind the notebooks use, and :func:`checkpoint_key` ``(kind, preset)``, the key its
results record.
"""

__all__ = ["decode", "decode_batch", "DecodeResult", "SCHEDULES", "load", "checkpoint_key"]
__version__ = "0.2.0"


def __getattr__(name: str):
    """The entry points load on first use (PEP 562), so that ``import spec_lib.notebook.run``
    or ``spec_lib.io`` does not import torch: the runner and each notebook kernel start faster."""
    if name in ("decode", "decode_batch"):
        from . import decoding
        return getattr(decoding, name)
    if name == "DecodeResult":
        from .schedules import DecodeResult
        return DecodeResult
    if name == "SCHEDULES":
        from .schedules import SCHEDULES
        return SCHEDULES
    if name in ("load", "checkpoint_key"):
        from .training import registry
        return getattr(registry, name)
    raise AttributeError(f"module 'spec_lib' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
