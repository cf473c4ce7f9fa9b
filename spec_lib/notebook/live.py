"""Live progress of a headless notebook run in a terminal (used by :mod:`spec_lib.notebook.run`).

papermill executes a notebook in a kernel and, by default, shows nothing until it ends; a
13-minute training cell then looks like a hung run.  This module shows, for the notebook
being executed, one terminal bar over its code cells whose label is the running cell's first
line, with the latest line of the notebook's *own* progress bars (the library's ``tqdm``
output, which the kernel sends as text on stderr) as its postfix; each line the notebook
prints, and the final state of each of its progress bars, is written above the bar.

The pieces are papermill's own extension points: an engine registered under
:data:`ENGINE_NAME` whose execution manager reports cell starts and ends, and the
``stdout_file`` / ``stderr_file`` streams of papermill's notebook client.

The kernel must print text progress bars for this to work: ``tqdm.auto`` picks widget bars
inside any Jupyter kernel where ``ipywidgets`` is installed (as ``make lab`` installs it),
and widgets never reach a terminal (nor render in the executed copies under ``runs/``).
:func:`text_progress_kernels` points the kernels a headless run starts at an IPython
directory whose start-up file selects ``tqdm``'s text bars; notebooks opened in JupyterLab
are not affected.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines
from tqdm import tqdm

ENGINE_NAME = "spec-lib-live"

_STARTUP = '''"""Headless notebook run (spec_lib.notebook.live): text progress bars on stderr."""
import warnings

import tqdm.std
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tqdm.auto
    import tqdm.autonotebook
for _module in (tqdm.auto, tqdm.autonotebook):
    _module.tqdm, _module.trange = tqdm.std.tqdm, tqdm.std.trange
'''


@contextlib.contextmanager
def text_progress_kernels():
    """Within this context, kernels started by this process print text ``tqdm`` bars (an
    ``IPYTHONDIR`` with one start-up file; the previous value is restored on exit)."""
    previous = os.environ.get("IPYTHONDIR")
    with tempfile.TemporaryDirectory(prefix="spec-lib-ipython-") as folder:
        startup = Path(folder) / "profile_default" / "startup"
        startup.mkdir(parents=True)
        (startup / "00-text-progress.py").write_text(_STARTUP)
        os.environ["IPYTHONDIR"] = folder
        try:
            yield Path(folder)
        finally:
            if previous is None:
                os.environ.pop("IPYTHONDIR", None)
            else:
                os.environ["IPYTHONDIR"] = previous


def first_line(source: str, limit: int = 48) -> str:
    """A cell's first non-blank line, shortened to ``limit`` characters."""
    line = next((ln.strip() for ln in source.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


class LiveView:
    """The terminal view of one notebook's execution (see the module docstring).

    ``write(text)`` / ``flush()`` make it usable as papermill's ``stdout_file`` and
    ``stderr_file``: complete lines are written above the bar (a line that carried carriage
    returns is a finished progress bar: its last state is kept); the last carriage-return
    segment of an unfinished line (a progress bar being redrawn) is shown after the cell.
    """

    def __init__(self, name: str, code_cells: int, file=None, position: int = 1):
        self.name = name
        self.total = code_cells
        self.file = file if file is not None else sys.stderr
        self.bar = tqdm(total=code_cells, leave=False, position=position, file=self.file, dynamic_ncols=True,
                        bar_format="{desc}")
        self._pending = ""
        self._cell = ""
        self._progress = ""
        self._show()

    def _show(self) -> None:
        elapsed = tqdm.format_interval(self.bar.format_dict["elapsed"])
        line = f"{self.name} [{elapsed}] cell {self.bar.n}/{self.total}: {self._cell}"
        if self._progress:
            line += f" | {self._progress}"
        self.bar.set_description_str(line[:200], refresh=True)

    def cell_started(self, cell) -> None:
        if cell.get("cell_type") != "code":
            return
        self._cell, self._progress = first_line(cell.get("source", "")), ""
        self._show()

    def cell_finished(self, cell) -> None:
        if cell.get("cell_type") == "code":
            self.bar.update(1)
            self._show()

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        for line in lines:
            shown = line.rsplit("\r", 1)[-1].rstrip()
            if shown:
                self.bar.write(f"  {self.name} | {shown}", file=self.file)
        self._progress = self._pending.rsplit("\r", 1)[-1].strip()
        self._show()
        return len(text)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.bar.close()


class _Manager(NotebookExecutionManager):
    """papermill's execution manager, also telling a :class:`LiveView` about cell starts and ends."""

    def __init__(self, nb, live: LiveView, **kwargs):
        super().__init__(nb, **kwargs)
        self.live = live

    def cell_start(self, cell, cell_index=None, **kwargs):
        super().cell_start(cell, cell_index, **kwargs)
        self.live.cell_started(cell)

    def cell_complete(self, cell, cell_index=None, **kwargs):
        super().cell_complete(cell, cell_index, **kwargs)
        self.live.cell_finished(cell)


class LiveEngine(NBClientEngine):
    """papermill's nbclient engine with a :class:`LiveView` (pass ``live=`` to
    ``papermill.execute_notebook(..., engine_name=ENGINE_NAME)``)."""

    @classmethod
    def execute_notebook(cls, nb, kernel_name, output_path=None, progress_bar=False, log_output=False,
                         autosave_cell_every=30, live: LiveView | None = None, **kwargs):
        if live is None:
            return super().execute_notebook(nb, kernel_name, output_path=output_path, progress_bar=progress_bar,
                                            log_output=log_output, autosave_cell_every=autosave_cell_every, **kwargs)
        nb_man = _Manager(nb, live, output_path=output_path, progress_bar=False, log_output=log_output,
                          autosave_cell_every=autosave_cell_every)
        nb_man.notebook_start()
        try:
            cls.execute_managed_notebook(nb_man, kernel_name, log_output=log_output,
                                         **{**kwargs, "stdout_file": live, "stderr_file": live})
        finally:
            nb_man.notebook_complete()
        return nb_man.nb


papermill_engines.register(ENGINE_NAME, LiveEngine)

__all__ = ["ENGINE_NAME", "LiveEngine", "LiveView", "first_line", "text_progress_kernels"]
