"""What editing does, measured round by round (seed 002, Sec. 4.3 Table 2(a), Sec. 5 Figure 3(a),
Table 3, Figure 4, App. A.4 and Figure 5).

Rounds are replayed teacher-forced on the target's own greedy output: for a prompt and its
greedy continuation y, a round anchored at position a has the verified prefix y_{<=a}, and
the target's greedy tokens after it are exactly y_{a+1..}; so the number of leading slots
of a proposal equal to y_{a+1..} is the number of draft tokens that round accepts (A,
bonus excluded).  Every anchor of the output is replayed (not only the anchors one decode
happens to visit), all in one batched drafter pass per editing pass, with the training
code's block mask (:func:`anchor_blocks`: one block per
eligible anchor, none for the prompt's positions).

Replaying every anchor weights text by tokens, not by rounds: a long accepted stretch holds many
anchors but costs one round.  :func:`decoded_path` therefore walks the rounds a greedy decode
with a given pass count would visit (anchor a, then a + A + 1, ...); tau, the edit effects and
the visibility table are means over those rounds.  The walk differs from a real decode only in
its first round, which here already has the prompt's target features (the decoder's first round
drafts from the anchor alone; ``replay_agrees_with_decoding`` checks the rest round for round).

Table 3's fixed-weight visibility intervention keeps the weights and the P1 proposal and
replaces the bidirectional attention inside the proposal by a lower-triangular one for the
editing passes (``edit_visibility="causal"``).
"""

from __future__ import annotations

from collections.abc import Callable

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

VISIBILITY = ("bidirectional", "causal")


def causal_block(batch: block_edit.AnchorBatch, width: int) -> block_edit.AnchorBatch:
    """The same batch with a lower-triangular mask inside each block (context unchanged)."""
    length = batch.features.shape[1]
    slot = torch.arange(batch.mask.shape[-2], device=batch.mask.device) % width
    mask = batch.mask.clone()
    mask[..., length:] &= slot[None, :] <= slot[:, None]
    return block_edit.AnchorBatch(batch.features, batch.anchors, batch.block, batch.labels, batch.positions, mask)


@torch.no_grad()
def replay_rounds(hf_model, network, sequence: list[int], prompt_len: int, *, passes: int,
                  edit_visibility: str = "bidirectional") -> pd.DataFrame:
    """One row per (anchor, pass): ``accepted`` A, ``correct_after_reject`` (correct slots after
    the first rejected one), ``changed`` (slots a pass changed) and ``proposal`` (the tokens).

    ``sequence`` is the prompt followed by the target's greedy continuation; anchors run
    from the last prompt token while a whole block of labels fits in the sequence.
    """
    if edit_visibility not in VISIBILITY:
        raise ValueError(f"edit_visibility must be one of {list(VISIBILITY)}, got {edit_visibility!r}")
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError(f"passes must be an int >= 1, got {passes!r}")
    width = int(network.config.block_size)
    seq = torch.as_tensor(sequence, dtype=torch.long)[None]
    if seq.shape[1] - prompt_len < width:                      # no complete block: nothing to replay
        return pd.DataFrame(columns=["anchor", "pass", "accepted", "correct_after_reject", "changed", "proposal"])
    batch = anchor_blocks(hf_model, network, seq, prompt_len)
    real = (batch.labels[..., 1:] != block_edit.IGNORE).all(-1)[0]   # complete blocks only
    edit_batch = causal_block(batch, width) if edit_visibility == "causal" else batch
    embed, head = hf_model.get_input_embeddings(), hf_model.get_output_embeddings()
    inputs, previous, rows = batch.block, None, []
    for step in range(1, passes + 1):
        logits = block_edit.block_logits(network, embed, head, batch if step == 1 else edit_batch, inputs)
        proposal = logits.argmax(-1)
        proposal[..., 0] = batch.block[..., 0]
        accepted = leading(proposal[..., 1:], batch.labels[..., 1:])[0]
        correct = (proposal[..., 1:] == batch.labels[..., 1:])[0]
        after = torch.arange(width - 1)[None] > accepted[:, None]
        changed = ((proposal[..., 1:] != previous[..., 1:]).sum(-1)[0] if previous is not None
                   else torch.full_like(accepted, width - 1))
        for i in torch.nonzero(real).flatten().tolist():
            rows.append({"anchor": int(batch.anchors[0, i]), "pass": step, "accepted": int(accepted[i]),
                         "correct_after_reject": int((correct[i] & after[i]).sum()), "changed": int(changed[i]),
                         "proposal": proposal[0, i, 1:].tolist()})
        previous, inputs = proposal, proposal
    return pd.DataFrame(rows)


