"""Separate drafters for the drafter-based schedules (``deer`` and ``ar_draft``).

Reference: seed 001 (DEER), Sec. 3.4 "Inference": the diffusion drafter proposes a block of
k tokens in **one** forward pass from ``[prefix][SEP][MASK]*k``, each q_theta(. | x_{1:j})
conditioned only on the verified prefix; an AR drafter (the EAGLE-3 role) proposes k
tokens in k passes, each conditioned on the drafts before it.

* :class:`Drafter` and :class:`BlockDrafter` (:mod:`~spec_lib.drafters.base`): the protocol the
  schedules use, and the block drafters' ``draft_logits`` returning :class:`DraftLogits`;
* :class:`DiffusionDrafter` / :class:`ARDrafter`: transformers models trained here
  (:mod:`spec_lib.training.deer`) or loaded from local checkpoints;
* :class:`BlockEditDrafter` (DFlash, and DEdit's K passes; seed 002) and
  :class:`HeadBlockDrafter` (Domino, DSpark) on a :class:`FeatureTarget`;
* :class:`FeatureHeadDrafter` (Medusa, Hydra) and :class:`Eagle3Drafter` on a
  :class:`FeatureTarget`'s hidden states (seed 001's feature-level baselines);
* :class:`ExactDiffusionDrafter` / :class:`ExactARDrafter`: exact drafters derived from a
  :class:`spec_lib.toy.MarkovLM`, for the statistical exactness checks.
"""

from .autoregressive import ARDrafter
from .base import BlockDrafter, DraftLogits, DraftOutput, Drafter
from .block_edit import BlockEditDrafter
from .diffusion import DiffusionDrafter
from .exact import ExactARDrafter, ExactDiffusionDrafter
from .feature_drafting import Eagle3Drafter, FeatureHeadDrafter
from .feature_target import FeatureTarget
from .head_block import HeadBlockDrafter

__all__ = ["ARDrafter", "BlockDrafter", "BlockEditDrafter", "DiffusionDrafter", "DraftLogits", "DraftOutput", "Drafter",
           "Eagle3Drafter", "ExactARDrafter", "ExactDiffusionDrafter", "FeatureHeadDrafter", "FeatureTarget",
           "HeadBlockDrafter"]
