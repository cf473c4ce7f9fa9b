"""Tables of the baselines notebook (seed 002's Domino and DSpark against DFlash and DEdit, and
seed 001's Medusa, Hydra and EAGLE-3): the decoded methods, the drafters' training summary, tau by block size (Table 2(a)'s DFlash and
Domino columns) and DSpark's confidence-cut verification lengths."""

from __future__ import annotations

import pandas as pd

from .. import decode
from ..drafters.head_block import HeadBlockDrafter
from . import acceptance
from .bench import Method


def table1_methods(bundle, heads, *, passes: int, confidence_threshold: float) -> list[Method]:
    """Seed 002's Table 1 methods on ``bundle``'s target (a
    :class:`~spec_lib.training.block_drafters.BlockDrafters`) with ``heads`` (a
    :class:`~spec_lib.training.baseline_drafters.Baselines`): AR; DFlash P1 (W - 1 drafts);
    Domino and DSpark (W drafts), DSpark also cut at ``confidence_threshold``; DEdit at its widest
    W with ``passes`` passes; then, for Table 2(a), the window-expanded DFlash and Domino
    networks (``dflash_w<W'>``, ``domino_w<W'>``) at their own W'."""
    target, width = bundle.target, bundle.config.width
    wide = bundle.widest("dedit")
    methods = [Method("ar", 1), Method("deer", width - 1, drafter=bundle.drafter("dflash", 1), label="dflash P1"),
               Method("deer", width, drafter=heads.drafter(target, "domino"), label="domino"),
               Method("deer", width, drafter=heads.drafter(target, "dspark"), label="dspark"),
               Method("deer", width, drafter=heads.drafter(target, "dspark", confidence_threshold=confidence_threshold),
                      label=f"dspark (cut < {confidence_threshold:g})"),
               Method("deer", bundle.width_of(wide) - 1, drafter=bundle.drafter(wide, passes),
                      label=f"dedit W={bundle.width_of(wide)} P{passes}")]
    for name in sorted(n for n in bundle.networks if n.startswith("dflash_w")):
        methods.append(Method("deer", bundle.width_of(name) - 1, drafter=bundle.drafter(name, 1),
                              label=f"dflash W={bundle.width_of(name)} P1"))
    for name in sorted(n for n in heads.networks if n.startswith("domino_w")):
        w = int(heads.networks[name].config.block_size)
        methods.append(Method("deer", w, drafter=heads.drafter(target, name), label=f"domino W={w}"))
    return methods


def feature_methods(target, feature_heads, *, width: int, eagle_depth: int) -> list[Method]:
    """Seed 001's feature-level baselines on ``target`` (a
    :class:`~spec_lib.drafters.feature_target.FeatureTarget`), with ``feature_heads`` (a
    :class:`~spec_lib.training.feature_head_drafters.FeatureHeadDrafters`): Medusa (its heads in one
    pass) and Hydra (head by head) drafting ``width`` tokens, EAGLE-3 drafting ``eagle_depth``
    tokens, one pass of its layer each."""
    for name, value in (("width", width), ("eagle_depth", eagle_depth)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    methods = []
    for kind, label, k in (("medusa", "medusa", width), ("hydra", "hydra", width),
                           ("eagle3", f"eagle-3 k={eagle_depth}", eagle_depth)):
        drafter = feature_heads.drafter(target, kind)
        methods.append(Method("drafted" if drafter.kind == "diffusion" else "ar_draft", k, drafter=drafter,
                              label=label))
    return methods


def drafter_comparison(target, prompts: dict, methods: list[Method], *, n_prompts: int, n_resamples: int, seed: int,
                       convention: str, **kwargs) -> tuple[dict, pd.DataFrame]:
    """Greedy decodes of the first ``n_prompts`` prompts of each slice with every method on one
    target: ``({0.0: grid}, tau and speedup table)`` (:func:`spec_lib.studies.acceptance.run_by_temperature`,
    :func:`~spec_lib.studies.acceptance.tau_speedup_table` in ``convention``); ``kwargs`` go to the decodes."""
    if isinstance(n_prompts, bool) or not isinstance(n_prompts, int) or n_prompts < 1:
        raise ValueError(f"n_prompts must be an int >= 1, got {n_prompts!r}")
    fewer = {name: items[:n_prompts] for name, items in prompts.items()}
    runs = acceptance.run_by_temperature(target, fewer, methods, [0.0], seed=seed, **kwargs)
    return runs, acceptance.tau_speedup_table(runs, n_resamples, seed, convention=convention)


def dspark_drafters(methods: list[Method]) -> dict:
    """``{label: drafter}`` of the DSpark methods among ``methods`` (for :func:`verified_lengths`)."""
    return {m.name: m.drafter for m in methods if m.name.startswith("dspark")}


def tau_by_width(main: pd.DataFrame, methods: list[Method], temperature: float = 0.0) -> pd.DataFrame:
    """Table 2(a)'s DFlash and Domino columns: per drafter (``dflash`` P1, ``domino``), block
    size W and slice, tau and speedup of ``main`` (a :func:`~spec_lib.studies.acceptance.tau_speedup_table`)
    at ``temperature``; W is the size the network was trained at (DFlash drafts W - 1 tokens,
    Domino W)."""
    rows = []
    for m in methods:
        drafter = m.name.split()[0]
        if drafter not in ("dflash", "domino"):
            continue
        w = int(m.drafter.network.config.block_size)
        picked = main[(main["method"] == m.name) & (main["temperature"] == temperature)]
        rows += [{"drafter": drafter, "W": w, "method": m.name, **r} for r in
                 picked[["slice", "tau", "speedup", "speedup_low", "speedup_high"]].to_dict("records")]
    if not rows:
        raise ValueError("methods hold no dflash or domino method measured in main")
    return pd.DataFrame(rows).sort_values(["drafter", "W", "slice"]).reset_index(drop=True)


def training_summary(*histories: pd.DataFrame) -> pd.DataFrame:
    """Per head (of every training ``histories``, one per pipeline): steps, training seconds,
    first and final held-out accuracy and loss parts."""
    history = pd.concat(histories, ignore_index=True)
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
