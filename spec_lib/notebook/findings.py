"""Each notebook's findings: the paper's claims beside what the run measured, and a verdict.

A notebook ends with a *Findings* section whose one code cell is ``findings.show(NOTEBOOK,
profile)``: it reads the result the notebook has just published (``results/<profile>/<notebook>.json``)
and prints, from those numbers only, one headline sentence and a table of findings, each with

* ``claim``: what the paper states, with where (``"seed 000, Sec. 4.1"``), or what the project
  asks where the paper is silent;
* ``measured``: what this run measured, formatted from its metrics (point estimate and CI);
* ``verdict``: one of :data:`VERDICTS`.

The README's notebook table takes every notebook's headline from the committed cpu results
through the same functions (``python -m spec_lib.notebook.readme``), so the sentences a reader
sees in the executed notebook, in ``make report`` and in the README cannot drift from the
numbers.  The per-notebook functions live in one module per group of notebooks
(:mod:`~spec_lib.notebook.findings_proofs` 00-04, :mod:`~spec_lib.notebook.findings_packed` 10-14,
:mod:`~spec_lib.notebook.findings_variants` 15-17, :mod:`~spec_lib.notebook.findings_deer` 20-22,
:mod:`~spec_lib.notebook.findings_dedit` 30-35); each maps a notebook's result to a :class:`Report`.

These modules format numbers a run computed and decide none, so they are not part of a
result's code version (:data:`spec_lib.notebook.versions.PRESENTATION`): rewording a finding does
not make a result stale.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .params import check_profile, results_dir

#: The verdicts a finding can carry.  ``agrees`` / ``disagrees``: the measured interval lies on the
#: paper's side / the other side; ``not resolved``: the interval contains the boundary; ``mixed``:
#: it agrees on some slices and not on others; ``measured``: no paper number to compare (a
#: project question, or a quantity the paper does not report).
VERDICTS = ("agrees", "disagrees", "not resolved", "mixed", "measured")


@dataclass(frozen=True)
class Finding:
    claim: str
    measured: str
    verdict: str

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


@dataclass(frozen=True)
class Report:
    """A notebook's findings: ``headline`` is one sentence (the README's table row), ``findings``
    the table that closes the notebook."""

    headline: str
    findings: list[Finding] = field(default_factory=list)


# ----- formatting --------------------------------------------------------------------------------

def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def num(value: float | None, digits: int = 2) -> str:
    """``value`` with ``digits`` decimals and thousands separators (``nan`` as "n/a")."""
    if _missing(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def ci(low: float, high: float, digits: int = 2) -> str:
    """``[low, high]``."""
    return f"[{num(low, digits)}, {num(high, digits)}]"


def times(value: float, low: float | None = None, high: float | None = None, digits: int = 2) -> str:
    """A ratio as ``1.33×``, with its interval when given: ``1.33× [1.29, 1.39]``."""
    text = f"{num(value, digits)}×"
    return text if low is None else f"{text} {ci(low, high, digits)}"


def pct(value: float, digits: int = 0) -> str:
    """A share in [0, 1] as a percentage."""
    return f"{num(100 * value, digits)}%"


def number(value) -> float:
    """A number of a result as a float: ``nan`` where the run wrote none (a NaN is saved as JSON null)."""
    return math.nan if value is None else float(value)


def span(values, digits: int = 2) -> str:
    """``low-high`` of the finite ``values`` (one number when both ends round alike; n/a when none is finite)."""
    finite = [v for v in map(number, values) if math.isfinite(v)]
    if not finite:
        return "n/a"
    low, high = num(min(finite), digits), num(max(finite), digits)
    return low if low == high else f"{low}-{high}"


def signed(value, digits: int = 2) -> str:
    """``+0.12`` / ``-0.12`` (n/a when missing)."""
    value = number(value)
    return "n/a" if math.isnan(value) else f"{value:+,.{digits}f}"


def interval(row: dict, key: str, digits: int = 2) -> str:
    """``row[key]`` as a ratio with its interval ``row[key + "_low"]``, ``row[key + "_high"]``."""
    return times(number(row[key]), number(row[f"{key}_low"]), number(row[f"{key}_high"]), digits)


def exactness(ex: dict, claim: str) -> Finding:
    """The finding that greedy speculative outputs equal AR's, from a notebook's ``metrics["exactness"]``
    (:func:`spec_lib.studies.bench.identity_check`)."""
    return Finding(claim, f"{ex['identical']} of {ex['responses']} responses identical, {ex['divergences']} divergences "
                          f"({ex['explained_by_ties']} explained by ties of gap ≤ {ex['tie_gap']})",
                   "agrees" if ex["ok"] else "disagrees")


def above(low: float | None, high: float | None, bound: float) -> str:
    """The verdict on "the quantity exceeds ``bound``" from its interval (a missing end, e.g. a NaN
    that the result file holds as null, leaves it unresolved)."""
    if _missing(low) or _missing(high):
        return "not resolved"
    if low > bound:
        return "agrees"
    if high < bound:
        return "disagrees"
    return "not resolved"


def above_one(low: float | None, high: float | None) -> str:
    """The verdict on "the ratio exceeds 1" from its interval."""
    return above(low, high, 1.0)


def combine(verdicts: Sequence[str]) -> str:
    """One verdict for several slices: the common one; ``mixed`` where some agree and others do not;
    ``disagrees`` where none agrees and some disagree; else ``not resolved``."""
    unique = set(verdicts)
    if not unique:
        raise ValueError("combine needs at least one verdict")
    if len(unique) == 1:
        return unique.pop()
    if "agrees" in unique:
        return "mixed"
    return "disagrees" if "disagrees" in unique else "not resolved"


def _pooled(rows: list[dict], kind: str) -> tuple[float, int]:
    """Tokens per iteration over the ``kind`` ("fresh" / "repeated") iterations of ``rows``, pooled
    (weighted by each row's iterations), and the number of those iterations."""
    pairs = [(number(r[f"{kind}_tokens_per_iteration"]), number(r[f"{kind}_iterations"])) for r in rows]
    pairs = [(v, c) for v, c in pairs if math.isfinite(v) and math.isfinite(c) and c > 0]
    count = sum(c for _, c in pairs)
    return (sum(v * c for v, c in pairs) / count if count else math.nan), int(count)


def repetition(metrics: dict, methods: Sequence[str] | None = None) -> Finding | None:
    """The row that reads tau and speedup beside the text they were earned on, from
    ``metrics["repetition_report"]`` (:func:`spec_lib.studies.repetition.repetition_report`): per
    slice the share of output tokens that repeat an earlier 4-gram against the real text's, and for
    each of ``methods`` (default: every method with iterations to split) the tokens per iteration on
    fresh and on repeated iterations, pooled over slices; per temperature where the report has one.
    ``None`` for a result published before the report existed."""
    rows = metrics.get("repetition_report")
    if not rows:
        return None
    by_temperature: dict = {}
    for r in rows:
        by_temperature.setdefault(r.get("temperature"), []).append(r)
    parts = []
    for t, group in by_temperature.items():
        slices: dict[str, list[dict]] = {}
        by_method: dict[str, list[dict]] = {}
        for r in group:
            slices.setdefault(r["slice"], []).append(r)
            by_method.setdefault(r["method"], []).append(r)
        shown = [m for m in (methods if methods is not None else by_method) if m in by_method]
        split = [(m, _pooled(by_method[m], "fresh"), _pooled(by_method[m], "repeated")) for m in shown]
        split = [(m, fresh, repeated) for m, fresh, repeated in split if fresh[1] + repeated[1]]
        text = ("repeated 4-grams, outputs vs real text: " + ", ".join(
            f"{s} {span([100 * r['repetition'] for r in rs], 0)}% vs "
            f"{span([100 * number(r['reference_repetition']) for r in rs], 0)}%" for s, rs in slices.items()))
        if split:
            text += "; tokens per iteration, fresh / repeated iterations: " + ", ".join(
                f"{m} {num(fresh[0])} / {num(repeated[0])} ({fresh[1]} / {repeated[1]})"
                for m, fresh, repeated in split)
        parts.append(text if t is None else f"T = {number(t):g}: {text}")
    return Finding("Acceptance read beside the text it was earned on: how much of the output repeats itself, against "
                   "the real continuations of the same prompts, and tokens per iteration on iterations whose tokens "
                   "are all fresh vs those touching repeated text (the project's question: acceptance earned on loops "
                   "says little about drafting)", "; ".join(parts), "measured")


# ----- reading and showing -----------------------------------------------------------------------

def read_result(notebook: str, profile: str) -> dict:
    """The published ``results/<profile>/<notebook>.json``."""
    path = results_dir(check_profile(profile)) / f"{notebook}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no published result for {notebook} at profile {profile!r} ({path.name}); "
                                f"run the notebook first: python -m spec_lib.run --profile {profile} {notebook}")
    return json.loads(path.read_text())


def report(registry: dict[str, Callable[[dict], Report]], notebook: str, result: dict) -> Report:
    """``registry[notebook](result)``, checked."""
    if notebook not in registry:
        raise KeyError(f"no findings for {notebook!r}; known: {sorted(registry)}")
    made = registry[notebook](result)
    if not isinstance(made, Report) or not made.headline:
        raise TypeError(f"the findings of {notebook} must be a Report with a headline, got {made!r}")
    return made


def markdown(made: Report, profile: str) -> str:
    """The findings section's text: the headline, then a table claim / measured / verdict."""
    rows = "\n".join(f"| {f.claim} | {f.measured} | **{f.verdict}** |" for f in made.findings)
    table = f"\n\n| the paper (or the question) | measured in this run | verdict |\n|---|---|---|\n{rows}" if rows else ""
    return f"**{made.headline}**{table}\n\n(profile `{profile}`; every number above is read from this run's result file.)"


def show(registry: dict[str, Callable[[dict], Report]], notebook: str, profile: str) -> None:
    """Display the findings of ``notebook``'s published result at ``profile`` as Markdown."""
    from IPython.display import Markdown, display

    display(Markdown(markdown(report(registry, notebook, read_result(notebook, profile)), profile)))
