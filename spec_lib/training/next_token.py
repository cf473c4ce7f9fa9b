"""Next-token cross-entropy of a causal drafter (the AR-drafter baseline of seed 001).

Reference: seed 001, Sec. 3.4 "Critical difference from AR drafters": the EAGLE-3 role is
played here by a small causal LM, pre-trained on the corpus and distilled on the target's
answers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def ar_batch(prompts: torch.Tensor, answers: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token labels for the AR drafter: corpus rows (``answers=None``: every
    position scored) or teacher rows (only the answer tokens scored, -100 elsewhere)."""
    if answers is None:
        return prompts[:, :-1], prompts[:, 1:]
    full = torch.cat([prompts, answers], 1)
    labels = full[:, 1:].clone()
    labels[:, : prompts.shape[1] - 1] = -100
    return full[:, :-1], labels


def ar_loss(hf_model, inputs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """Next-token CE of a causal drafter (the AR drafter baseline's objective)."""
    device = next(hf_model.parameters()).device
    logits = hf_model(input_ids=inputs.to(device)).logits.float()
    labels = labels.to(device)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    with torch.no_grad():
        scored = labels != -100
        accuracy = (logits.argmax(-1)[scored] == labels[scored]).float().mean()
    return loss, {"loss": float(loss.detach()), "ce": float(loss.detach()), "accuracy": float(accuracy)}
