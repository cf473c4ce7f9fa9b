"""The committed cpu results: current, whole, and saying what the README says.

In the manner of recommenders' notebook tests, every headline claim of the README is asserted
here against ``results/cpu/*.json`` with an explicit tolerance.  Results are also checked for
staleness: a result whose recorded code version (its notebook, params file and the source of
every library module it imports) or checkpoint key differs from what the current code computes
was produced by other code and must be regenerated (``python -m spec_lib.run --profile cpu NN``).
"""

from __future__ import annotations

import json

import pytest

from spec_lib.notebook.params import NOTEBOOKS_DIR
from spec_lib.notebook.results import check_published, code_version, results_dir
from spec_lib.training.checkpoints import model_key
from spec_lib.training.deer import D2A_PRESETS, deer_cache_key

PROFILE = "cpu"
NOTEBOOKS = sorted(p.stem for p in NOTEBOOKS_DIR.glob("*.ipynb"))
MODEL_NOTEBOOKS = ("10_train_self_speculative_model", "11_packed_ss_greedy", "12_packed_ss_sampling",
                   "13_block_size_probe", "14_timing_decomposition", "20_deer_alignment", "21_deer_decoding")
DEER_NOTEBOOKS = ("20_deer_alignment", "21_deer_decoding")


def results(stem: str) -> dict:
    path = results_dir(PROFILE) / f"{stem}.json"
    assert path.is_file(), f"no committed results for {stem}: python -m spec_lib.run --profile cpu {stem}"
    return json.loads(path.read_text())


def metrics(stem: str) -> dict:
    return results(stem)["metrics"]


def rows(stem: str, table: str, **where) -> list[dict]:
    return [r for r in metrics(stem)[table] if all(r.get(k) == v for k, v in where.items())]


def row(stem: str, table: str, **where) -> dict:
    found = rows(stem, table, **where)
    assert len(found) == 1, f"{len(found)} rows of {stem}/{table} match {where}"
    return found[0]


# ----- every result is current and whole ------------------------------------------------------------

@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_result_is_from_the_current_code(stem):
    recorded = results(stem)["code_version"]
    assert recorded == code_version(stem, PROFILE), \
        f"{stem}: results come from other code (stale); regenerate: python -m spec_lib.run --profile cpu {stem}"


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_result_files_are_one_run(stem):
    assert check_published(stem, PROFILE) == []


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_every_check_of_the_cpu_run_held(stem):
    checks = results(stem)["checks"]
    assert checks and not [name for name, ok in checks.items() if ok is not True]


@pytest.mark.parametrize("stem", MODEL_NOTEBOOKS)
def test_model_results_come_from_the_current_checkpoint(stem):
    assert metrics(stem)["checkpoint_key"] == model_key("cpu"), \
        f"{stem} was produced by another self-speculative checkpoint than the current code trains"


@pytest.mark.parametrize("stem", DEER_NOTEBOOKS)
def test_deer_results_come_from_the_current_drafters(stem):
    assert metrics(stem)["drafter_key"] == deer_cache_key(D2A_PRESETS["cpu"])
