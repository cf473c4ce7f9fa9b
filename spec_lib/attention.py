"""A second attention backend behind the same model seam: PyTorch's FlexAttention with a
``BlockMask`` built from the project's mask predicates.

:class:`~spec_lib.models.DualModeLM` hands transformers an additive float mask (SDPA or
eager attention).  :class:`FlexDualModeLM` runs the same calls with
``attn_implementation="flex_attention"`` and a :class:`torch.nn.attention.flex_attention.BlockMask`
whose ``mask_mod`` reads the very boolean matrix that
:func:`spec_lib.masks.predicates.block_causal_visible` produced for the layout (the layout's
:meth:`~spec_lib.masks.layouts.Layout.visible`), with the cached verified prefix visible to
every row (seed 000, App. D.1).  So both backends evaluate one predicate; ``tests/test_attention_backends.py``
checks that they give the same logits for every call kind within float32 tolerance.

FlexAttention runs on CPU too (each new shape is compiled once, a few seconds); it pays off on
a GPU, where a ``BlockMask`` skips fully masked tiles (Quadratic-SS's block-diagonal branches)
instead of adding -inf to them.  ``benchmarks/gpu_check.sh`` times both per layout there.
"""

from __future__ import annotations

import torch

from . import masks
from .models import DualModeLM

#: Smallest head dimension accepted on CPU.  torch 2.13's compiled CPU FlexAttention kernel returns
#: wrong outputs (even NaN) at head dimensions 8 and 16, for plain causal masks too, while 24, 32,
#: 48, 64 and 128 match SDPA (``tests/test_attention_backends.py`` keeps checking that the kernel
#: is still wrong at 16, so this limit can go once torch fixes it).
MIN_CPU_HEAD_DIM = 32


def head_dim(config) -> int:
    """The attention head dimension of a transformers config (its text config for multimodal ones)."""
    text = config.get_text_config(decoder=True)
    return getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads


def flex_block_mask(visible: torch.Tensor, cache_len: int = 0):
    """A ``BlockMask`` for one call: ``visible`` ``(rows, rows)`` among the call's rows, plus
    ``cache_len`` cached key columns that every row sees."""
    from torch.nn.attention.flex_attention import create_block_mask

    if visible.dim() != 2 or visible.shape[0] != visible.shape[1] or visible.dtype != torch.bool:
        raise ValueError(f"visible must be a square boolean (rows, rows) matrix, got {tuple(visible.shape)} "
                         f"{visible.dtype}")
    if isinstance(cache_len, bool) or not isinstance(cache_len, int) or cache_len < 0:
        raise ValueError(f"cache_len must be an int >= 0, got {cache_len!r}")
    rows = visible.shape[0]

    def mask_mod(batch, head, q_idx, kv_idx):
        key = (kv_idx - cache_len).clamp(min=0)
        return (kv_idx < cache_len) | visible[q_idx, key]

    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=rows, KV_LEN=cache_len + rows,
                             device=visible.device)


class FlexDualModeLM(DualModeLM):
    """:class:`~spec_lib.models.DualModeLM` on FlexAttention (same calls, same cache).

    The model's attention implementation is switched to ``flex_attention`` in place
    (``set_attn_implementation``): pass a model that no SDPA caller shares.
    """

    def __init__(self, hf_model, mask_token_id: int) -> None:
        super().__init__(hf_model, mask_token_id)
        if not hasattr(hf_model, "set_attn_implementation"):
            raise TypeError(f"{type(hf_model).__name__} cannot switch its attention implementation "
                            f"(no set_attn_implementation)")
        self.head_dim = head_dim(hf_model.config)
        self._check_device(next(hf_model.parameters()).device)
        hf_model.set_attn_implementation("flex_attention")

    def _check_device(self, device: torch.device) -> None:
        if device.type == "cpu" and self.head_dim < MIN_CPU_HEAD_DIM:
            raise ValueError(f"FlexDualModeLM on CPU needs head_dim >= {MIN_CPU_HEAD_DIM}, got {self.head_dim}: "
                             f"the compiled CPU FlexAttention kernel gives wrong outputs at small head "
                             f"dimensions; use DualModeLM (SDPA) for this model, or run it on a GPU")

    def attention_mask(self, layout: masks.Layout, cache_len: int):
        """A ``BlockMask`` of the layout's predicate over the cache, plain causal calls included
        (transformers' own flex causal mask hits an inductor compile error on CPU)."""
        self._check_device(layout.input_ids.device)          # the model may have moved since
        return flex_block_mask(layout.visible(), cache_len)
