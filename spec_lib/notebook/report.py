"""A static HTML report of the executed notebooks: ``make report`` (``python -m spec_lib.notebook.report``).

Renders the executed copies the runner keeps (``runs/<profile>/<notebook>.ipynb``, written by
``make reproduce`` or ``python -m spec_lib.run``) with nbconvert's HTML exporter and JupyterLab's
template, one page per notebook, and an index page with each notebook's title and the headline of
its findings (:mod:`spec_lib.notebook.findings`), into ``report/<profile>/``.  nbconvert rather
than Jupyter Book: the report shows notebooks as they ran, with no cross-references, narrative
pages or builds of its own to need Sphinx for; nbconvert is the exporter the Jupyter project keeps
for this, and papermill's outputs go through it unchanged.

Progress bars (tqdm's text bars on stderr) are dropped from the pages, since a reader wants the
outcome, not the frames of a bar; any other stderr output, a warning say, stays and is visible.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path

from ..io import atomic_write_bytes, output_root
from .params import check_profile

_BAR = re.compile(r"^\s*(.*?:\s*)?\d+%\|.*\|.*$")          # a tqdm frame: "desc:  40%|████      | 4/10 [...]"
_CURSOR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")              # tqdm's cursor moves between nested bars


def report_dir(profile: str) -> Path:
    return output_root() / "report" / check_profile(profile)


def runs_dir(profile: str) -> Path:
    return output_root() / "runs" / check_profile(profile)


def _is_progress(text: str) -> bool:
    """Whether a stream's text is only progress-bar frames and blank clears."""
    frames = [line for chunk in _CURSOR.sub("", text).split("\n") for line in chunk.split("\r")]
    return all(not line.strip() or _BAR.match(line) for line in frames)


def drop_progress_bars(nb):
    """``nb`` without the stderr stream outputs that hold only progress-bar frames."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if not (
                o.get("output_type") == "stream" and o.get("name") == "stderr" and _is_progress(o.get("text", "")))]
    return nb


def render_notebook(path: Path) -> str:
    """One executed notebook as a standalone HTML page (figures embedded)."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = drop_progress_bars(nbformat.read(path, as_version=4))
    exporter = HTMLExporter(template_name="lab")
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": path.stem}})
    return body


_INDEX = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>spec-lib: executed notebooks ({profile})</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; color: #222; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ text-align: left; vertical-align: top; padding: .45rem .6rem; border-bottom: 1px solid #ddd; }}
th {{ background: #f4f4f4; }} td.nb {{ white-space: nowrap; font-family: monospace; }}
.missing {{ color: #a00; }}
</style></head><body>
<h1>spec-lib: the executed notebooks, profile <code>{profile}</code></h1>
<p>Speculative decoding with diffusion drafting: Packed-SS (seed 000), DEER (seed 001) and DEdit
(seed 002), reproduced as notebooks. Each page is a notebook as it ran, with its outputs, figures
and, at its end, its findings: the paper's claims beside what the run measured.</p>
<table><thead><tr><th>notebook</th><th>reproduces</th><th>headline of this run</th></tr></thead>
<tbody>
{rows}
</tbody></table>
</body></html>
"""


def build(profile: str, notebooks: list[str] | None = None) -> Path:
    """Write ``report/<profile>/`` (one page per executed notebook and ``index.html``); return the index.

    A notebook that has no executed copy is listed on the index as not run; its findings come
    from its published result when there is one."""
    from . import findings, readme
    from .params import NOTEBOOKS_DIR

    names = notebooks or sorted(p.stem for p in NOTEBOOKS_DIR.glob("*.ipynb"))
    unknown = sorted(set(names) - {p.stem for p in NOTEBOOKS_DIR.glob("*.ipynb")})
    if unknown:
        raise ValueError(f"notebooks must be among notebooks/*.ipynb; unknown: {unknown}")
    executed = [n for n in names if (runs_dir(profile) / f"{n}.ipynb").is_file()]
    if not executed:
        raise FileNotFoundError(f"no executed notebooks in runs/{profile}/: run `make reproduce PROFILE={profile}` "
                                f"(or python -m spec_lib.run --profile {profile}) first")
    out = report_dir(profile)
    rows = []
    from tqdm.auto import tqdm

    for name in tqdm(names, desc="report pages", unit="page"):
        title = html.escape(readme.title(name))
        try:
            headline = html.escape(findings.report(readme.REGISTRY, name, findings.read_result(name, profile)).headline)
        except FileNotFoundError:
            headline = "<span class=missing>no published result</span>"
        if name in executed:
            atomic_write_bytes(out / f"{name}.html", render_notebook(runs_dir(profile) / f"{name}.ipynb").encode())
            link = f'<a href="{name}.html">{name}</a>'
        else:
            link = f"{name} <span class=missing>(not run)</span>"
        rows.append(f"<tr><td class=nb>{link}</td><td>{title}</td><td>{headline}</td></tr>")
    index = out / "index.html"
    atomic_write_bytes(index, _INDEX.format(profile=profile, rows="\n".join(rows)).encode())
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spec_lib.notebook.report", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu", help="which executed notebooks (runs/<profile>/); default cpu")
    parser.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    args = parser.parse_args(argv)
    try:
        index = build(args.profile, args.notebooks or None)
    except (FileNotFoundError, ValueError) as error:
        print(f"make report: {error}", file=sys.stderr)
        return 2
    try:
        shown = index.relative_to(Path.cwd())
    except ValueError:
        shown = index
    print(f"report written: {shown} (open it in a browser)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
