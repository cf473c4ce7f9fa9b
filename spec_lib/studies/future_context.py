"""Does editing use future context?  DEdit's editor against Domino's causal corrector on the
same proposals (seed 002, Sec. 5.2, Figure 3(b) and the observational audit of App. A).

Seed 002: "We apply Domino's causal corrector and DEdit's P2 editor to identical W = 16
proposals from Domino's backbone; the DEdit editor comes from the main experiments and has
never seen Domino's proposals.  [...] After stratifying by accepted-prefix length, each
additional correct future token is associated with a 0.140-token increase in the advantage."
Correct future tokens are the proposal's correct slots after its first mismatch (the trailing
C's of [C, C, W, C, C]); a bidirectional editor can attend to them, a causal corrector cannot.

Rounds are replayed on the target's own greedy output, as :mod:`spec_lib.studies.editing`
does: at anchor a the verified prefix is y_{<=a} and the target's tokens after it are
y_{a+1..}, so the leading slots of a draft equal to them are the drafts that round accepts.
Every anchor is replayed, and :func:`visited` keeps the rounds a greedy Domino decode visits
(anchor a, then a + A + 1, ...), on which the comparison is made.  At each anchor:

* the **proposal** is the argmax of Domino's backbone (its block ``[y_a, MASK x (W - 1)]``,
  slot j predicting y_{a+j+1});
* **Domino** is its corrector's draft on that backbone pass (the decoder's own slot-by-slot
  loop, :meth:`~spec_lib.drafters.domino.DominoNetwork.corrected`), i.e. Domino's real draft;
* the **editor** is one editing pass of a DEdit network whose input block is
  ``[y_a, proposal_1 .. proposal_{W_e - 1}]`` (P2 with the proposal in place of its own P1).

Acceptance is compared over the first ``m = min(W_domino, W_editor - 1)`` slots, the advantage
being A_editor - A_domino per round.  The slope per extra correct future token is the
within-stratum least-squares slope (strata: the proposal's own accepted-prefix length, i.e. a
fixed effect per length), with a bootstrap over responses (a response is the cluster).
"""

from __future__ import annotations

import numbers

import numpy as np
import pandas as pd
import torch

from ..drafters.domino import DominoNetwork
from ..drafters.feature_block import FeatureBlockDrafter
from ..training import block_edit
from ..training.baselines import backbone
from . import editing
from .editing import anchor_blocks, leading, replay_responses

#: One row per anchor.  Domino's side: ``accepted`` / ``proposal`` are Domino's real A and (corrected)
#: draft over its W slots (what :func:`visited` walks and what the decode check reads); ``backbone`` is
#: the backbone's argmax proposal, ``accepted_proposal`` its A over the first m slots and
#: ``future_correct`` its correct slots after the first mismatch among them; ``accepted_domino`` is
#: Domino's A over the same m slots.  The editor's side: ``edited`` (its slots 1..W_e - 1) and
#: ``accepted_editor``; ``advantage`` = accepted_editor - accepted_domino.  ``accepted_corrector`` is
#: Domino's corrector run once over the backbone's proposal (its GRU reading the proposal's tokens,
#: as the editor does, instead of its own corrections), ``advantage_over_corrector`` the editor's
#: advantage over it: the two differ only in what they may see (causal vs bidirectional);
#: ``corrector`` holds its tokens.
COLUMNS = ["anchor", "pass", "accepted", "proposal", "backbone", "edited", "accepted_proposal", "future_correct",
           "accepted_domino", "accepted_editor", "advantage", "corrector", "accepted_corrector",
           "advantage_over_corrector"]


def _check_networks(domino, editors: dict) -> None:
    if not isinstance(domino, DominoNetwork):
        raise TypeError(f"domino must be a DominoNetwork, got {type(domino).__name__}")
    if not isinstance(editors, dict) or not editors:
        raise TypeError(f"editors must be a non-empty {{name: FeatureBlockDrafter}}, got {type(editors).__name__}")
    device = next(domino.parameters()).device
    for name, editor in editors.items():
        if type(editor) is not FeatureBlockDrafter:
            raise TypeError(f"editor {name!r} must be a DEdit FeatureBlockDrafter (not a baseline head), got "
                            f"{type(editor).__name__}")
        if int(domino.config.mask_token_id) != int(editor.config.mask_token_id):
            raise ValueError(f"domino and editor {name!r} must share the MASK id, got {domino.config.mask_token_id} "
                             f"and {editor.config.mask_token_id}")
        if next(editor.parameters()).device != device:
            raise ValueError(f"domino and editor {name!r} must be on one device, got {device} and "
                             f"{next(editor.parameters()).device}")


