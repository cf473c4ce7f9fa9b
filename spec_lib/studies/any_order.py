"""The experiments behind notebooks 04 (Proposition C.1) and 15 (SetDLM: Tables 8-11).

* :func:`proposition_c1`: every schedule x order x width on random prompts, compared with the
  serial reference (outputs and drafts); :func:`negative_controls` does the same with a
  deliberately wrong mask, which the comparison must catch;
* :func:`ltr_identity`: left-to-right outputs of the three schedules against the model's
  plain serial greedy decode;
* :func:`math_set`, :func:`stop_marker`, :func:`runners`, :func:`score`: the math slice
  (synthetic problems with known answers), decoded with every schedule and order plus the
  native decoder, and answer scoring;
* :func:`accuracy_table`, :func:`paired_accuracy`, :func:`ltr_labels`, :func:`order_effect`:
  accuracy per method, paired accuracy differences with CIs (Table 11's form), whether the LTR
  schedules give identical correctness labels, and what confidence ordering costs and saves.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import torch

from ..decoding import decode
from ..masks.anyorder import any_order_rows
from ..schedules.anyorder import serial_greedy, serial_reference
from .grid import Runner

SPECULATIVE = ("linear", "packed", "quadratic")
#: the stop marker of the math slice: the next problem begins (seed 000, App. E.2 stop sequences)
MARKER_TEXT = "\nQuestion"


def random_order(seed: int):
    """An order policy drawing a uniformly random permutation of the window (seeded)."""
    generator = torch.Generator().manual_seed(seed)

    def policy(positions: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return positions[torch.randperm(positions.numel(), generator=generator)]
    return policy


def _order(name: str, seed: int):
    return random_order(seed) if name == "random" else name


def _prompts(model, n: int, seed: int, low: int = 2, high: int = 8) -> list[torch.Tensor]:
    """Random prompts over the model's vocabulary, MASK excluded."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high + 1, (n,), generator=generator)
    out = [torch.randint(0, model.vocab_size, (int(k),), generator=generator) for k in lengths]
    for prompt in out:
        prompt[prompt == model.mask_token_id] = (model.mask_token_id + 1) % model.vocab_size
    return out


def proposition_c1(models: dict, *, orders=("ltr", "confidence", "random"), widths=(4, 8), n_prompts: int = 8,
                   length: int = 32, eos_token_id: int | None = None, seed: int = 0, ablation: str | None = None,
                   schedules=SPECULATIVE) -> pd.DataFrame:
    """One row per (model, schedule, order, width): runs, how many outputs equal the serial
    reference and how many runs had every draft equal to the drafter's conditional argmax."""
    rows = []
    for name, model in models.items():
        prompts = _prompts(model, n_prompts, seed)
        for schedule in schedules:
            for order in orders:
                for width in widths:
                    equal = drafts_equal = tokens = rebuilds = 0
                    for i, prompt in enumerate(prompts):
                        result = decode(model, prompt, schedule=schedule, width=width, max_new_tokens=length,
                                        order=_order(order, seed + i), eos_token_id=eos_token_id, trace=True,
                                        ablation=ablation)
                        reference, drafts = serial_reference(model, prompt, result.extras["trace"],
                                                             max_new_tokens=length, eos_token_id=eos_token_id)
                        equal += result.tokens == reference
                        drafts_equal += all(step["drafted"] == d for step, d in zip(result.extras["trace"], drafts))
                        tokens += len(result.tokens)
                        rebuilds += result.extras["cache_rebuilds"]
                    rows.append({"model": name, "schedule": schedule, "order": order, "width": width,
                                 "ablation": ablation or "-", "runs": len(prompts), "outputs_equal": equal,
                                 "drafts_equal": drafts_equal, "tokens": tokens, "cache_rebuilds": rebuilds})
    return pd.DataFrame(rows)


#: the schedules whose layouts each wrong mask changes (Linear-SS's drafting call has no O rows)
ABLATION_SCHEDULES = {"m_sees_own_o": SPECULATIVE, "r_sees_o": ("packed", "quadratic")}


def negative_controls(models: dict, ablations=("m_sees_own_o", "r_sees_o"), **kwargs) -> pd.DataFrame:
    """:func:`proposition_c1` with each wrong mask, on the schedules it changes; ``caught`` counts
    runs whose output or drafts differ from the reference."""
    frames = [proposition_c1(models, ablation=a, schedules=ABLATION_SCHEDULES[a], **kwargs) for a in ablations]
    out = pd.concat(frames, ignore_index=True)
    out["caught"] = out["runs"] - np.minimum(out["outputs_equal"], out["drafts_equal"])
    return out


