"""Every anchor of one response as a drafter batch: the replays' common input (seed 002's
analyses replay decoding rounds on the target's own greedy output, :mod:`spec_lib.studies.editing`).

For a sequence (the prompt, then the target's greedy continuation y) the round anchored at a
has the verified prefix y_{<=a}, and the target's tokens after it are y_{a+1..}; the leading
draft slots equal to them are exactly the drafts that round accepts.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd
import torch

from ..training import block_edit
from ..training.dedit import target_features


def anchor_blocks(hf_model, network, seq: torch.Tensor, prompt_len: int) -> block_edit.AnchorBatch:
    """Every eligible anchor's block ``[y_a, MASK x (W - 1)]`` of ``seq`` ``(1, L)`` (W: the
    network's own block size; anchors from the last prompt token while the block fits), with the
    training code's bidirectional block mask and the target's features at the network's layers."""
    loss_mask = torch.zeros_like(seq, dtype=torch.bool)
    loss_mask[:, prompt_len:] = True
    parts = block_edit.sample_anchors(seq, loss_mask, n_anchors=seq.shape[1] - prompt_len + 1,
                                      width=int(network.config.block_size),
                                      mask_token_id=int(network.config.mask_token_id),
                                      generator=torch.Generator().manual_seed(0))
    return block_edit.AnchorBatch(target_features(hf_model, seq, list(network.config.target_layer_ids)), *parts)


def leading(tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Leading positions (last dimension) where ``tokens`` equals ``labels``."""
    return (tokens == labels).long().cumprod(-1).sum(-1)


def replay_responses(replay: Callable[[list[int], int], dict[str, pd.DataFrame]], greedy: pd.DataFrame,
                     prompts: dict[str, list[list[int]]], method: str = "ar") -> dict[str, pd.DataFrame]:
    """``{name: rows}``: ``replay(sequence, prompt_len)`` (which returns ``{name: rows}``) over every
    greedy response of ``method`` in a benchmark grid, each response's rows tagged with its
    ``slice`` and ``prompt``."""
    responses = greedy[greedy["method"] == method]
    if responses.empty:
        raise ValueError(f"greedy holds no responses of method {method!r}")
    frames: dict[str, list[pd.DataFrame]] = {}
    for row in responses.itertuples():
        prompt = prompts[row.slice][row.prompt]
        for name, frame in replay(list(prompt) + list(row.output), len(prompt)).items():
            frames.setdefault(name, []).append(frame.assign(slice=row.slice, prompt=row.prompt))
    return {name: pd.concat(parts, ignore_index=True) for name, parts in frames.items()}
