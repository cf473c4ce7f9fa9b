"""Notebook 11's greedy grid, serial versus fanned out over Dask workers (a local cluster by default), in one run.

The issue's target: with the prompt x method grid fanned out over 2 local workers, the grid
of notebook 11 at a profile takes <= 0.7x the serial wall time, with identical outputs.
Both runs use the notebook's own parameters file, prompts, methods and caps; the serial run
uses this process's torch threads (as the notebook does), the workers one thread each.
Outputs are compared response by response (tokens, NFE, accepted counts); a greedy divergence
is reported with its logit gap, as notebook 11 does (a different thread count can reorder
float sums).  Runs alternate serial / fanned ``--repeats`` times; the ratio of medians and
every repeat's ratio are written to the JSON report.

The workers: by default a local cluster of ``--workers`` processes started by
:func:`spec_lib.cluster.local_cluster`, which runs them without Dask's malloc trim
threshold whatever the Dask configuration; ``--cluster ADDRESS`` times the workers of a running
scheduler instead, and refuses to start when they run with the threshold (start them with
config/dask.yaml in their Dask configuration; ``--allow-malloc-trim`` times them as they are).

    python benchmarks/fanout_speed.py --profile cpu --workers 2 --out benchmarks/results/fanout_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import pandas as pd
import torch

import spec_lib
from spec_lib.io import atomic_write_bytes
from spec_lib.notebook import params
from spec_lib.provenance import code_key, git_commit
from spec_lib.studies import bench, fanout

NOTEBOOK = "11_packed_ss_greedy"
SAME = ["slice", "prompt", "sample", "method", "tokens", "nfe", "output", "accepted"]


def grid_inputs(profile: str, limit: int | None):
    """Model, prompts, methods and caps exactly as notebook 11 builds them at ``profile``."""
    p = {name: d.default for name, d in params.declared_parameters(params.notebook_path(NOTEBOOK)).items()}
    p.update(params.load_params(params.notebook_path(NOTEBOOK), profile))
    model, tokenizer = spec_lib.load("target", p["model_preset"], checkpoint_path=p["checkpoint_path"], dtype=p["dtype"],
                                     device=p["device"])
    methods = [bench.Method("ar", 1), bench.Method("linear", p["block_linear_packed"] - 1),
               bench.Method("quadratic", p["block_quadratic"] - 1), bench.Method("packed", p["block_linear_packed"] - 1)]
    counts = {"code": p["n_code"], "packages": p["n_packages"], "stdlib": p["n_stdlib"], "math": p["n_math"]}
    if limit:
        counts = {name: min(n, limit) for name, n in counts.items()}
    prompts = bench.slice_prompts(tokenizer, counts, p["max_prompt_tokens"], p["seed"])
    caps = {"code": p["max_new_code"], "packages": p["max_new_code"], "stdlib": p["max_new_code"],
            "math": p["max_new_math"]}
    return model, tokenizer, prompts, methods, caps, p


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="smoke", choices=["smoke", "cpu"])
    parser.add_argument("--workers", type=int, default=2, help="processes of the local cluster")
    parser.add_argument("--cluster", default="",
                        help="a running scheduler's address (tcp://host:8786) instead of a local cluster")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0, help="at most this many prompts per slice (0: all)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--allow-malloc-trim", action="store_true",
                        help="with --cluster: time the workers even when they run with Dask's malloc trim threshold")
    args = parser.parse_args()
    if args.workers < 1 or args.repeats < 1 or args.limit < 0:
        parser.error("--workers and --repeats must be >= 1, --limit >= 0")
    if args.cluster and (args.cluster == "local" or args.cluster.startswith("local:")):
        parser.error("--cluster takes a scheduler's address; for a local cluster use --workers N")
    # a local cluster goes through spec_lib.cluster.local_cluster (no malloc trim threshold)
    client = fanout.connect(args.cluster or f"local:{args.workers}")
    workers = len(client.scheduler_info()["workers"])
    # what the workers were started with
    worker_environment = {name: sorted(set(client.run(lambda name=name: os.environ.get(name)).values()), key=str)
                          for name in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")}
    if worker_environment["MALLOC_TRIM_THRESHOLD_"] != [None] and not (args.cluster and args.allow_malloc_trim):
        client.close()
        if not args.cluster:                  # local_cluster unsets it: reaching this is a bug
            raise SystemExit(f"the local workers run with MALLOC_TRIM_THRESHOLD_="
                             f"{worker_environment['MALLOC_TRIM_THRESHOLD_']}: local_cluster did not unset it")
        raise SystemExit(
            f"the workers of {args.cluster} run with MALLOC_TRIM_THRESHOLD_="
            f"{worker_environment['MALLOC_TRIM_THRESHOLD_']} "
            f"(Dask's default), which slows every decoding worker by about a fifth. Start them with config/dask.yaml "
            f"in their Dask configuration (`make` copies it to .venv/etc/dask/; elsewhere ~/.config/dask/), or "
            f"pass --allow-malloc-trim to time them as they are")
    model, tokenizer, prompts, methods, caps, p = grid_inputs(args.profile, args.limit)     # trains on first use
    kwargs = dict(max_new_tokens=caps, temperature=0.0, eos_token_id=tokenizer.eos_token_id, seed=p["seed"])
    walls = {"serial": [], "fanned": []}
    for repeat in range(args.repeats):
        for mode in ("serial", "fanned"):
            start = time.perf_counter()
            runs = bench.run_grid(model, prompts, methods, client=client if mode == "fanned" else None, **kwargs)
            walls[mode].append(time.perf_counter() - start)
            if repeat == 0 and mode == "serial":
                first = runs
            elif repeat == 0:
                fanned = runs
    same = (fanned[SAME].reset_index(drop=True) == first[SAME].reset_index(drop=True)).all(axis=1)
    differing = fanned[~same]
    gaps = []                      # a differing response: the logit gap where it leaves the serial output
    for method in differing["method"].unique():
        pair = pd.concat([first[first["method"] == method].assign(method="serial"),
                          fanned[fanned["method"] == method]])
        gaps += bench.divergences(model.hf_model, pair, prompts, reference="serial").to_dict("records")
    report = {"profile": args.profile, "cluster": args.cluster or "local", "workers": workers,
              "repeats": args.repeats,
              "serial_threads": torch.get_num_threads(), "worker_environment": worker_environment,
              # the vector kernels torch dispatches to here (AVX2 / AVX-512 machines time differently)
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "checkpoint_key": None if p["checkpoint_path"] else spec_lib.checkpoint_key("target", p["model_preset"]),
              "responses": int(len(first)),
              "identical_responses": int(same.sum()), "differing": gaps, "serial_wall_s": walls["serial"], "fanned_wall_s": walls["fanned"],
              "ratio_of_medians": float(np.median(walls["fanned"]) / np.median(walls["serial"])),
              "ratios": [f / s for f, s in zip(walls["fanned"], walls["serial"])], "target": 0.7,
              "code": code_key(["spec_lib.studies.bench", "spec_lib.studies.fanout"]), "commit": git_commit()}
    report["meets_target"] = report["ratio_of_medians"] <= 0.7 and report["identical_responses"] == report["responses"]
    atomic_write_bytes(args.out, (json.dumps(report, indent=1) + "\n").encode())
    print(json.dumps({k: v for k, v in report.items() if k != "differing"}, indent=1))


if __name__ == "__main__":
    main()
