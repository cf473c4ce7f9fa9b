"""The static-cache compiled path (:mod:`spec_lib.compiled`) against the eager path and against
transformers' own greedy generation, measured in one run.

Per schedule: tokens/s of ``StaticDualModeLM(compile=True)`` over ``DualModeLM`` (eager, dynamic
cache), and for ``ar`` also over ``hf_model.generate`` (eager, default cache) and over
``generate`` with ``cache_implementation="static"`` and a compiled forward (the recipe of
transformers' documentation, "torch.compile" / static cache), all on the same weights and
prompts.  Every method decodes every prompt in every repeat, interleaved, so machine noise
hits them alike; per-repeat ratios of total wall time, medians with 95% bootstrap CIs.
Compile time is paid before timing (:func:`spec_lib.compiled.warm_up`) and reported per shape.

    python benchmarks/compiled_decode.py [--preset cpu] [--repeats 5] [--out benchmarks/results/compiled_decode_cpu.json]

The model is notebook 10's self-speculative model of ``--preset`` (trained and cached on first
use, about 34 min at the cpu preset), so drafts are accepted as in the notebooks.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

import numpy as np
import torch
from tqdm.auto import tqdm

import spec_lib
from spec_lib import decode
from spec_lib.compiled import StaticDualModeLM, warm_up
from spec_lib.io import atomic_write_bytes
from spec_lib.provenance import code_key
from spec_lib.studies import bench, compiled_path

from decode_overhead import median_ci          # benchmarks/ is the script's folder: on sys.path

SLICES = ("code", "stdlib", "math")


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu", help="model preset of notebook 10 (default cpu)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per slice (code, stdlib, math)")
    parser.add_argument("--max-prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--width", type=int, default=15, help="W of linear and packed")
    parser.add_argument("--quadratic-width", type=int, default=7, help="W of quadratic")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", default=None, help="torch.compile mode (default: inductor's default)")
    parser.add_argument("--out", default=None, help="write the numbers as JSON to this path")
    args = parser.parse_args(argv)
    require_positive(parser, args, ("prompts", "max_prompt_tokens", "new_tokens", "width", "quadratic_width",
                                    "repeats"))
    return args


def require_positive(parser, args, names) -> None:
    """A usage error naming the first of ``names`` that is below 1."""
    for name in names:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")


def slice_prompts(tokenizer, per_slice: int, max_prompt_tokens: int) -> list[torch.Tensor]:
    """``per_slice`` prompts of each of :data:`SLICES`, as token tensors."""
    return [torch.tensor(p) for name in SLICES
            for p in bench.slice_prompts(tokenizer, {name: per_slice}, max_prompt_tokens)[name]]


def greedy_generate(model, prompt: torch.Tensor, new_tokens: int, pad_token_id: int) -> tuple[list[int], float]:
    """``model.generate`` greedy for exactly ``new_tokens`` tokens: (new token ids, seconds)."""
    ones = torch.ones(1, prompt.numel(), dtype=torch.long)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(prompt[None], attention_mask=ones, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                             pad_token_id=pad_token_id)
    return out[0, prompt.numel():].tolist(), time.perf_counter() - start


def main(argv=None) -> int:
    args = parse(argv)
    eager, tokenizer = spec_lib.load("target", args.preset)
    hf_model = eager.hf_model
    cases = [("ar", 1), ("linear", args.width), ("packed", args.width), ("quadratic", args.quadratic_width)]
    longest = max(2 * (args.width + 1), (args.quadratic_width + 1) * (args.quadratic_width + 2))
    static = StaticDualModeLM(hf_model, eager.mask_token_id, compile=True, mode=args.mode,
                              max_cache_len=args.max_prompt_tokens + args.new_tokens + longest + 1)

    # transformers' fastest greedy generate: static cache, compiled forward (on its own copy,
    # so that the compiled forward does not leak into the two paths above)
    hf_static = copy.deepcopy(hf_model)
    hf_static.generation_config.cache_implementation = "static"
    hf_static.forward = torch.compile(hf_static.forward, mode=args.mode)
    pad = eager.mask_token_id

    prompts = slice_prompts(tokenizer, args.prompts, args.max_prompt_tokens)

    def run_generate(model, prompt):
        return greedy_generate(model, prompt, args.new_tokens, pad)

    start = time.perf_counter()
    for schedule, width in cases:
        warm_up(static, prompts[0], schedules=(schedule,), widths=(width,), max_new_tokens=args.new_tokens)
    for prompt in prompts:                       # shapes a later prompt may meet (a shorter last draft)
        for schedule, width in cases:
            decode(static, prompt, schedule=schedule, width=width, max_new_tokens=args.new_tokens)
    generate_warm = time.perf_counter()
    for prompt in prompts:                       # generate's static path compiles per prompt length
        run_generate(hf_static, prompt)
        run_generate(hf_model, prompt)
    warm_seconds = {"spec_lib": generate_warm - start, "generate_static": time.perf_counter() - generate_warm}

    methods = [f"{s}:{path}" for s, _ in cases for path in ("eager", "compiled")] + ["generate", "generate_static"]
    walls = {m: [] for m in methods}
    model_share = {s: [] for s, _ in cases}
    divergent = {m: 0 for m in methods}
    for _ in tqdm(range(args.repeats), desc="repeats"):
        wall = dict.fromkeys(methods, 0.0)
        model_time = {s: 0.0 for s, _ in cases}
        for prompt in prompts:
            reference, seconds = run_generate(hf_model, prompt)
            wall["generate"] += seconds
            tokens, seconds = run_generate(hf_static, prompt)
            wall["generate_static"] += seconds
            divergent["generate_static"] += tokens != reference
            for schedule, width in cases:
                for path, model in (("eager", eager), ("compiled", static)):
                    res = decode(model, prompt, schedule=schedule, width=width, max_new_tokens=args.new_tokens)
                    wall[f"{schedule}:{path}"] += res.wall_seconds
                    divergent[f"{schedule}:{path}"] += res.tokens != reference
                    if path == "compiled":
                        model_time[schedule] += res.model_seconds
        for m in methods:
            walls[m].append(wall[m])
        for schedule, _ in cases:
            model_share[schedule].append(1.0 - model_time[schedule] / wall[f"{schedule}:compiled"])

    tokens = len(prompts) * args.new_tokens
    report = {"code_version": code_key(["spec_lib.compiled", "spec_lib.schedules", "spec_lib.models"]),
              "args": vars(args), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
              "params_millions": sum(p.numel() for p in hf_model.parameters()) / 1e6,
              "prompts": len(prompts), "tokens_per_repeat": tokens,
              "compile_seconds": compiled_path.shape_names(static.compile_seconds),
              "shapes_compiled": len(static.compile_seconds), "graphs": static.graphs, "warm_up_seconds": warm_seconds,
              "divergent_responses": divergent, "responses_per_method": len(prompts) * args.repeats,
              "tokens_per_s": {m: median_ci([tokens / w for w in walls[m]]) for m in methods},
              "ratios": {}, "compiled_non_model_share": {s: median_ci(v) for s, v in model_share.items()}}
    pairs = [(f"{s}:compiled", f"{s}:eager") for s, _ in cases]
    pairs += [("ar:compiled", "generate"), ("ar:compiled", "generate_static"), ("generate_static", "generate"),
              ("packed:eager", "linear:eager"), ("packed:compiled", "linear:compiled")]
    for fast, slow in pairs:
        report["ratios"][f"{fast} / {slow}"] = median_ci(np.array(walls[slow]) / np.array(walls[fast]))

    print(f"\n{report['params_millions']:.1f}M params, {len(prompts)} prompts x {args.new_tokens} new tokens, "
          f"{args.repeats} interleaved repeats, {torch.get_num_threads()} threads; "
          f"{len(static.compile_seconds)} shapes compiled in {sum(static.compile_seconds.values()):.1f} s")
    print(f"{'method':<22} tokens/s median [95% CI]   divergent responses")
    for m in methods:
        med, low, high = report["tokens_per_s"][m]
        print(f"{m:<22} {med:8.1f} [{low:7.1f}, {high:7.1f}]   {divergent[m]}/{report['responses_per_method']}")
    print(f"{'tokens/s ratio':<40} median [95% CI]")
    for name, (med, low, high) in report["ratios"].items():
        print(f"{name:<40} {med:.3f} [{low:.3f}, {high:.3f}]")
    for schedule, (med, low, high) in report["compiled_non_model_share"].items():
        print(f"non-model share, {schedule} compiled: {100 * med:.1f}% [{100 * low:.1f}, {100 * high:.1f}]")
    if args.out:
        atomic_write_bytes(args.out, (json.dumps(report, indent=2) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
