"""The prompt x method grid fanned out over a local Dask cluster of 2 worker processes gives
the serial run's rows: same outputs, NFE and acceptance, in the same order; the jobs are
submitted longest first; ``local_cluster``'s workers run without Dask's malloc trim threshold."""

from __future__ import annotations

import os

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
                        {"max_new_tokens": {"a": 4}, "temperature": 0.0, "eos_token_id": None, "seed": 0},
                        rows=bench.job_rows, warm_up=bench.warm_up, threads=0)


def test_workers_keep_glibc_own_trim_threshold(client):
    """The fixture's cluster comes from ``local_cluster``: its workers run without Dask's
    ``MALLOC_TRIM_THRESHOLD_=65536`` (with it, a worker decoded notebook 11's grid about 19%
    slower than the same code in a plain process)."""
    seen = set(client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_")).values())
    assert seen == {None}, seen


def test_local_cluster_unsets_the_trim_threshold_whatever_the_dask_config(monkeypatch):
    """``local_cluster`` does not depend on config/dask.yaml: under a Dask configuration that
    asks for the threshold, a plain ``LocalCluster`` starts its worker with it (the negative
    control; its nanny also writes it into this process's environment, which children inherit),
    and ``local_cluster``, started after it, starts its worker without it."""
    import dask.config
    from distributed import Client, LocalCluster

    from spec_lib.cluster import local_cluster

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)     # restored (unset) after the test

    def worker_values(cluster):
        with Client(cluster) as c:
            return set(c.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_")).values())

    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": 65536}):
        plain = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
        try:
            assert worker_values(plain) == {"65536"}
        finally:
            plain.close()
        assert os.environ.get("MALLOC_TRIM_THRESHOLD_") == "65536"      # the nanny's leak into this process
        ours = local_cluster(1)
        try:
            assert worker_values(ours) == {None}
        finally:
            ours.close()
        assert "MALLOC_TRIM_THRESHOLD_" not in os.environ
        assert dask.config.get("distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_") == 65536   # left as set


def _order_grid():
    """Jobs whose longest-first order is neither the grid order nor its reverse."""
    prompts = {"a": [[1, 2, 3], [4]], "b": [[5]], "c": [[6, 7]]}
    caps = {"a": 6, "b": 12, "c": 8}                     # expected costs: a0 9, a1 7, b0 13, c0 10
    return prompts, caps


def test_submission_order_is_longest_first():
    prompts, caps = _order_grid()
    jobs = [(name, i, 0, prompt) for name, items in prompts.items() for i, prompt in enumerate(items)]
    settings = {"max_new_tokens": caps}
    assert [fanout.expected_cost(job, settings) for job in jobs] == [9, 7, 13, 10]
    assert fanout.submission_order(jobs, settings) == [2, 3, 0, 1]
    assert fanout.submission_order(jobs[:2] + jobs[:2], settings) == [0, 2, 1, 3]      # ties in grid order


def test_fanned_out_jobs_are_submitted_longest_first_and_return_in_grid_order(client, monkeypatch):
    """The jobs reach the scheduler longest first (recorded at ``client.submit``) and the rows
    come back as the serial run's; with the estimate reversed (the negative control) the
    recorded order is shortest first, which the longest-first check would reject, and the rows
    are still the serial run's."""
    toy = MarkovLM(16, seed=2, concentration=0.2, draft_noise=0.3)
    prompts, caps = _order_grid()
    methods = bench.block_methods({"linear": [3], "packed": [3]})

    def grid(**kwargs):
        return bench.run_grid(toy, prompts, methods, max_new_tokens=caps, eos_token_id=None, seed=3, progress=False,
                              **kwargs)

    serial = grid()
    submit = client.submit
    submitted = []

    def recording_submit(func, *args, **kwargs):
        if func is fanout._job:
            submitted.append((args[1], kwargs["priority"]))
        return submit(func, *args, **kwargs)

    monkeypatch.setattr(client, "submit", recording_submit)
    pd.testing.assert_frame_equal(grid(client=client)[SAME], serial[SAME])
    assert submitted == [(2, 0), (3, -1), (0, -2), (1, -3)]

    submitted.clear()
    cost = fanout.expected_cost
    monkeypatch.setattr(fanout, "expected_cost", lambda spec, settings: -cost(spec, settings))
    pd.testing.assert_frame_equal(grid(client=client)[SAME], serial[SAME])
    assert [job for job, _ in submitted] == [1, 0, 3, 2] != [2, 3, 0, 1]
