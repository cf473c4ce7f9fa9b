"""Which levers of the self-speculative training recipe move acceptance on held-out text?

Trains variants of the cpu preset's recipe (``spec_lib.training.presets.PRESETS``)
and judges each the way notebook 10 judges its ablation rows: greedy AR and Linear-SS at
width W on held-out prompts of the packages / stdlib / code slices, reporting Linear-SS's
tokens per iteration beside the repetition share of the (identical) outputs, so that
acceptance earned on loops is visible.

Two kinds of variant:

* ``stage2``: stage-2 (self-distillation) overrides, trained from the preset's cached stage-1
  model (:func:`spec_lib.training.self_speculative.load_or_distill_variant`; ~10 min each);
* ``full``: overrides of any ``ModelConfig`` / ``TrainConfig`` field, trained from scratch
  (:func:`spec_lib.training.self_speculative.load_or_train`; ~25 min each).

Every variant is cached under ``artifacts/models/`` like a checkpoint, so re-running the
script only evaluates.  Rows are appended to the CSV as each variant finishes (a killed run
keeps what it measured; the file is rewritten atomically).

    python benchmarks/recipe_levers.py --out benchmarks/results/recipe_levers.csv \
        --variant stage2:longer_distillation:distill_steps=600 --variant full:p_full_half:p_full=0.5
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

import pandas as pd

from spec_lib.io import atomic_write_bytes
from spec_lib.models import DualModeLM
from spec_lib.studies import bench, recipe
from spec_lib.training.presets import PRESETS
from spec_lib.training.self_speculative import (STAGE2_FIELDS, ModelConfig, TrainConfig, load_or_distill_variant,
                                                load_or_train)

KINDS = ("stage2", "full")


def parse_variant(text: str) -> tuple[str, str, dict, dict]:
    """``kind:name:field=value,field=value`` -> (kind, name, model overrides, train overrides)."""
    parts = text.split(":", 2)
    if len(parts) != 3 or parts[0] not in KINDS or not parts[1]:
        raise ValueError(f"--variant must look like 'stage2|full:name:field=value,...', got {text!r}")
    kind, name, assignments = parts
    model_fields = {f.name for f in fields(ModelConfig)}
    train_fields = {f.name for f in fields(TrainConfig)}
    model_over, train_over = {}, {}
    for item in filter(None, re.split(r",(?=\s*\w+=)", assignments)):      # commas inside values stay
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"variant {name!r}: expected field=value, got {item!r}")
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError(f"variant {name!r}: value of {key!r} must be a Python literal, got {value!r}") from None
        if key in model_fields:
            model_over[key] = parsed
        elif key in train_fields:
            train_over[key] = parsed
        else:
            raise ValueError(f"variant {name!r}: unknown field {key!r}; allowed: ModelConfig {sorted(model_fields)}, "
                             f"TrainConfig {sorted(train_fields)}")
    if kind == "stage2" and (model_over or set(train_over) - set(STAGE2_FIELDS)):
        raise ValueError(f"variant {name!r}: a stage2 variant may only change {list(STAGE2_FIELDS)}; use 'full:' "
                         f"to retrain from scratch")
    return kind, name, model_over, train_over


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", action="append", default=[], help="kind:name:field=value,... (repeatable)")
    parser.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
    parser.add_argument("--prompts", type=int, default=32, help="held-out prompts per slice")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--width", type=int, default=31, help="Linear-SS width W (block size W + 1)")
    parser.add_argument("--baseline", action="store_true", help="also evaluate the preset's final and stage-1 models")
    parser.add_argument("--out", required=True, help="CSV to append rows to")
    args = parser.parse_args(argv)
    try:
        variants = [parse_variant(v) for v in args.variant]
    except ValueError as error:
        parser.error(str(error))
    if not variants and not args.baseline:
        parser.error("nothing to do: give --variant and/or --baseline")
    model_config, train_config = PRESETS[args.preset]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    base = load_or_train(model_config, train_config)
    prompts = bench.slice_prompts(base.tokenizer, {"packages": args.prompts, "stdlib": args.prompts, "code": args.prompts},
                                  512, 0)
    jobs = []
    if args.baseline:
        jobs += [("final", "preset", lambda: base), ("stage 1", "preset", lambda: None)]
    for kind, name, model_over, train_over in variants:
        if kind == "stage2":
            jobs.append((name, f"stage2 {train_over}",
                         lambda o=train_over: load_or_distill_variant(model_config, train_config, o)))
        else:
            jobs.append((name, f"full {model_over} {train_over}",
                         lambda m=model_over, t=train_over: load_or_train(replace(model_config, **m),
                                                                          replace(train_config, **t))))
    for name, overrides, get in jobs:
        started = time.perf_counter()
        trained = get()
        hf_model = base.stage1 if trained is None else trained.hf_model
        record = {} if trained is None else trained.record
        models = {name: DualModeLM(hf_model, base.mask_token_id)}
        accuracy = recipe.expected_leading(recipe.drafter_accuracy(models, prompts, args.width))
        table, _ = recipe.acceptance_and_repetition(models, prompts, width=args.width,
                                                    max_new_tokens=args.max_new_tokens,
                                                    eos_token_id=base.tokenizer.eos_token_id, progress=False)
        table = table.merge(accuracy, on=["model", "slice"])
        history = None if trained is None else trained.history
        heldout = recipe.heldout_summary(history) if history is not None else {}
        table = table.assign(overrides=overrides, train_seconds=record.get("train_seconds"),
                             heldout_perplexity=heldout.get("heldout_perplexity"),
                             checkpoint=record.get("checkpoint_key", ""))
        previous = pd.read_csv(out) if out.is_file() else None
        merged = table if previous is None else pd.concat([previous, table], ignore_index=True)
        atomic_write_bytes(out, merged.to_csv(index=False).encode())
        print(f"[{time.perf_counter() - started:.0f} s] {name}:", flush=True)
        print(table[["slice", "linear_tokens_per_iteration", "repetition", "expected_correct_leading",
                     "linear_speedup_over_ar"]].round(3).to_string(index=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
