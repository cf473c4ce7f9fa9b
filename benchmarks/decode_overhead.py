"""Decoder overhead and AR speed versus ``transformers.generate``, measured in one run.

Two numbers per schedule (seed 000, App. F.3 splits decoder wall time the same way):

* non-model share = (wall - model) / wall, summed over all decodes of a repeat;
  targets: <= 10% for ar, linear, packed at W = 31 and <= 20% for quadratic at B = 8;
* ``ar`` tokens/s divided by ``hf_model.generate`` greedy tokens/s on the same model and
  prompts (target >= 1.0), with identical outputs checked.

Schedules and ``generate`` are interleaved prompt by prompt and repeat by repeat, so
machine noise hits all of them alike; medians over repeats with 95% bootstrap CIs.

    python benchmarks/decode_overhead.py [--hidden 256 --layers 4 --vocab 4096 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
from scipy import stats
from tqdm.auto import tqdm

from spec_lib import decode
from spec_lib.io import atomic_write_bytes
from spec_lib.models import DualModeLM, build_qwen3
from spec_lib.provenance import code_key

CASES = [("ar", 31), ("linear", 31), ("packed", 31), ("quadratic", 7)]
TARGETS = {"ar": 0.10, "linear": 0.10, "packed": 0.10, "quadratic": 0.20}


def median_ci(values, seed=0) -> tuple[float, float, float]:
    values = np.asarray(values, dtype=float)
    if len(values) < 3:
        return float(np.median(values)), float("nan"), float("nan")
    ci = stats.bootstrap((values,), np.median, n_resamples=5000, confidence_level=0.95,
                         random_state=np.random.default_rng(seed), method="percentile").confidence_interval
    return float(np.median(values)), float(ci.low), float(ci.high)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=256, help="hidden size (256 with 4 layers: ~4M params)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    parser.add_argument("--device", default="cpu", help="torch device (cuda on a GPU)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--out", default=None, help="write the numbers as JSON to this path")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no GPU")

    hf_model = build_qwen3(args.vocab, hidden_size=args.hidden, num_layers=args.layers, num_heads=4,
                           max_positions=args.prompt_len + args.new_tokens + 64, seed=0)
    hf_model = hf_model.to(device=args.device, dtype=getattr(torch, args.dtype))
    hf_model.generation_config.pad_token_id = args.vocab - 1
    hf_model.generation_config.eos_token_id = None
    model = DualModeLM(hf_model, mask_token_id=args.vocab - 1)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, args.vocab - 1, (args.prompt_len,), generator=gen).to(args.device)
               for _ in range(args.prompts)]
    ones = torch.ones(1, args.prompt_len, dtype=torch.long, device=args.device)

    def run_generate(prompt):
        start = time.perf_counter()
        with torch.inference_mode():
            out = hf_model.generate(prompt[None], attention_mask=ones, max_new_tokens=args.new_tokens,
                                    min_new_tokens=args.new_tokens, do_sample=False)
        tokens = out[0, args.prompt_len:].tolist()                   # .tolist() waits for the GPU
        return tokens, time.perf_counter() - start

    for prompt in prompts[:2]:                                              # warm-up
        run_generate(prompt)
        for schedule, width in CASES:
            decode(model, prompt, schedule=schedule, width=width, max_new_tokens=16)

    share = {s: [] for s, _ in CASES}
    speed_ratio, identical = [], True
    for _ in tqdm(range(args.repeats), desc="repeats"):
        wall = {s: 0.0 for s, _ in CASES}
        model_time = {s: 0.0 for s, _ in CASES}
        gen_wall = 0.0
        for prompt in prompts:
            reference, seconds = run_generate(prompt)
            gen_wall += seconds
            for schedule, width in CASES:
                res = decode(model, prompt, schedule=schedule, width=width, max_new_tokens=args.new_tokens)
                wall[schedule] += res.wall_seconds
                model_time[schedule] += res.model_seconds
                identical &= res.tokens == reference
        for schedule, _ in CASES:
            share[schedule].append(1.0 - model_time[schedule] / wall[schedule])
        speed_ratio.append(gen_wall / wall["ar"])           # same tokens: ratio of tokens/s

    n_params = sum(p.numel() for p in hf_model.parameters())
    report = {"code_version": code_key(["spec_lib.schedules", "spec_lib.models"]), "params_millions": n_params / 1e6,
              "args": vars(args), "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
              "torch_threads": torch.get_num_threads(), "identical_to_generate": identical,
              "non_model_share": {}, "ar_over_generate_tokens_per_s": None}
    print(f"\nQwen3 {n_params / 1e6:.1f}M params, {args.prompts} prompts x {args.new_tokens} new tokens, "
          f"{args.repeats} interleaved repeats, {torch.get_num_threads()} threads")
    print(f"{'schedule':<10} {'W':>3}  non-model share  median [95% CI]    target")
    for schedule, width in CASES:
        med, low, high = median_ci(share[schedule])
        report["non_model_share"][schedule] = {"width": width, "median": med, "ci95": [low, high],
                                               "target": TARGETS[schedule]}
        flag = "ok" if med <= TARGETS[schedule] else "ABOVE TARGET"
        print(f"{schedule:<10} {width:>3}  {100 * med:6.1f}% [{100 * low:5.1f}, {100 * high:5.1f}]"
              f"      <= {100 * TARGETS[schedule]:.0f}%  {flag}")
    med, low, high = median_ci(speed_ratio)
    report["ar_over_generate_tokens_per_s"] = {"median": med, "ci95": [low, high], "target": 1.0}
    print(f"ar tokens/s / generate tokens/s: {med:.3f} [{low:.3f}, {high:.3f}]  (target >= 1.0)")
    print(f"all schedules identical to generate: {identical}")
    if args.out:
        atomic_write_bytes(args.out, (json.dumps(report, indent=2) + "\n").encode())
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