def controls_caught(controls: pd.DataFrame) -> pd.DataFrame:
    """Per (model, ablation): runs and runs caught, over the schedules the ablation changes."""
    return controls.groupby(["model", "ablation"], sort=False)[["runs", "caught"]].sum().reset_index()


def ltr_identity(model, prompts: list, *, widths=(4, 8), length: int = 32, eos_token_id: int | None = None,
                 stop_sequences=None) -> pd.DataFrame:
    """Per (prompt, width): whether Linear, Quadratic and Packed in LTR order all return the model's
    serial greedy decode."""
    rows = []
    for i, prompt in enumerate(prompts):
        serial = serial_greedy(model, prompt, max_new_tokens=length, eos_token_id=eos_token_id,
                               stop_sequences=stop_sequences)
        for width in widths:
            outs = {s: decode(model, prompt, schedule=s, width=width, max_new_tokens=length, order="ltr",
                              eos_token_id=eos_token_id, stop_sequences=stop_sequences).tokens for s in SPECULATIVE}
            rows.append({"prompt": i, "width": width, "tokens": len(serial),
                         **{f"{s}_equal": outs[s] == serial for s in SPECULATIVE}})
    return pd.DataFrame(rows)


def layout_table(widths=(8, 16)) -> pd.DataFrame:
    """Table 2's SetDLM columns from the builders (u = W, p = 1) beside the formulas."""
    rows = []
    for w in widths:
        rows.append({"width": w, "schedule": "linear",
                     "rows": any_order_rows("ao_linear_draft", 1, w) + any_order_rows("ao_linear_verify", 1, w),
                     "formula": 1 + 3 * w, "calls": 2})
        rows.append({"width": w, "schedule": "packed", "rows": any_order_rows("ao_packed", 1, w),
                     "formula": 1 + 3 * w, "calls": 1})
        rows.append({"width": w, "schedule": "quadratic", "rows": any_order_rows("ao_quadratic", 1, w),
                     "formula": 1 + 2 * w + w * w, "calls": 1})
    return pd.DataFrame(rows)


# ----- the math slice ------------------------------------------------------------------------------------

def math_set(tokenizer, n: int, seed: int = 0, operand_max: int | None = None) -> tuple[list[list[int]], list[int]]:
    """Held-out synthetic problems (seeds never used in training; the operand range the model was
    trained on): prompt ids ``Question: ...\\nAnswer:`` and the known final answers."""
    from ..training.any_order import problems

    items = problems(n, 10_000 + seed, operand_max)
    prompts = [tokenizer(p.prompt(), add_special_tokens=False)["input_ids"] for p in items]
    return prompts, [p.answer for p in items]


def stop_marker(tokenizer) -> list[int]:
    """The token ids of :data:`MARKER_TEXT` (several tokens: a multi-token stop sequence)."""
    return tokenizer(MARKER_TEXT, add_special_tokens=False)["input_ids"]


def runners(model, label: str, width: int, orders=("ltr", "confidence"), schedules=SPECULATIVE,
            stop: list[int] | None = None, threshold: float = 0.9) -> list[Runner]:
    """Every schedule in every order, plus the native decoder, at ``width`` (names ``schedule/order``)."""
    def make(schedule, order):
        def run(prompt, max_new_tokens, eos_token_id):
            stops = [stop] if stop and len(stop) <= max_new_tokens else None     # (a short warm-up decode)
            return decode(model, prompt, schedule=schedule, width=width, max_new_tokens=max_new_tokens, order=order,
                          eos_token_id=eos_token_id, stop_sequences=stops,
                          **({"threshold": threshold} if schedule == "native" else {}))
        return run

    out = [Runner(f"{s}/{o}", s, width, make(s, o), {"checkpoint": label, "order": o})
           for o in orders for s in schedules]
    out.append(Runner("native", "native", width, make("native", "ltr"), {"checkpoint": label, "order": "native"}))
    return out


_ANSWER = re.compile(r"####\s*(-?\d+)")


def answer_of(text: str) -> int | None:
    """The final answer of a worked solution (``#### N``), or None."""
    found = _ANSWER.search(text)
    return int(found.group(1)) if found else None


def score(runs: pd.DataFrame, tokenizer, answers: list[int]) -> pd.DataFrame:
    """Adds ``answer`` (parsed from the decoded output) and ``correct``."""
    out = runs.copy()
    out["answer"] = [answer_of(tokenizer.decode(list(o))) for o in out["output"]]
    out["correct"] = [a is not None and a == answers[p] for a, p in zip(out["answer"], out["prompt"])]
    return out


def accuracy_table(runs: pd.DataFrame) -> pd.DataFrame:
    return (runs.groupby(["slice", "method"], sort=False)
            .agg(accuracy=("correct", "mean"), answered=("answer", lambda a: a.notna().mean()),
                 responses=("correct", "size")).reset_index())


