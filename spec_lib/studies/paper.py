"""Numbers printed in the papers, in one place, for side-by-side comparison with what the
notebooks measure.  Each constant cites where it is stated; nothing here is computed.
"""

from __future__ import annotations

# ----- seed 000, "One Call Ahead" (Packed-SS) ------------------------------------------------------

#: App. F.2 (Nemotron 8B with its draft LoRA, A100, B = 32): model execution time per
#: iteration after the first call, milliseconds.  Linear-SS: two calls of 32 rows; Packed-SS: one of 64.
F2_MS_PER_ITERATION = {"linear": 56.77, "packed": 32.37}
F2_BLOCK = 32

#: App. D.3, Table 2: NFE per iteration and evaluated rows per iteration (Nemotron layout, B = W + 1).
TABLE2_NFE_PER_ITERATION = {"linear": 2, "quadratic": 1, "packed": 1}
TABLE2_ROWS = {"linear": lambda b: 2 * b, "quadratic": lambda b: b * (b + 1), "packed": lambda b: 2 * b}

#: App. D.3, Table 2: SetDLM rows per iteration at their maximum, p = 1 and u = W.
TABLE2_SETDLM_MAX_ROWS = {("linear", 8): 25, ("linear", 16): 49, ("quadratic", 8): 81, ("quadratic", 16): 289,
                          ("packed", 8): 25, ("packed", 16): 49}

#: Sec. 4.1 (Nemotron, greedy): Packed/Linear tokens-per-NFE gain range and throughput gain range.
TOKENS_PER_NFE_GAIN = (1.134, 1.203)
THROUGHPUT_GAIN = (1.035, 1.093)

#: Sec. 4.1 (Nemotron, greedy, B = 32, no LoRA): Packed-SS's decoder time per NFE over Linear-SS's
#: ("the 8.9-10.1% increase in decoder time per NFE"); Packed's call has 2B rows, Linear's B.
TIME_PER_NFE_RATIO = (1.089, 1.101)
SEC41_BLOCK = 32

#: App. F.3: Packed-SS model time / Linear-SS total (3B, 8B), non-model time ratio to Linear-SS,
#: and Quadratic-SS's non-model time ratio.
F3_PACKED_MODEL_SHARE = (0.860, 0.854)
F3_PACKED_NON_MODEL_RATIO = 1.4
F3_QUADRATIC_NON_MODEL_RATIO = (2.9, 2.7)

# ----- seed 001, DEER -----------------------------------------------------------------------------

#: Sec. 3.4 / Figure 6: Stage II alpha sensitivity (R_max = 96): 1.01 stable, 1.02 noisy, 1.05 diverges.
ALPHA_SENSITIVITY = {1.01: "stable", 1.02: "noisy", 1.05: "diverges"}
STAGE2_R_MAX = 96