def replay_slices(hf_model, network, runs: pd.DataFrame, prompts: dict[str, list[list[int]]], *, passes: int,
                  edit_visibility: str = "bidirectional", method: str = "ar") -> pd.DataFrame:
    """:func:`replay_rounds` over every greedy response of ``method`` in a benchmark grid
    (:func:`replay_responses`; columns ``slice`` and ``prompt`` added)."""
    def replay(sequence: list[int], prompt_len: int) -> dict[str, pd.DataFrame]:
        return {"rows": replay_rounds(hf_model, network, sequence, prompt_len, passes=passes,
                                      edit_visibility=edit_visibility)}

    return replay_responses(replay, runs, prompts, method)["rows"]


def decoded_path(rounds: pd.DataFrame, step: int) -> pd.DataFrame:
    """The rounds a greedy decode verifying P_``step`` visits: per response, from the first
    anchor (the last prompt token), each next anchor is a + A + 1, while a complete block fits.
    Returns the visited anchors (``slice, prompt, anchor``)."""
    part = rounds[rounds["pass"] == step]
    visited = []
    for (name, prompt), group in part.groupby(["slice", "prompt"], sort=False):
        accepted = dict(zip(group["anchor"], group["accepted"]))
        anchor = min(accepted)
        while anchor in accepted:
            visited.append({"slice": name, "prompt": prompt, "anchor": anchor})
            anchor += accepted[anchor] + 1
    return pd.DataFrame(visited, columns=["slice", "prompt", "anchor"])


def on_path(rounds: pd.DataFrame, path: pd.DataFrame) -> pd.DataFrame:
    """The replayed rows (every pass) of the anchors of ``path``."""
    return rounds.merge(path, on=["slice", "prompt", "anchor"])


def tau_by_pass(rounds: pd.DataFrame, by=("slice",)) -> pd.DataFrame:
    """tau = E[A + 1] over the rounds a decode verifying P_K visits, per pass K and slice, with
    the macro average over slices (``rounds`` per response along each pass's own path)."""
    tables = []
    for step in sorted(rounds["pass"].unique()):
        visited = on_path(rounds[rounds["pass"] == step], decoded_path(rounds, step))
        tables.append(visited.groupby(list(by))["accepted"].agg(tau="mean", rounds="size").reset_index()
                      .assign(**{"pass": step}))
    table = pd.concat(tables, ignore_index=True)
    table["tau"] += 1
    macro = table.groupby("pass", as_index=False).agg(tau=("tau", "mean"), rounds=("rounds", "sum"))
    return pd.concat([table, macro.assign(**{b: "macro" for b in by})], ignore_index=True)


def edit_effects(rounds: pd.DataFrame, from_pass: int = 1, to_pass: int = 2, big: int = 5) -> dict:
    """Figure 3(a), over the rounds a decode verifying P_``to_pass`` visits: share where the
    edit shortens, keeps or extends A relative to the P_``from_pass`` proposal at the same
    anchor, extends it by >= ``big``, and the mean gain E[A_to - A_from]."""
    visited = on_path(rounds, decoded_path(rounds, to_pass))
    wide = visited.pivot_table(index=["slice", "prompt", "anchor"], columns="pass", values="accepted")
    gain = wide[to_pass] - wide[from_pass]
    return {"rounds": int(len(gain)), "shortens": float((gain < 0).mean()), "keeps": float((gain == 0).mean()),
            "extends": float((gain > 0).mean()), f"extends_by_{big}_or_more": float((gain >= big).mean()),
            "mean_gain": float(gain.mean())}


def visibility_table(bidirectional: pd.DataFrame, causal: pd.DataFrame, passes=(2, 3)) -> pd.DataFrame:
    """Table 3: mean A per slice at each editing pass with bidirectional (as trained) and
    lower-triangular attention inside the proposal, same weights and P1, over the same rounds
    (those the bidirectional decode at that pass visits), and the difference."""
    rows = []
    for step in passes:
        path = decoded_path(bidirectional, step)
        bi = on_path(bidirectional[bidirectional["pass"] == step], path).groupby("slice")["accepted"].mean()
        ca = on_path(causal[causal["pass"] == step], path).groupby("slice")["accepted"].mean()
        for name in bi.index:
            rows.append({"slice": name, "pass": f"P{step}", "bidirectional": bi[name], "causal": ca[name],
                         "delta": bi[name] - ca[name], "rounds": int(len(path[path["slice"] == name]))})
    return pd.DataFrame(rows)


