"""The static-cache (and compiled) path of :mod:`spec_lib.compiled` is as exact as the eager one.

Greedy outputs of every schedule equal ``hf_model.generate(do_sample=False)`` in float64 (seed
000, Theorem 3.3 at temperature 0), sampled outputs equal the eager path's token for token for
the same seed (so the eager path's chi-square tests carry over), the verified-only cache update
moves a pointer (no reallocation), and bad arguments are refused before any work.  The
compiled tests are kept small: each distinct call shape costs one inductor compile.
"""

from __future__ import annotations

import copy
import gc
import threading
import time

import pytest
import torch

from spec_lib import decode
from spec_lib.models import DualModeLM
from spec_lib.compiled import CompiledRegions, MaskStrips, StaticDualModeLM, skipped_guards, warm_up
from spec_lib.compiled.target import _GuardStance

from .conftest import MASK_ID, as_dual, prompts
from .test_lossless_greedy import MAX_NEW, references

SPECULATIVE = ("linear", "quadratic", "packed")


def as_static(hf_model, dtype=torch.float64, **kwargs) -> StaticDualModeLM:
    return StaticDualModeLM(copy.deepcopy(hf_model).to(dtype), mask_token_id=MASK_ID, **kwargs)


def test_static_path_matches_generate_float64(trained_hf_model):
    model = as_static(trained_hf_model, max_cache_len=128)          # quadratic at W = 8: 90 rows
    cases = references(model.hf_model, prompts(4, seed=21, chain=trained_hf_model.chain))
    multi = 0
    for prompt, eos, expected in cases:
        assert decode(model, prompt, schedule="ar", width=1, max_new_tokens=MAX_NEW, eos_token_id=eos).tokens == expected
        for schedule in SPECULATIVE:
            for width in (1, 3, 8):
                res = decode(model, prompt, schedule=schedule, width=width, max_new_tokens=MAX_NEW, eos_token_id=eos)
                assert res.tokens == expected, (schedule, width, eos, prompt.tolist())
                multi += sum(a > 1 for a in res.accepted)
    assert multi > 25, multi                      # drafts were accepted: multi-token commits ran


def test_cache_is_preallocated_once_and_rewound_by_a_pointer(trained_hf_model):
    model = as_static(trained_hf_model, max_cache_len=64)
    prompt = prompts(1, seed=3, chain=trained_hf_model.chain)[0]
    res = decode(model, prompt, schedule="packed", width=4, max_new_tokens=20)
    keys = model.kv_cache.layers[0].keys
    assert keys.shape[2] == 64
    assert model.kv_cache.get_seq_length() == model.cache_len == len(prompt) + len(res.tokens) - 1
    again = decode(model, prompt, schedule="packed", width=4, max_new_tokens=20)
    assert again.tokens == res.tokens
    assert model.kv_cache.layers[0].keys.data_ptr() == keys.data_ptr()        # reused, not reallocated


def test_sampling_equals_the_eager_path_for_the_same_seed(trained_hf_model):
    eager, static = as_dual(trained_hf_model), as_static(trained_hf_model, max_cache_len=96)
    for i, prompt in enumerate(prompts(2, seed=5, chain=trained_hf_model.chain)):
        for schedule in ("ar",) + SPECULATIVE:
            kw = dict(schedule=schedule, width=4, max_new_tokens=MAX_NEW, temperature=1.0, seed=100 + i)
            assert decode(static, prompt, **kw).tokens == decode(eager, prompt, **kw).tokens, (schedule, i)


def test_threads_decode_at_the_same_time_with_their_own_caches(trained_hf_model):
    model = as_static(trained_hf_model, max_cache_len=64)
    cases = prompts(4, seed=8, chain=trained_hf_model.chain)
    serial = [decode(model, p, schedule="packed", width=4, max_new_tokens=20).tokens for p in cases]
    out, errors = [None] * len(cases), []

    def work(i):
        try:
            out[i] = decode(model, cases[i], schedule="packed", width=4, max_new_tokens=20).tokens
        except Exception as exc:                # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and out == serial


