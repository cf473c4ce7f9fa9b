"""The PyPI ``dflash`` package (0.1.0, the public DFlash release) as a peer of the project's
DFlash drafter (seed 002's first baseline): the same trained weights, target and prompts,
decoded greedily by both, compared on outputs, tau and tokens/s.

``dflash[local]`` pins transformers 5.15.0 (the project uses another), so it runs in its own
throwaway environment (``--peer-venv``, created on first use with ``pip install torch==2.13.0
'dflash[local]==0.1.0'``; the torch pin takes the local CPU wheel) from
``benchmarks/dflash_peer_run.py``; this script runs in the project's environment, writes the
job (the target saved with ``save_pretrained``, notebook 30's trained ``dflash`` drafter, the
prompts), runs the peer, and compares.  Interleaved repeats: each repeat decodes every prompt
with the project (AR, then ``deer`` with the DFlash drafter at P1) and then with the peer
(``dflash_generate`` at the drafter's block size, then at block size 1, dflash's own AR baseline
as its benchmark times it; the target's ``generate`` once more, for outputs only); both sides
warm up untimed first.  Speedups are each side's own over its own AR, medians with 95% bootstrap
CIs over repeats.

What differs by design (read from ``dflash/model.py``): dflash runs the prompt through the
target and emits the first token before its first draft (that token is in no round of its
``acceptance_lengths``), so its first round drafts with the prompt's features, while the
project's first round drafts from the anchor alone.  Both count the bonus token in a round.
Rounds after the first are alike on both sides: that tau is the comparison.

The peer environment needs PyPI (``pip install``); on this project's machines ``torch==2.13.0``
resolves to a local CPU wheel, elsewhere pip may take a CUDA build (the decode still runs on
the CPU).

    python benchmarks/dflash_peer.py [--preset cpu] [--repeats 5] [--out benchmarks/results/dflash_peer_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

import spec_lib
from spec_lib import decode
from spec_lib.io import REPO_ROOT, atomic_write_bytes
from spec_lib.studies import bench
from spec_lib.training.block_drafters import DEDIT_PRESETS

from decode_overhead import median_ci          # benchmarks/ is the script's folder: on sys.path

PEER_REQUIREMENTS = ["torch==2.13.0", "dflash[local]==0.1.0"]


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu", help=f"DEdit preset, one of {list(DEDIT_PRESETS)}")
    parser.add_argument("--drafter", default="dflash", help="the preset's DFlash network (dflash or dflash_w32)")
    parser.add_argument("--n-code", type=int, default=8)
    parser.add_argument("--n-stdlib", type=int, default=8)
    parser.add_argument("--n-math", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-prompt-tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer-venv", default=str(REPO_ROOT / ".dflash-venv"),
                        help="the throwaway environment of the peer (created when missing)")
    parser.add_argument("--out", default=None, help="write the numbers as JSON to this path")
    args = parser.parse_args(argv)
    if args.preset not in DEDIT_PRESETS:
        parser.error(f"--preset must be one of {list(DEDIT_PRESETS)}, got {args.preset!r}")
    if not args.drafter.startswith("dflash"):
        parser.error(f"--drafter must name a DFlash network (dflash, dflash_w32), got {args.drafter!r}: the peer "
                     "has one drafting pass per round, so DEdit's editing passes cannot run in it")
    for name in ("n_code", "n_stdlib", "n_math", "max_new_tokens", "max_prompt_tokens", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def ensure_peer_venv(path: Path) -> Path:
    """The peer environment's Python, creating (or completing) the environment when ``dflash``
    does not import in it."""
    python = path / "bin" / "python"
    probe = [str(python), "-c", "import dflash.model, transformers"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"creating the peer environment {path} ({' '.join(PEER_REQUIREMENTS)}) ...", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PEER_REQUIREMENTS], check=True)
    subprocess.run(probe, check=True)
    return python


def main(argv=None) -> int:
    args = parse(argv)
    bundle = spec_lib.load("dedit", args.preset)
    if args.drafter not in bundle.networks:
        sys.exit(f"--drafter must be one of {[n for n in bundle.networks if n.startswith('dflash')]}, "
                 f"got {args.drafter!r}")
    python = ensure_peer_venv(Path(args.peer_venv))
    prompts = bench.slice_prompts(bundle.tokenizer, {"code": args.n_code, "stdlib": args.n_stdlib,
                                                     "math": args.n_math}, args.max_prompt_tokens, args.seed)
    with tempfile.TemporaryDirectory(prefix="dflash-peer-") as tmp:
        report = compare(args, python, bundle, prompts, Path(tmp))
    print(f"\n{report['responses']} responses, {report['tokens']} tokens; peer dflash {report['peer']['dflash']} "
          f"(transformers {report['peer']['transformers']}, {report['peer']['threads']} threads; the project "
          f"{report['project']['threads']}), loading {report['peer']['loading']}")
    print(f"identical greedy outputs: {report['identical']} of {report['responses']}")
    print("tau after the first round (bonus included): ours {ours_after_first_round:.3f}, peer "
          "{peer_after_first_round:.3f}; every round: ours {ours:.3f}, peer {peer:.3f}".format(**report["tau"]))
    for key in ("tokens_per_second", "speedup_over_own_ar"):
        print(key, {k: tuple(round(x, 2) for x in v) for k, v in report[key].items()})
    if args.out:
        atomic_write_bytes(args.out, (json.dumps(report, indent=2) + "\n").encode())
    return 0


def compare(args, python: Path, bundle, prompts: dict, work: Path) -> dict:
    """Write the job into ``work``, run both sides ``args.repeats`` times, interleaved, and compare."""
    target, tokenizer, eos = bundle.target, bundle.tokenizer, bundle.tokenizer.eos_token_id
    width = bundle.width_of(args.drafter)
    flat = [(name, i, list(p)) for name, items in prompts.items() for i, p in enumerate(items)]
    drafter = bundle.drafter(args.drafter, 1)
    target.lm.save_pretrained(work / "target")
    tokenizer.save_pretrained(work / "target")
    bundle.networks[args.drafter].save_pretrained(work / "draft")
    job = {"target_dir": str(work / "target"), "draft_dir": str(work / "draft"),
           "num_target_layers": target.lm.config.num_hidden_layers, "prompts": [p for _, _, p in flat],
           "eos_token_id": eos, "max_new_tokens": args.max_new_tokens, "block_size": width}
    (work / "job.json").write_text(json.dumps(job))

    def ours_decode(method, prompt):
        return decode(target, prompt, schedule=method, width=width - 1 if method == "deer" else 1,
                      max_new_tokens=args.max_new_tokens, eos_token_id=eos,
                      drafter=drafter if method == "deer" else None)

    for method in ("ar", "deer"):                        # untimed warm-up (the peer warms up in its runner)
        ours_decode(method, flat[0][2])
    ours, peer = {"ar": [], "deer": []}, []
    for repeat in tqdm(range(args.repeats), desc="repeats"):
        for method in ("ar", "deer"):
            seconds, results = 0.0, []
            for _, _, prompt in flat:
                start = time.perf_counter()
                results.append(ours_decode(method, prompt))
                seconds += time.perf_counter() - start
            ours[method].append((seconds, results))
        out = work / f"peer_{repeat}.json"
        subprocess.run([str(python), str(Path(__file__).with_name("dflash_peer_run.py")), str(work / "job.json"),
                        str(out)], check=True)
        peer.append(json.loads(out.read_text()))

    first_ar, first_deer, first_peer = ours["ar"][0][1], ours["deer"][0][1], peer[0]["rows"]
    identical = {"ours_vs_ar": 0, "peer_vs_ar": 0, "peer_ar_vs_ar": 0, "peer_generate_vs_ar": 0}
    rows = []
    for j, (name, i, _) in enumerate(flat):
        ar_tokens, deer, p = first_ar[j].tokens, first_deer[j], first_peer[j]
        identical["ours_vs_ar"] += deer.tokens == ar_tokens
        identical["peer_vs_ar"] += p["tokens"] == ar_tokens
        identical["peer_ar_vs_ar"] += p["ar_tokens"] == ar_tokens
        identical["peer_generate_vs_ar"] += p["generate_tokens"] == ar_tokens
        rows.append({"slice": name, "prompt": i, "tokens": len(ar_tokens), "ours_rounds": len(deer.accepted),
                     "ours_tau": float(np.mean(deer.accepted)), "peer_rounds": len(p["acceptance_lengths"]),
                     "peer_tau": float(np.mean(p["acceptance_lengths"])), "ours_first_round": deer.accepted[0],
                     "peer_first_round": p["acceptance_lengths"][0]})
    tau = {"ours": [a for r in first_deer for a in r.accepted],
           "peer": [a for r in first_peer for a in r["acceptance_lengths"]],
           "ours_after_first_round": [a for r in first_deer for a in r.accepted[1:]],
           "peer_after_first_round": [a for r in first_peer for a in r["acceptance_lengths"][1:]]}
    ours_tps = [sum(len(r.tokens) for r in results) / seconds for seconds, results in ours["deer"]]
    peer_tps = [sum(len(r["tokens"]) for r in p["rows"]) / sum(r["seconds"] for r in p["rows"]) for p in peer]
    ours_speedup = [ar / deer for (ar, _), (deer, _) in zip(ours["ar"], ours["deer"])]
    peer_speedup = [sum(r["ar_seconds"] for r in p["rows"]) / sum(r["seconds"] for r in p["rows"]) for p in peer]
    return {"preset": args.preset, "drafter": args.drafter, "drafter_key": spec_lib.checkpoint_key("dedit", args.preset),
            "block_size": width, "args": {k: v for k, v in vars(args).items() if k != "peer_venv"},
            "peer": {k: peer[0][k] for k in ("dflash", "transformers", "torch", "threads", "block_size", "loading")},
            "project": {"torch": torch.__version__, "threads": torch.get_num_threads()},
            "responses": len(flat), "tokens": sum(len(r.tokens) for r in first_ar), "identical": identical,
            "tau": {k: float(np.mean(v)) for k, v in tau.items()},
            "tokens_per_second": {"ours_deer": median_ci(ours_tps), "peer_dflash": median_ci(peer_tps)},
            "speedup_over_own_ar": {"ours": median_ci(ours_speedup), "peer": median_ci(peer_speedup)},
            "per_response": rows}


if __name__ == "__main__":
    sys.exit(main())
