"""Verified-length dynamics of greedy Linear-SS and Packed-SS, vectorised over instances.

References (seed 000): Assumption 3.1 (monotone draft correctness with thresholds
c*_k <= k), Lemma B.1 (F in Eq. 6 is nondecreasing), Lemma B.2 (two Packed-SS passes
reach F(c)), Theorem 3.2 (c_{2t} >= l_t, hence NFE_Packed(L) <= NFE_Linear(L)).

Output positions are k = 1, 2, ...; a drafter's prediction at position k from a context of
c verified output tokens is *correct* or not.  Two kinds of instance:

* ``thresholds`` ``(N, K)``: column k holds c*_k, correct iff c >= c*_k (Assumption 3.1);
* ``table`` ``(N, K, K)``: ``table[n, k, c]`` arbitrary (may violate the assumption).

Column / index 0 is unused (positions start at 1).  K must exceed L + W + 1.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np


def _correct(instances: np.ndarray, positions: np.ndarray, context: np.ndarray) -> np.ndarray:
    """``(N, w)`` correctness of predictions at ``positions`` (N, w) from contexts (N,)."""
    rows = np.arange(instances.shape[0])[:, None]
    positions = np.minimum(positions, instances.shape[1] - 1)      # finished rows may look past K
    if instances.ndim == 2:                                         # thresholds c*_k
        return instances[rows, positions] <= context[:, None]
    return instances[rows, positions, np.minimum(context, instances.shape[2] - 1)[:, None]]


def _leading(ok: np.ndarray) -> np.ndarray:
    """Number of leading True values per row."""
    return np.cumprod(ok, axis=1).sum(axis=1)


def linear_step(instances: np.ndarray, verified: np.ndarray, width: int) -> np.ndarray:
    """One Linear-SS iteration F(c) (Eq. 6): fresh draft of W positions from c, then verify."""
    positions = verified[:, None] + np.arange(1, width + 1)           # c+1 .. c+W
    return verified + _leading(_correct(instances, positions, verified)) + 1


def fresh_verified_length(instances: np.ndarray, width: int, max_c: int) -> np.ndarray:
    """``(N, max_c + 1)``: F(c) for every c = 0..max_c (Lemma B.1's map)."""
    n = instances.shape[0]
    return np.stack([linear_step(instances, np.full(n, c), width) for c in range(max_c + 1)], axis=1)


@dataclass
class Trajectories:
    """Verified output lengths: ``packed[:, t]`` after t passes, ``linear[:, t]`` after t iterations."""

    packed: np.ndarray
    linear: np.ndarray

    def nfe_packed(self, length: int) -> np.ndarray:
        """Passes Packed-SS needs to reach ``length`` tokens (first t with c_t >= L)."""
        return np.argmax(self.packed >= length, axis=1)

    def nfe_linear(self, length: int) -> np.ndarray:
        """Passes Linear-SS needs: two per iteration."""
        return 2 * np.argmax(self.linear >= length, axis=1)


def simulate(instances: np.ndarray, width: int, length: int) -> Trajectories:
    """Run both schedules (no stopping) until every instance has ``length`` tokens.

    Packed-SS (Algorithm 1): pass t verifies the retained draft (drafted from context
    ``ctx``, covering positions up to ``ctx + W``), accepts its correct leading part plus
    the verifier token, and drafts positions c+1..c+W from its own start length c; the
    positions beyond the new length are retained (Eq. 4).  D_0 is empty.
    """
    n, size = instances.shape[:2]
    if size <= length + width + 1:
        raise ValueError(f"instances need more than length + width + 1 = {length + width + 1} positions, got {size}")
    c = np.zeros(n, dtype=np.int64)
    ctx = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)                                 # D_0 = ∅
    packed = [c.copy()]
    while packed[-1].min() < length:
        positions = c[:, None] + np.arange(1, width + 1)
        ok = _correct(instances, positions, ctx) & (positions <= end[:, None])
        new_c = c + _leading(ok) + 1
        ctx, end, c = c, c + width, np.where(c >= length, c, new_c)   # finished rows stay put
        packed.append(c.copy())
    ell = np.zeros(n, dtype=np.int64)
    linear = [ell.copy()]
    while linear[-1].min() < length:
        ell = np.where(ell >= length, ell, linear_step(instances, ell, width))
        linear.append(ell.copy())
    return Trajectories(np.stack(packed, axis=1), np.stack(linear, axis=1))


