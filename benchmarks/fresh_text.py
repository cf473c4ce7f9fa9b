"""Does a self-speculative model write fresh text, and how much does Linear-SS accept on it?

The measure of the fresh-text lever table (``docs/models.md``, "Fresh text: the levers"): for
each checkpoint folder given, greedy Linear-SS at W = 31 (B = 32) on held-out prompts of the
code and stdlib slices (notebook 11's prompts and caps), reporting per slice

* ``repetition``: share of output tokens that close a 4-gram already in the output
  (:mod:`spec_lib.studies.repetition`, notebook 11's measure); the real text's share beside it;
* ``tokens_per_iteration`` over all iterations, and ``fresh_tokens_per_iteration`` over those
  whose appended tokens are all fresh (``repeated_tokens_per_iteration`` over the others);
* ``heldout_ar_ce``: the checkpoint's last held-out AR cross-entropy (its ``history.csv``).

A folder may be a saved self-speculative checkpoint or its ``stage1`` subfolder (the model
before self-distillation; the tokenizer is read from the parent).  Rows are appended to the
CSV (rewritten atomically) under ``--label``.

    python benchmarks/fresh_text.py --label "committed target" --checkpoint models/models/<key>
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from spec_lib.io import atomic_write_bytes
from spec_lib.studies import bench, repetition
from spec_lib.training.checkpoints import load_dual_mode

OUT = Path(__file__).parent / "results" / "fresh_text_levers.csv"


def heldout_ce(folder: Path) -> float:
    history = folder.parent / "history.csv" if folder.name == "stage1" else folder / "history.csv"
    if not history.is_file():
        return float("nan")
    frame = pd.read_csv(history)
    held = frame[frame["split"] == "heldout"]
    if folder.name == "stage1":
        held = held[held["stage"].str.startswith("stage 1")]
    return float(held["ar"].iloc[-1]) if len(held) else float("nan")


def measure(folder: Path, n_prompts: int, seed: int) -> pd.DataFrame:
    from transformers import AutoTokenizer

    model, _ = load_dual_mode(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder.parent if folder.name == "stage1" else folder,
                                              local_files_only=True)
    counts = {"code": n_prompts, "stdlib": n_prompts}
    caps = {"code": 128, "stdlib": 128}
    prompts = bench.slice_prompts(tokenizer, counts, 384, seed)
    runs = bench.run_grid(model, prompts, [bench.Method("linear", 31)], max_new_tokens=caps,
                          eos_token_id=tokenizer.eos_token_id, seed=seed)
    split = repetition.acceptance_by_repetition(runs)
    real = repetition.reference_shares(tokenizer, counts, caps, seed).rename(
        columns={"mean_tokens": "reference_mean_tokens"})
    table = runs.groupby("slice").agg(responses=("tokens", "size"), mean_tokens=("tokens", "mean"),
                                      repetition=("repetition", "mean"))
    table["tokens_per_iteration"] = runs.groupby("slice").apply(
        lambda part: part["tokens"].sum() / part["iterations"].sum(), include_groups=False)
    table = table.reset_index().merge(split.drop(columns="method"), on="slice").merge(real, on="slice")
    table["heldout_ar_ce"] = heldout_ce(folder)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="a saved checkpoint folder (or its stage1)")
    parser.add_argument("--label", required=True, help="the lever's name in the table")
    parser.add_argument("--prompts", type=int, default=16, help="held-out prompts per slice (default 16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if not (args.checkpoint / "config.json").is_file():
        print(f"error: --checkpoint {str(args.checkpoint)!r} holds no config.json", file=sys.stderr)
        return 2
    if args.prompts < 1:
        print(f"error: --prompts must be >= 1, got {args.prompts}", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    table = measure(args.checkpoint, args.prompts, args.seed)
    table.insert(0, "lever", args.label)
    table["checkpoint"] = args.checkpoint.as_posix()
    table["seconds"] = time.perf_counter() - started
    old = pd.read_csv(args.out) if args.out.is_file() else pd.DataFrame()
    if len(old):
        old = old[old["lever"] != args.label]
    atomic_write_bytes(args.out, pd.concat([old, table]).to_csv(index=False).encode())
    print(table.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
