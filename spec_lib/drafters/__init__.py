"""Separate drafters for the drafter-based schedules (``deer`` and ``ar_draft``).

Reference: seed 001 (DEER), Sec. 3.4 "Inference": the diffusion drafter proposes a block of
k tokens in **one** forward pass from ``[prefix][SEP][MASK]*k``, each q_theta(. | x_{1:j})
conditioned only on the verified prefix; an AR drafter (the EAGLE-3 role) proposes k
tokens in k passes, each conditioned on the drafts before it.

* :class:`DiffusionDrafter` / :class:`ARDrafter`: transformers models trained here
  (:mod:`spec_lib.drafter_train`) or loaded from local checkpoints.
* :class:`ExactDiffusionDrafter` / :class:`ExactARDrafter`: exact drafters derived from a
  :class:`spec_lib.toy.MarkovLM`, for the statistical exactness checks.

Every drafter returns logits on the target's device; the schedule turns them into drafts
and the stored distribution Q (temperature, top-k/top-p) exactly as for self-drafting.
"""

from .ar import ARDrafter, ExactARDrafter
from .diffusion import DiffusionDrafter, ExactDiffusionDrafter

__all__ = ["ARDrafter", "DiffusionDrafter", "ExactARDrafter", "ExactDiffusionDrafter"]
