"""Table 2(b) and Figure 3(a) of seed 002 as its authors ran them: a frozen DFlash supplies P1,
and a separately trained editor (:mod:`spec_lib.training.frozen_editors`) edits it once (P2).

Seed 002, Sec. 4.2: "Removing ProposalMix lowers tau by 0.144 and removing joint training by
0.085, while removing both lowers it by 0.257" (Qwen3-4B, W = 16, macro tau at P2, relative to
Full); Sec. 5.1: Figure 3(a) compares the Full and w/o ProposalMix editors "which edit proposals
from the same frozen DFlash drafter".

Rounds are replayed on the target's own greedy output (:func:`spec_lib.studies.editing.anchor_blocks`):
at every anchor, pass 1 is the proposer's block from masks and pass 2 the editor's pass on
that proposal (anchor fixed).  The rows have the columns of
:func:`spec_lib.studies.editing.replay_rounds`, so :func:`~spec_lib.studies.editing.tau_by_pass`
(tau along the rounds a decode verifying P1 or P2 visits) and
:func:`~spec_lib.studies.editing.edit_effects` apply unchanged.
"""

from __future__ import annotations

import pandas as pd
import torch

from ..drafters.feature_block import FeatureBlockDrafter
from ..training import block_edit
from . import editing
from .editing import anchor_blocks, leading, replay_responses

COLUMNS = ["anchor", "pass", "accepted", "correct_after_reject", "changed", "proposal"]


def _check(proposer, editors: dict) -> None:
    if type(proposer) is not FeatureBlockDrafter:
        raise TypeError(f"proposer must be a FeatureBlockDrafter, got {type(proposer).__name__}")
    if not isinstance(editors, dict) or not editors:
        raise TypeError(f"editors must be a non-empty {{name: FeatureBlockDrafter}}, got {type(editors).__name__}")
    for name, editor in editors.items():
        if type(editor) is not FeatureBlockDrafter:
            raise TypeError(f"editor {name!r} must be a FeatureBlockDrafter, got {type(editor).__name__}")
        for field in ("block_size", "mask_token_id", "target_layer_ids"):
            if getattr(proposer.config, field) != getattr(editor.config, field):
                raise ValueError(f"proposer and editor {name!r} must share {field}, got "
                                 f"{getattr(proposer.config, field)} and {getattr(editor.config, field)}")


def _rows(batch, real, labels, proposal, before, step: int) -> list[dict]:
    """The replay rows of one pass (``proposal`` and ``before``: slots 1..W-1 per anchor)."""
    accepted = leading(proposal, labels)
    after = torch.arange(proposal.shape[-1], device=proposal.device)[None] > accepted[:, None]
    correct = ((proposal == labels) & after).sum(-1)
    changed = (proposal != before).sum(-1) if before is not None else torch.full_like(accepted, proposal.shape[-1])
    return [{"anchor": int(batch.anchors[0, i]), "pass": step, "accepted": int(accepted[i]),
             "correct_after_reject": int(correct[i]), "changed": int(changed[i]), "proposal": proposal[i].tolist()}
            for i in torch.nonzero(real).flatten().tolist()]


@torch.no_grad()
def replay_rounds(hf_model, proposer: FeatureBlockDrafter, editors: dict[str, FeatureBlockDrafter],
                  sequence: list[int], prompt_len: int) -> dict[str, pd.DataFrame]:
    """``{editor: rows}``, one row per (anchor, pass): pass 1 the proposer's P1 (computed once,
    shared), pass 2 the editor's edit of it; ``accepted`` A, ``correct_after_reject``,
    ``changed`` (slots pass 2 changed) and ``proposal``."""
    _check(proposer, editors)
    if not isinstance(prompt_len, int) or isinstance(prompt_len, bool) or not 1 <= prompt_len <= len(sequence):
        raise ValueError(f"prompt_len must be an int in [1, {len(sequence)}], got {prompt_len!r}")
    width = int(proposer.config.block_size)
    seq = torch.as_tensor(sequence, dtype=torch.long, device=next(proposer.parameters()).device)[None]
    if seq.shape[1] - prompt_len < width:                      # no complete block: nothing to replay
        return {name: pd.DataFrame(columns=COLUMNS) for name in editors}
    embed, head = hf_model.get_input_embeddings(), hf_model.get_output_embeddings()
    batch = anchor_blocks(hf_model, proposer, seq, prompt_len)     # the editors share W, MASK and layers
    real = (batch.labels[0, :, 1:] != block_edit.IGNORE).all(-1)    # complete blocks only
    labels = batch.labels[0, :, 1:]
    p1 = block_edit.block_logits(proposer, embed, head, batch, batch.block).argmax(-1)
    p1[..., 0] = batch.block[..., 0]
    first = _rows(batch, real, labels, p1[0, :, 1:], None, 1)
    replayed = {}
    for name, editor in editors.items():
        p2 = block_edit.block_logits(editor, embed, head, batch, p1).argmax(-1)
        replayed[name] = pd.DataFrame(first + _rows(batch, real, labels, p2[0, :, 1:], p1[0, :, 1:], 2),
                                      columns=COLUMNS)
    return replayed


def replay_slices(hf_model, proposer: FeatureBlockDrafter, editors: dict[str, FeatureBlockDrafter],
                  greedy: pd.DataFrame, prompts: dict[str, list[list[int]]], method: str = "ar"
                  ) -> dict[str, pd.DataFrame]:
    """``{editor: rows}``: :func:`replay_rounds` over every greedy response of ``method`` in a
    benchmark grid (columns ``slice`` and ``prompt`` added)."""
    return replay_responses(lambda sequence, prompt_len: replay_rounds(hf_model, proposer, editors, sequence,
                                                                       prompt_len), greedy, prompts, method)


def ablation_table(replayed: dict[str, pd.DataFrame], reference: str = "full") -> pd.DataFrame:
    """Table 2(b): per editor and slice (and the macro average), tau of the frozen proposer (P1)
    and of the editor (P2), each along the rounds a decode verifying that pass visits, and the
    editor's delta tau relative to ``reference``."""
    if reference not in replayed:
        raise ValueError(f"reference must be one of {list(replayed)}, got {reference!r}")
    table = editing.tau_by_pass_table(replayed)
    wide = table.pivot_table(index=["drafter", "slice"], columns="pass", values="tau").reset_index()
    wide = wide.rename(columns={"drafter": "editor", 1: "tau_p1", 2: "tau_p2"})
    ref = wide[wide["editor"] == reference].set_index("slice")["tau_p2"]
    wide["delta_tau"] = wide["tau_p2"] - wide["slice"].map(ref)
    return wide[["editor", "slice", "tau_p1", "tau_p2", "delta_tau"]]