@pytest.mark.slow
def test_compiled_path_matches_generate_float64(trained_hf_model):
    """Inductor on CPU, float64: greedy outputs of every schedule equal generate; each
    steady-state shape is compiled once and its compile time recorded."""
    model = as_static(trained_hf_model, max_cache_len=64, compile=True)
    cases = references(model.hf_model, prompts(2, seed=31, chain=trained_hf_model.chain))
    compiled = warm_up(model, cases[0][0], widths=(3,), max_new_tokens=MAX_NEW)
    assert compiled and all(s > 0 for s in compiled.values())
    kinds = {kind for kind, _ in compiled}
    assert {"verify", "linear_draft", "quadratic", "packed"} <= kinds, kinds      # ar's call is a verify call
    print("compile seconds per (call kind, rows):", {k: round(v, 1) for k, v in compiled.items()})
    for prompt, eos, expected in cases:
        for schedule in ("ar",) + SPECULATIVE:
            res = decode(model, prompt, schedule=schedule, width=1 if schedule == "ar" else 3,
                         max_new_tokens=MAX_NEW, eos_token_id=eos)
            assert res.tokens == expected, (schedule, eos, prompt.tolist())
    assert set(model.compile_seconds) == set(compiled), "a decode met a shape the warm-up did not compile"
    assert model.graphs == len(compiled), "one graph per (call kind, rows), whatever rows a call keeps"


def test_static_path_refuses_bad_arguments(trained_hf_model, random_hf_model):
    with pytest.raises(ValueError, match="max_cache_len"):
        as_static(trained_hf_model, max_cache_len=1)
    with pytest.raises(ValueError, match="max_cache_len"):
        as_static(trained_hf_model, max_cache_len=10**6)
    with pytest.raises(ValueError, match="max_cache_len"):
        as_static(trained_hf_model, max_cache_len=32.0)
    with pytest.raises(TypeError, match="compile"):
        as_static(trained_hf_model, compile="yes")
    with pytest.raises(ValueError, match="mode"):
        as_static(trained_hf_model, compile=True, mode="fastest")
    with pytest.raises(TypeError, match="skip_guards"):
        as_static(trained_hf_model, compile=True, skip_guards="yes")
    with pytest.raises(TypeError, match="cpp_wrapper"):
        as_static(trained_hf_model, compile=True, cpp_wrapper=1)
    with pytest.raises(TypeError, match="StaticDualModeLM"):
        warm_up(as_dual(random_hf_model), torch.tensor([1, 2]))
    small = as_static(trained_hf_model, max_cache_len=16)
    with pytest.raises(ValueError, match="max_cache_len=16 is too small"):
        decode(small, torch.arange(1, 10), schedule="packed", width=8, max_new_tokens=20)
    # the model is usable again after the refusal: a fitting decode starts clean
    assert decode(small, torch.arange(1, 4), schedule="ar", width=1, max_new_tokens=5).tokens == \
        decode(as_dual(trained_hf_model), torch.arange(1, 4), schedule="ar", width=1, max_new_tokens=5).tokens


def _stance():
    from torch._dynamo.eval_frame import _stance
    return _stance


