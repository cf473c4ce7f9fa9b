"""The separate drafters on the compiled fast path (:mod:`spec_lib.compiled.drafters`) against
their eager versions: time per drafting call, measured in one run.

* DEER's diffusion drafter (seed 001): one pass over ``[prefix tail][SEP][MASK]*k``, eager
  ``DiffusionDrafter`` against ``StaticDiffusionDrafter(compile=True)`` (input padded to the
  drafter's context, one compiled shape per k), at several prefix lengths and k.
* The AR drafter (seed 001's EAGLE-3 role): one drafting cycle of k tokens (one pass over the
  new verified tokens, then k - 1 one-row passes), eager ``ARDrafter`` (dynamic cache) against
  ``StaticARDrafter(compile=True)`` (static cache, compiled one-row passes), as in a decode:
  the prefix grows by a few verified tokens per cycle and the drafts are rejected after the
  first, so the cache is rewound every cycle.

The DEER and AR drafters have the architecture of the ``--preset`` entry of
:data:`spec_lib.training.deer.D2A_PRESETS`, the DEdit drafter that of
:class:`spec_lib.training.dedit.DEditConfig`, with the vocabulary of their target, and freshly
initialised weights: the time of a call does not depend on the weights, and the trained
drafters take about 50 min each to train.  Every method runs every case
in every repeat, interleaved; per-repeat ratios of total time, medians with 95% bootstrap CIs.
Compile time is paid before timing and reported.

    python benchmarks/compiled_drafters.py [--preset cpu] [--repeats 7] [--out benchmarks/results/compiled_drafters_cpu.json]
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

from spec_lib import decode
from spec_lib.compiled.drafters import StaticARDrafter, StaticBlockEditDrafter, StaticDiffusionDrafter
from spec_lib.drafters import ARDrafter, DiffusionDrafter
from spec_lib.drafters.block_edit import BlockEditDrafter
from spec_lib.drafters.feature_block import build_feature_block_drafter
from spec_lib.drafters.feature_target import FeatureTarget
from spec_lib.io import atomic_write_bytes
from spec_lib.models import build_qwen3
from spec_lib.provenance import code_key
from spec_lib.training.dedit import DEditConfig
from spec_lib.training.deer import D2A_PRESETS
from spec_lib.training.presets import PRESETS
from spec_lib.training.self_speculative import load_or_train

from decode_overhead import median_ci          # benchmarks/ is the script's folder: on sys.path


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu", help=f"D2A preset for the architecture, one of {list(D2A_PRESETS)}")
    parser.add_argument("--prefix-lengths", default="32,128,384", help="prefix lengths of the DEER cases")
    parser.add_argument("--ks", default="4,8,16", help="draft lengths k")
    parser.add_argument("--cycles", type=int, default=24, help="AR drafting cycles per repeat")
    parser.add_argument("--calls", type=int, default=10, help="DEER calls per case per repeat")
    parser.add_argument("--passes", type=int, default=3, help="DEdit's K (passes per round)")
    parser.add_argument("--dedit-tokens", type=int, default=64, help="new tokens per DEdit decode")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--mode", default=None, help="torch.compile mode (default: inductor's default)")
    parser.add_argument("--out", default=None, help="write the numbers as JSON to this path")
    args = parser.parse_args(argv)
    if args.preset not in D2A_PRESETS:
        parser.error(f"--preset must be one of {list(D2A_PRESETS)}, got {args.preset!r}")
    for name in ("prefix_lengths", "ks"):
        try:
            values = [int(v) for v in getattr(args, name).split(",")]
        except ValueError:
            parser.error(f"--{name.replace('_', '-')} must be comma-separated ints, got {getattr(args, name)!r}")
        if not values or min(values) < 1:
            parser.error(f"--{name.replace('_', '-')} must be ints >= 1, got {getattr(args, name)!r}")
        setattr(args, name, values)
    for name in ("cycles", "calls", "repeats", "passes", "dedit_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def greedy(logits):
    return logits.argmax(-1), None


def main(argv=None) -> int:
    args = parse(argv)
    config = D2A_PRESETS[args.preset]
    trained = load_or_train(*PRESETS[config.target_preset], progress=True)
    tokenizer = trained.tokenizer
    vocab = len(tokenizer)
    hf = build_qwen3(vocab, hidden_size=config.hidden_size, num_layers=config.num_layers,
                     num_heads=config.num_heads, max_positions=2048, seed=0).eval()
    mask_id, sep_id = tokenizer.mask_token_id, tokenizer.sep_token_id
    longest = max(args.prefix_lengths) + args.cycles * (max(args.ks) + 2) + 1
    deer = {"eager": DiffusionDrafter(hf, mask_id, sep_id, context=config.context),
            "compiled": StaticDiffusionDrafter(copy.deepcopy(hf), mask_id, sep_id, context=config.context,
                                               compile=True, mode=args.mode)}
    ar = {"eager": ARDrafter(copy.deepcopy(hf)),
          "compiled": StaticARDrafter(copy.deepcopy(hf), max_cache_len=longest, compile=True, mode=args.mode)}
    dedit_config = DEditConfig()
    target_hf = trained.hf_model.eval()
    network = build_feature_block_drafter(target_hf.config, num_layers=dedit_config.num_layers,
                                          n_features=dedit_config.n_features, block_size=max(args.ks) + 1,
                                          mask_token_id=mask_id, seed=0)
    feature_target = FeatureTarget(target_hf, mask_id, network.config.target_layer_ids)
    dedit = {"eager": BlockEditDrafter(feature_target, network, passes=args.passes),
             "compiled": StaticBlockEditDrafter(feature_target, network, passes=args.passes, max_context=1024,
                                                compile=True, mode=args.mode)}
    gen = torch.Generator().manual_seed(0)
    text = max(tokenizer.all_special_ids) + 1                # ordinary tokens: [text, vocab)
    prefixes = {n: torch.randint(text, vocab, (n,), generator=gen) for n in args.prefix_lengths}

    def deer_case(drafter, n, k):
        start = time.perf_counter()
        for _ in range(args.calls):
            drafter.draft(prefixes[n], k, greedy)
        return time.perf_counter() - start

    def ar_case(drafter, k):
        """A decode's drafting: each cycle the verifier keeps d^(1) and adds its correction."""
        drafter.reset()
        prefix = prefixes[min(args.prefix_lengths)]
        seconds = 0.0
        for _ in range(args.cycles):
            start = time.perf_counter()
            out = drafter.draft(prefix, k, greedy)
            seconds += time.perf_counter() - start
            prefix = torch.cat([prefix, out.tokens[:1], (out.tokens[1:2] + 1) % vocab])    # d^(2) rejected
        return seconds

    def dedit_case(drafter, k):
        """Drafter seconds of a greedy deer decode (its rounds) on the cpu target."""
        res = decode(feature_target, prefixes[min(args.prefix_lengths)], schedule="deer", width=k,
                     max_new_tokens=args.dedit_tokens, drafter=drafter)
        return res.extras["drafter_seconds"], len(res.accepted)

    cases = [("deer", n, k) for n in args.prefix_lengths for k in args.ks] + [("ar_draft", None, k) for k in args.ks]
    cases += [("dedit", None, k) for k in args.ks]
    rounds = {}

    def run(case, path):
        kind, n, k = case
        if kind == "dedit":
            seconds, rounds[(case, path)] = dedit_case(dedit[path], k)
            return seconds
        return deer_case(deer[path], n, k) if kind == "deer" else ar_case(ar[path], k)

    start = time.perf_counter()
    for case in cases:                               # compile every shape before timing
        run(case, "compiled")
    warm_seconds = time.perf_counter() - start
    # the same drafts on both paths (greedy, same weights)
    for k in args.ks:
        a = deer["eager"].draft(prefixes[max(args.prefix_lengths)], k, greedy).tokens
        b = deer["compiled"].draft(prefixes[max(args.prefix_lengths)], k, greedy).tokens
        assert torch.equal(a, b), ("deer", k)

    times = {(case, path): [] for case in cases for path in ("eager", "compiled")}
    for _ in tqdm(range(args.repeats), desc="repeats"):
        for case in cases:
            for path in ("eager", "compiled"):
                times[(case, path)].append(run(case, path))

    def name(case):
        kind, n, k = case
        return f"deer:prefix={n}:k={k}" if kind == "deer" else f"{kind}:k={k}"

    rows = []
    for case in cases:
        eager, compiled = np.array(times[(case, "eager")]), np.array(times[(case, "compiled")])
        per = {"deer": args.calls, "ar_draft": args.cycles}.get(case[0]) or rounds[(case, "eager")]
        if case[0] == "dedit":
            assert rounds[(case, "eager")] == rounds[(case, "compiled")], case       # the same rounds
        rows.append({"case": name(case), "eager_ms_per_call": 1e3 * float(np.median(eager)) / per,
                     "compiled_ms_per_call": 1e3 * float(np.median(compiled)) / per,
                     "speedup": median_ci(eager / compiled)})
    report = {"code_version": code_key(["spec_lib.compiled.drafters", "spec_lib.drafters"]),
              "args": vars(args), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
              "params_millions": sum(p.numel() for p in hf.parameters()) / 1e6, "vocab": vocab,
              "context": config.context, "warm_up_seconds": warm_seconds,
              "compile_seconds": {"deer": {f"prefix={w}:k={k}": s
                                           for (_, w, k), s in deer["compiled"].compile_seconds.items()},
                                  "ar_draft": {f"rows={r}": s for (_, r), s in ar["compiled"].compile_seconds.items()},
                                  "dedit": {f"context={w}:k={k}": s
                                            for (_, w, k), s in dedit["compiled"].compile_seconds.items()}},
              "dedit_passes": args.passes,
              "per_call": rows}
    print(f"\n{report['params_millions']:.2f}M-parameter drafters (vocab {vocab}, context {config.context}), "
          f"{args.repeats} interleaved repeats, {torch.get_num_threads()} threads; warm-up {warm_seconds:.1f} s")
    print(f"{'case':<26} {'eager ms':>9} {'compiled ms':>12}   speedup median [95% CI]")
    for r in rows:
        med, low, high = r["speedup"]
        print(f"{r['case']:<26} {r['eager_ms_per_call']:9.2f} {r['compiled_ms_per_call']:12.2f}   "
              f"{med:.2f} [{low:.2f}, {high:.2f}]")
    if args.out:
        atomic_write_bytes(args.out, (json.dumps(report, indent=2) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
