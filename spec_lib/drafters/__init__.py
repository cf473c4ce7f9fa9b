"""Separate drafters for the drafter-based schedules (``deer`` and ``ar_draft``).

Reference: seed 001 (DEER), Sec. 3.4 "Inference": the diffusion drafter proposes a block of
k tokens in **one** forward pass from ``[prefix][SEP][MASK]*k``, each q_theta(. | x_{1:j})
conditioned only on the verified prefix; an AR drafter (the EAGLE-3 role) proposes k
tokens in k passes, each conditioned on the drafts before it.

* :class:`Drafter` (:mod:`~spec_lib.drafters.base`): the protocol the schedules use;
* :class:`DiffusionDrafter` / :class:`ARDrafter`: transformers models trained here
  (:mod:`spec_lib.training.deer`) or loaded from local checkpoints;
* :class:`ExactDiffusionDrafter` / :class:`ExactARDrafter`: exact drafters derived from a
  :class:`spec_lib.toy.MarkovLM`, for the statistical exactness checks.
"""

from .autoregressive import ARDrafter
from .base import Drafter, DraftOutput
from .diffusion import DiffusionDrafter
from .exact import ExactARDrafter, ExactDiffusionDrafter

__all__ = ["ARDrafter", "DiffusionDrafter", "DraftOutput", "Drafter", "ExactARDrafter", "ExactDiffusionDrafter"]