@pytest.mark.slow
def test_two_architectures_share_shapes_but_not_graphs(trained_hf_model, random_hf_model):
    """Two compiled models of different widths meet the same call shapes, interleaved: each
    shape's graph is reused without guard checks, so each model must get its own (a graph of
    the other width would fail or give other tokens); the guard stance is back to default
    after every decode, threads included."""
    models = [as_static(trained_hf_model, max_cache_len=64, compile=True),
              as_static(random_hf_model, max_cache_len=64, compile=True)]
    cases = [references(m.hf_model, prompts(2, seed=41, chain=trained_hf_model.chain)) for m in models]
    for i in range(2):
        for model, model_cases in zip(models, cases):
            prompt, eos, expected = model_cases[i]
            for schedule, width in (("ar", 1), ("packed", 3)):
                res = decode(model, prompt, schedule=schedule, width=width, max_new_tokens=MAX_NEW, eos_token_id=eos)
                assert res.tokens == expected, (model.hf_model.config.hidden_size, schedule, i)
                assert not _stance().skip_guard_eval_unsafe
    kinds = [{kind for kind, _ in m.compile_seconds} for m in models]
    assert kinds[0] == kinds[1] == {"verify", "packed"} and models[0].graphs == models[1].graphs == 2

    out, errors = [None] * 4, []

    def work(j):
        try:
            prompt, eos, _ = cases[j % 2][j // 2]
            out[j] = decode(models[j % 2], prompt, schedule="packed", width=3, max_new_tokens=MAX_NEW,
                            eos_token_id=eos).tokens
        except Exception as exc:                # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(j,)) for j in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and out == [cases[j % 2][j // 2][2] for j in range(4)]
    assert not _stance().skip_guard_eval_unsafe and _stance().stance == "default"


@pytest.mark.slow
def test_a_users_compiler_stance_is_left_alone(trained_hf_model):
    """Under the user's ``force_eager`` stance the compiled model runs eagerly (no graph, same
    tokens) and the stance is still ``force_eager`` afterwards."""
    model = as_static(trained_hf_model, max_cache_len=64, compile=True)
    prompt, eos, expected = references(model.hf_model, prompts(1, seed=43, chain=trained_hf_model.chain))[0]
    with torch.compiler.set_stance("force_eager"):
        for _ in range(2):                       # the second decode takes the warm (guard-skipping) branch
            assert decode(model, prompt, schedule="ar", width=1, max_new_tokens=MAX_NEW, eos_token_id=eos).tokens \
                == expected
            assert _stance().stance == "force_eager" and not _stance().skip_guard_eval_unsafe
    assert _stance().stance == "default"


@pytest.mark.slow
def test_a_decode_inside_skipped_guards_compiles_its_new_shapes(trained_hf_model):
    """A user's ``skipped_guards()`` block around a decode that meets shapes not compiled yet:
    the decode compiles them (the stance taken back while it does) instead of waiting on its
    own block, gives generate's tokens, and the stance is back to default afterwards.  The
    decode runs in a thread with a timeout, so a deadlock fails the test instead of hanging."""
    model = as_static(trained_hf_model, max_cache_len=64, compile=True)
    prompt, eos, expected = references(model.hf_model, prompts(1, seed=47, chain=trained_hf_model.chain))[0]
    out = []

    def work():
        with skipped_guards():
            for _ in range(2):                   # the second decode runs the warm graphs under the block
                out.append(decode(model, prompt, schedule="packed", width=3, max_new_tokens=MAX_NEW,
                                  eos_token_id=eos).tokens)
            out.append(_stance().skip_guard_eval_unsafe)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout=600)
    assert not thread.is_alive(), "the decode inside skipped_guards() waits on its own block"
    assert out == [expected, expected, True] and model.graphs == 1          # packed: one steady shape
    assert not _stance().skip_guard_eval_unsafe and _stance().stance == "default"


@pytest.mark.slow
def test_a_partial_cast_between_decodes_gets_its_own_graph(trained_hf_model):
    """One norm cast to float32 after the float64 graphs are warm: with guards skipped the
    warm graph would still run (it did, giving other tokens), so the model's signature is part
    of the region key and the cast model gets a graph of its own, with the eager path's tokens;
    casting back reuses the first graph."""
    model = as_static(trained_hf_model, max_cache_len=64, compile=True)
    prompt, eos, expected = references(model.hf_model, prompts(1, seed=53, chain=trained_hf_model.chain))[0]
    run = lambda m: decode(m, prompt, schedule="ar", width=1, max_new_tokens=MAX_NEW, eos_token_id=eos).tokens  # noqa: E731
    assert run(model) == expected and model.graphs == 1
    model.hf_model.model.norm.to(torch.float32)
    assert run(model) == run(DualModeLM(copy.deepcopy(model.hf_model), mask_token_id=MASK_ID)) and model.graphs == 2
    model.hf_model.model.norm.to(torch.float64)
    assert run(model) == expected and model.graphs == 2


