"""The networks of the feature-level drafters: Medusa's and Hydra's heads and EAGLE-3's layer.

Reference: seed 001 (DEER), Sec. 4 compares DEER with three drafters that read the target's
hidden states (their drafting, and where they read the target: :mod:`~spec_lib.drafters.feature_drafting`):

* **Medusa** (Cai et al., 2024): k independent heads on the target's last hidden state h_t;
  head i, a residual SiLU block, proposes x_{t+1+i} through the LM head.
* **Hydra** (Ankner et al., 2024): sequentially dependent heads; head i also reads the
  embeddings of the tokens before its slot (x_{t+1}, d_1, ..., d_{i-1}).
* **EAGLE-3** (Li et al., 2025): one decoder layer; at row j its input fuses the target's low,
  middle and high layer features g_j with the embedding of x_{j+1}; past the verified prefix
  its own output at the row before stands in for g (the training-time test, trained on its own
  outputs: :meth:`Eagle3Network.unrolled`).

Choices of this project where the papers are silent at this scale: the heads and the EAGLE
layer share the target's frozen embeddings and LM head (Medusa-1 gives each head its own LM
head initialised from the target's; EAGLE-3 trains a reduced draft vocabulary), which are not
part of these modules; each head and the EAGLE layer end in their own RMSNorm before that LM
head; Medusa's and Hydra's residual blocks start at zero (Medusa's initialisation), so every
head starts as the target's next-token prediction.  Both networks are ``transformers``
``PreTrainedModel`` s (``save_pretrained`` / ``from_pretrained``), built from transformers'
Qwen3 attention, MLP, RMSNorm and rotary modules.  Decoding code lives elsewhere, so it does not
enter a trained checkpoint's key.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel, Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3PreTrainedModel, Qwen3RMSNorm, Qwen3RotaryEmbedding

from .feature_block import _InjectedLayer

HEAD_KINDS = ("medusa", "hydra")


class HeadsConfig(PretrainedConfig):
    """Medusa's or Hydra's heads.

    Attributes:
        kind: ``"medusa"`` or ``"hydra"``.
        hidden_size: H, the target's hidden size.
        vocab_size: the target's vocabulary.
        num_heads: k, the most tokens one round can propose.
        feature_layer: the target layer whose output is h_t (the last one).
        rms_norm_eps: the heads' RMSNorm epsilon.
    """

    model_type = "feature_heads"

    def __init__(self, kind: str = "medusa", hidden_size: int = 64, vocab_size: int = 64, num_heads: int = 4,
                 feature_layer: int = 0, rms_norm_eps: float = 1e-6, **kwargs) -> None:
        self.kind = kind
        self.hidden_size = int(hidden_size)
        self.vocab_size = int(vocab_size)
        self.num_heads = int(num_heads)
        self.feature_layer = int(feature_layer)
        self.rms_norm_eps = float(rms_norm_eps)
        super().__init__(**kwargs)


class _ResBlock(nn.Module):
    """Medusa's block ``h + SiLU(W h + b)``, zero-initialised (the identity at the start)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(size, size)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + F.silu(self.linear(h))