def editor_inputs(block: torch.Tensor, editor_anchors: torch.Tensor, domino_anchors: torch.Tensor,
                  proposal: torch.Tensor) -> torch.Tensor:
    """The editor's input blocks ``(A_e, W_e)``: ``[y_a, proposal_1 .. proposal_{W_e - 1}]`` where
    Domino has a block at the same anchor (its slot j - 1 predicts y_{a+j}, the editor's slot j),
    the editor's own ``[y_a, MASK ...]`` elsewhere.  ``block`` ``(A_e, W_e)``, the anchors 1-D,
    ``proposal`` ``(A_d, W_d)`` with W_d >= W_e - 1."""
    width = block.shape[-1]
    if proposal.shape[-1] < width - 1:
        raise ValueError(f"the proposal has {proposal.shape[-1]} slots, the editor needs {width - 1}")
    where = {int(a): i for i, a in enumerate(domino_anchors.tolist())}
    inputs = block.clone()
    for i, a in enumerate(editor_anchors.tolist()):
        if int(a) in where:
            inputs[i, 1:] = proposal[where[int(a)], : width - 1]
    return inputs


@torch.no_grad()
def replay_rounds(hf_model, domino: DominoNetwork, editors: dict[str, FeatureBlockDrafter], sequence: list[int],
                  prompt_len: int) -> dict[str, pd.DataFrame]:
    """``{editor: rows}`` (:data:`COLUMNS`), one row per anchor of ``sequence`` (the prompt, then the
    target's greedy continuation) from the last prompt token while every block's labels fit.
    Domino's side (the backbone pass and its corrector's per-anchor loop) is computed once and
    shared by the editors; each editor edits the same backbone proposals."""
    _check_networks(domino, editors)
    if not isinstance(prompt_len, int) or isinstance(prompt_len, bool) or not 1 <= prompt_len <= len(sequence):
        raise ValueError(f"prompt_len must be an int in [1, {len(sequence)}], got {prompt_len!r}")
    w_domino = int(domino.config.block_size)
    widths = {name: int(editor.config.block_size) for name, editor in editors.items()}
    seq = torch.as_tensor(sequence, dtype=torch.long, device=next(domino.parameters()).device)[None]
    last = seq.shape[1] - 1 - max(w_domino, *widths.values())   # anchors with labels for every slot of every block
    if last < prompt_len - 1:
        return {name: pd.DataFrame(columns=COLUMNS) for name in editors}
    embed, head = hf_model.get_input_embeddings(), hf_model.get_output_embeddings()
    d_batch = anchor_blocks(hf_model, domino, seq, prompt_len)
    base, hidden = backbone(domino, embed, head, d_batch)
    proposal = base.argmax(-1)[0]                                          # (A, W_domino): slot j is y_{a+j+1}
    # The corrector as a one-pass editor: its GRU reads the backbone's proposal (anchor first), not
    # its own corrections, so it sees exactly what the editor sees, up to the slot it corrects.
    read = torch.cat([d_batch.block[0, :, :1], proposal[:, :-1]], dim=1)
    on_proposal = domino.teacher_forced(base[0], hidden[0], embed(read)).argmax(-1)   # (A, W_domino)
    d_index = {int(a): i for i, a in enumerate(d_batch.anchors[0].tolist())}
    y = seq[0]
    shared = []
    for anchor in range(prompt_len - 1, last + 1):
        i = d_index[anchor]
        _, draft = domino.corrected(base[0, i], hidden[0, i], embed(y[anchor:anchor + 1]), embed)
        labels = y[anchor + 1: anchor + 1 + w_domino]
        shared.append((anchor, i, draft, labels))
    replayed = {}
    for name, editor in editors.items():
        m = min(w_domino, widths[name] - 1)
        e_batch = anchor_blocks(hf_model, editor, seq, prompt_len)
        e_index = {int(a): i for i, a in enumerate(e_batch.anchors[0].tolist())}
        inputs = editor_inputs(e_batch.block[0], e_batch.anchors[0], d_batch.anchors[0], proposal)
        edited = block_edit.block_logits(editor, embed, head, e_batch, inputs[None]).argmax(-1)[0]   # (A_e, W_e)
        rows = []
        for anchor, i, draft, labels in shared:
            prop, target, mine = proposal[i, :m], labels[:m], edited[e_index[anchor], 1:]
            a_prop = int(leading(prop, target))
            a_domino, a_editor = int(leading(draft[:m], target)), int(leading(mine[:m], target))
            a_corrector = int(leading(on_proposal[i, :m], target))
            rows.append({"anchor": anchor, "pass": 1, "accepted": int(leading(draft, labels)),
                         "proposal": draft.tolist(), "backbone": proposal[i].tolist(), "edited": mine.tolist(),
                         "accepted_proposal": a_prop,
                         "future_correct": int((prop[a_prop + 1:] == target[a_prop + 1:]).sum()),
                         "accepted_domino": a_domino, "accepted_editor": a_editor, "advantage": a_editor - a_domino,
                         "corrector": on_proposal[i].tolist(), "accepted_corrector": a_corrector,
                         "advantage_over_corrector": a_editor - a_corrector})
        replayed[name] = pd.DataFrame(rows, columns=COLUMNS)
    return replayed