def dominance_report(instances: np.ndarray, width: int, length: int) -> dict:
    """Check Lemma B.1, Lemma B.2 and Theorem 3.2 on every instance; count violations."""
    traj = simulate(instances, width, length)
    fresh = fresh_verified_length(instances, width, length)
    steps = traj.linear.shape[1] - 1
    packed = traj.packed
    if packed.shape[1] < 2 * steps + 1:                               # pad finished trajectories
        packed = np.concatenate([packed, np.repeat(packed[:, -1:], 2 * steps + 1 - packed.shape[1], 1)], 1)
    even = np.minimum(packed[:, 0: 2 * steps + 1: 2], length)         # c_{2t}, capped at L
    theorem = (even < np.minimum(traj.linear, length)).sum()           # c_{2t} >= l_t
    c_t = np.minimum(packed[:, :-2], length)
    lemma_b2 = (np.minimum(packed[:, 2:], length)
                < np.minimum(np.take_along_axis(fresh, c_t, axis=1), length)).sum()
    nfe_ratio = traj.nfe_packed(length) / traj.nfe_linear(length)
    nfe_violations = sum(int((traj.nfe_packed(L) > traj.nfe_linear(L)).sum()) for L in range(1, length + 1))
    return {
        "instances": int(instances.shape[0]),
        "theorem_violations": int(theorem),
        "nfe_violations": nfe_violations,
        "lemma_b1_violations": int((np.diff(fresh, axis=1) < 0).sum()),
        "lemma_b2_violations": int(lemma_b2),
        "nfe_ratio": nfe_ratio,
        # c_{2t} - l_t at every t >= 1 with l_t < L (a frozen, finished Packed-SS row only
        # understates its margin).
        "margin": (packed[:, 0: 2 * steps + 1: 2] - traj.linear)[:, 1:][traj.linear[:, 1:] < length],
    }


# ----- threshold generators (all satisfy c*_k <= k) ----------------------------------------------

def thresholds_iid(n: int, size: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """c*_k = k - G_k with G_k i.i.d. uniform on {0..W+1}: each position needs its own lookahead."""
    k = np.arange(size)
    return np.maximum(0, k - rng.integers(0, width + 2, (n, size)))


def thresholds_bursty(n: int, size: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """Runs of easy positions (c*_k = k - W - 1, predictable from far back) and hard ones (c*_k = k)."""
    k = np.arange(size)
    hard = np.zeros((n, size), dtype=bool)
    state = rng.random(n) < 0.5
    switch = rng.random((n, size)) < rng.uniform(0.05, 0.4, (n, 1))
    for j in range(size):
        state = np.where(switch[:, j], ~state, state)
        hard[:, j] = state
    return np.where(hard, k, np.maximum(0, k - width - 1))


def thresholds_near_miss(n: int, size: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """Adversarial for a stale drafter: c*_k in {k-1, k-2} (needs all or all-but-one earlier
    token) or k (never early); Packed-SS's one-call-old context misses by one or two."""
    k = np.arange(size)
    offset = rng.choice([0, 1, 2], p=[0.3, 0.4, 0.3], size=(n, size))
    return np.maximum(0, k - offset)


GENERATORS = {"iid": thresholds_iid, "bursty": thresholds_bursty, "near_miss": thresholds_near_miss}


# ----- negative control: drafters that violate Assumption 3.1 --------------------------------------

def violates_assumption(table: np.ndarray) -> np.ndarray:
    """Per instance: some position is correct from a context and wrong from a longer one."""
    size = table.shape[1]
    bad = np.zeros(table.shape[0], dtype=bool)
    for k in range(1, size):
        row = table[:, k, :k]                                          # contexts c < k
        bad |= (row[:, :-1] & ~row[:, 1:]).any(axis=1)
    return bad


def counterexample_summary(counter: dict) -> dict:
    """The JSON-able part of :func:`smallest_counterexample`'s result."""
    return {k: counter[k] for k in ("length", "width", "nfe_packed", "nfe_linear", "exhaustive", "searched", "packed",
                                    "linear", "fresh")}


def smallest_counterexample(max_length: int = 8, max_width: int = 4, budget: int = 2 ** 17,
                            seed: int = 0) -> dict | None:
    """Search, by increasing L then W, for a correctness table (necessarily violating
    Assumption 3.1) on which Packed-SS needs more passes than Linear-SS to reach L tokens.

    Only predictions a schedule can make matter: position k from context c with
    k - W <= c < k.  Sizes with at most ``budget`` tables are searched exhaustively, larger
    ones with ``budget`` random tables.  Returns the first table found, both trajectories
    and the NFE counts, or None.
    """
    rng = np.random.default_rng(seed)
    for length in range(1, max_length + 1):
        for width in range(1, max_width + 1):
            size = length + width + 2
            cells = [(k, c) for k in range(1, size) for c in range(max(0, k - width), k)]
            exhaustive = 2 ** len(cells) <= budget
            if exhaustive:
                bits = np.array(list(itertools.product([False, True], repeat=len(cells))), dtype=bool)
            else:
                bits = rng.random((budget, len(cells))) < rng.uniform(0.3, 0.9, (budget, 1))
            tables = np.zeros((bits.shape[0], size, size), dtype=bool)
            k_idx, c_idx = np.array(cells).T
            tables[:, k_idx, c_idx] = bits
            traj = simulate(tables, width, length)
            worse = traj.nfe_packed(length) > traj.nfe_linear(length)
            if worse.any():
                i = int(np.flatnonzero(worse)[0])
                return {"length": length, "width": width, "table": tables[i],
                        "packed": traj.packed[i], "linear": traj.linear[i],
                        "nfe_packed": int(traj.nfe_packed(length)[i]),
                        "nfe_linear": int(traj.nfe_linear(length)[i]),
                        "violates_assumption": bool(violates_assumption(tables[i:i + 1])[0]),
                        "searched": int(bits.shape[0]), "exhaustive": exhaustive,
                        "fresh": fresh_verified_length(tables[i:i + 1], width, length)[0]}
    return None