class FeatureHeads(PreTrainedModel):
    """Medusa's independent heads or Hydra's sequential ones (``config.kind``).

    :meth:`forward` gives the normed hidden states the target's LM head turns into logits:
    ``(..., num_heads, H)`` for Medusa from ``h`` ``(..., H)``; for Hydra, head i also reads the
    embeddings ``(..., i + 1, H)`` of x_{t+1} and the tokens after it, and :meth:`head` runs one.
    """

    config_class = HeadsConfig
    base_model_prefix = "heads"

    def __init__(self, config: HeadsConfig) -> None:
        super().__init__(config)
        if config.kind not in HEAD_KINDS:
            raise ValueError(f"config.kind must be one of {list(HEAD_KINDS)}, got {config.kind!r}")
        size = config.hidden_size
        if config.kind == "hydra":               # head i reads [h; E(x_{t+1}); E(d_1..d_{i-1})]
            self.inputs = nn.ModuleList(nn.Linear((i + 2) * size, size, bias=False) for i in range(config.num_heads))
        self.blocks = nn.ModuleList(_ResBlock(size) for _ in range(config.num_heads))
        self.norms = nn.ModuleList(Qwen3RMSNorm(size, eps=config.rms_norm_eps) for _ in range(config.num_heads))
        self.post_init()
        with torch.no_grad():                    # Medusa's start: every residual block is the identity
            for block in self.blocks:
                block.linear.weight.zero_()
                block.linear.bias.zero_()
            for linear in getattr(self, "inputs", ()):    # Hydra's input maps start as "take h"
                linear.weight.normal_(std=0.02 / linear.in_features ** 0.5)
                linear.weight[:, :size] += torch.eye(size)

    def _init_weights(self, module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, Qwen3RMSNorm):
            nn.init.ones_(module.weight)

    def head(self, i: int, h: torch.Tensor, embeds: torch.Tensor | None = None) -> torch.Tensor:
        """Head ``i`` (0-based: it proposes slot i + 1): normed hidden ``(..., H)``."""
        if self.config.kind == "hydra":
            if embeds is None or embeds.shape[-2] != i + 1:
                raise ValueError(f"Hydra's head {i} reads the embeddings of {i + 1} tokens, got "
                                 f"{None if embeds is None else embeds.shape[-2]}")
            h = self.inputs[i](torch.cat([h, embeds.flatten(-2)], dim=-1))
        return self.norms[i](self.blocks[i](h))

    def forward(self, h: torch.Tensor, embeds: torch.Tensor | None = None) -> torch.Tensor:
        """Every head at once, ``(..., num_heads, H)``: Medusa from ``h``; Hydra teacher-forced,
        ``embeds`` ``(..., num_heads, H)`` holding E(x_{t+1}) .. E(x_{t+num_heads})."""
        k = self.config.num_heads
        if self.config.kind == "hydra":
            return torch.stack([self.head(i, h, embeds[..., : i + 1, :]) for i in range(k)], dim=-2)
        return torch.stack([self.head(i, h) for i in range(k)], dim=-2)


class Eagle3Config(Qwen3Config):
    """A Qwen3 config for EAGLE-3's one drafting layer, plus ``target_layer_ids`` (the low,
    middle and high target layers it fuses)."""

    model_type = "eagle3_drafter"

    def __init__(self, target_layer_ids=(0,), **kwargs) -> None:
        self.target_layer_ids = list(target_layer_ids)
        super().__init__(**kwargs)


class _CachedLayer(_InjectedLayer):
    """A Qwen3 decoder layer over explicit past keys and values (returns its own): DFlash's
    injected layer with the past standing in for the context."""

    def __init__(self, config: Eagle3Config) -> None:
        super().__init__(config, 0)

    def forward(self, h, cos, sin, past: tuple[torch.Tensor, torch.Tensor] | None, mask: torch.Tensor | None):
        k, v = self.context_kv(self.input_layernorm(h), cos, sin)
        if past is None:
            past = (k[:, :, :0], v[:, :, :0])
        return super().forward(h, cos, sin, past, mask), (k, v)