def paired_accuracy(runs: pd.DataFrame, baseline: str, *, n_resamples: int = 20_000, seed: int = 0,
                    confidence: float = 0.95) -> pd.DataFrame:
    """Accuracy difference (percentage points) of every method minus ``baseline``, with a paired
    percentile CI over prompts (seed 000, F.6 / Table 11's form)."""
    rng = np.random.default_rng(seed)
    alpha = (1 - confidence) / 2
    rows = []
    for name, part in runs.groupby("slice", sort=False):
        table = part.pivot_table(index="prompt", columns="method", values="correct", aggfunc="mean")
        draws = rng.integers(0, len(table), (n_resamples, len(table)))
        base = table[baseline].to_numpy(float)
        for method in table.columns:
            if method == baseline:
                continue
            diff = 100 * (table[method].to_numpy(float) - base)
            boot = diff[draws].mean(1)
            low, high = np.quantile(boot, [alpha, 1 - alpha])
            rows.append({"slice": name, "method": method, "baseline": baseline, "prompts": len(table),
                         "diff_pp": diff.mean(), "low_pp": low, "high_pp": high})
    return pd.DataFrame(rows)


def ltr_labels(runs: pd.DataFrame) -> pd.DataFrame:
    """Per checkpoint: whether Linear / Quadratic / Packed in LTR order give identical correctness
    labels on every prompt, and on how many prompts their outputs differ."""
    rows = []
    for name, part in runs.groupby("slice", sort=False):
        ltr = part[part["method"].isin([f"{s}/ltr" for s in SPECULATIVE])]
        labels = ltr.pivot_table(index="prompt", columns="method", values="correct", aggfunc="first")
        outputs = ltr.groupby("prompt")["output"].agg(lambda o: len(set(o)))
        rows.append({"slice": name, "prompts": len(labels), "identical_labels": bool((labels.nunique(axis=1) == 1).all()),
                     "prompts_with_different_outputs": int((outputs > 1).sum())})
    return pd.DataFrame(rows)


def order_effect(agg: pd.DataFrame, accuracy: pd.DataFrame, schedule: str = "packed") -> pd.DataFrame:
    """Per checkpoint: ``schedule``'s accuracy and mean wall per response in LTR and confidence
    order, and the relative latency change (seed 000, F.5)."""
    rows = []
    merged = agg.merge(accuracy, on=["slice", "method"])
    for name, part in merged.groupby("slice", sort=False):
        ltr = part[part["method"] == f"{schedule}/ltr"].iloc[0]
        conf = part[part["method"] == f"{schedule}/confidence"].iloc[0]
        native = part[part["method"] == "native"].iloc[0]
        rows.append({"slice": name, "accuracy_ltr": ltr["accuracy"], "accuracy_confidence": conf["accuracy"],
                     "accuracy_native": native["accuracy"], "wall_ltr": ltr["wall_per_response"],
                     "wall_confidence": conf["wall_per_response"],
                     "latency_change": conf["wall_per_response"] / ltr["wall_per_response"] - 1})
    return pd.DataFrame(rows)


# ----- notebook helpers --------------------------------------------------------------------------------

def toy_models(n: int, vocab: int, max_positions: int, seed: int = 0) -> dict:
    """``n`` exact any-order toys (seeds ``seed .. seed + n - 1``)."""
    from ..anyorder_models import ExactAnyOrderLM

    return {f"toy seed {s}": ExactAnyOrderLM(vocab, max_positions, seed=seed + s) for s in range(n)}


def all_equal(frame: pd.DataFrame) -> bool:
    """Every run of a :func:`proposition_c1` table equals the reference, outputs and drafts."""
    return bool((frame["outputs_equal"] == frame["runs"]).all() and (frame["drafts_equal"] == frame["runs"]).all())


def ltr_all_equal(frame: pd.DataFrame) -> bool:
    """Every row of an :func:`ltr_identity` table has all three schedules equal to serial greedy."""
    return bool(frame[[f"{s}_equal" for s in SPECULATIVE]].all().all())


def training_table(trained: dict) -> pd.DataFrame:
    """Per checkpoint: S, where it continued from, steps, minutes, parameters and the last held-out CEs."""
    rows = []
    for name, t in trained.items():
        config = t.record["config"]
        last = [h for h in t.record["history"] if h.get("split") == "heldout"][-1]
        rows.append({"checkpoint": name, "S": config["prediction_budget"], "continued_from": config["init_from"] or "-",
                     "steps": config["steps"], "minutes": t.record["seconds"] / 60, "parameters": t.record["parameters"],
                     "heldout_verify_ce": last["verify_ce"], "heldout_draft_ce": last["draft_ce"]})
    return pd.DataFrame(rows)


