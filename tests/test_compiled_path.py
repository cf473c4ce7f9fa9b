"""The timing notebooks' two execution paths (spec_lib.studies.compiled_path): a compiled twin
sized to the grid, one interleaved grid over both paths with the path in every row, and tau,
delta fitted per path."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from spec_lib.compiled import StaticDualModeLM
from spec_lib.studies import bench, compiled_path

from .conftest import as_dual, prompts

METHODS = [bench.Method("ar", 1), bench.Method("linear", 3), bench.Method("packed", 3), bench.Method("quadratic", 2)]


def grid_prompts(chain):
    return {"a": [p.tolist() for p in prompts(2, seed=51, chain=chain)],
            "b": [p.tolist() for p in prompts(1, seed=52, chain=chain)]}


def test_execution_paths_and_the_twin_cache_fits_the_grid(trained_hf_model):
    model = as_dual(trained_hf_model)
    grid = grid_prompts(trained_hf_model.chain)
    assert list(compiled_path.execution_paths(model, False, grid, METHODS, 10)) == ["eager"]
    paths = compiled_path.execution_paths(model, True, grid, METHODS, {"a": 10, "b": 20})
    twin = paths["compiled"]
    assert isinstance(twin, StaticDualModeLM) and twin.compiled and twin.hf_model is model.hf_model
    longest = max(len(p) for items in grid.values() for p in items)
    assert twin.max_cache_len == longest + 20 + 3 * 4 + 1              # Quadratic-SS at W = 2: (W + 1)(W + 2) rows
    assert [compiled_path.call_rows(m) for m in METHODS] == [1, 4, 8, 12]
    with pytest.raises(TypeError, match="compiled"):
        compiled_path.execution_paths(model, "yes", grid, METHODS, 10)
    assert compiled_path.call_rows(bench.Method("deer", 4)) == compiled_path.call_rows(bench.Method("ar_draft", 4)) == 5
    with pytest.raises(ValueError, match="schedules"):
        compiled_path.call_rows(bench.Method("medusa", 4))


def test_run_paths_interleaves_paths_and_fits_each(trained_hf_model):
    """Both paths decode every prompt with every method (here the second path is the static
    cache without compiling, which is enough to check the bookkeeping); greedy outputs agree
    across paths and with AR; each path gets its own tau, delta."""
    model = as_dual(trained_hf_model)
    grid = grid_prompts(trained_hf_model.chain)
    static = StaticDualModeLM(model.hf_model, model.mask_token_id, max_cache_len=64)
    runs = compiled_path.run_paths({"eager": model, "compiled": static}, grid, METHODS, max_new_tokens=12,
                                   progress=False)
    assert len(runs) == 2 * len(METHODS) * 3
    assert set(runs["method"]) == {m.name for m in METHODS} | {f"{m.name} (compiled)" for m in METHODS}
    assert (runs["path"] == "compiled").sum() == len(runs) // 2
    identity = bench.identity_to_reference(runs)
    assert (identity["identical"] == identity["responses"]).all()
    costs = compiled_path.per_path_costs(runs, "packed B=4", "linear B=4")
    assert list(costs["path"]) == ["eager", "compiled"] and costs["delta_ms"].notna().all()
    assert compiled_path.compile_seconds({"eager": model}) == {}
    eager, twin = compiled_path.on_path(runs, "eager"), compiled_path.on_path(runs, "compiled")
    assert set(eager["method"]) == set(twin["method"]) == {m.name for m in METHODS}
    key = ["slice", "prompt", "method"]
    assert eager.sort_values(key)["output"].tolist() == twin.sort_values(key)["output"].tolist()
    probe, speedups = compiled_path.best_blocks_by_path(runs, n_resamples=200)
    assert set(probe["path"]) == set(speedups["path"]) == {"eager", "compiled"}
    assert len(probe) == 2 * len(METHODS) and set(speedups["slice"]) == {"a", "b"}
    assert speedups["B"].notna().all() and (speedups["throughput_ratio"] > 0).all()
    with pytest.raises(ValueError, match="path must be one of"):
        compiled_path.on_path(runs, "gpu")
    with pytest.raises(ValueError, match="models"):
        compiled_path.run_paths({"fast": model}, grid, METHODS, max_new_tokens=4, progress=False)
    with pytest.raises(ValueError, match="at least one prompt"):
        compiled_path.run_paths({"eager": model}, {"a": []}, METHODS, max_new_tokens=4, progress=False)


def test_run_paths_fans_out_the_eager_path_only(trained_hf_model):
    """With a client the eager grid goes to Dask workers and comes back as the serial grid (same
    rows, same order, the path column added); a compiled path with a client is refused before
    anything is decoded."""
    from spec_lib.studies import fanout

    model = as_dual(trained_hf_model)
    grid = grid_prompts(trained_hf_model.chain)
    same = ["slice", "prompt", "method", "path", "tokens", "nfe", "output", "accepted"]
    serial = compiled_path.run_paths({"eager": model}, grid, METHODS, max_new_tokens=10, progress=False)
    client = fanout.connect("local:2")
    try:
        fanned = compiled_path.run_paths({"eager": model}, grid, METHODS, max_new_tokens=10, progress=False,
                                         client=client)
        assert fanned[same].equals(serial[same])
        static = StaticDualModeLM(model.hf_model, model.mask_token_id, max_cache_len=64)
        with pytest.raises(ValueError, match="fans out the eager path only"):
            compiled_path.run_paths({"eager": model, "compiled": static}, grid, METHODS, max_new_tokens=10,
                                    progress=False, client=client)
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()


def test_drafter_methods_run_with_compiled_drafters_on_the_compiled_path(trained_hf_model, drafters):
    """DEER's two drafters get compiled twins on the compiled path (the target compiled too):
    every greedy output still equals AR's on both paths, the warm-up compiles every shape the
    grid meets (target, both drafters; every padded prefix length of the diffusion drafter),
    and drafters without a twin or methods that differ between paths are refused with their
    names."""
    from spec_lib.compiled.drafters import StaticARDrafter, StaticDiffusionDrafter
    from spec_lib.drafters import ARDrafter, DiffusionDrafter

    from .conftest import MASK_ID, SEP_ID

    model = as_dual(trained_hf_model)
    grid = grid_prompts(trained_hf_model.chain)
    ar_drafter = ARDrafter(drafters[1])
    methods = [bench.Method("ar", 1), bench.Method("linear", 3),
               bench.Method("deer", 4, drafter=DiffusionDrafter(drafters[0], MASK_ID, SEP_ID)),
               bench.Method("ar_draft", 2, drafter=ar_drafter), bench.Method("ar_draft", 4, drafter=ar_drafter)]
    paths = compiled_path.execution_paths(model, True, grid, methods, 10)
    per_path = compiled_path.methods_by_path(paths, methods, grid, 10)
    assert per_path["eager"] == methods
    twins = {m.name: m.drafter for m in per_path["compiled"] if m.drafter is not None}
    assert twins["ar_draft k=2"] is twins["ar_draft k=4"]          # methods sharing a drafter share its twin
    twins = {m.schedule: m.drafter for m in per_path["compiled"] if m.drafter is not None}
    assert isinstance(twins["deer"], StaticDiffusionDrafter) and twins["deer"].compiled
    assert isinstance(twins["ar_draft"], StaticARDrafter) and twins["ar_draft"].compiled
    assert twins["deer"].hf_model is drafters[0] and twins["ar_draft"].hf_model is drafters[1]
    longest = max(len(p) for items in grid.values() for p in items)
    assert twins["deer"].context == longest + 10 - 1               # the eager drafter reads the whole prefix
    # the AR drafter's slots: the longest prefix and the widest method's drafts but the last,
    # exactly (the grid below decodes to the cap with them)
    assert twins["ar_draft"].max_cache_len == longest + 10 - 1 + 4 - 1
    worst = torch.arange(longest + 10 - 1) % 5 + 1                # the longest prefix a draft follows
    twins["ar_draft"].reset()
    assert twins["ar_draft"].draft(worst, 4, lambda logits: (logits.argmax(-1), None)).tokens.numel() == 4
    compiled_path.warm_up_paths(paths, per_path, grid, 10)          # one cap for every slice
    compiled = [paths["compiled"], twins["deer"], twins["ar_draft"]]
    warm = [dict(part.compile_seconds) for part in compiled]
    runs = compiled_path.run_paths(paths, grid, per_path, max_new_tokens=10, progress=False)
    assert [dict(part.compile_seconds) for part in compiled] == warm      # the timed grid compiled nothing
    assert set(runs["path"]) == {"eager", "compiled"} and len(runs) == 2 * 5 * 3
    seconds = compiled_path.drafter_compile_seconds(per_path["compiled"])
    assert set(seconds) == {"deer k=4", "ar_draft k=2, ar_draft k=4"}, seconds      # a shared twin once
    assert seconds["ar_draft k=2, ar_draft k=4"] and seconds["deer k=4"], seconds
    assert compiled_path.drafter_compile_seconds(methods) == {}             # eager drafters compile nothing
    identity = bench.identity_to_reference(runs)
    assert (identity["identical"] == identity["responses"]).all(), identity
    agree = compiled_path.acceptance_by_path(runs)
    assert len(agree) == 5 * 2 and (agree["same_acceptance"] == 1).all(), agree      # float32: no ties here
    # the eager path is the baseline whatever the order of the rows
    assert set(agree["path"]) == set(compiled_path.acceptance_by_path(runs.iloc[::-1])["path"]) == {"compiled"}
    # the negative control: a compiled DEER twin on other weights still gives AR's outputs, and
    # only its acceptance tells
    other = copy.deepcopy(drafters[0])
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param in other.parameters():
            param.add_(torch.randn(param.shape, generator=generator, dtype=param.dtype), alpha=0.5)
    wrong = StaticDiffusionDrafter(other, MASK_ID, SEP_ID, twins["deer"].context, compile=False)
    swapped = {**per_path, "compiled": [replace(m, drafter=wrong) if m.schedule == "deer" else m
                                        for m in per_path["compiled"]]}
    runs_wrong = compiled_path.run_paths(paths, grid, swapped, max_new_tokens=10, progress=False)
    identity = bench.identity_to_reference(runs_wrong)
    assert (identity["identical"] == identity["responses"]).all()
    agree = compiled_path.acceptance_by_path(runs_wrong).set_index("method")
    assert (agree.loc["deer k=4", "same_acceptance"] < 1).any(), agree     # where the drafter gets drafts accepted
    compiled_drafter_rows = runs[(runs["path"] == "compiled") & (runs["schedule"] == "deer")]
    assert (compiled_drafter_rows["drafter_nfe"] > 0).all()
    lengths = {twins["deer"].padded_length(n) for n in range(1, twins["deer"].context + 1)}
    assert {shape[1] for shape in twins["deer"].compile_seconds} == lengths   # all warmed, none met later
    with pytest.raises(ValueError, match="twins of DiffusionDrafter and ARDrafter, got MarkovLM"):
        compiled_path.compiled_drafter(trained_hf_model.chain, 32, 4)
    for bad_prompts, cap, match in (({"a": []}, 10, "at least one prompt"), (grid, 0, "max_new_tokens must be"),
                                    (grid, {"a": 10, "b": "10"}, "max_new_tokens must be"),
                                    (grid, {"a": 10}, "must name exactly the slices")):
        with pytest.raises(ValueError, match=match):
            compiled_path.warm_up_paths(paths, per_path, bad_prompts, cap)
        with pytest.raises(ValueError, match=match):
            compiled_path.methods_by_path(paths, methods, bad_prompts, cap)
        with pytest.raises(ValueError, match=match):
            compiled_path.run_paths(paths, bad_prompts, per_path, max_new_tokens=cap, progress=False)
    with pytest.raises(ValueError, match="same names"):
        compiled_path.run_paths(paths, grid, {"eager": methods, "compiled": methods[:2]}, max_new_tokens=4,
                                progress=False)


def test_the_warm_up_compiles_every_bucket_a_later_prompt_meets(trained_hf_model, drafters, monkeypatch):
    """A slice whose first prompt is short and whose second is long: the warm-up decode of the
    first prompt meets only the diffusion drafter's smallest bucket, so without compiling every
    bucket up front (``_warm_drafters``) the long prompt's bucket is compiled inside the timed
    grid (the negative control, run here); with it, the timed grid compiles nothing."""
    from spec_lib.compiled.drafters import StaticDiffusionDrafter
    from spec_lib.drafters import DiffusionDrafter

    from .conftest import MASK_ID, SEP_ID

    model = as_dual(trained_hf_model)
    short, long = prompts(1, seed=61, chain=trained_hf_model.chain, low=3, high=4)[0], \
        prompts(1, seed=62, chain=trained_hf_model.chain, low=44, high=45)[0]
    grid = {"a": [short.tolist(), long.tolist()]}
    methods = [bench.Method("deer", 4, drafter=DiffusionDrafter(drafters[0], MASK_ID, SEP_ID))]

    def compiles_in_timed_grid(warm_drafters: bool) -> bool:
        paths = compiled_path.execution_paths(model, True, grid, methods, 6)
        per_path = compiled_path.methods_by_path(paths, methods, grid, 6)
        twin = per_path["compiled"][0].drafter
        assert isinstance(twin, StaticDiffusionDrafter) and len({twin.padded_length(n) for n in (4, 50)}) == 2
        if not warm_drafters:
            monkeypatch.setattr(compiled_path, "_warm_drafters", lambda methods: None)
        compiled_path.warm_up_paths(paths, per_path, grid, {"a": 6})
        warm = dict(twin.compile_seconds)
        runs = compiled_path.run_paths(paths, grid, per_path, max_new_tokens=6, progress=False)
        identity = bench.identity_to_reference(runs.assign(method=runs["path"] + ":" + runs["method"]),
                                               reference="eager:deer k=4")
        assert (identity["identical"] == identity["responses"]).all()
        monkeypatch.undo()
        return dict(twin.compile_seconds) != warm

    assert not compiles_in_timed_grid(True)
    assert compiles_in_timed_grid(False)                      # the control: the long prompt's bucket