def visited(rounds: pd.DataFrame) -> pd.DataFrame:
    """The rows of the rounds a greedy Domino decode visits (anchor a, then a + A + 1, ...)."""
    return editing.on_path(rounds, editing.decoded_path(rounds, 1))


def visited_rounds(replayed: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """:func:`visited` of every editor's replay (``{editor: rows}``)."""
    return {name: visited(rows) for name, rows in replayed.items()}


def select(networks: dict, names: list[str]) -> dict:
    """``{name: networks[name]}`` for ``names`` (the editors to compare), in that order."""
    missing = [n for n in names if n not in networks]
    if missing or not names:
        raise ValueError(f"editors must be a non-empty subset of {list(networks)}, got {list(names)}")
    return {name: networks[name] for name in names}


def measured_everywhere(slopes: pd.DataFrame, editors: list[str], slices) -> bool:
    """Does the slope table hold every (editor, comparison, slice) pair, ``"all"`` included?"""
    want = {(e, a, s) for e in editors for a in AGAINST for s in ["all", *slices]}
    return set(zip(slopes["editor"], slopes["against"], slopes["slice"])) == want


def replay_slices(hf_model, domino: DominoNetwork, editors: dict[str, FeatureBlockDrafter], greedy: pd.DataFrame,
                  prompts: dict[str, list[list[int]]], method: str = "ar") -> dict[str, pd.DataFrame]:
    """``{editor: rows}``: :func:`replay_rounds` over every greedy response of ``method`` in a
    benchmark grid (columns ``slice`` and ``prompt`` added)."""
    return replay_responses(lambda sequence, prompt_len: replay_rounds(hf_model, domino, editors, sequence,
                                                                       prompt_len), greedy, prompts, method)


def _cluster_weights(clusters: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """``(n_resamples + 1, rows)`` bootstrap weights: row 0 the sample itself (all ones), then
    each resample's count of draws of the row's cluster (clusters drawn with replacement)."""
    ids, inverse = np.unique(clusters, return_inverse=True)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(ids), np.full(len(ids), 1 / len(ids)), size=n_resamples).astype(float)
    return np.vstack([np.ones(len(clusters)), counts[:, inverse]])


#: What the editor's advantage is measured against: Domino's real draft (its corrector reading its own
#: corrections, as it decodes) or its corrector run once over the same proposal (a causal editor).
AGAINST = {"domino": "advantage", "corrector": "advantage_over_corrector"}


def _column(against: str) -> str:
    if against not in AGAINST:
        raise ValueError(f"against must be one of {list(AGAINST)}, got {against!r}")
    return AGAINST[against]


def _check_rounds(rounds: pd.DataFrame, n_resamples: int, level: float, column: str) -> None:
    missing = {"slice", "prompt", "future_correct", "accepted_proposal", column} - set(rounds.columns)
    if missing:
        raise ValueError(f"rounds must come from replay_slices, missing columns {sorted(missing)}")
    if rounds.empty:
        raise ValueError("no replayed rounds")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, numbers.Integral) or n_resamples < 100:
        raise ValueError(f"n_resamples must be an int >= 100, got {n_resamples!r}")
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")


def _clusters(rounds: pd.DataFrame) -> np.ndarray:
    return (rounds["slice"].astype(str) + "/" + rounds["prompt"].astype(str)).to_numpy()


