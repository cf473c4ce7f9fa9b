"""What each of the compiled path's two overhead levers buys the compiled ``ar`` path on this
CPU: an ablation of :class:`spec_lib.compiled.CompiledRegions`
(``StaticDualModeLM``'s ``cpp_wrapper`` and ``skip_guards``).

A profile of one compiled one-row forward of the cpu model (hidden 256, 4 layers) showed three
costs besides the arithmetic: dynamo's guard evaluation, inductor's Python wrapper, and 29
small ``mm`` calls.  The library removes the first two: inductor's C++ wrapper
(``options={"cpp_wrapper": True}``) and one ``torch.compile`` region per call shape whose single
graph runs with dynamo's ``skip_guard_eval_unsafe`` stance.  This script times greedy ``ar``
decoding with each lever switched off, against ``hf_model.generate`` (eager, default cache) in
the same rounds:

- ``library``: both levers (``StaticDualModeLM(compile=True)`` as it is);
- ``python_wrapper``: inductor's Python wrapper, guards skipped;
- ``guards_evaluated``: the C++ wrapper, guards evaluated on every call (``skip_guards=False``);
- ``neither``: inductor's defaults with guards evaluated (the library's path before).

Each round runs every variant once, in an order rotated from round to round, each on a new
``StaticDualModeLM`` after ``torch._dynamo.reset()``.  Compile time is paid in a warm-up outside
the timing; each variant's first warm-up is reported (inductor's on-disk cache serves later
ones, and may already hold a graph).  Every response is compared with ``generate``'s.  Medians
over rounds with 95% bootstrap CIs.

    python benchmarks/compile_options.py [--preset cpu] [--rounds 5] [--out benchmarks/results/compile_options_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from tqdm.auto import tqdm

import spec_lib
from spec_lib import decode
from spec_lib.compiled import StaticDualModeLM
from spec_lib.io import atomic_write_bytes
from spec_lib.provenance import code_key

from compiled_decode import greedy_generate, require_positive, slice_prompts   # benchmarks/ is on sys.path
from decode_overhead import median_ci

#: variant -> (C++ wrapper, guards skipped)
VARIANTS = {
    "library": (True, True),
    "python_wrapper": (False, True),
    "guards_evaluated": (True, False),
    "neither": (False, False),
}


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu", help="model preset of notebook 10 (default cpu)")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per slice (code, stdlib, math)")
    parser.add_argument("--max-prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None, help="write the numbers as JSON to this path")
    args = parser.parse_args(argv)
    require_positive(parser, args, ("prompts", "max_prompt_tokens", "new_tokens", "rounds"))
    return args


def main(argv=None) -> int:
    args = parse(argv)
    eager, tokenizer = spec_lib.load("target", args.preset)
    hf_model = eager.hf_model
    prompts = slice_prompts(tokenizer, args.prompts, args.max_prompt_tokens)
    max_cache_len = args.max_prompt_tokens + args.new_tokens + 2

    def run_generate(prompt):
        return greedy_generate(hf_model, prompt, args.new_tokens, eager.mask_token_id)

    references = [run_generate(p)[0] for p in prompts]          # also warms generate up
    walls = {name: [] for name in [*VARIANTS, "generate"]}
    warm_up_seconds, divergent = {}, dict.fromkeys(VARIANTS, 0)
    names = list(VARIANTS)
    for rnd in tqdm(range(args.rounds), desc="rounds"):
        walls["generate"].append(sum(run_generate(p)[1] for p in prompts))
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:     # order rotated per round
            cpp_wrapper, skip_guards = VARIANTS[name]
            torch._dynamo.reset()
            model = StaticDualModeLM(hf_model, eager.mask_token_id, compile=True, max_cache_len=max_cache_len,
                                     skip_guards=skip_guards, cpp_wrapper=cpp_wrapper)
            start = time.perf_counter()
            for prompt in prompts[:2]:
                decode(model, prompt, schedule="ar", width=1, max_new_tokens=8)
            warm_up_seconds.setdefault(name, time.perf_counter() - start)
            wall = 0.0
            for prompt, reference in zip(prompts, references):
                res = decode(model, prompt, schedule="ar", width=1, max_new_tokens=args.new_tokens)
                wall += res.wall_seconds
                divergent[name] += res.tokens != reference
            walls[name].append(wall)
    torch._dynamo.reset()

    tokens = len(prompts) * args.new_tokens
    report = {"code_version": code_key(["spec_lib.compiled", "spec_lib.schedules", "spec_lib.models"]),
              "args": vars(args), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
              "prompts": len(prompts), "tokens_per_round": tokens, "variants": list(VARIANTS),
              "first_warm_up_seconds": warm_up_seconds, "divergent_responses": divergent,
              "responses_per_variant": len(prompts) * args.rounds,
              "tokens_per_s": {m: median_ci([tokens / w for w in walls[m]]) for m in walls},
              "over_library": {m: median_ci(np.array(walls[m]) / np.array(walls["library"])) for m in VARIANTS},
              "over_generate": {m: median_ci(np.array(walls["generate"]) / np.array(walls[m])) for m in VARIANTS}}
    print(f"\n{len(prompts)} prompts x {args.new_tokens} new tokens, {args.rounds} rounds, "
          f"{torch.get_num_threads()} threads")
    print(f"{'variant':<28} tokens/s     library / variant       / generate              divergent  warm-up")
    for m in VARIANTS:
        t, d, g = report["tokens_per_s"][m], report["over_library"][m], report["over_generate"][m]
        print(f"{m:<28} {t[0]:7.1f}  {d[0]:.3f} [{d[1]:.3f}, {d[2]:.3f}]  {g[0]:.3f} [{g[1]:.3f}, {g[2]:.3f}]  "
              f"{divergent[m]:>3}/{report['responses_per_variant']}    {warm_up_seconds[m]:.1f} s")
    print(f"{'generate':<28} {report['tokens_per_s']['generate'][0]:7.1f}")
    if args.out:
        atomic_write_bytes(args.out, (json.dumps(report, indent=2) + "\n").encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