class Eagle3Network(Qwen3PreTrainedModel):
    """EAGLE-3's drafter: ``fuse`` the target features, then one layer over
    ``fc_in([RMSNorm(E(x_{j+1})); RMSNorm(g_j)])`` at position j, whose output a_j gives the
    logits of x_{j+2} (after ``norm`` and the target's LM head) and stands in for g_{j+1}
    when row j+1 is a draft."""

    config_class = Eagle3Config
    base_model_prefix = "eagle3"
    _no_split_modules = ["_CachedLayer"]

    def __init__(self, config: Eagle3Config) -> None:
        super().__init__(config)
        size = config.hidden_size
        self.fuse = nn.Linear(len(config.target_layer_ids) * size, size, bias=False)
        self.embed_norm = Qwen3RMSNorm(size, eps=config.rms_norm_eps)
        self.feature_norm = Qwen3RMSNorm(size, eps=config.rms_norm_eps)
        self.fc_in = nn.Linear(2 * size, size, bias=False)
        self.layer = _CachedLayer(config)
        self.norm = Qwen3RMSNorm(size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.post_init()

    def step(self, embeds: torch.Tensor, feats: torch.Tensor, positions: torch.Tensor, past=None, mask=None):
        """One pass over rows with token embeddings ``embeds`` (B, n, H) and features ``feats``
        (B, n, H) (fused target features, or outputs a of the rows before): ``(a, normed, (k, v))``."""
        h = self.fc_in(torch.cat([self.embed_norm(embeds), self.feature_norm(feats)], dim=-1))
        cos, sin = self.rotary_emb(h, positions)
        a, kv = self.layer(h, cos, sin, past, mask)
        return a, self.norm(a), kv

    def unrolled(self, features: torch.Tensor, next_embeds: torch.Tensor, depth: int) -> torch.Tensor:
        """The training-time test: normed outputs ``(B, depth, L, H)``.

        ``features`` (B, L, n_features * H) are the target's at rows 0..L-1 and ``next_embeds``
        (B, L, H) the embeddings of x_{j+1} at row j.  Depth 0 is the causal pass over real
        features; at depth s, row j is the s-th draft after the verified row m = j - s: its
        feature is depth s-1's output at row j-1, and it attends to the real rows <= m and to
        the draft rows m+1..j of its own chain (one per depth), which is what row j sees when
        :class:`Eagle3Drafter` drafts it.  Row j at every depth predicts x_{j+2}; rows j < s
        have no chain (their outputs are not meaningful).
        """
        batch, length, _ = next_embeds.shape
        positions = torch.arange(length, device=next_embeds.device)[None].expand(batch, -1)
        rows = torch.arange(length, device=next_embeds.device)
        feats, keys, values, outs = self.fuse(features), [], [], []
        for s in range(depth):
            allowed = [rows[None, :] <= rows[:, None] - s]                  # real rows <= m = j - s
            allowed += [rows[None, :] == rows[:, None] - s + t for t in range(1, s + 1)]   # its own chain
            mask = torch.cat(allowed, dim=1)[None, None]
            past = None if s == 0 else (torch.cat(keys, 2), torch.cat(values, 2))
            a, normed, (k, v) = self.step(next_embeds, feats, positions, past, mask)
            keys.insert(s, k)                                               # [K_0, K_1, ..., K_s] like the mask
            values.insert(s, v)
            outs.append(normed)
            feats = torch.cat([torch.zeros_like(a[:, :1]), a[:, :-1]], dim=1)   # row j reads a_{j-1}
        return torch.stack(outs, dim=1)


def build_feature_heads(target_config, kind: str, *, num_heads: int, seed: int = 0) -> FeatureHeads:
    """Medusa's or Hydra's heads for a target (h_t: the output of its last layer)."""
    config = HeadsConfig(kind=kind, hidden_size=target_config.hidden_size, vocab_size=target_config.vocab_size,
                         num_heads=num_heads, feature_layer=int(target_config.num_hidden_layers) - 1,
                         rms_norm_eps=target_config.rms_norm_eps)
    return _seeded(FeatureHeads, config, seed)


def build_eagle3(target_config, target_layer_ids: list[int], seed: int = 0) -> Eagle3Network:
    """EAGLE-3's drafting layer, as wide as the target (its heads, RoPE and vocabulary)."""
    config = Eagle3Config(
        target_layer_ids=target_layer_ids, vocab_size=target_config.vocab_size, hidden_size=target_config.hidden_size,
        intermediate_size=target_config.intermediate_size, num_hidden_layers=1,
        num_attention_heads=target_config.num_attention_heads, num_key_value_heads=target_config.num_key_value_heads,
        head_dim=target_config.head_dim, max_position_embeddings=target_config.max_position_embeddings,
        rope_parameters=getattr(target_config, "rope_parameters", None), rms_norm_eps=target_config.rms_norm_eps)
    return _seeded(Eagle3Network, config, seed)


def _seeded(cls, config, seed: int):
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return cls(config).eval()
    finally:
        torch.random.set_rng_state(state)
