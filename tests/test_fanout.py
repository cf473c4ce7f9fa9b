"""The prompt x method grid fanned out over a local Dask cluster of 2 worker processes gives
the serial run's rows: same outputs, NFE and acceptance, in the same order."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from spec_lib.studies import bench, fanout
from spec_lib.toy import MarkovLM

from .conftest import as_dual

SAME = ["slice", "prompt", "sample", "method", "tokens", "nfe", "iterations", "output", "accepted", "rows_per_call"]


@pytest.fixture(scope="module")
def client():
    client = fanout.connect("local:2")
    yield client
    cluster = client.cluster
    client.close()
    cluster.close()


def _grid(model, prompts, methods, **kwargs):
    return bench.run_grid(model, prompts, methods, max_new_tokens={"a": 24, "b": 16}, eos_token_id=None, seed=3,
                          progress=False, **kwargs)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_fanned_out_grid_equals_the_serial_grid(client, trained_hf_model, temperature):
    model = as_dual(trained_hf_model, torch.float32)
    chain = trained_hf_model.chain
    seqs = chain.sample_sequences(5, 12, seed=7).tolist()
    prompts = {"a": seqs[:3], "b": seqs[3:]}
    methods = bench.block_methods({"linear": [4], "packed": [4, 8], "quadratic": [4]})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                 # the workers' thread count: the same float sums
    try:
        serial = _grid(model, prompts, methods, temperature=temperature, samples={"a": 2})
    finally:
        torch.set_num_threads(threads)
    fanned = _grid(model, prompts, methods, temperature=temperature, samples={"a": 2}, client=client)
    assert len(fanned) == len(serial) == len(methods) * (3 * 2 + 2)
    pd.testing.assert_frame_equal(fanned[SAME], serial[SAME])
    assert (fanned["wall"] > 0).all()
    # a negative control: another seed changes sampled outputs, and the comparison sees it
    if temperature > 0:
        other = bench.run_grid(model, prompts, methods, max_new_tokens={"a": 24, "b": 16}, seed=4, progress=False,
                               client=client, temperature=temperature, samples={"a": 2})
        assert len(other) == len(serial) and not other["output"].equals(serial["output"])


def test_fanned_out_grid_of_an_exact_toy_model(client):
    toy = MarkovLM(16, seed=2, concentration=0.2, draft_noise=0.3)
    prompts = {"a": [[1, 2], [3], [4, 5, 6]], "b": [[7]]}
    methods = bench.block_methods({"linear": [3], "packed": [3]})
    serial = _grid(toy, prompts, methods)
    fanned = _grid(toy, prompts, methods, client=client)
    pd.testing.assert_frame_equal(fanned[SAME], serial[SAME])


def test_fan_out_bad_input(client):
    with pytest.raises(TypeError, match="cluster must be a str"):
        fanout.connect(2)
    assert fanout.connect("") is None
    with pytest.raises(ValueError, match="prompts must hold at least one prompt"):
        bench.run_grid(MarkovLM(4), {"a": []}, [bench.Method("ar", 1)], max_new_tokens=4, client=client)
    with pytest.raises(ValueError, match="threads must be an int >= 1"):
        fanout.run_jobs(client, MarkovLM(4), [bench.Method("ar", 1)], [("a", 0, 0, [1])],
                        {"max_new_tokens": {"a": 4}, "temperature": 0.0, "eos_token_id": None, "seed": 0}, threads=0)


def test_workers_keep_glibc_own_trim_threshold(client):
    """``config/dask.yaml`` (copied into the environment by ``make``) unsets Dask's default
    ``MALLOC_TRIM_THRESHOLD_=65536`` for the workers it spawns: with it, a worker decoded
    notebook 11's grid about 19% slower than the same code in a plain process."""
    import os

    seen = set(client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_")).values())
    assert seen == {os.environ.get("MALLOC_TRIM_THRESHOLD_")}, seen
    assert "65536" not in seen, "the workers run with Dask's MALLOC_TRIM_THRESHOLD_ (is config/dask.yaml installed?)"
