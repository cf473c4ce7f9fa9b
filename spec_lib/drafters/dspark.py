"""DSpark: the DFlash backbone plus a low-rank Markov head and a confidence head.

Reference: seed 002 (DEdit) names DSpark as a baseline; its architecture is the public
DeepSpec ``dspark`` model and DSpark paper Sec. 3 (the project's research notes, Sec. 3.3,
mark these details as read from that code):

* the backbone is DFlash's with the anchor as the first prediction slot: the block
  ``[x_a, MASK x (W - 1)]`` gives W candidates, slot j predicting x_{a+j+1};
* the **Markov head** (rank r) adds a bigram term on the previous token,
  ``p_j(v) ~ exp(U_j(v) + (W2 W1[x_prev])(v))`` with ``W1 = Embedding(V, r)``,
  ``W2 = Linear(r, V, bias=False)``; x_prev is the anchor at slot 0, then the previous slot's
  token (teacher-forced in training, the drafter's own argmax at inference);
* the **confidence head** ``c_j = sigmoid(w^T [h_j; W1[x_prev]] + b)`` is trained toward
  ``1 - TV(p_draft_j, p_target_j)`` (:mod:`spec_lib.training.baselines`), an estimate of the
  probability that slot j is accepted;
* verification is cut at the first slot whose confidence falls below a threshold (the
  public evaluation code's ``--confidence-threshold``; 0 verifies every slot).
"""

from __future__ import annotations

import torch
from torch import nn

from .feature_block import FeatureBlockConfig, FeatureBlockDrafter


class DSparkConfig(FeatureBlockConfig):
    """The backbone's config plus the Markov head's rank (DeepSpec: 256 at V = 151k)."""

    model_type = "dspark_drafter"

    def __init__(self, markov_rank: int = 64, **kwargs) -> None:
        self.markov_rank = int(markov_rank)
        super().__init__(**kwargs)


class DSparkNetwork(FeatureBlockDrafter):
    """The backbone (inherited) plus ``markov_in``, ``markov_out`` and ``confidence``."""

    config_class = DSparkConfig

    def __init__(self, config: DSparkConfig) -> None:
        super().__init__(config)
        self.markov_in = nn.Embedding(config.vocab_size, config.markov_rank)
        self.markov_out = nn.Linear(config.markov_rank, config.vocab_size, bias=False)
        self.confidence = nn.Linear(config.hidden_size + config.markov_rank, 1)
        self.post_init()

    def teacher_forced(self, base_logits: torch.Tensor, hidden: torch.Tensor, prev_tokens: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """Training: ``(logits (..., W, V), confidence logits (..., W))`` given the true
        previous tokens ``prev_tokens`` ``(..., W)`` (x_a..x_{a+W-1})."""
        low = self.markov_in(prev_tokens)
        logits = base_logits + self.markov_out(low).to(base_logits.dtype)
        return logits, self.confidence(torch.cat([hidden, low.to(hidden.dtype)], dim=-1))[..., 0]

    @torch.no_grad()
    def sequential(self, base_logits: torch.Tensor, hidden: torch.Tensor, anchor: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Inference for one block: ``(logits (W, V), tokens (W,), confidence (W,))`` in
        [0, 1], each slot's token the argmax fed to the next slot's heads."""
        width = base_logits.shape[0]
        w_hidden, w_low = self.confidence.weight[0].split([hidden.shape[-1], self.config.markov_rank])
        from_hidden = hidden @ w_hidden + self.confidence.bias                 # every slot at once
        prev = anchor.reshape(())
        logits, tokens, scores = [], [], []
        for j in range(width):
            low = self.markov_in(prev)
            row = base_logits[j] + self.markov_out(low)
            scores.append(from_hidden[j] + low @ w_low)
            prev = row.argmax(-1)
            logits.append(row)
            tokens.append(prev)
        return torch.stack(logits), torch.stack(tokens), torch.sigmoid(torch.stack(scores))
