"""A notebook's code version, keyed by what decides its numbers, and the stale ledger.

A result records the version of the code that produced it (:func:`version_parts`), in three parts:

* ``code``: the notebook's code cells and its parameters for the profile, and every ``spec_lib``
  module its cells import (transitively) that the fingerprint does not cover (the studies and
  figure modules, the loaders, the training pipelines), each compared as its syntax tree without
  docstrings (:func:`spec_lib.provenance.normalized_source`); the runner's bookkeeping modules
  (:data:`BOOKKEEPING`: where files go, how versions are hashed) and the findings that format a run's
  numbers (:data:`PRESENTATION`) are left out; one hash per part (cells,
  parameters, each module), so :func:`stale_reasons` names the part that changed;
* ``models``: the checkpoint keys of the trained models the notebook can load (those whose
  training pipeline it imports; :mod:`spec_lib.notebook.store`), source-based: a changed trainer
  is a changed model; each with the weights a load uses (the committed manifest's digest, so a
  float16 commit of the same key is another model);
* ``behaviour``: for each component of the decoding core's behavioural fingerprint
  (:mod:`spec_lib.notebook.fingerprint`) whose modules the notebook imports, its hash.

A comment, a docstring or a reformatting leaves every part as it was; a refactor of the decoding
core that keeps its behaviour (a renamed private function, a module split inside a covered
package) leaves them too, since the core is compared by behaviour; the same refactor of a study,
loader or training module changes ``code`` (and a trainer's key), since those are compared as
code.  A change of the core's behaviour changes the parts of exactly the notebooks that import
the changed component, and :func:`stale_reasons` names what changed.

**The ledger.**  A regeneration may span sessions, so a stale result may stay committed while
it is listed in ``results/<profile>/STALE.md`` (notebook, why, the commit its results come from,
the commit at which it was found stale): the runner writes it (``python -m spec_lib.run --stale``
lists every stale notebook before it starts and strikes each one off as it is published), and
the claims test fails on a stale result that is not listed and on a listed one that is current.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

from ..io import atomic_write_bytes
from ..provenance import closure, git_commit, imports_in_source, normalized_module, normalized_source
from .params import notebook_path, params_path, read_yaml, results_dir

#: Modules that decide where outputs go and how versions are computed, not what a notebook computes.
BOOKKEEPING = ("spec_lib.io", "spec_lib.provenance", "spec_lib.notebook", "spec_lib.notebook.results",
               "spec_lib.notebook.versions", "spec_lib.notebook.fingerprint", "spec_lib.notebook.params",
               "spec_lib.notebook.run", "spec_lib.notebook.live", "spec_lib.notebook.cluster",
               "spec_lib.training.cache", "spec_lib.notebook.store", "spec_lib.cluster", "spec_lib.run")

#: Modules that format the numbers a run computed and decide none (each notebook's closing findings,
#: :mod:`spec_lib.notebook.findings`): rewording a finding leaves every result current.
PRESENTATION = ("spec_lib.notebook.findings", "spec_lib.notebook.findings_proofs", "spec_lib.notebook.findings_packed",
                "spec_lib.notebook.findings_variants", "spec_lib.notebook.findings_deer",
                "spec_lib.notebook.findings_dedit", "spec_lib.notebook.readme")

#: Checkpoint kind -> the training pipeline module whose import makes a notebook depend on it.
PIPELINES = {"models": "spec_lib.training.self_speculative", "dedit": "spec_lib.training.dedit",
             "drafters": "spec_lib.training.deer", "baselines": "spec_lib.training.baselines",
             "frozen_editors": "spec_lib.training.frozen_editors", "lora": "spec_lib.training.proposal_lora",
             "anyorder": "spec_lib.training.any_order", "feature_heads": "spec_lib.training.feature_heads"}

#: The one loader (``spec_lib.load``); it imports its kinds' modules by name, so a notebook that
#: reaches it depends on the kinds its code names (:func:`loaded_kinds`), each one's modules added.
REGISTRY = "spec_lib.training.registry"
_KIND_CALL = re.compile(r"""\b(?:load|checkpoint_key)\(\s*["'](\w+)["']""")

LEDGER = "STALE.md"


def _cells(notebook) -> list[str]:
    import nbformat

    nb = nbformat.read(notebook_path(notebook), as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _normalized_cell(source: str) -> str:
    try:
        return normalized_source(source)
    except SyntaxError:                                  # IPython magics: compared as text
        return "\n".join(line.rstrip() for line in source.strip().splitlines())


def notebook_imports(notebook) -> set[str]:
    """The ``spec_lib`` modules a notebook's cells import."""
    found: set[str] = set()
    for source in _cells(notebook):
        try:
            found |= imports_in_source(source)
        except SyntaxError:
            continue
    return found


def _params(notebook, profile: str) -> str:
    """The parameters as canonical JSON (comments and formatting of the YAML do not count)."""
    path = params_path(notebook, profile)
    return json.dumps(read_yaml(path) if path.is_file() else None, sort_keys=True, default=str)


@functools.lru_cache(maxsize=None)
def _checkpoints(profile: str) -> tuple:
    """The profile's checkpoints, computed once per process: their keys hash the training code and
    the stdlib listing (about 9 s on 2 cores), and a kernel runs the code it imported at its start."""
    from ..training.presets import PRESETS
    from .store import profile_checkpoints

    if profile not in PRESETS:                            # gpu: checkpoints come from paths
        return ()
    return tuple(profile_checkpoints(profile))


def _models(notebook, profile: str, modules: list[str]) -> dict[str, str]:
    """``{"<preset> (<kind>)": "<key> <weights>"}`` of the checkpoints the notebook can load:
    those whose training pipeline it imports (and that are not kept for other notebooks), with
    the weights a load would use (:func:`spec_lib.training.cache.weights_id`)."""
    if not set(PIPELINES.values()) & set(modules):
        return {}
    from ..training.cache import weights_id

    stem = notebook_path(notebook).stem
    return {f"{c.preset} ({c.kind})": f"{c.key} {weights_id(c.kind, c.key)}" for c in _checkpoints(profile)
            if PIPELINES[c.kind] in modules and (c.notebooks is None or stem in c.notebooks)}


def loaded_kinds(sources: Iterable[str]) -> set[str]:
    """The model kinds named by literal ``load("<kind>"`` / ``checkpoint_key("<kind>"`` calls in
    ``sources`` (:data:`spec_lib.training.registry.MODULES`' kinds only)."""
    from ..training.registry import MODULES

    return {kind for source in sources for kind in _KIND_CALL.findall(source) if kind in MODULES}


def code_closure(notebook) -> list[str]:
    """The library modules ``notebook``'s result depends on: its imports' closure, and where it
    reaches the one loader, the modules of the kinds its cells and those modules name."""
    modules = closure(notebook_imports(notebook), exclude=BOOKKEEPING + PRESENTATION)
    if REGISTRY not in modules:
        return modules
    from ..provenance import module_path
    from ..training.registry import MODULES

    sources = _cells(notebook) + [module_path(m).read_text() for m in modules if m != REGISTRY]
    kinds = sorted(loaded_kinds(sources))
    roots = [m for kind in kinds for m in MODULES[kind]]
    return sorted(set(modules) | set(closure(roots, exclude=BOOKKEEPING + PRESENTATION)))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def version_parts(notebook, profile: str) -> dict:
    """``{"code": {part: hash}, "models": {"<preset> (<kind>)": key}, "behaviour": {component: hash}}``
    of ``notebook`` at ``profile`` for the current code (see the module docstring); ``code`` has one
    hash for the notebook's cells, one for its parameters and one per module compared as code, so a
    stale result names what changed."""
    from .fingerprint import COMPONENTS, component_modules, covered_modules, fingerprint

    modules = code_closure(notebook)
    covered = set(covered_modules())
    code = {"cells": _digest("\0".join(_normalized_cell(source) for source in _cells(notebook))),
            "parameters": _digest(_params(notebook, profile))}
    code.update({module: _digest(normalized_module(module)) for module in modules if module not in covered})
    models = _models(notebook, profile, modules)
    reached = set(modules)
    behaviour = {}
    components = [c for c in COMPONENTS if reached & set(component_modules(c))]
    if components:
        prints = fingerprint()
        behaviour = {c.name: prints[c.name] for c in components}
    return {"code": code, "models": models, "behaviour": behaviour}


def version_of(parts: dict) -> str:
    """The single code version a result records: a hash of its parts."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def code_version(notebook, profile: str) -> str:
    return version_of(version_parts(notebook, profile))


def stale_reasons(recorded: dict | None, current: dict) -> list[str]:
    """What differs between a result's recorded parts and the current code's (empty: current)."""
    if not recorded:
        return ["no recorded code version (results from an older runner)"]
    reasons = []
    old_code, new_code = recorded.get("code"), current["code"]
    if not isinstance(old_code, dict):                   # a result from before code was recorded by part
        if old_code != new_code:
            reasons.append("the notebook, its parameters or the library code it imports changed")
    else:
        changed = sorted(n for n in set(old_code) | set(new_code) if old_code.get(n) != new_code.get(n))
        named = [{"cells": "the notebook's code cells", "parameters": "its parameters"}.get(
            n, f"{n} ({'added' if n not in old_code else 'no longer imported' if n not in new_code else 'changed'})")
            for n in changed]
        if named:
            reasons.append(f"code changed: {', '.join(named)}")
    old_models, new_models = recorded.get("models", {}), current["models"]
    for name in sorted(set(old_models) | set(new_models)):
        if old_models.get(name) != new_models.get(name):
            reasons.append(f"model {name}: {old_models.get(name, 'none')} -> {new_models.get(name, 'none')}")
    old, new = recorded.get("behaviour", {}), current["behaviour"]
    changed = sorted(n for n in set(old) & set(new) if old[n] != new[n])
    if changed:
        reasons.append(f"behaviour of the decoding core changed: {', '.join(changed)}")
    if set(new) - set(old):
        reasons.append(f"now reaches more of the decoding core: {', '.join(sorted(set(new) - set(old)))}")
    if set(old) - set(new):
        reasons.append(f"no longer reaches: {', '.join(sorted(set(old) - set(new)))}")
    return reasons


# ----- the ledger ---------------------------------------------------------------------------------

def ledger_path(profile: str) -> Path:
    return results_dir(profile) / LEDGER


_NONE = ("# Stale results\n\nNone: every result in `results/{profile}/` was produced by the code of this commit "
         "(the runner lists a notebook here when a change makes its result stale).\n")
_HEADER = ("# Stale results\n\nResults of these notebooks were produced by other code than the code in this commit; "
           "a regeneration is under way\n(`python -m spec_lib.run --profile {profile} --stale` reruns them, longest "
           "first, and strikes each one off as it is published).\n\n"
           "| notebook | why | results from commit | found stale at |\n|---|---|---|---|\n")


def read_ledger(profile: str) -> dict[str, dict]:
    """``{notebook: {"why", "results_commit", "found_at"}}`` listed in the ledger (empty if none)."""
    path = ledger_path(profile)
    if not path.is_file():
        return {}
    listed = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("notebook", "---") and not set(cells[0]) <= {"-"}:
            listed[cells[0].strip("`")] = {"why": cells[1], "results_commit": cells[2], "found_at": cells[3]}
    return listed


def write_ledger(profile: str, entries: dict[str, dict]) -> None:
    """Write the ledger (atomically); with no entries it says that none is stale."""
    path = ledger_path(profile)
    if not entries:
        atomic_write_bytes(path, _NONE.format(profile=profile).encode())
        return
    rows = "".join(f"| `{stem}` | {e['why'].replace('|', '/')} | {e['results_commit']} | {e['found_at']} |\n"
                   for stem, e in sorted(entries.items()))
    atomic_write_bytes(path, (_HEADER.format(profile=profile) + rows).encode())


def recorded_parts(notebook, profile: str) -> dict | None:
    """The parts a published result records, or None when there is no result."""
    path = results_dir(profile) / f"{notebook_path(notebook).stem}.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get("code_parts") or {}


def stale(profile: str, notebooks) -> dict[str, list[str]]:
    """``{stem: reasons}`` of the notebooks (paths or stems) whose results are missing or stale."""
    found = {}
    for notebook in notebooks:
        stem = notebook_path(notebook).stem
        recorded = recorded_parts(stem, profile)
        if recorded is None:
            found[stem] = ["no results"]
            continue
        reasons = stale_reasons(recorded, version_parts(stem, profile))
        if reasons:
            found[stem] = reasons
    return found


def list_stale(profile: str, found: dict[str, list[str]]) -> dict[str, dict]:
    """Ledger entries for ``found`` (keeping the first ``found_at`` of notebooks already listed)."""
    old = read_ledger(profile)
    head = git_commit() or "unknown"
    entries = {}
    for stem, reasons in found.items():
        path = results_dir(profile) / f"{stem}.json"
        commit = json.loads(path.read_text()).get("git_commit") if path.is_file() else None
        entries[stem] = {"why": "; ".join(reasons), "results_commit": commit or "none",
                         "found_at": old.get(stem, {}).get("found_at", head)}
    return entries


__all__ = ["BOOKKEEPING", "LEDGER", "PRESENTATION", "code_version", "list_stale", "read_ledger", "stale", "stale_reasons",
           "version_of", "version_parts", "write_ledger"]
