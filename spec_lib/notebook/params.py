"""Notebook parameters: the one parser of a notebook's ``parameters`` cell, and the checked
reading of ``params/<profile>/<notebook>.yaml`` against it.

A ``parameters`` cell holds one ``name: type = literal  # comment`` line per parameter
(papermill's convention; ``papermill --help-notebook`` prints them).  A params file must be
a UTF-8 YAML mapping of declared names to values of the declared types, without duplicate
keys; anything else is a :class:`ParameterError` naming the file (and the line, where there
is one), raised before any notebook runs.
"""

from __future__ import annotations

import ast
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..io import REPO_ROOT, output_root

#: The parameter profiles: ``params/<profile>/`` and the results, figures and runs of each.
PROFILES = ("smoke", "cpu", "gpu")


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {list(PROFILES)}, got {profile!r}")
    return profile


def results_dir(profile: str) -> Path:
    return output_root() / "results" / check_profile(profile)


def figures_dir(profile: str) -> Path:
    return output_root() / "figures" / check_profile(profile)


#: Where notebooks and their params live (the environment variables point a run, and the
#: notebook kernels it starts, at another tree, e.g. in tests).
NOTEBOOKS_DIR = Path(os.environ.get("SPEC_LIB_NOTEBOOKS_DIR", REPO_ROOT / "notebooks"))
PARAMS_DIR = Path(os.environ.get("SPEC_LIB_PARAMS_DIR", REPO_ROOT / "params"))
INJECTED = ("profile",)


class ParameterError(ValueError):
    """A params file does not match its notebook, or cannot be read."""


@dataclass(frozen=True)
class Declared:
    """One parameter of a notebook's ``parameters`` cell."""

    name: str
    annotation: str
    default: object


def notebook_path(notebook: str | Path) -> Path:
    """A notebook given by stem (``11_packed_ss_greedy``) or path."""
    path = Path(notebook)
    return path if path.suffix else NOTEBOOKS_DIR / f"{path.name}.ipynb"


def params_path(notebook: str | Path, profile: str) -> Path:
    return PARAMS_DIR / profile / f"{notebook_path(notebook).stem}.yaml"


def declared_parameters(notebook: str | Path) -> dict[str, Declared]:
    """Parse the single ``parameters`` cell: ``name: type = literal  # comment`` lines."""
    import nbformat

    path = notebook_path(notebook)
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ParameterError(f"{path.name}: expected exactly one cell tagged 'parameters', found {len(cells)}")
    declared = {}
    for node in ast.parse(cells[0].source).body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None):
            raise ParameterError(f"{path.name}: every line of the parameters cell must be "
                                 f"'name: type = literal', got {ast.unparse(node)!r}")
        declared[node.target.id] = Declared(node.target.id, ast.unparse(node.annotation),
                                            ast.literal_eval(node.value))
    return declared


def type_of(annotation: str):
    """The type an annotation string of a parameters cell names (int, list[int], X | None, ...)."""
    namespace = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict,
                 "tuple": tuple, "None": None, "Optional": typing.Optional}
    return eval(annotation, {"__builtins__": {}}, namespace)  # annotations are our own literals


def matches(value, annotation) -> bool:
    """Whether a YAML value fits a parameter annotation (int, float, str, bool, list[...], X | None)."""
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, arg) for arg in typing.get_args(annotation))
    if origin in (list, tuple):
        (inner,) = typing.get_args(annotation)[:1] or (object,)
        return isinstance(value, list) and all(matches(v, inner) for v in value)
    if origin is dict:
        key_t, val_t = typing.get_args(annotation)
        return isinstance(value, dict) and all(matches(k, key_t) and matches(v, val_t) for k, v in value.items())
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is object:
        return True
    return isinstance(value, annotation)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects duplicate keys (PyYAML keeps the last one silently)."""


def _mapping_without_duplicates(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def read_yaml(path: Path) -> object:
    """A params file's content; every way it can be unreadable is a ParameterError with the
    file (and line) named."""
    if path.is_dir():
        raise ParameterError(f"{_rel(path)}: is a directory, expected a YAML file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise ParameterError(f"{_rel(path)}:{line}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    except OSError as err:
        raise ParameterError(f"{_rel(path)}: cannot be read ({err.strerror})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ParameterError(f"{_rel(path)}{where}: invalid YAML: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise ParameterError(f"{_rel(path)}: invalid YAML: {err}") from None


def load_params(notebook: Path, profile: str) -> dict:
    """Read and check ``params/<profile>/<stem>.yaml`` against the notebook's parameters cell."""
    path = params_path(notebook, profile)
    if not path.exists():
        raise ParameterError(f"{notebook.stem}: no parameters file {_rel(path)}")
    params = read_yaml(path)
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise ParameterError(f"{_rel(path)}: expected a mapping of parameter names to values")
    declared = declared_parameters(notebook)
    for name in INJECTED:
        if name not in declared:
            raise ParameterError(f"{notebook.name}: the parameters cell must declare {name!r} (set by the runner)")
        if name in params:
            raise ParameterError(f"{_rel(path)}: {name!r} is set by --profile, not by the file")
    unknown = sorted(set(map(str, params)) - set(declared))
    if unknown:
        raise ParameterError(f"{_rel(path)}: unknown parameter(s) {unknown} for "
                             f"{notebook.name}; allowed: {sorted(set(declared) - set(INJECTED))}")
    for name, value in params.items():
        annotation = declared[name].annotation
        if not matches(value, type_of(annotation)):
            raise ParameterError(f"{_rel(path)}: parameter {name!r} must be {annotation}, "
                                 f"got {value!r} ({type(value).__name__})")
    return {**params, "profile": profile}
