"""What further ``torch.compile`` options would buy the compiled ``ar`` path on this CPU (an
experiment: none of these options is in :mod:`spec_lib.compiled` yet).

``StaticDualModeLM(compile=True)`` compiles its steady-state forward with inductor's defaults.
A profile of one compiled one-row forward of the cpu model (hidden 256, 4 layers) showed three
costs besides the arithmetic: dynamo's guard evaluation, inductor's Python wrapper, and 29
small ``mm`` calls.  This script times greedy ``ar`` decoding with the forward compiled under
each variant below, against ``hf_model.generate`` (eager, default cache) in the same rounds:

- ``default``: the library's compiled path as it is;
- ``cpp_wrapper``: inductor's C++ wrapper instead of the Python one (``options={"cpp_wrapper": True}``);
- ``tensor_guards``: ``guard_filter_fn=torch.compiler.keep_tensor_guards_unsafe``, which keeps
  only the guards on tensors and drops the others (on the model object, its config constants,
  global state): unsafe in general, since a second model or a changed attribute could reuse a
  graph built for another;
- ``cpp_wrapper+tensor_guards``: both.

Each round runs every variant once, in an order rotated from round to round, each after
``torch._dynamo.reset()`` (the variants share ``StaticDualModeLM._forward``'s code object, so
one variant's graphs must not serve another).  Compile time is paid in a warm-up outside the
timing; each variant's first warm-up is reported (inductor's on-disk cache serves later ones,
and may already hold a graph).  Every response is compared with ``generate``'s.  Medians over
rounds with 95% bootstrap CIs.

    python benchmarks/compile_options.py [--preset cpu] [--rounds 5] [--out benchmarks/results/compile_options_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from spec_lib import decode
from spec_lib.compiled import StaticDualModeLM
from spec_lib.io import atomic_write_bytes
from spec_lib.provenance import code_key
from spec_lib.training.checkpoints import load_model

from compiled_decode import greedy_generate, require_positive, slice_prompts   # benchmarks/ is on sys.path
from decode_overhead import median_ci

VARIANTS = {
    "default": None,
    "cpp_wrapper": {"cpp_wrapper": True},
    "tensor_guards": {"guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe},
    "cpp_wrapper+tensor_guards": {"cpp_wrapper": True, "guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe},
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
    eager, tokenizer = load_model(args.preset, progress=True)
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
            options = VARIANTS[name]
            torch._dynamo.reset()
            model = StaticDualModeLM(hf_model, eager.mask_token_id, compile=True, max_cache_len=max_cache_len)
            if options is not None:                 # the experiment: the same forward, other options
                model._step = torch.compile(model._forward, dynamic=False, options=options)
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
              "over_default": {m: median_ci(np.array(walls["default"]) / np.array(walls[m])) for m in VARIANTS},
              "over_generate": {m: median_ci(np.array(walls["generate"]) / np.array(walls[m])) for m in VARIANTS}}
    print(f"\n{len(prompts)} prompts x {args.new_tokens} new tokens, {args.rounds} rounds, "
          f"{torch.get_num_threads()} threads")
    print(f"{'variant':<28} tokens/s     / default               / generate              divergent  warm-up")
    for m in VARIANTS:
        t, d, g = report["tokens_per_s"][m], report["over_default"][m], report["over_generate"][m]
        print(f"{m:<28} {t[0]:7.1f}  {d[0]:.3f} [{d[1]:.3f}, {d[2]:.3f}]  {g[0]:.3f} [{g[1]:.3f}, {g[2]:.3f}]  "
              f"{divergent[m]:>3}/{report['responses_per_variant']}    {warm_up_seconds[m]:.1f} s")
    print(f"{'generate':<28} {report['tokens_per_s']['generate'][0]:7.1f}")
    if args.out:
        atomic_write_bytes(args.out, (json.dumps(report, indent=2) + "\n").encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