def test_a_stance_set_inside_a_block_outlives_it():
    """The block takes its stance back only while it is still the one it set: a stance the user
    sets inside the block (function form, no restore) is still there after the block."""
    try:
        with skipped_guards():
            assert _stance().skip_guard_eval_unsafe
            torch.compiler.set_stance("force_eager")
        assert _stance().stance == "force_eager"
    finally:
        torch.compiler.set_stance("default")
    with skipped_guards():
        pass
    assert _stance().stance == "default" and not _stance().skip_guard_eval_unsafe


def test_guard_stance_prefers_compiles_and_names_a_two_block_deadlock():
    """The readers-writer stance on its own (no compile): a waiting compile holds back a new
    skipping block (no starvation), and two threads inside blocks that both need to compile get
    a clear error instead of waiting on each other forever."""
    stance = _GuardStance()
    order, errors = [], []
    in_block, release = threading.Event(), threading.Event()

    def holder():                              # a user's block that later needs a compile
        with stance.skipping():
            in_block.set()
            release.wait(10)
            try:
                with stance.compiling():
                    order.append("holder compiles")
            except RuntimeError as exc:
                errors.append(str(exc))

    def compiler():
        with stance.compiling():
            order.append("compiler")

    def reader():
        with stance.skipping():
            order.append("reader")

    first = threading.Thread(target=holder)
    first.start()
    assert in_block.wait(10)
    waiting = threading.Thread(target=compiler)
    waiting.start()
    while stance._waiting == 0:
        time.sleep(0.01)
    late = threading.Thread(target=reader)
    late.start()
    time.sleep(0.2)
    assert order == []                         # both wait for the holder's block
    release.set()
    for t in (first, waiting, late):
        t.join(10)
    assert order == ["holder compiles", "compiler", "reader"] and not errors, (order, errors)

    # two holders: the second to need a compile gets the error, the first compiles once it can
    stance, errors, order = _GuardStance(), [], []
    a_in, b_in, go = threading.Event(), threading.Event(), threading.Event()

    def holder_a():
        with stance.skipping():
            a_in.set()
            with stance.compiling():         # waits for b's block
                order.append("a compiles")

    def holder_b():
        with stance.skipping():
            b_in.set()
            go.wait(10)
            try:
                with stance.compiling():
                    order.append("b compiles")
            except RuntimeError as exc:
                errors.append(str(exc))

    b = threading.Thread(target=holder_b)
    b.start()
    assert b_in.wait(10)
    a = threading.Thread(target=holder_a)
    a.start()
    assert a_in.wait(10)
    while stance._held == 0:
        time.sleep(0.01)
    go.set()
    a.join(10)
    b.join(10)
    assert not a.is_alive() and not b.is_alive()
    assert order == ["a compiles"] and len(errors) == 1 and "warm the shapes up first" in errors[0]
    assert _stance().stance == "default" and not _stance().skip_guard_eval_unsafe


def test_mask_strips_are_dropped_with_their_blocks():
    strips = MaskStrips(16)
    block = torch.zeros(3, 3)
    mask = strips.mask(block, 4)
    assert mask.shape == (1, 1, 3, 16) and len(strips) == 1
    assert (mask[0, 0, :, :4] == 0).all() and (mask[0, 0, :, 7:] < -1e30).all()
    del block
    gc.collect()
    assert len(strips) == 0


@pytest.mark.slow
def test_a_warm_region_that_dynamo_refuses_falls_back_to_a_guarded_call():
    """A caller whose key misses a difference (here a float64 tensor under a key warmed with
    float32): under the stance dynamo refuses the region's graph, and the call compiles a second
    one instead of raising; the result is right and the compile time is counted again."""
    regions = CompiledRegions(lambda x: x * 2 + 1)
    cpu = torch.device("cpu")
    assert regions(("s",), (), cpu, torch.ones(3)).tolist() == [3.0] * 3
    assert regions(("s",), (), cpu, torch.ones(3)).tolist() == [3.0] * 3      # warm: guards skipped
    first = regions.compile_seconds[("s",)]
    out = regions(("s",), (), cpu, torch.ones(3, dtype=torch.float64))
    assert out.dtype == torch.float64 and out.tolist() == [3.0] * 3
    assert regions.compile_seconds[("s",)] > first and len(regions) == 1
    assert not _stance().skip_guard_eval_unsafe
