"""The peer side of ``benchmarks/dflash_peer.py``: run by the throwaway environment's Python,
never by the project's (it imports the PyPI ``dflash`` package, whose ``local`` extra pins
transformers 5.15.0).  It reads a job JSON, writes a result JSON, and imports nothing from
``spec_lib``.

    <peer venv>/bin/python benchmarks/dflash_peer_run.py JOB.json OUT.json

Job fields: ``target_dir`` (a transformers causal LM saved with ``save_pretrained``),
``draft_dir`` (the project's ``FeatureBlockDrafter`` checkpoint), ``num_target_layers``,
``prompts`` (token-id lists), ``eos_token_id``, ``max_new_tokens``, ``block_size``.

The project's checkpoint loads into ``dflash.DFlashDraftModel`` with two adjustments (both
found by reading ``dflash/model.py`` 0.1.0): the config must carry ``num_target_layers`` (the
default layer ids are computed from it even when ``target_layer_ids`` is given), and the
project's ``context_norm`` is dflash's ``hidden_norm`` (``key_mapping``).  ``dflash_generate``
times with ``torch.cuda.synchronize``; on a CPU its timer is replaced by ``time.perf_counter``.
"""

from __future__ import annotations

import json
import sys
import time

import torch


def main(job_path: str, out_path: str) -> int:
    import dflash
    import dflash.model as dm
    import transformers
    from transformers import AutoModelForCausalLM, Qwen3Config

    job = json.loads(open(job_path).read())
    transformers.logging.set_verbosity_error()
    dm._cuda_time = time.perf_counter                  # the models run on the CPU: no CUDA synchronisation
    config = Qwen3Config.from_pretrained(job["draft_dir"])
    config.num_target_layers = job["num_target_layers"]
    draft, info = dflash.DFlashDraftModel.from_pretrained(job["draft_dir"], config=config, dtype=torch.float32,
                                                          key_mapping={r"^context_norm": "hidden_norm"},
                                                          output_loading_info=True)
    draft.eval()
    target = AutoModelForCausalLM.from_pretrained(job["target_dir"], dtype=torch.float32).eval()
    def run(ids, block_size):
        """dflash's own decode; block size 1 is its AR baseline (as its benchmark times it)."""
        start = time.perf_counter()
        stats = dm.dflash_generate(draft, target, ids, job["max_new_tokens"], [job["eos_token_id"]], 0.0,
                                   block_size=block_size, return_stats=True)
        return stats, time.perf_counter() - start

    warm = torch.tensor([job["prompts"][0]])
    for block_size in (1, job["block_size"]):           # untimed warm-up, as dflash's benchmark does
        run(warm, block_size)
    rows = []
    for prompt in job["prompts"]:
        ids = torch.tensor([prompt])
        stats, seconds = run(ids, job["block_size"])
        ar, ar_seconds = run(ids, 1)
        reference = target.generate(ids, max_new_tokens=job["max_new_tokens"], do_sample=False,
                                    eos_token_id=job["eos_token_id"], pad_token_id=job["eos_token_id"])
        rows.append({"tokens": stats.output_ids[0, len(prompt):].tolist()[: stats.num_output_tokens],
                     "acceptance_lengths": [int(a) for a in stats.acceptance_lengths], "seconds": seconds,
                     "ar_tokens": ar.output_ids[0, len(prompt):].tolist()[: ar.num_output_tokens],
                     "ar_seconds": ar_seconds, "generate_tokens": reference[0, len(prompt):].tolist()})
    report = {"dflash": getattr(dflash, "__version__", None) or _version("dflash"),
              "transformers": transformers.__version__, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "block_size": int(draft.block_size),
              "loading": {k: sorted(map(str, v)) for k, v in info.items() if k != "error_msgs"}, "rows": rows}
    with open(out_path, "w") as handle:
        json.dump(report, handle)
    return 0


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: dflash_peer_run.py JOB.json OUT.json")
    sys.exit(main(sys.argv[1], sys.argv[2]))
