"""Exactness and attention backends on an accelerator: the parts of ``benchmarks/gpu_check.sh``
that need a model on the device.

1. **Greedy identity** of every schedule with ``transformers.generate`` on the device, in
   float32 and bfloat16 (Sec. 3.1: greedy speculative decoding reproduces AR decoding of the
   same weights).  On a GPU the reduction order of a 64-row call differs from a 1-row call, so
   a near-tie can flip: every divergence is reported with the position and the AR logit gap
   (top-1 minus top-2) at the first differing token, which must be small for the divergence
   to be a rounding tie rather than a bug.
2. **Exact sampling** on the device (Thm. 3.3): at temperature 1, 3-token continuations of
   Packed-SS and Linear-SS on a small-vocabulary model follow the AR law enumerated exactly
   in float64 (chi-square), and a broken sampler (the rejection residual left out) is
   rejected: the negative control.
3. **SDPA versus FlexAttention** per call layout (:mod:`spec_lib.attention`): largest logit
   difference and median time per call over a cached prefix.

Writes one JSON report.  Runs on CPU too (small sizes), for checking the script itself:

    python benchmarks/gpu_exactness.py --device cpu --prompts 2 --new-tokens 16 --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
from scipy import stats

from spec_lib import decode, masks
from spec_lib.architectures import build_qwen3
from spec_lib.attention import FlexDualModeLM
from spec_lib.io import atomic_write_bytes
from spec_lib.models import DualModeLM

SCHEDULES = [("ar", 1), ("linear", 31), ("packed", 31), ("quadratic", 7)]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def greedy_identity(hf_model, model, prompts, new_tokens: int) -> dict:
    """Per schedule: identical responses, and each divergence with its AR logit gap."""
    out = {}
    for schedule, width in SCHEDULES:
        same, divergences = 0, []
        for prompt in prompts:
            with torch.inference_mode():
                ref = hf_model.generate(prompt[None], attention_mask=torch.ones_like(prompt)[None],
                                        max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
            reference = ref[0, prompt.numel():].tolist()
            tokens = decode(model, prompt, schedule=schedule, width=width, max_new_tokens=new_tokens).tokens
            if tokens == reference:
                same += 1
                continue
            i = next(j for j, (a, b) in enumerate(zip(tokens, reference)) if a != b)
            with torch.inference_mode():
                context = torch.cat([prompt, torch.tensor(reference[:i], device=prompt.device)])
                logits = hf_model(input_ids=context[None]).logits[0, -1].float()
            top = logits.topk(2).values
            divergences.append({"position": i, "ar_logit_gap": float(top[0] - top[1])})
        out[schedule] = {"width": width, "identical": same, "responses": len(prompts), "divergences": divergences}
    return out


def sampling_law(device: str, samples: int, length: int = 3, vocab: int = 12) -> dict:
    """Chi-square of Packed-SS's and Linear-SS's ``length``-token continuations at temperature 1
    against the AR law, enumerated exactly (float64 on the CPU) for a small-vocabulary model
    whose logits are sharpened (so drafts are often accepted and often rejected); the negative
    control is Packed-SS with the rejection residual left out (``ablation="no_residual"``)."""
    import itertools

    hf_model = build_qwen3(vocab + 1, hidden_size=32, num_layers=2, num_heads=2, seed=5)
    with torch.no_grad():                             # tied embeddings: sharpen both ends at once
        hf_model.get_input_embeddings().weight.mul_(3.0)
    prompt = [1, 2, 3]
    law = {}
    reference = hf_model.double().eval()
    with torch.inference_mode():
        for tokens in itertools.product(range(vocab + 1), repeat=length):    # the MASK id is a token too
            ids = torch.tensor([prompt + list(tokens)])
            logp = torch.log_softmax(reference(input_ids=ids).logits[0, len(prompt) - 1: -1], -1)
            law[tokens] = float(logp.gather(1, torch.tensor(tokens)[:, None]).sum().exp())
    total = sum(law.values())
    model = DualModeLM(hf_model.float().to(device), mask_token_id=vocab)
    outcomes = list(law)
    expected = np.array([law[o] / total for o in outcomes]) * samples
    keep = expected >= 5
    report = {}
    for name, schedule, ablation in (("packed", "packed", None), ("linear", "linear", None),
                                     ("negative_control_packed_no_residual", "packed", "no_residual")):
        counts = dict.fromkeys(outcomes, 0)
        for seed in range(samples):
            res = decode(model, torch.tensor(prompt, device=device), schedule=schedule, width=3,
                         max_new_tokens=length, temperature=1.0, seed=seed, ablation=ablation)
            counts[tuple(res.tokens)] += 1
        observed = np.array([counts[o] for o in outcomes])
        obs = np.append(observed[keep], observed[~keep].sum())
        exp = np.append(expected[keep], expected[~keep].sum())
        report[name] = {"chi2_p": float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue),
                        "cells": int(keep.sum()) + 1}
    return report


def backends(sdpa: DualModeLM, flex: FlexDualModeLM, device: str, cache_len: int, repeats: int) -> list[dict]:
    """Largest |logit difference| and median seconds per call, SDPA vs Flex, per layout."""
    cases = [("verify", 31), ("linear_draft", 31), ("packed", 31), ("quadratic", 7), ("quadratic", 15)]
    prompt = torch.arange(1, cache_len + 2, device=device) % 50 + 1
    draft = torch.arange(3, 3 + 31, device=device) % 50 + 1
    rows = []
    for kind, width in cases:
        entry = {"kind": kind, "width": width}
        outputs = {}
        for name, model in (("sdpa", sdpa), ("flex", flex)):
            times = []
            for r in range(repeats + 1):                     # the first call of a shape compiles (flex)
                model.reset()
                model.call("linear_draft", prompt, draft[:0], width)       # fills the cache with the prompt
                model.commit(1)
                sync(device)
                start = time.perf_counter()
                out = model.call(kind, torch.cat([prompt, draft[:1]]), draft[1: width + 1], width)
                sync(device)
                if r:
                    times.append(time.perf_counter() - start)
            outputs[name] = out
            entry[f"{name}_ms"] = 1e3 * float(np.median(times))
            entry["rows"] = out.rows
        diffs = [(a - b).abs().max().item() for a, b in
                 ((outputs["sdpa"].target_logits, outputs["flex"].target_logits),
                  (outputs["sdpa"].draft_logits, outputs["flex"].draft_logits)) if a is not None]
        entry["max_abs_logit_diff"] = max(diffs)
        rows.append(entry)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--samples", type=int, default=4000, help="sampled continuations per schedule")
    parser.add_argument("--cache-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no GPU")
    report = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
              "torch": torch.__version__, "args": vars(args)}
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, args.vocab - 1, (args.prompt_len,), generator=gen).to(args.device)
               for _ in range(args.prompts)]
    for dtype in ("float32", "bfloat16"):
        hf_model = build_qwen3(args.vocab, hidden_size=args.hidden, num_layers=args.layers, num_heads=4,
                               max_positions=4096, seed=0).to(args.device, getattr(torch, dtype))
        hf_model.generation_config.pad_token_id = args.vocab - 1
        hf_model.generation_config.eos_token_id = None
        model = DualModeLM(hf_model, mask_token_id=args.vocab - 1)
        started = time.perf_counter()
        report[f"greedy_{dtype}"] = greedy_identity(hf_model, model, prompts, args.new_tokens)
        print(f"greedy {dtype}: {time.perf_counter() - started:.0f} s", flush=True)
        for schedule, part in report[f"greedy_{dtype}"].items():
            gaps = [d["ar_logit_gap"] for d in part["divergences"]]
            print(f"  {schedule:<10} {part['identical']}/{part['responses']} identical; divergence gaps {gaps}")
    started = time.perf_counter()
    report["sampling_law_float32"] = sampling_law(args.device, args.samples)
    print(f"sampling: {report['sampling_law_float32']} ({time.perf_counter() - started:.0f} s)", flush=True)
    sdpa_hf = build_qwen3(args.vocab, hidden_size=args.hidden, num_layers=args.layers, num_heads=4,
                          max_positions=4096, seed=0).to(args.device)
    flex_hf = build_qwen3(args.vocab, hidden_size=args.hidden, num_layers=args.layers, num_heads=4,
                          max_positions=4096, seed=0).to(args.device)
    report["attention_backends"] = backends(DualModeLM(sdpa_hf, args.vocab - 1), FlexDualModeLM(flex_hf, args.vocab - 1),
                                            args.device, args.cache_len, args.repeats)
    for row in report["attention_backends"]:
        print(f"  {row['kind']:<12} W={row['width']:<3} rows={row['rows']:<4} sdpa {row['sdpa_ms']:.3f} ms  "
              f"flex {row['flex_ms']:.3f} ms  max |dlogit| {row['max_abs_logit_diff']:.2e}", flush=True)
    atomic_write_bytes(args.out, (json.dumps(report, indent=2) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
