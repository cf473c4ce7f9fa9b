"""Domino: the DFlash backbone plus a causal corrector over the block's earlier tokens.

Reference: seed 002 (DEdit) names Domino as a baseline that corrects a parallel draft
causally; its architecture is the public SpecForge ``domino`` draft model (the project's
research notes, Sec. 3.2, mark these details as read from that code):

* the backbone is DFlash's (:class:`~spec_lib.drafters.feature_block.FeatureBlockDrafter`),
  with the anchor as the first prediction slot ("shift_label"): the block
  ``[x_a, MASK x (W - 1)]`` gives W candidates, slot j predicting x_{a+j+1};
* a one-layer GRU without biases reads the embeddings of the block's tokens so far,
  ``g_j = GRU(e(x_a), e(y_1), ..., e(y_j))`` (teacher-forced in training, the drafter's own
  argmax at inference);
* ``logits_j = U_j + MLP([z_j; g_j])`` with ``MLP = Linear -> SiLU -> Linear(V)``, where U_j and
  z_j are the backbone's logits and final hidden state at slot j; slots before
  ``suffix_start`` keep U_j.

Inference costs one backbone pass plus a slot-by-slot loop of the small GRU and MLP
(:meth:`DominoNetwork.corrected`), with no host synchronisation inside the loop.
"""

from __future__ import annotations

import torch
from torch import nn

from .feature_block import FeatureBlockConfig, FeatureBlockDrafter


class DominoConfig(FeatureBlockConfig):
    """The backbone's config plus the corrector's sizes.

    Attributes:
        gru_hidden: GRU state size (SpecForge: 1024 on a 4096-wide target).
        mlp_hidden: the MLP's inner width (SpecForge: 256).
        suffix_start: first slot the corrector applies to (SpecForge's ``pure_draft_prefix_len``).
    """

    model_type = "domino_drafter"

    def __init__(self, gru_hidden: int = 128, mlp_hidden: int = 128, suffix_start: int = 1, **kwargs) -> None:
        self.gru_hidden = int(gru_hidden)
        self.mlp_hidden = int(mlp_hidden)
        self.suffix_start = int(suffix_start)
        super().__init__(**kwargs)


class DominoNetwork(FeatureBlockDrafter):
    """The backbone (inherited) plus ``gru`` and ``mlp``; saved with ``save_pretrained``."""

    config_class = DominoConfig

    def __init__(self, config: DominoConfig) -> None:
        super().__init__(config)
        hidden = config.hidden_size
        self.gru = nn.GRU(hidden, config.gru_hidden, num_layers=1, bias=False, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(hidden + config.gru_hidden, config.mlp_hidden), nn.SiLU(),
                                 nn.Linear(config.mlp_hidden, config.vocab_size))
        self.post_init()

    def _applies(self, width: int, device) -> torch.Tensor:
        return (torch.arange(width, device=device) >= self.config.suffix_start)[:, None]

    def teacher_forced(self, base_logits: torch.Tensor, hidden: torch.Tensor, prev_embeds: torch.Tensor
                       ) -> torch.Tensor:
        """Training: ``(..., W, V)`` final logits from backbone ``base_logits`` ``(..., W, V)``,
        ``hidden`` ``(..., W, H)`` and the embeddings of the true tokens x_a..x_{a+W-1}
        ``(..., W, H)`` (slot j's GRU state has read x_a..x_{a+j})."""
        lead, width = base_logits.shape[:-2], base_logits.shape[-2]
        states, _ = self.gru(prev_embeds.reshape(-1, width, prev_embeds.shape[-1]))
        states = states.reshape(*lead, width, -1)
        correction = self.mlp(torch.cat([hidden, states.to(hidden.dtype)], dim=-1))
        return base_logits + correction * self._applies(width, base_logits.device)

    @torch.no_grad()
    def corrected(self, base_logits: torch.Tensor, hidden: torch.Tensor, anchor_embed: torch.Tensor, embed
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inference for one block: ``(logits (W, V), tokens (W,))``, each slot's token the
        argmax of its corrected logits, fed to the GRU for the next slot."""
        width = base_logits.shape[0]
        w_hidden, w_state = self.mlp[0].weight.split([hidden.shape[-1], self.config.gru_hidden], dim=1)
        from_hidden = hidden @ w_hidden.T + self.mlp[0].bias                     # every slot at once
        state = None
        x = anchor_embed.reshape(1, 1, -1)
        logits, tokens = [], []
        for j in range(width):
            out, state = self.gru(x, state)
            row = base_logits[j]
            if j >= self.config.suffix_start:
                row = row + self.mlp[2](self.mlp[1](from_hidden[j] + out[0, 0] @ w_state.T))
            token = row.argmax(-1)
            logits.append(row)
            tokens.append(token)
            x = embed(token).reshape(1, 1, -1)
        return torch.stack(logits), torch.stack(tokens)
