"""Notebook 01's compiled path (spec_lib.studies.compiled_costs): forward calls of n rows over a
static cache, one compiled region per row count, timed after their compile, fitted per path."""

from __future__ import annotations

import copy

import pytest
import torch

from spec_lib.architectures import build_qwen3
from spec_lib.studies import compiled_costs, costmodel

ROWS = [1, 4, 16]


@pytest.mark.slow
def test_compiled_forward_timings_fit_beside_the_eager_ones(random_hf_model):
    model = copy.deepcopy(random_hf_model).to(torch.float32)
    eager = costmodel.time_forward_rows(model, ROWS, cache_len=24, repeats=2, progress=False)
    timings, table, fits = compiled_costs.timings_by_path(model, eager, True, row_counts=ROWS, cache_len=24,
                                                          repeats=2, progress=False)
    compiled = timings[timings["path"] == "compiled"]
    assert len(compiled) == len(eager) == 2 * len(ROWS) and sorted(set(compiled["rows"])) == ROWS
    assert (compiled["seconds"] > 0).all() and (compiled["compile_seconds"] > compiled["seconds"]).all()
    assert list(fits) == list(table["path"]) == ["eager", "compiled"]
    assert {"tau_ms", "delta_ms", "tau_over_delta", "r2"} <= set(table.columns)
    only_eager = compiled_costs.timings_by_path(model, eager, False, row_counts=ROWS)
    assert list(only_eager[2]) == ["eager"] and len(only_eager[0]) == len(eager)


def test_bad_sizes_and_models_are_refused_before_any_work(random_hf_model):
    for bad in ([], [0, 4], [1.5], "4", [True]):
        with pytest.raises(ValueError, match="row_counts"):
            compiled_costs.time_forward_rows(random_hf_model, bad)
    with pytest.raises(ValueError, match="cache_len"):
        compiled_costs.time_forward_rows(random_hf_model, ROWS, cache_len=0)
    with pytest.raises(ValueError, match="repeats"):
        compiled_costs.time_forward_rows(random_hf_model, ROWS, repeats=-1)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        compiled_costs.time_forward_rows(random_hf_model, [300])
    windowed = build_qwen3(64, hidden_size=32, num_layers=2, num_heads=4, max_positions=256, seed=0)
    windowed.config.use_sliding_window, windowed.config.sliding_window = True, 8
    windowed.config.layer_types = ["sliding_attention"] * 2
    with pytest.raises(ValueError, match="sliding window"):
        compiled_costs.time_forward_rows(windowed, ROWS)
    with pytest.raises(TypeError, match="compiled"):
        compiled_costs.timings_by_path(random_hf_model, None, "yes", row_counts=ROWS)
