"""The trained DFlash / DEdit drafters (seed 002; notebook 31's) end to end on both execution
paths: on the eager path the ``FeatureTarget`` verifies and the ``BlockEditDrafter`` drafts; on
the compiled path the target is a ``StaticFeatureTarget(compile=True)`` and the drafter a
``StaticBlockEditDrafter(compile=True)`` (:mod:`spec_lib.compiled.drafters`), so target and
drafter both run compiled; plain AR on each path beside them.

Every prompt is decoded by every method on both paths, paths and methods in a rotating order
(:func:`spec_lib.studies.compiled_path.run_paths`), after every prompt was decoded once by the
compiled methods, so that each context bucket the timed decodes meet is compiled before
timing.  Reported: tokens/s per method, the paired bootstrap ratio (CIs over prompts) of each
method compiled over itself eager, of each drafter over the same path's AR and of each compiled
drafter over eager AR, the drafter's share of wall time, the compile seconds per shape, and the
outputs: every response must equal eager AR's greedy output (the drafters and the path change
speed, never tokens).

    python benchmarks/compiled_end_to_end.py [--per-slice 24] [--out benchmarks/results/compiled_end_to_end_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

import spec_lib
from spec_lib import decode
from spec_lib.compiled.drafters import StaticBlockEditDrafter, StaticFeatureTarget
from spec_lib.io import atomic_write_bytes
from spec_lib.provenance import code_key
from spec_lib.studies import bench, compiled_path
from spec_lib.training.block_drafters import DEDIT_PRESETS

SLICES = ("code", "stdlib", "math")


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu", help=f"DEdit preset, one of {list(DEDIT_PRESETS)}")
    parser.add_argument("--per-slice", type=int, default=24, help="prompts per slice (code, stdlib, math)")
    parser.add_argument("--new-tokens", type=int, default=128, help="output cap per response")
    parser.add_argument("--max-prompt-tokens", type=int, default=512)
    parser.add_argument("--passes", type=int, default=3, help="DEdit's K (P_K)")
    parser.add_argument("--n-resamples", type=int, default=20_000, help="bootstrap resamples")
    parser.add_argument("--out", default=None, help="write the numbers as JSON to this path")
    args = parser.parse_args(argv)
    if args.preset not in DEDIT_PRESETS:
        parser.error(f"--preset must be one of {list(DEDIT_PRESETS)}, got {args.preset!r}")
    for name in ("per_slice", "new_tokens", "max_prompt_tokens", "passes", "n_resamples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    bundle = spec_lib.load("dedit", args.preset)
    target, tokenizer = bundle.target, bundle.tokenizer
    width = bundle.config.width - 1
    prompts = bench.slice_prompts(tokenizer, dict.fromkeys(SLICES, args.per_slice), args.max_prompt_tokens, 0)
    longest = max(len(p) for items in prompts.values() for p in items)
    slots = longest + args.new_tokens + width + 2
    static = StaticFeatureTarget(target.lm, target.mask_token_id, target.layer_ids, max_cache_len=slots, compile=True)
    models = {"eager": target, "compiled": static}
    drafters = {"eager": {}, "compiled": {}}
    for label, name, passes in (("dflash P1", "dflash", 1), (f"dedit P{args.passes}", "dedit", args.passes)):
        drafters["eager"][label] = bundle.drafter(name, passes)
        drafters["compiled"][label] = StaticBlockEditDrafter(static, bundle.networks[name], passes=passes,
                                                             max_context=slots, compile=True)
    methods = {path: [bench.Method("ar", 1), *bench.labelled_methods("deer", width, drafters[path])]
               for path in models}

    start = time.perf_counter()
    for items in prompts.values():              # every context bucket the timed decodes will meet
        for prompt in items:
            for method in methods["compiled"]:
                decode(static, prompt, schedule=method.schedule, width=method.width,
                       max_new_tokens=args.new_tokens, drafter=method.drafter)
    warm_seconds = time.perf_counter() - start

    runs = compiled_path.run_paths(models, prompts, methods, max_new_tokens=args.new_tokens,
                                   eos_token_id=tokenizer.eos_token_id, seed=0)
    identity = bench.identity_to_reference(runs)
    totals = runs.groupby("method", sort=False)[["tokens", "wall", "iterations", "drafter_seconds"]].sum()
    labels = list(drafters["eager"])
    compiled = compiled_path.path_method
    pairs = [(compiled(m, "compiled"), m) for m in ["ar", *labels]]
    pairs += [(compiled(label, path), compiled("ar", path)) for path in models for label in labels]
    pairs += [(compiled(label, "compiled"), "ar") for label in labels]
    ratios = {}
    for method, baseline in pairs:
        table = bench.paired_bootstrap(runs, baseline, methods=[method], n_resamples=args.n_resamples, seed=0)
        ratios[f"{method} / {baseline}"] = {r["slice"]: [r["throughput_ratio"], r["throughput_ratio_low"],
                                                         r["throughput_ratio_high"]] for r in table.to_dict("records")}
    compile_seconds = {"target": compiled_path.shape_names(static.compile_seconds)}
    compile_seconds |= {label: compiled_path.shape_names(d.compile_seconds) for label, d in drafters["compiled"].items()}
    report = {"code_version": code_key(["spec_lib.compiled.drafters", "spec_lib.drafters", "spec_lib.schedules",
                                        "spec_lib.studies.bench", "spec_lib.studies.compiled_path"]),
              "drafter_key": spec_lib.checkpoint_key("dedit", args.preset), "args": vars(args), "torch": torch.__version__,
              "torch_threads": torch.get_num_threads(), "width": width, "prompts": bench.prompt_counts(prompts),
              "warm_up_seconds": warm_seconds, "compile_seconds": compile_seconds,
              "identical": int(identity["identical"].sum()), "responses": int(identity["responses"].sum()),
              "tokens_per_s": (totals["tokens"] / totals["wall"]).to_dict(),
              "tokens_per_round": (totals["tokens"] / totals["iterations"]).to_dict(),
              "drafter_share_of_wall": (totals["drafter_seconds"] / totals["wall"]).to_dict(), "ratios": ratios}

    print(f"\n{report['prompts']} prompts x {args.new_tokens} new tokens, W = {width + 1}; "
          f"{report['identical']}/{report['responses']} responses identical to eager AR; warm-up {warm_seconds:.0f} s")
    for method, value in report["tokens_per_s"].items():
        print(f"{method:<28} {value:7.1f} tokens/s   tokens/round {report['tokens_per_round'][method]:.2f}   "
              f"drafter {100 * report['drafter_share_of_wall'][method]:4.1f}% of wall")
    for pair, per_slice in ratios.items():
        print(pair, {s: [round(x, 3) for x in v] for s, v in per_slice.items()})
    if args.out:
        atomic_write_bytes(args.out, (json.dumps(report, indent=2) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
