"""Does ``torch.autocast("cpu", dtype=torch.bfloat16)`` speed up dual-mode training here?

Times one optimisation step (dual-mode loss, backward, AdamW) of the cpu preset's model
architecture in float32 and under bf16 autocast, alternating the two step by step on the
same batches so machine noise hits both alike; reports the median step time of each and the
median of the paired per-step ratios with a 95% bootstrap CI.  The cpu preset trains in
float32 unless this ratio is clearly below 1 (``TrainConfig.bf16``).

    python benchmarks/training_precision.py [--steps 30 --batch 16 --seq-len 256]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
from scipy import stats

from spec_lib.training.dual_mode import dual_mode_loss, make_dual_mode_batch
from spec_lib.training.presets import PRESETS
from spec_lib.training.self_speculative import build_model


def step_seconds(model, optimizer, batch, bf16: bool) -> float:
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss, _ = dual_mode_loss(model, batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per precision (after 3 warm-up steps)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--width", type=int, default=31, help="drafting width W of the diffusion blocks")
    parser.add_argument("--out", default="", help="optional JSON output path")
    args = parser.parse_args(argv)
    if args.steps < 3 or args.batch < 1 or args.seq_len < args.width + 2:
        parser.error("need --steps >= 3, --batch >= 1 and --seq-len > --width + 1")
    model_config, train_config = PRESETS["cpu"]
    gen = torch.Generator().manual_seed(0)
    models = {bf16: build_model(model_config, seed=0).train() for bf16 in (False, True)}
    optimizers = {bf16: torch.optim.AdamW(m.parameters(), lr=1e-3) for bf16, m in models.items()}
    batches = [make_dual_mode_batch(torch.randint(4, model_config.vocab_size, (args.batch, args.seq_len), generator=gen),
                                    width=args.width, n_blocks=train_config.n_blocks, mask_token_id=0, generator=gen)
               for _ in range(4)]
    times = {False: [], True: []}
    for step in range(args.steps + 3):
        order = (False, True) if step % 2 == 0 else (True, False)
        for bf16 in order:
            seconds = step_seconds(models[bf16], optimizers[bf16], batches[step % len(batches)], bf16)
            if step >= 3:
                times[bf16].append(seconds)
    ratio = np.asarray(times[True]) / np.asarray(times[False])
    ci = stats.bootstrap((ratio,), np.median, n_resamples=5000, random_state=0).confidence_interval
    tokens = args.batch * args.seq_len
    report = {"fp32_step_s": float(np.median(times[False])), "bf16_step_s": float(np.median(times[True])),
              "fp32_tokens_per_s": tokens / float(np.median(times[False])),
              "bf16_tokens_per_s": tokens / float(np.median(times[True])),
              "bf16_over_fp32_time": float(np.median(ratio)), "ci": [float(ci.low), float(ci.high)],
              "steps": args.steps, "batch": args.batch, "seq_len": args.seq_len, "threads": torch.get_num_threads()}
    print(json.dumps(report, indent=2))
    if args.out:
        from spec_lib.io import atomic_write_bytes

        atomic_write_bytes(args.out, json.dumps(report, indent=2).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
