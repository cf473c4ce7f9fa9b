"""Teacher text: greedy continuations by a frozen model (the one generator of distillation data).

Used twice: the self-speculative model's self-distillation stage (its diffusion mode learns
what its own AR mode will say) and DEER's Stage I (seed 001, Sec. 3.4: the drafter learns
the AR target's answers).  Batched ``generate`` without EOS stopping, so every row has the
same length.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm


@torch.no_grad()
def greedy_continuations(hf_model, prompts: torch.Tensor, new_tokens: int, *, batch: int = 32,
                         pad_token_id: int | None = None, progress: bool = True,
                         label: str = "teacher answers") -> torch.Tensor:
    """``(N, new_tokens)``: the greedy continuation of each prompt row ``(N, l)`` by ``hf_model``."""
    was_training = hf_model.training
    hf_model.eval()
    device = next(hf_model.parameters()).device
    pad = pad_token_id if pad_token_id is not None else getattr(hf_model.config, "pad_token_id", None)
    out = []
    for chunk in tqdm(prompts.split(batch), desc=label, disable=not progress, leave=False):
        chunk = chunk.to(device)
        full = hf_model.generate(chunk, attention_mask=torch.ones_like(chunk), max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=pad)
        out.append(full[:, chunk.shape[1]:].cpu())
    hf_model.train(was_training)
    return torch.cat(out)