def advantage_by_future(rounds: pd.DataFrame, n_resamples: int = 2000, seed: int = 0, level: float = 0.95,
                        against: str = "domino") -> pd.DataFrame:
    """Figure 3(b): mean advantage of the editor over Domino (``against``, :data:`AGAINST`) per
    number of correct future tokens, with a percentile interval from the response bootstrap, and
    the shares of rounds the editor wins, ties and loses."""
    column = _column(against)
    _check_rounds(rounds, n_resamples, level, column)
    weights = _cluster_weights(_clusters(rounds), n_resamples, seed)
    adv = rounds[column].to_numpy(float)
    rows = []
    for count in sorted(rounds["future_correct"].unique()):
        pick = (rounds["future_correct"] == count).to_numpy()
        w = weights[:, pick]
        total = w.sum(1)
        means = np.where(total > 0, (w * adv[pick]).sum(1) / np.where(total > 0, total, 1), np.nan)
        low, high = np.nanquantile(means[1:], [(1 - level) / 2, (1 + level) / 2])
        part = adv[pick]
        rows.append({"future_correct": int(count), "rounds": int(pick.sum()), "advantage": float(means[0]),
                     "ci_low": float(low), "ci_high": float(high), "wins": float((part > 0).mean()),
                     "ties": float((part == 0).mean()), "losses": float((part < 0).mean())})
    return pd.DataFrame(rows)


def _within_slope(x: np.ndarray, y: np.ndarray, strata: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least-squares slope of y on x with a fixed effect per stratum, for each row of
    ``weights`` ``(R, n)``: sum w (x - xbar_s)(y - ybar_s) / sum w (x - xbar_s)^2."""
    _, inverse = np.unique(strata, return_inverse=True)
    onehot = np.eye(inverse.max() + 1)[inverse]                       # (n, S)
    total = weights @ onehot                                          # (R, S)
    safe = np.where(total > 0, total, 1)
    x_bar = ((weights * x) @ onehot / safe) @ onehot.T                # (R, n): each row's stratum mean
    y_bar = ((weights * y) @ onehot / safe) @ onehot.T
    dx = x - x_bar
    denominator = (weights * dx * dx).sum(1)
    return np.where(denominator > 0, (weights * dx * (y - y_bar)).sum(1) / np.where(denominator > 0, denominator, 1),
                    np.nan)


def future_slope(rounds: pd.DataFrame, n_resamples: int = 2000, seed: int = 0, level: float = 0.95,
                 against: str = "domino") -> dict:
    """The slope of the advantage (over ``against``, :data:`AGAINST`) per extra correct future token
    after stratifying by the proposal's accepted-prefix length (seed 002: 0.140, 95% CI [0.130,
    0.150]), with a percentile interval from the response bootstrap; and the overall shares of
    rounds the editor wins, ties, loses."""
    column = _column(against)
    _check_rounds(rounds, n_resamples, level, column)
    weights = _cluster_weights(_clusters(rounds), n_resamples, seed)
    x, y = rounds["future_correct"].to_numpy(float), rounds[column].to_numpy(float)
    strata = rounds["accepted_proposal"].to_numpy()
    slopes = np.concatenate([_within_slope(x, y, strata, weights[i: i + 500])            # bounded memory
                             for i in range(0, len(weights), 500)])
    finite = slopes[1:][np.isfinite(slopes[1:])]         # NaN: a resample (or the sample) with no spread in x
    low, high = np.quantile(finite, [(1 - level) / 2, (1 + level) / 2]) if finite.size else (np.nan, np.nan)
    adv = rounds[column].to_numpy()
    return {"rounds": int(len(rounds)), "responses": int(len(np.unique(_clusters(rounds)))),
            "slope": float(slopes[0]), "slope_low": float(low), "slope_high": float(high),
            "mean_advantage": float(adv.mean()), "wins": float((adv > 0).mean()), "ties": float((adv == 0).mean()),
            "losses": float((adv < 0).mean())}


def slope_table(rounds: dict[str, pd.DataFrame], n_resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """:func:`future_slope` per editor (``{editor: visited rounds}``) and comparison
    (:data:`AGAINST`), over all slices (``"all"``) and per slice."""
    rows = []
    for editor, part in rounds.items():
        groups = [("all", part)] + [(name, group) for name, group in part.groupby("slice", sort=False)]
        rows += [{"editor": editor, "against": against, "slice": name,
                  **future_slope(group, n_resamples, seed, against=against)}
                 for against in AGAINST for name, group in groups]
    return pd.DataFrame(rows)


def by_future_table(rounds: dict[str, pd.DataFrame], n_resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """:func:`advantage_by_future` per editor (``{editor: visited rounds}``) and comparison
    (:data:`AGAINST`), with ``editor`` and ``against`` columns."""
    return pd.concat([advantage_by_future(part, n_resamples, seed, against=against).assign(editor=editor,
                                                                                           against=against)
                      for editor, part in rounds.items() for against in AGAINST], ignore_index=True)
