"""The benchmark scripts' argument handling (the scripts themselves are run by hand: they time
or train for minutes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recipe_levers_parses_variants_and_names_what_is_wrong():
    levers = load("recipe_levers")
    assert levers.parse_variant("stage2:longer:distill_steps=600,distill_lr=0.003") == \
        ("stage2", "longer", {}, {"distill_steps": 600, "distill_lr": 0.003})
    assert levers.parse_variant("full:wide:hidden_size=384,p_full=0.5,widths=(7, 15)") == \
        ("full", "wide", {"hidden_size": 384}, {"p_full": 0.5, "widths": (7, 15)})
    with pytest.raises(ValueError, match="stage2 variant may only change"):
        levers.parse_variant("stage2:x:p_full=0.5")                  # a stage-1 field needs a full retrain
    with pytest.raises(ValueError, match="must look like"):
        levers.parse_variant("stage3:x:distill_steps=1")
    with pytest.raises(ValueError, match="unknown field 'nope'"):
        levers.parse_variant("full:x:nope=1")
    with pytest.raises(ValueError, match="must be a Python literal"):
        levers.parse_variant("full:x:p_full=half")
    with pytest.raises(SystemExit):
        levers.main(["--out", "unused.csv"])                           # nothing to do: a usage error


def test_gpu_check_script_parses():
    """benchmarks/gpu_check.sh is only run on a GPU machine; here at least bash must accept it."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def test_compiled_decode_refuses_bad_sizes(monkeypatch):
    """benchmarks/compiled_decode.py names a bad size before it loads or compiles anything."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))                       # it imports decode_overhead
    compiled = load("compiled_decode")
    assert compiled.parse(["--width", "7", "--repeats", "3"]).width == 7
    for flag in ("--width", "--repeats", "--new-tokens", "--prompts"):
        with pytest.raises(SystemExit):
            compiled.parse([flag, "0"])


def test_compiled_drafters_refuses_bad_arguments(monkeypatch):
    """benchmarks/compiled_drafters.py names a bad argument before it loads or compiles anything."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))                       # it imports decode_overhead
    drafters = load("compiled_drafters")
    args = drafters.parse(["--ks", "2,8", "--prefix-lengths", "16"])
    assert args.ks == [2, 8] and args.prefix_lengths == [16]
    for argv in (["--ks", "0"], ["--ks", "a,b"], ["--prefix-lengths", ""], ["--repeats", "0"],
                 ["--cycles", "0"], ["--calls", "0"], ["--passes", "0"], ["--dedit-tokens", "0"], ["--preset", "huge"]):
        with pytest.raises(SystemExit):
            drafters.parse(argv)


def test_compile_options_refuses_bad_sizes(monkeypatch):
    """benchmarks/compile_options.py names a bad size before it loads or compiles anything."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))                       # it imports decode_overhead
    options = load("compile_options")
    assert options.parse(["--rounds", "3"]).rounds == 3
    assert options.VARIANTS == {"library": (True, True), "python_wrapper": (False, True), "guards_evaluated": (True, False),
                               "neither": (False, False)}
    for flag in ("--rounds", "--new-tokens", "--prompts", "--max-prompt-tokens"):
        with pytest.raises(SystemExit):
            options.parse([flag, "0"])


def test_dflash_peer_refuses_bad_arguments(monkeypatch, capsys):
    """benchmarks/dflash_peer.py names a bad argument before it loads a model or builds the
    peer's environment; a DEdit network is refused (the peer runs one drafting pass per round)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))                       # it imports decode_overhead
    peer = load("dflash_peer")
    args = peer.parse(["--drafter", "dflash_w32", "--repeats", "2"])
    assert args.drafter == "dflash_w32" and args.repeats == 2
    for argv in (["--drafter", "dedit"], ["--preset", "huge"], ["--repeats", "0"], ["--n-code", "0"],
                 ["--max-new-tokens", "0"]):
        with pytest.raises(SystemExit):
            peer.parse(argv)
    assert "one drafting pass per round" in capsys.readouterr().err


def test_dflash_peer_runner_imports_nothing_from_the_project():
    """The peer side runs in the throwaway environment, where spec_lib is not installed."""
    source = (BENCHMARKS / "dflash_peer_run.py").read_text()
    assert "spec_lib" not in source.split('"""', 2)[2]


def test_compiled_end_to_end_refuses_bad_arguments():
    """benchmarks/compiled_end_to_end.py names a bad argument before it loads or trains anything."""
    e2e = load("compiled_end_to_end")
    assert e2e.parse(["--per-slice", "2", "--passes", "4"]).passes == 4
    for argv in (["--per-slice", "0"], ["--new-tokens", "0"], ["--passes", "0"], ["--n-resamples", "0"],
                 ["--max-prompt-tokens", "0"], ["--preset", "huge"]):
        with pytest.raises(SystemExit):
            e2e.parse(argv)
