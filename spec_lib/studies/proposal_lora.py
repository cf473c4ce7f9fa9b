"""Studies behind notebook 17: proposal-only LoRA (seed 000, App. F.2, Tables 4-5).

* :func:`load_models`: the models compared, from presets trained here or from a local checkpoint
  plus a proposal-only adapter trained elsewhere (``checkpoint_path`` + ``adapter_path``);
  :func:`sources`, :func:`training_summary`, :func:`losses_decreased` and :func:`training_checks`
  say where they came from and how their training went (nothing to check for an adapter trained
  elsewhere).
* :func:`runners`: AR, Linear-SS, Packed-SS and Quadratic-SS on each model (the dual-mode model
  of notebook 10, and the AR base with its adapter in ``paper`` and ``lean`` mode), one
  interleaved grid (:func:`spec_lib.studies.grid.run_grid`).
* :func:`table4`: per model and schedule, means per response of NFE, model time, non-model
  time, wall time and tokens, and throughput; :func:`packed_vs_linear`: the Packed/Linear
  throughput ratio and wall-time difference with paired CIs, per model.
* :func:`table5`: model time per iteration after the first call, with the rows per call and
  the adapter's selected / evaluated rows (:func:`spec_lib.lora.adapter_rows`).
* :func:`lean_vs_paper`: model time per call of the lean variant over the paper's, per
  schedule, with a paired bootstrap interval over prompts.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from ..lora import adapter_rows
from ..decoding import decode
from . import grid
from .bench import paired_bootstrap

#: schedules of Tables 4-5 (AR is the reference of the identity check)
SCHEDULES = ("ar", "linear", "packed", "quadratic")


def load_models(model_preset: str, lora_preset: str, checkpoint_path: str = "", adapter_path: str = "", *,
                dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False,
                mask_token_id: int | None = None):
    """``(dual, lora, tokenizer, trained)``: the dual-mode model beside the LoRA models, the LoRA
    models ``{"base", "paper", "lean"}`` over one set of weights
    (:func:`spec_lib.training.lora_models.every_mode`), the tokenizer, and the adapter's training
    record or None.

    * Both paths empty: notebook 10's model of ``model_preset`` and the AR base + adapter of
      ``lora_preset``, trained here on first use
      (:func:`spec_lib.load`); they must share a tokenizer.
    * ``checkpoint_path`` and ``adapter_path``: a local checkpoint plus a proposal-only adapter
      trained elsewhere (:func:`~spec_lib.training.checkpoints.load_dual_mode` with
      ``adapter_path``; the presets are not used); ``dual`` is then the checkpoint without its
      adapter (``lora["base"]``: its own diffusion mode), and ``trained`` is None; the MASK id is
      ``mask_token_id`` (None or negative: the checkpoint's config or tokenizer).
    """
    if bool(checkpoint_path) != bool(adapter_path):
        raise ValueError(f"checkpoint_path and adapter_path go together (a checkpoint and the proposal-only adapter "
                         f"trained for it), or both stay empty for the presets; got checkpoint_path "
                         f"{checkpoint_path!r}, adapter_path {adapter_path!r}")
    from ..training.lora_models import load_lora_checkpoint
    from ..training.registry import load

    if checkpoint_path:
        mask = None if mask_token_id is None or mask_token_id < 0 else mask_token_id
        lora, tokenizer = load_lora_checkpoint(checkpoint_path, adapter_path, mask_token_id=mask, dtype=dtype,
                                               device=device, trust_remote_code=trust_remote_code)
        return lora["base"], lora, tokenizer, None
    dual, tokenizer = load("target", model_preset, dtype=dtype, device=device)
    lora, lora_tokenizer, trained = load("lora", lora_preset, dtype=dtype, device=device)
    if lora_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"model_preset {model_preset!r} and lora_preset {lora_preset!r} tokenize differently; "
                         f"both must use notebook 10's tokenizer")
    return dual, lora, tokenizer, trained


def sources(model_preset: str, lora_preset: str, trained) -> dict:
    """For a run's results: the checkpoint keys of the presets and the adapter's training record,
    or None each for a checkpoint plus an adapter given by path (``trained`` None; the paths name
    a machine, so they are not recorded)."""
    if trained is None:
        return {"checkpoint_key": None, "lora_key": None, "record": None}
    from ..training.checkpoints import model_key
    from ..training.proposal_lora import lora_key

    return {"checkpoint_key": model_key(model_preset), "lora_key": lora_key(lora_preset), "record": trained.record}


def runners(models: dict, block: int, block_quadratic: int) -> list[grid.Runner]:
    """Every schedule on every model (``{label: SpecModel}``); names are ``"<label>: <schedule>"``."""
    widths = {"ar": 1, "linear": block - 1, "packed": block - 1, "quadratic": block_quadratic - 1}
    return [grid.Runner(f"{label}: {schedule}", schedule, widths[schedule],
                        functools.partial(decode, model, schedule=schedule, width=widths[schedule]),
                        {"lm": label, "adapter": getattr(model, "mode", "-")})
            for label, model in models.items() for schedule in SCHEDULES]


def identity(runs: pd.DataFrame, reference_model: str) -> pd.DataFrame:
    """Per model and schedule: responses identical to ``reference_model``'s AR output on the
    same prompt (LoRA models share the AR base, so every schedule must reproduce its AR output)."""
    ref = runs[runs["method"] == f"{reference_model}: ar"].set_index(["slice", "prompt"])["output"]
    part = runs[runs["lm"] != "dual-mode"].copy()
    part["identical"] = [out == ref.loc[(s, p)] for s, p, out in zip(part["slice"], part["prompt"], part["output"])]
    return part.groupby(["lm", "schedule"], sort=False)["identical"].agg(["sum", "size"]).reset_index().rename(
        columns={"sum": "identical", "size": "responses"})


def table4(runs: pd.DataFrame) -> pd.DataFrame:
    """Means per response (App. F.2, Table 4) per model (``lm``) and schedule; model + non-model = wall."""
    out = runs.assign(non_model=runs["wall"] - runs["model"]).groupby(["lm", "schedule"], sort=False).agg(
        responses=("tokens", "size"), nfe=("nfe", "mean"), model_s=("model", "mean"), non_model_s=("non_model", "mean"),
        wall_s=("wall", "mean"), tokens=("tokens", "mean"), total_tokens=("tokens", "sum"),
        total_wall=("wall", "sum")).reset_index()
    out["throughput"] = out["total_tokens"] / out["total_wall"]
    return out.drop(columns=["total_tokens", "total_wall"])


def packed_vs_linear(runs: pd.DataFrame, n_resamples: int, seed: int = 0) -> pd.DataFrame:
    """Packed-SS over Linear-SS per model: paired bootstrap ratios and the wall-time difference,
    all slices pooled (prompts of different slices are different pairs)."""
    pooled = runs.assign(prompt=runs["slice"] + ":" + runs["prompt"].astype(str), slice="all")
    parts = [paired_bootstrap(group, f"{label}: linear", methods=[f"{label}: packed"], n_resamples=n_resamples,
                              seed=seed).assign(lm=label)
             for label, group in pooled.groupby("lm", sort=False)]
    return pd.concat(parts, ignore_index=True)


def table5(runs: pd.DataFrame) -> pd.DataFrame:
    """Model time per iteration after the first call (Linear-SS: both calls), iterations per
    response after the first, rows per iteration and the adapter's selected / evaluated rows per
    iteration at a full draft (App. F.2, Table 5)."""
    rows = []
    for (label, schedule), group in runs[runs["schedule"] != "ar"].groupby(["lm", "schedule"], sort=False):
        calls = 2 if schedule == "linear" else 1
        seconds = np.concatenate([np.asarray(s[calls:]) for s in group["call_seconds"]])
        width, mode = int(group["width"].iloc[0]), group["adapter"].iloc[0]
        kinds = ("linear_draft", "verify") if schedule == "linear" else (schedule,)
        counts = [adapter_rows(kind, 0 if kind == "linear_draft" else width, width, mode if mode != "-" else "lean")
                  for kind in kinds]
        lora = mode != "-"
        rows.append({"lm": label, "schedule": schedule, "B": width + 1,
                     "iterations_after_first": float(group["iterations"].mean() - 1),
                     "model_ms_per_iteration": 1e3 * calls * float(seconds.mean()),
                     "rows_per_iteration": sum(c["rows"] for c in counts),
                     "selected": sum(c["selected"] for c in counts) if lora else 0,
                     "evaluated": sum(c["evaluated"] for c in counts) if lora else 0})
    return pd.DataFrame(rows)


def lean_vs_paper(runs: pd.DataFrame, lean: str, paper: str, n_resamples: int, seed: int = 0) -> pd.DataFrame:
    """Per schedule: mean model time per steady-state call of the lean variant over the paper
    variant (same prompts, same calls up to timing), with a paired bootstrap 95% interval over prompts."""
    rng = np.random.default_rng(seed)
    rows = []
    for schedule in ("linear", "packed", "quadratic"):
        per = {}
        for label in (lean, paper):
            part = runs[(runs["lm"] == label) & (runs["schedule"] == schedule)].sort_values(["slice", "prompt"])
            skip = 2 if schedule == "linear" else 1
            per[label] = np.array([np.mean(s[skip:]) if len(s) > skip else np.nan for s in part["call_seconds"]])
        ok = ~(np.isnan(per[lean]) | np.isnan(per[paper]))
        a, b = per[lean][ok], per[paper][ok]
        draws = rng.integers(0, len(a), (n_resamples, len(a)))
        boot = a[draws].mean(1) / b[draws].mean(1)
        rows.append({"schedule": schedule, "prompts": int(ok.sum()), "lean_ms_per_call": 1e3 * a.mean(),
                     "paper_ms_per_call": 1e3 * b.mean(), "ratio": a.mean() / b.mean(),
                     "ratio_low": float(np.quantile(boot, 0.025)), "ratio_high": float(np.quantile(boot, 0.975))})
    return pd.DataFrame(rows)


def training_summary(trained) -> dict:
    """Training times and the last held-out losses of the AR base and the adapter (``trained``,
    a :class:`~spec_lib.training.proposal_lora.TrainedLoRA`); for an adapter trained elsewhere
    (``trained`` None) only ``{"trained_here": False}``."""
    if trained is None:
        return {"trained_here": False}
    history, record = trained.history, trained.record
    held = history[history["split"] == "heldout"]
    last = held.groupby("stage").tail(1).set_index("stage")
    return {"base_minutes": record["base_seconds"] / 60, "adapter_minutes": record["adapter_seconds"] / 60,
            "adapter_parameters": record["adapter_parameters"], "base_parameters": record["base_parameters"],
            "base_heldout_ce": float(last.loc["AR base", "ce"]),
            "adapter_heldout_diffusion": float(last.loc["proposal LoRA", "diffusion"]),
            "adapter_heldout_accuracy": float(last.loc["proposal LoRA", "accuracy"])}


def losses_decreased(trained, window: int = 5) -> dict[str, bool]:
    """Whether the AR base's CE and the adapter's diffusion CE ended below where they started
    (``{}`` for an adapter trained elsewhere, ``trained`` None)."""
    if trained is None:
        return {}
    history = trained.history
    out = {}
    for stage, column in (("AR base", "ce"), ("proposal LoRA", "diffusion")):
        rows = history[(history["stage"] == stage) & (history["split"] == "train")][column]
        out[stage] = bool(len(rows) >= 2 * window and rows.iloc[-window:].mean() < rows.iloc[:window].mean())
    return out


def training_checks(trained, budget_minutes: float) -> dict[str, bool]:
    """The notebook's checks of training here: both losses decreased and the adapter trained
    within ``budget_minutes``; none for an adapter trained elsewhere (``trained`` None)."""
    if trained is None:
        return {}
    return {"losses_decreased": all(losses_decreased(trained).values()),
            "adapter_training_within_budget": training_summary(trained)["adapter_minutes"] <= budget_minutes}


def verifier_bitwise(adapted: dict, base, prompts: list[list[int]], width: int) -> dict[str, bool]:
    """Per adapter mode: whether the target logits of packed, quadratic and verify calls (the
    prompt call, then a steady-state call verifying the prompt's last tokens as a draft) equal the
    adapter-free base model's bitwise.  ``base`` must share the adapted models' weights (as
    :func:`spec_lib.training.lora_models.load_lora_preset` returns them): two copies of one model
    can differ in the last bit, since CPU kernels depend on where the weights lie in memory."""
    import torch

    out = {}
    for mode, model in adapted.items():
        same = True
        for prompt in prompts:
            tokens = torch.as_tensor(prompt, device=model.device)
            m = min(width, len(prompt) - 2)
            if m < 1:
                continue
            n = len(prompt) - m                                     # the steady call verifies tokens[n:]
            for kind in ("packed", "quadratic", "verify"):
                logits = []
                for lm in (model, base):
                    lm.reset()
                    first = lm.call(kind, tokens[:n], tokens[:0], width)
                    lm.commit(1)
                    steady = lm.call(kind, tokens[: n + 1], tokens[n + 1:], width)
                    lm.commit(1)
                    logits.append((first.target_logits, steady.target_logits))
                same &= all(torch.equal(a, b) for a, b in zip(*logits))
        out[mode] = bool(same)
    return out


def exactness(runs: pd.DataFrame, models: dict, prompts: dict, tie_gap: float, base_label: str) -> pd.DataFrame:
    """Greedy identity per model (:func:`spec_lib.studies.bench.identity_check`): every schedule's
    output against the model's own AR output (the LoRA models against the AR base's, since their
    verifier is the base), divergences explained only by finite-precision ties."""
    from .bench import divergences, identity_check, identity_to_reference

    rows = []
    for label, model in models.items():
        reference = f"{base_label}: ar" if getattr(model, "mode", None) else f"{label}: ar"
        part = runs[(runs["lm"] == label) | (runs["method"] == reference)]
        same = identity_to_reference(part, reference)
        same = same[same["method"].str.startswith(f"{label}:")]
        diverged = divergences(model.hf_model, part, prompts, reference)
        rows.append({"lm": label, "reference": reference, **identity_check(same, diverged, tie_gap)})
    return pd.DataFrame(rows)


def adapter_improves(accuracy: pd.DataFrame, adapted: str, base: str) -> bool:
    """Offset-1 accuracy with the adapter above the base model's without it on average over the
    slices, and not below it on any slice."""
    first = accuracy[accuracy["offset"] == 1].pivot_table(index="slice", columns="model", values="accuracy")
    return bool(first[adapted].mean() > first[base].mean() and (first[adapted] >= first[base]).all())


def table5_matches_paper(table: pd.DataFrame) -> bool:
    """App. F.2's row accounting for the LoRA rows of Table 5 (paper mode): Packed-SS evaluates 2B
    and applies B, Quadratic-SS evaluates B(B + 1) and applies B^2, Linear-SS evaluates and applies
    B (its drafting call; the verify call runs without the adapter)."""
    expected = {"packed": lambda b: (2 * b, b), "quadratic": lambda b: (b * (b + 1), b * b), "linear": lambda b: (b, b)}
    lora = table[table["lm"].str.contains("paper")]
    return bool(len(lora) == 3) and all(
        (row.evaluated, row.selected) == expected[row.schedule](row.B) for row in lora.itertuples())
