"""The feature-conditioned block drafter network (the DFlash backbone that DEdit adopts).

Reference: seed 002 (DEdit), Sec. 3 "adopts the DFlash backbone and target-feature
conditioning"; the architecture is the public DFlash drafter's (stated in the seed only by
name; the details below follow the public DFlash code as the project's research notes read it):

* the context is the frozen target's hidden states at a few evenly spaced layers,
  concatenated, projected by ``fc`` (no bias) and normalised (``context_norm``);
* every drafter layer injects that context as extra keys and values through its *own*
  ``k_proj`` / ``v_proj`` (K = k_norm([k_proj(ctx); k_proj(h_block)]), V likewise);
* the queries are the block ``[anchor, MASK x (W - 1)]`` only, bidirectional inside the
  block, and see context strictly before the anchor;
* the target's token embeddings and LM head are reused, frozen, and are *not* part of this
  module (they are passed in), so a checkpoint holds only the drafter's own weights.

The module is a ``transformers`` ``PreTrainedModel`` (``save_pretrained`` /
``from_pretrained``); its layers are built from transformers' Qwen3 attention, MLP, RMSNorm
and rotary modules, and only the forward that injects the context is written here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (Qwen3Attention, Qwen3MLP, Qwen3PreTrainedModel, Qwen3RMSNorm,
                                                      Qwen3RotaryEmbedding, apply_rotary_pos_emb, repeat_kv)


def target_layer_ids(num_target_layers: int, n_features: int) -> list[int]:
    """Evenly spaced target layers whose outputs are the drafter's context.

    Public DFlash uses ``round(1 + i (N - 4) / (n - 1))`` (it skips the first and last layers
    of a deep target); for the project's shallow targets (N < n + 3) that formula repeats
    layers, so the ids are then spread over all N layers instead (a choice of this project).
    Layer ``l`` means ``hidden_states[l + 1]`` of a transformers forward (after layer l).
    """
    if not isinstance(n_features, int) or isinstance(n_features, bool) or not 1 <= n_features <= num_target_layers:
        raise ValueError(f"n_features must be an int in [1, {num_target_layers}] (the target's layers), "
                         f"got {n_features!r}")
    if n_features == 1:
        return [num_target_layers // 2]
    if num_target_layers >= n_features + 3:
        return [round(1 + i * (num_target_layers - 4) / (n_features - 1)) for i in range(n_features)]
    return [round(i * (num_target_layers - 1) / (n_features - 1)) for i in range(n_features)]


class FeatureBlockConfig(Qwen3Config):
    """A Qwen3 config plus the drafter's own fields.

    Attributes:
        target_layer_ids: target layers whose hidden states form the context.
        block_size: W, the block the drafter was trained at (anchor + W - 1 masks).
        mask_token_id: the MASK id of the shared tokenizer.
    """

    model_type = "feature_block_drafter"

    def __init__(self, target_layer_ids=(0,), block_size: int = 16, mask_token_id: int = 0, **kwargs) -> None:
        self.target_layer_ids = list(target_layer_ids)
        self.block_size = int(block_size)
        self.mask_token_id = int(mask_token_id)
        super().__init__(**kwargs)


class _InjectedLayer(nn.Module):
    """A Qwen3 decoder layer whose attention also reads the context's keys and values."""

    def __init__(self, config: FeatureBlockConfig, index: int) -> None:
        super().__init__()
        self.self_attn = Qwen3Attention(config, index)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def _heads(self, x: torch.Tensor, proj: nn.Linear, norm: nn.Module | None) -> torch.Tensor:
        head_dim = self.self_attn.head_dim
        y = proj(x).view(*x.shape[:-1], proj.out_features // head_dim, head_dim)
        return (norm(y) if norm is not None else y).transpose(1, 2)          # (B, heads, n, d)

    def context_kv(self, context: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (rotated at the context positions) and values of the projected context."""
        attn = self.self_attn
        k = self._heads(context, attn.k_proj, attn.k_norm)
        k = k * cos[:, None] + _rotate_half(k) * sin[:, None]
        return k, self._heads(context, attn.v_proj, None)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor | None) -> torch.Tensor:
        attn = self.self_attn
        x = self.input_layernorm(h)
        q = self._heads(x, attn.q_proj, attn.q_norm)
        k = self._heads(x, attn.k_proj, attn.k_norm)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        keys = repeat_kv(torch.cat([kv[0], k], dim=2), attn.num_key_value_groups)
        values = repeat_kv(torch.cat([kv[1], self._heads(x, attn.v_proj, None)], dim=2), attn.num_key_value_groups)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling)
        h = h + attn.o_proj(out.transpose(1, 2).reshape(*h.shape[:-1], -1))
        return h + self.mlp(self.post_attention_layernorm(h))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class FeatureBlockDrafter(Qwen3PreTrainedModel):
    """The drafter network: ``context_kv`` once per new context, ``forward`` per block pass.

    Shapes: ``features`` (B, n_ctx, n_features * H) from the target; ``block_embeds``
    (B, n, H) the target's embeddings of the block inputs; positions are absolute.
    """

    config_class = FeatureBlockConfig
    base_model_prefix = "drafter"
    _no_split_modules = ["_InjectedLayer"]

    def __init__(self, config: FeatureBlockConfig) -> None:
        super().__init__(config)
        hidden = config.hidden_size
        self.fc = nn.Linear(len(config.target_layer_ids) * hidden, hidden, bias=False)
        self.context_norm = Qwen3RMSNorm(hidden, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList(_InjectedLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = Qwen3RMSNorm(hidden, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.post_init()

    def rotary(self, like: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin ``(B, n, head_dim)`` at absolute ``positions`` ``(B, n)``."""
        return self.rotary_emb(like, positions)

    def context_kv(self, features: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the keys and values of the context ``RMSNorm(fc(features))``."""
        context = self.context_norm(self.fc(features))
        cos, sin = self.rotary(context, positions)
        return [layer.context_kv(context, cos, sin) for layer in self.layers]

    def forward(self, block_embeds: torch.Tensor, positions: torch.Tensor,
                context_kv: list[tuple[torch.Tensor, torch.Tensor]], attention_mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        """Final hidden states ``(B, n, H)`` of the block rows (normed; apply the LM head).

        ``attention_mask``: additive or boolean ``(B, 1, n, n_ctx + n)`` over
        [context, block] keys; None lets every block row see every key (inference: one
        block whose context lies entirely before its anchor).
        """
        h = block_embeds
        cos, sin = self.rotary(h, positions)
        for layer, kv in zip(self.layers, context_kv, strict=True):
            h = layer(h, cos, sin, kv, attention_mask)
        return self.norm(h)


def build_feature_block_drafter(target_config, *, num_layers: int, n_features: int, block_size: int,
                                mask_token_id: int, seed: int = 0) -> FeatureBlockDrafter:
    """A randomly initialised drafter as wide as the target (its heads, RoPE and vocabulary)."""
    config = FeatureBlockConfig(
        target_layer_ids=target_layer_ids(int(target_config.num_hidden_layers), n_features), block_size=block_size,
        mask_token_id=mask_token_id, vocab_size=target_config.vocab_size, hidden_size=target_config.hidden_size,
        intermediate_size=target_config.intermediate_size, num_hidden_layers=num_layers,
        num_attention_heads=target_config.num_attention_heads, num_key_value_heads=target_config.num_key_value_heads,
        head_dim=target_config.head_dim, max_position_embeddings=target_config.max_position_embeddings,
        rope_parameters=getattr(target_config, "rope_parameters", None), rms_norm_eps=target_config.rms_norm_eps)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return FeatureBlockDrafter(config).eval()
    finally:
        torch.random.set_rng_state(state)