_KEYS = ["slice", "prompt", "anchor"]


def repair_and_corruption(bidirectional: pd.DataFrame, causal: pd.DataFrame, greedy: pd.DataFrame, prompts: dict,
                          passes=(2, 3)) -> pd.DataFrame:
    """Seed 002, App. A.4 "Repair and preservation": per slice, pass P_K and attention inside the
    proposal, over the rounds the bidirectional decode at P_K visits (as :func:`visibility_table`):
    ``repairs``, the share of rounds with a rejected P1 slot in which P_K's token at P1's first
    rejected slot is the target's; ``corrupts``, the share of rounds in which P_K accepts fewer
    tokens than P1 (an edit broke a slot of P1's accepted prefix); with the round counts."""
    sequences: dict[tuple, list[int]] = {}

    def label(row) -> int:
        key = (row["slice"], row["prompt"])
        if key not in sequences:
            sequences[key] = _sequence(greedy, prompts, *key)
        return sequences[key][row["anchor"] + 1 + row["accepted_p1"]]

    rows = []
    for step in passes:
        path = decoded_path(bidirectional, step)
        for attention, rounds in (("bidirectional", bidirectional), ("causal", causal)):
            first = on_path(rounds[rounds["pass"] == 1], path)[[*_KEYS, "accepted", "proposal"]]
            later = on_path(rounds[rounds["pass"] == step], path)[[*_KEYS, "accepted", "proposal"]]
            both = first.merge(later, on=_KEYS, suffixes=("_p1", "_pk"))
            rejected = both[both["accepted_p1"] < both["proposal_p1"].str.len()].copy()
            rejected["repaired"] = [r["proposal_pk"][r["accepted_p1"]] == label(r) for _, r in rejected.iterrows()]
            both["corrupted"] = both["accepted_pk"] < both["accepted_p1"]
            for name in both["slice"].unique():
                part, bad = both[both["slice"] == name], rejected[rejected["slice"] == name]
                rows.append({"slice": name, "pass": f"P{step}", "attention": attention,
                             "repairs": float(bad["repaired"].mean()) if len(bad) else float("nan"),
                             "corrupts": float(part["corrupted"].mean()), "rounds": int(len(part)),
                             "rounds_with_a_rejection": int(len(bad))})
    return pd.DataFrame(rows)


def gain_by_future(bidirectional: pd.DataFrame, causal: pd.DataFrame, passes=(2, 3), cap: int = 6) -> pd.DataFrame:
    """Seed 002, App. A.4 and Figure 5: the mean A_bidirectional - A_causal at P_K by the number of
    P1's correct tokens after its first rejected slot (``cap`` or more pooled), over the rounds the
    bidirectional decode at P_K visits, with the round counts."""
    tables = []
    for step in passes:
        path = decoded_path(bidirectional, step)
        future = on_path(bidirectional[bidirectional["pass"] == 1], path)[[*_KEYS, "correct_after_reject"]]
        bi = on_path(bidirectional[bidirectional["pass"] == step], path)[[*_KEYS, "accepted"]]
        ca = on_path(causal[causal["pass"] == step], path)[[*_KEYS, "accepted"]]
        merged = future.merge(bi, on=_KEYS).merge(ca, on=_KEYS, suffixes=("_bidirectional", "_causal"))
        merged["delta"] = merged["accepted_bidirectional"] - merged["accepted_causal"]
        merged["correct_future_tokens"] = merged["correct_after_reject"].clip(upper=cap)
        tables.append(merged.groupby("correct_future_tokens", as_index=False)
                      .agg(delta=("delta", "mean"), rounds=("delta", "size")).assign(**{"pass": f"P{step}"}))
    return pd.concat(tables, ignore_index=True)


