"""How fast is this host?  Eager ``generate`` tokens/s of the committed cpu target, as
``benchmarks/compiled_decode.py`` measures its "generate" column (4 prompts per slice, 96 new
tokens, median of 5 repeats), in about a minute, so that run times recorded on different
hosts can be compared (the README's run-time table labels each run with its host).

    python benchmarks/host_speed.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compiled_decode import greedy_generate, slice_prompts  # noqa: E402

from spec_lib.training.checkpoints import load_model  # noqa: E402


def main() -> int:
    eager, tokenizer = load_model("cpu", progress=False)
    prompts = slice_prompts(tokenizer, 4, 128)
    for prompt in prompts[:2]:                                   # warm-up
        greedy_generate(eager.hf_model, prompt, 8, eager.mask_token_id)
    rates = []
    for _ in range(5):
        seconds = sum(greedy_generate(eager.hf_model, p, 96, eager.mask_token_id)[1] for p in prompts)
        rates.append(len(prompts) * 96 / seconds)
    print(f"generate: {statistics.median(rates):.0f} tokens/s (median of 5; {', '.join(f'{r:.0f}' for r in rates)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