def decode_math(trained: dict, checkpoints: dict[str, int], prompts, answers, *, orders, max_new_tokens: int,
                threshold: float, progress: bool = True) -> pd.DataFrame:
    """Every checkpoint at its window: every schedule and order plus native, on the math prompts
    (methods rotated prompt by prompt, :func:`spec_lib.studies.grid.run_grid`), scored."""
    from ..anyorder_models import AnyOrderLM
    from .grid import run_grid

    frames = []
    tokenizer = None
    for name, width in checkpoints.items():
        tokenizer = trained[name].tokenizer
        model = AnyOrderLM(trained[name].model, trained[name].record["mask_token_id"])
        label = f"{name} (W={width})"
        methods = runners(model, label, width, orders, stop=stop_marker(tokenizer), threshold=threshold)
        frames.append(run_grid({label: prompts}, methods, max_new_tokens={label: max_new_tokens},
                               eos_token_id=tokenizer.eos_token_id, progress=progress))
    return score(pd.concat(frames, ignore_index=True), tokenizer, answers)


def absolute_table(agg: pd.DataFrame, accuracy: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Tables 8-9's columns: accuracy, per-response tokens / wall / NFE, rates from totals, and the
    model's share of wall time."""
    table = agg.merge(accuracy.drop(columns="responses"), on=["slice", "method"])
    table["tokens_per_response"] = table["tokens"] / table["responses"]
    table["nfe_per_response"] = table["nfe"] / table["responses"]
    return table[["slice", "method", "accuracy", "answered", "tokens_per_response", "wall_per_response",
                  "nfe_per_response", "throughput", "tokens_per_nfe", "time_per_nfe_ms", "model_share"]]


def packed_pairs(runs: pd.DataFrame, orders, *, n_resamples: int, seed: int = 0) -> pd.DataFrame:
    """Table 10: Packed-SS against Linear-SS and Quadratic-SS in the same order (paired bootstrap)."""
    from .bench import paired_bootstrap

    return pd.concat([paired_bootstrap(runs, f"{baseline}/{order}", methods=[f"packed/{order}"],
                                       n_resamples=n_resamples, seed=seed)
                      for order in orders for baseline in ("linear", "quadratic")], ignore_index=True)


def packed_fastest(table: pd.DataFrame, orders) -> dict[str, bool]:
    """Per checkpoint and order: whether Packed-SS has the highest throughput of the three schedules."""
    out = {}
    for name in table["slice"].unique():
        for order in orders:
            part = table[(table["slice"] == name) & table["method"].str.endswith(f"/{order}")]
            out[f"{name} {order}"] = bool(part.set_index("method")["throughput"].idxmax() == f"packed/{order}")
    return out


#: Table 2's largest rows of one decoding call at u = W, p = 1 (Linear: its verify call; native: p <= W)
CALL_ROWS = {"linear": lambda w: 2 * w, "packed": lambda w: 1 + 3 * w, "quadratic": lambda w: 1 + 2 * w + w * w,
             "native": lambda w: 2 * w}


def call_rows(trained: dict, checkpoints: dict[str, int], prompts, *, orders, max_new_tokens: int,
              threshold: float) -> pd.DataFrame:
    """Per checkpoint and method, on ``prompts``: the largest rows of a decoding call (prompt and
    cache-rebuild prefills excluded, they are prompt processing) beside Table 2's maximum, and how
    many prefills rebuilt a cache."""
    from ..anyorder_models import AnyOrderLM

    rows = []
    for name, width in checkpoints.items():
        model = AnyOrderLM(trained[name].model, trained[name].record["mask_token_id"])
        tokenizer = trained[name].tokenizer
        for runner in runners(model, f"{name} (W={width})", width, orders, stop=stop_marker(tokenizer),
                              threshold=threshold):
            results = [runner.run(p, max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id)
                       for p in prompts]
            calls = [(r, k) for res in results for r, k in zip(res.rows_per_call, res.extras["call_kinds"])]
            rows.append({"slice": f"{name} (W={width})", "method": runner.name,
                         "max_rows": max(r for r, k in calls if k != "prefill"),
                         "table2_max": CALL_ROWS[runner.schedule](width),
                         "cache_rebuilds": sum(res.extras["cache_rebuilds"] for res in results)})
    return pd.DataFrame(rows)


def load_checkpoints(preset: str, names) -> dict:
    """The any-order checkpoints ``names`` of ``preset`` (committed, cached, or trained first)."""
    from ..training.registry import load

    return {name: load("any_order", preset, name=name) for name in names}


def checkpoint_keys(preset: str, names) -> dict[str, str]:
    """Their keys, as results record them."""
    from ..training.registry import checkpoint_key

    return {name: checkpoint_key("any_order", preset, name=name) for name in names}