def round_picture(round_rows: pd.DataFrame, sequence: list[int], anchor: int, tokenizer) -> pd.DataFrame:
    """Figure 4: one round slot by slot: the target's tokens, each pass's proposal, and whether
    each proposal token equals the target's (``P<k> ok``)."""
    picked = round_rows.sort_values("pass")
    if picked["anchor"].nunique() != 1 or int(picked["anchor"].iloc[0]) != anchor:
        raise ValueError(f"round_rows must be the rows of anchor {anchor} (one response), got anchors "
                         f"{sorted(picked['anchor'].unique())}")
    width = len(picked.iloc[0]["proposal"])
    target = sequence[anchor + 1: anchor + 1 + width]
    table = {"target": [tokenizer.decode([t]) for t in target]}
    for _, row in picked.iterrows():
        table[f"P{row['pass']}"] = [tokenizer.decode([t]) for t in row["proposal"]]
        table[f"P{row['pass']} ok"] = [int(t) == int(g) for t, g in zip(row["proposal"], target)]
    return pd.DataFrame(table, index=pd.RangeIndex(1, width + 1, name="slot"))


def tau_by_pass_table(replayed: dict[str, pd.DataFrame], widths: dict[str, int] | None = None) -> pd.DataFrame:
    """:func:`tau_by_pass` of several drafters (``{name: rounds}``), with a ``drafter`` column
    and, given ``widths`` (``{name: W}``), a ``W`` column (Table 2(a): tau by W and passes)."""
    table = pd.concat([tau_by_pass(rounds).assign(drafter=name) for name, rounds in replayed.items()],
                      ignore_index=True)
    if widths is not None:
        missing = sorted(set(replayed) - set(widths))
        if missing:
            raise ValueError(f"widths must give W for every drafter, missing {missing}")
        table["W"] = table["drafter"].map(widths)
    return table


def edit_effects_table(replayed: dict[str, pd.DataFrame], names: list[str]) -> pd.DataFrame:
    """:func:`edit_effects` (P1 -> P2) of the drafters ``names``, one row each."""
    return pd.DataFrame([{"drafter": name, **edit_effects(replayed[name])} for name in names if name in replayed])


def _sequence(greedy: pd.DataFrame, prompts: dict, slice_: str, prompt: int) -> list[int]:
    row = greedy[(greedy["slice"] == slice_) & (greedy["prompt"] == prompt)].iloc[0]
    return list(prompts[slice_][prompt]) + list(row["output"])


def most_improved_round(rounds: pd.DataFrame, greedy: pd.DataFrame, prompts: dict
                        ) -> tuple[pd.DataFrame, list[int], int]:
    """``(rows, sequence, anchor)`` of the round, among those decodes verifying the last pass
    visit, whose A grew most from P1 to the last pass (``rows``: every pass of that round;
    ties go to the first slice and prompt)."""
    if rounds.empty:
        raise ValueError("no replayed rounds")
    last = int(rounds["pass"].max())
    visited = on_path(rounds, decoded_path(rounds, last))
    wide = visited.pivot_table(index=["slice", "prompt", "anchor"], columns="pass", values="accepted", sort=False)
    name, prompt, anchor = (wide[last] - wide[1]).idxmax()
    rows = rounds[(rounds["slice"] == name) & (rounds["prompt"] == prompt) & (rounds["anchor"] == anchor)]
    return rows, _sequence(greedy, prompts, name, int(prompt)), int(anchor)


def replay_agrees_with_decoding(target, drafter, rounds: pd.DataFrame, greedy: pd.DataFrame, prompts: dict,
                                min_share: float = 0.98) -> bool:
    """Does the replay predict what decoding accepts?  Each response is decoded greedily with
    ``drafter`` (its passes must equal the replayed pass); at every complete round after the
    first (the first has no target features yet) the decoded accepted drafts must equal the
    replayed A at that anchor, for at least ``min_share`` of rounds (float32 ties aside)."""
    from ..decoding import decode

    step = drafter.passes
    agree = total = 0
    for row in greedy.itertuples():
        prompt = prompts[row.slice][row.prompt]
        res = decode(target, prompt, schedule="deer", width=len(rounds["proposal"].iloc[0]),
                     max_new_tokens=len(row.output), drafter=drafter)
        replay = rounds[(rounds["slice"] == row.slice) & (rounds["prompt"] == row.prompt) & (rounds["pass"] == step)]
        replay = replay.set_index("anchor")["accepted"]
        anchor = len(prompt) - 1
        for i, appended in enumerate(res.accepted[:-1]):
            if i and anchor in replay.index:
                total += 1
                agree += int(replay[anchor] == appended - 1)
            anchor += appended
    return total > 0 and agree >= min_share * total
