"""Decoding with Domino and DSpark: one backbone pass, then the head's slot-by-slot loop.

References: seed 002 (DEdit) compares DEdit with Domino and DSpark on the DFlash backbone,
"Domino and DSpark draft W candidates, DFlash and DEdit W - 1": both put the anchor in the
first prediction slot, so the block ``[x_a, MASK x (k - 1)]`` of k rows proposes k tokens.
The heads are :mod:`~spec_lib.drafters.domino` and :mod:`~spec_lib.drafters.dspark`;
DSpark's verification is cut at the first slot whose confidence is below
``confidence_threshold`` (the public DSpark evaluation code's rule; 0 verifies every slot).

Stochastic decoding is seed 002's: the drafter proposes its argmax and verification accepts
while the draft equals the target's sampled token, i.e. rejection sampling with a point-mass
stored Q (exact; :mod:`~spec_lib.drafters.block_edit` explains why).  Drawing the proposal
from the drafter instead would need the heads to condition on the drawn tokens, which their
argmax loop does not do, so ``stochastic="sample"`` is refused.
"""

from __future__ import annotations

import time

import torch

from .. import verify
from .base import DraftLogits, DraftOutput, SampleRule
from .block_edit import BlockEditDrafter
from .domino import DominoNetwork
from .dspark import DSparkNetwork
from .feature_target import FeatureTarget


class HeadBlockDrafter(BlockEditDrafter):
    """A Domino or DSpark drafter for the ``deer`` schedule (kind ``"diffusion"``).

    Args:
        target: the :class:`FeatureTarget` the decode runs on.
        network: a trained :class:`DominoNetwork` or :class:`DSparkNetwork`.
        confidence_threshold: DSpark only, in [0, 1]: verify the draft up to (excluding) the
            first slot whose confidence is below it.
    """

    def __init__(self, target: FeatureTarget, network, *, confidence_threshold: float = 0.0) -> None:
        if not isinstance(network, (DominoNetwork, DSparkNetwork)):
            raise TypeError(f"network must be a DominoNetwork or a DSparkNetwork, got {type(network).__name__}")
        if isinstance(confidence_threshold, bool) or not isinstance(confidence_threshold, (int, float)) \
                or not 0 <= confidence_threshold <= 1:
            raise ValueError(f"confidence_threshold must be a number in [0, 1], got {confidence_threshold!r}")
        if confidence_threshold and not isinstance(network, DSparkNetwork):
            raise ValueError("confidence_threshold needs a DSparkNetwork (Domino has no confidence head)")
        super().__init__(target, network, passes=1)
        self.confidence_threshold = float(confidence_threshold)

    def _new_state(self):
        state = super()._new_state()
        state.lengths = []                   # drafts sent to verification per round
        return state

    @property
    def verified_lengths(self) -> list[int]:
        """Draft tokens sent to verification in each round of this thread's current decode
        (DSpark's confidence cut makes them shorter than k)."""
        return list(self.state.lengths)

    def draft_logits(self, prefix: torch.Tensor, k: int) -> DraftLogits:
        """One round: ``logits`` (k, V), the head's own ``tokens`` (k,), DSpark's
        ``confidence`` (k,) (None for Domino), the one pass's seconds and rows."""
        state = self.state
        embed, head = self.target.lm.get_input_embeddings(), self.target.lm.get_output_embeddings()
        anchor_position = prefix.numel() - 1
        with torch.inference_mode():
            start = time.perf_counter()
            before = state.rows
            self._extend_context(state, anchor_position)
            block = torch.full((k,), self.mask_token_id, dtype=torch.long, device=prefix.device)
            block[0] = prefix[-1]
            positions = torch.arange(anchor_position, anchor_position + k, device=prefix.device)[None]
            hidden = self.network(embed(block)[None], positions, state.kv)[0]
            base = head(hidden)
            confidence = None
            if isinstance(self.network, DominoNetwork):
                logits, tokens = self.network.corrected(base, hidden, embed(block[:1]), embed)
            else:
                logits, tokens, confidence = self.network.sequential(base, hidden, block[:1])
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
            seconds = [time.perf_counter() - start]
        state.passes.append(1)
        return DraftLogits(logits, seconds, [k + state.rows - before], tokens, confidence)

    def draft(self, prefix: torch.Tensor, k: int, sample: SampleRule) -> DraftOutput:
        """The argmax proposal (cut by DSpark's confidence) and its point-mass Q (None when greedy)."""
        round_ = self.draft_logits(prefix, k)
        logits, tokens = round_.logits, round_.tokens
        if self.confidence_threshold:
            low = (round_.confidence < self.confidence_threshold).nonzero()
            if low.numel():                                                    # the one host sync
                tokens = tokens[: int(low[0, 0])]
        self.state.lengths.append(int(tokens.numel()))
        _, q = sample(logits[:1])                                              # greedy: q is None
        if q is not None:
            q = verify.SparseQ(tokens[:, None], torch.ones(tokens.numel(), 1, dtype=logits.dtype,
                                                           device=logits.device), self.vocab_size)
        return DraftOutput(tokens, q, round_.seconds, round_.rows)
