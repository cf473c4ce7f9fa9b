"""DEER's alignment stages read from their training history and from decoding (seed 001,
Sec. 3.4; Figure 6: alpha sensitivity of Stage II; Table 3: the Stage II ablation)."""

from __future__ import annotations

import pandas as pd

from ..training.deer import deer_cache_key, drafter_names, objectives, stage2_name
from .acceptance import tau_by


def final_heldout(history: pd.DataFrame) -> pd.DataFrame:
    """The last held-out row of every trained model (step, loss, CE, accuracy)."""
    held = history[history["split"] == "heldout"]
    return held.groupby("model", sort=False).last()[["step", "loss", "ce", "accuracy"]].reset_index()


def alpha_sensitivity(history: pd.DataFrame, alphas, r_max: int, name) -> pd.DataFrame:
    """Per Stage II alpha: the first/last weight ratio alpha^(R_max - 1), first and last
    held-out loss, late-training loss spread and trend, and the largest gradient norm
    (``name(alpha)`` is the model's name in the history)."""
    rows = []
    for alpha in alphas:
        part = history[(history["model"] == name(alpha)) & (history["split"] == "train")]
        held = history[(history["model"] == name(alpha)) & (history["split"] == "heldout")]
        late = part["loss"].iloc[len(part) // 2:]
        quarter = max(1, len(late) // 4)
        rows.append({"alpha": alpha, "r_max": r_max, "weight_ratio_first_last": alpha ** (r_max - 1),
                     "first_heldout_loss": float(held["loss"].iloc[0]), "last_heldout_loss": float(held["loss"].iloc[-1]),
                     "last_heldout_ce": float(held["ce"].iloc[-1]), "late_train_loss_std": float(late.std()),
                     "late_train_loss_trend": float(late.iloc[-quarter:].mean() - late.iloc[:quarter].mean()),
                     "max_grad_norm": float(part["grad_norm"].max())})
    return pd.DataFrame(rows)


def every_stage_trained(history: pd.DataFrame, names) -> bool:
    """Whether the history holds every named model."""
    return set(names) <= set(history["model"])


def stage2_ablation(runs: pd.DataFrame, labels: list[str], pairs: dict[str, tuple[str, str]]) -> pd.DataFrame:
    """tau per slice of each drafter (columns in ``labels`` order) and, per variant of
    ``pairs = {variant: (stage1_label, stage2_label)}``, Stage II's gain over Stage I
    (column ``stage2_gain <variant>``); tau in DEER's convention (seed 001: draft tokens
    accepted per cycle)."""
    table = tau_by(runs, convention="deer").pivot(index="slice", columns="method", values="tau")[labels]
    for variant, (stage1, stage2) in pairs.items():
        table[f"stage2_gain {variant}"] = table[stage2] - table[stage1]
    return table.reset_index()


def objectives_comparison(ablation: pd.DataFrame, alpha_table: pd.DataFrame,
                          pairs: dict[str, tuple[str, str]]) -> pd.DataFrame:
    """One row per objective variant: mean tau over slices after Stage I and after Stage II,
    Stage II's gain, R_max, the first/last weight ratios alpha^(R_max - 1) spanned by the
    alpha sweep, and the late-training loss spread of Stage II at the smallest and largest
    alpha (``alpha_table`` from :func:`alpha_sensitivity` with a ``variant`` column)."""
    rows = []
    for variant, (stage1, stage2) in pairs.items():
        alphas = alpha_table[alpha_table["variant"] == variant].sort_values("alpha")
        rows.append({"variant": variant, "tau_stage1": float(ablation[stage1].mean()),
                     "tau_stage2": float(ablation[stage2].mean()),
                     "stage2_gain": float(ablation[f"stage2_gain {variant}"].mean()),
                     "r_max": int(alphas["r_max"].iloc[0]),
                     "weight_ratio_low": float(alphas["weight_ratio_first_last"].iloc[0]),
                     "weight_ratio_high": float(alphas["weight_ratio_first_last"].iloc[-1]),
                     "late_loss_std_low_alpha": float(alphas["late_train_loss_std"].iloc[0]),
                     "late_loss_std_high_alpha": float(alphas["late_train_loss_std"].iloc[-1]),
                     "max_grad_norm_high_alpha": float(alphas["max_grad_norm"].iloc[-1])})
    return pd.DataFrame(rows)


# ----- notebook 20's two objective variants side by side --------------------------------------------

def load_variants(presets: dict[str, str]) -> dict:
    """``{variant: DeerModels}`` for ``{variant: D2A preset}`` (trained on first use, cached)."""
    from ..training.registry import load

    return {variant: load("deer", name) for variant, name in presets.items()}


def variant_records(variants: dict) -> pd.DataFrame:
    """Per variant: which objectives it trains, model sizes, data and training time."""
    return pd.DataFrame([{"variant": v, "objectives": objectives(t.config),
                          "target_parameters_M": t.record["target_parameters"] / 1e6,
                          "drafter_parameters_M": t.record["drafter_parameters"] / 1e6,
                          "corpus_tokens": t.record["corpus_tokens"], "teacher_rows": t.record["teacher_rows"],
                          "answer_len": t.config.answer_len, "teacher_seconds": t.record["teacher_seconds"],
                          "train_minutes": t.record["train_seconds"] / 60, "drafter_key": deer_cache_key(t.config)}
                         for v, t in variants.items()])


def final_heldout_by_variant(variants: dict) -> pd.DataFrame:
    """:func:`final_heldout` of every variant, with a ``variant`` column."""
    return pd.concat([final_heldout(t.history).assign(variant=v) for v, t in variants.items()], ignore_index=True)


def alpha_table(variants: dict) -> pd.DataFrame:
    """:func:`alpha_sensitivity` of every variant (its own alphas and R_max), with a ``variant`` column."""
    return pd.concat([alpha_sensitivity(t.history, t.config.alphas, t.config.r_max, stage2_name).assign(variant=v)
                      for v, t in variants.items()], ignore_index=True)


def ablation_drafters(variants: dict, pretrained_from: str) -> tuple[dict, dict[str, tuple[str, str]]]:
    """The drafters of the Stage II ablation, ``{label: drafter}``: the masked-diffusion drafter
    before alignment (of ``pretrained_from``) and each variant's Stage I and Stage I + II
    drafters; and ``pairs = {variant: (stage1_label, stage2_label)}``."""
    drafters = {"pre-trained dLLM": variants[pretrained_from].diffusion_drafter("pretrained")}
    pairs = {}
    for variant, trained in variants.items():
        pairs[variant] = (f"{variant} Stage I", f"{variant} Stage I + II")
        drafters[pairs[variant][0]] = trained.diffusion_drafter("stage1")
        drafters[pairs[variant][1]] = trained.diffusion_drafter(stage2_name(trained.config.alpha))
    return drafters, pairs


def every_variant_trained(variants: dict) -> bool:
    """Whether every variant's history holds every model its pipeline saves."""
    return all(every_stage_trained(t.history, drafter_names(t.config)) for t in variants.values())


def training_costs(deer, feature_heads) -> pd.DataFrame:
    """Seed 001's Table 8 here: what each drafter's training cost on this machine, from the
    training histories of ``deer`` (a :class:`~spec_lib.training.deer_models.DeerModels`) and
    ``feature_heads`` (a :class:`~spec_lib.training.feature_head_drafters.FeatureHeadDrafters`).

    One row per drafter: its trained ``stages``, ``steps``, ``parameters`` and ``train_minutes``
    (each stage's last training-row ``seconds``, summed), and ``relative_to_deer``.  DEER is its
    alignment (Stage I + II, seed 001's 240 GPU hours); the masked-diffusion pre-training it starts
    from (seed 001 converts an existing model instead) and the AR drafter are rows of their own.
    The teacher answers each set is trained on are generated once and not counted.
    """
    def per_stage(history: pd.DataFrame) -> pd.DataFrame:
        train = history[history["split"] == "train"]
        return train.groupby("model", sort=False).agg(steps=("step", "max"), seconds=("seconds", "max"))   # steps from 1

    deer_stages = per_stage(deer.history)
    alignment = ["stage1", stage2_name(deer.config.alpha)]        # the drafter DEER decodes with (other alphas: Fig. 6)
    def size(model) -> int:
        return int(sum(p.numel() for p in model.parameters()))

    dllm, ar = size(deer.hf_models["stage1"]), size(deer.hf_models["ar_distilled"])
    groups = {"DEER (D2A: Stage I + II)": (deer_stages, alignment, dllm),
              "DEER's dLLM pre-training": (deer_stages, ["pretrained"], dllm),
              "AR drafter (pre-training + distillation)": (deer_stages, ["ar_pretrained", "ar_distilled"], ar)}
    feature_stages = per_stage(feature_heads.history)
    names = {"medusa": "Medusa", "hydra": "Hydra", "eagle3": "EAGLE-3"}
    for kind in feature_stages.index:
        groups[names.get(kind, kind)] = (feature_stages, [kind], feature_heads.record["parameters"][kind])
    rows = []
    for drafter, (stages, names_, parameters) in groups.items():
        present = [s for s in names_ if s in stages.index]
        if not present:
            continue
        rows.append({"drafter": drafter, "stages": " + ".join(present),
                     "steps": int(stages.loc[present, "steps"].sum()), "parameters": parameters,
                     "train_minutes": float(stages.loc[present, "seconds"].sum()) / 60})
    table = pd.DataFrame(rows)
    table["relative_to_deer"] = table["train_minutes"] / table["train_minutes"].iloc[0]
    return table


def regenerate_blocks(hf_model, mask_token_id: int, sep_token_id: int, prefix: list[int], *, blocks: int, k: int,
                      per_iteration: int, context: int | None = None) -> pd.DataFrame:
    """Seed 001, Sec. 4.5 and Figure 5, "reliable block regeneration": the dLLM alone extends
    ``prefix`` block by block.  A block starts as ``[prefix tail][SEP][MASK x k]``; each iteration
    fills the ``per_iteration`` masked slots it is most confident about with their argmax, and the
    slots left masked are predicted again with the filled ones visible; a full block joins the
    prefix and the next one starts.  One row per generated token: ``block``, ``slot``, the global
    ``iteration`` that produced it, ``token`` and ``confidence`` (its probability then)."""
    import torch

    from ..masks.predicates import padded_visible, to_additive

    for name, value in (("blocks", blocks), ("k", k), ("per_iteration", per_iteration)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    device = next(hf_model.parameters()).device
    dtype = next(hf_model.parameters()).dtype
    text, rows, iteration = list(prefix), [], 0
    for b in range(blocks):
        tail = text[-context:] if context else text
        block = torch.full((k,), mask_token_id, dtype=torch.long, device=device)
        open_ = torch.ones(k, dtype=torch.bool, device=device)              # slots still masked
        while bool(open_.any()):
            ids = torch.cat([torch.tensor(tail + [sep_token_id], device=device), block])[None]
            mask = to_additive(padded_visible(torch.tensor([ids.shape[1]], device=device), ids.shape[1]), dtype)[:, None]
            with torch.inference_mode():
                probs = hf_model(input_ids=ids, attention_mask=mask, use_cache=False,
                                 logits_to_keep=k).logits[0].float().softmax(-1)
                probs[:, [mask_token_id, sep_token_id]] = 0.0               # a filled slot holds a text token
                confidence, token = probs.max(-1)
            chosen = torch.where(open_, confidence, -1.0).topk(min(per_iteration, int(open_.sum()))).indices
            block[chosen] = token[chosen]
            open_[chosen] = False
            rows += [{"block": b, "slot": int(s), "iteration": iteration, "token": int(token[s]),
                      "confidence": float(confidence[s])} for s in chosen.tolist()]
            iteration += 1
        text += block.tolist()
    return pd.DataFrame(rows).sort_values(["block", "slot"], ignore_index=True)


def regeneration_agreement(target_hf, drafters: dict, prompts: dict, *, mask_token_id: int, sep_token_id: int,
                           blocks: int, k: int, per_iteration: int, context: int | None = None
                           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`regenerate_blocks` with each drafter (``{label: hf_model}``) from every prompt of every
    slice: ``(tokens, summary)``.  ``tokens`` holds every generated token (with ``drafter``,
    ``slice``, ``prompt``) and whether it equals the target's greedy token at the same position
    (the target decoding from the same prompt: what "coherent" is measured against here); the
    summary per drafter and slice holds that agreement, the leading agreement (tokens before the
    first disagreement, per prompt), iterations per block and the repetition share of the text."""
    import torch

    from .repetition import repetition_share

    tables, summary = [], []
    for name, items in prompts.items():
        for i, prompt in enumerate(items):
            with torch.inference_mode():
                reference = target_hf.generate(torch.tensor([list(prompt)]), max_new_tokens=blocks * k,
                                               do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(prompt):]
            for label, model in drafters.items():
                rows = regenerate_blocks(model, mask_token_id, sep_token_id, list(prompt), blocks=blocks, k=k,
                                         per_iteration=per_iteration, context=context)
                position = rows["block"] * k + rows["slot"]
                rows["agrees"] = rows["token"].to_numpy() == reference.numpy()[position.to_numpy()]
                rows = rows.assign(drafter=label, slice=name, prompt=i)
                tables.append(rows)
                ordered = rows.sort_values(["block", "slot"])["agrees"].to_numpy()
                leading = int(ordered.argmin()) if not ordered.all() else len(ordered)
                summary.append({"drafter": label, "slice": name, "prompt": i, "agreement": float(ordered.mean()),
                                "leading_agreement": leading,
                                "iterations_per_block": rows.groupby("block")["iteration"].nunique().mean(),
                                "repetition": repetition_share(rows.sort_values(["block", "slot"])["token"].tolist())})
    per_prompt = pd.DataFrame(summary)
    table = per_prompt.groupby(["drafter", "slice"], sort=False, as_index=False)[
        ["agreement", "leading_agreement", "iterations_per_block", "repetition"]].mean()
    return pd.concat(tables, ignore_index=True), table
