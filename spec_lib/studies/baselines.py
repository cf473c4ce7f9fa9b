"""Tables of the baselines notebook (seed 002's Domino and DSpark against DFlash and DEdit):
the heads' training summary and DSpark's confidence-cut verification lengths."""

from __future__ import annotations

import pandas as pd

from .. import decode
from ..drafters.head_block import HeadBlockDrafter


def training_summary(history: pd.DataFrame) -> pd.DataFrame:
    """Per head: steps, training seconds, first and final held-out accuracy and loss parts."""
    held = history[history["split"] == "heldout"].sort_values("step")
    columns = [c for c in ("objective", "accuracy", "base_accuracy", "final_ce", "base_ce", "ce", "tv", "conf_bce",
                           "confidence_error") if c in held and held[c].notna().any()]
    first = held.groupby("model")[columns].first().add_prefix("first_")
    last = held.groupby("model")[columns].last().add_prefix("final_")
    steps = held.groupby("model")["step"].max().rename("steps")
    seconds = history[history["split"] == "train"].groupby("model")["seconds"].max().rename("train_seconds")
    return pd.concat([steps, seconds, first, last], axis=1).reset_index().rename(columns={"model": "head"})


def verified_lengths(target, drafters: dict, prompts: dict, width: int, *, max_new_tokens: int,
                     eos_token_id=None) -> pd.DataFrame:
    """Greedy decodes of every prompt with each labelled DSpark drafter (``{label: drafter}``):
    per label and slice, the mean number of drafts sent to verification per round, the share
    of rounds cut below ``width``, and the tokens appended per round (bonus included)."""
    wrong = {label: type(d).__name__ for label, d in drafters.items() if not isinstance(d, HeadBlockDrafter)}
    if wrong or not drafters:
        raise TypeError(f"drafters must be a non-empty {{label: HeadBlockDrafter}}, got {wrong or drafters}")
    rows = []
    for label, drafter in drafters.items():
        for name, items in prompts.items():
            lengths, appended = [], []
            for prompt in items:
                result = decode(target, prompt, schedule="deer", width=width, max_new_tokens=max_new_tokens,
                                eos_token_id=eos_token_id, drafter=drafter)
                lengths += drafter.verified_lengths
                appended += result.accepted
            rows.append({"method": label, "slice": name, "rounds": len(lengths),
                         "verified_per_round": sum(lengths) / len(lengths),
                         "cut_share": sum(n < width for n in lengths) / len(lengths),
                         "tokens_per_round": sum(appended) / len(appended)})
    return pd.DataFrame(rows)
