"""Open notebooks in JupyterLab in a headless browser, Run All, and take screenshots: the
first hour of a new user, checked the way a person would check it.

Needs what ``make lab`` installs (JupyterLab, ipywidgets), Playwright's Python package and a
Chromium (Debian's works: ``apt-get install chromium``; Playwright's own browser download is
not needed).  It starts JupyterLab on a free port with a fresh token, opens each notebook,
records whether the document is marked modified right after opening (the unsaved dot), runs
every cell, waits until the kernel is idle, and records

* error outputs, and stderr outputs (warnings, text progress bars) with their first line,
* screenshots of the whole notebook, a viewport at a time, into ``--out``,
* a JSON report (``report.json``) with all of the above,
* for the first notebook, run on a copy beside it: the copy saved from Lab (Ctrl+S) and passed
  through the git clean filter that ``make`` defines must equal the committed notebook.

Autosave is off (JupyterLab runs with settings and workspace folders of its own) and nothing
is saved, so the committed notebooks stay as they are; the report ends with ``git status`` of
``notebooks/`` to show it.

    python tools/lab_check.py --out lab-check 00_quickstart 11_packed_ss_greedy
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_lab(port: int, token: str, log: Path, settings: Path) -> subprocess.Popen:
    """JupyterLab on ``port`` with autosave off (its own settings and workspace folders)."""
    jupyter = REPO / ".venv" / "bin" / "jupyter"
    if not jupyter.exists():
        raise SystemExit("lab_check: .venv/bin/jupyter is missing; run `make lab` once (it installs JupyterLab)")
    plugin = settings / "user" / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings"
    plugin.parent.mkdir(parents=True, exist_ok=True)
    plugin.write_text(json.dumps({"autosave": False}))
    news = settings / "user" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True, exist_ok=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    command = [str(jupyter), "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={REPO}",
               f"--LabApp.user_settings_dir={settings / 'user'}", f"--LabApp.workspaces_dir={settings / 'ws'}"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    proc = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    for _ in range(120):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"lab_check: JupyterLab exited; see {log}")
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"lab_check: JupyterLab did not answer within 60 s; see {log}")


PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"


def strip_like_the_filter(text: str) -> str:
    """``text`` through the git clean filter the Makefile defines (its NBSTRIPOUT line)."""
    import shlex

    line = next(ln for ln in (REPO / "Makefile").read_text().splitlines() if ln.startswith("NBSTRIPOUT :="))
    command = [sys.executable, *shlex.split(line.split(":=", 1)[1].strip()), "-t"]
    return subprocess.run(command, input=text, capture_output=True, text=True, check=True).stdout


def check_notebook(context, base: str, stem: str, out: Path, timeout_s: float, save_copy: bool) -> dict:
    """Open ``stem`` in a fresh page, Run All, screenshot; with ``save_copy`` the run happens on
    a copy beside it, which is then saved from Lab and passed through the git filter."""
    name = f"{stem}.ipynb"
    copy = REPO / "notebooks" / f"{stem}.labcheck.ipynb"
    if save_copy:
        shutil.copyfile(REPO / "notebooks" / name, copy)
        name = copy.name
    page = context.new_page()
    try:
        page.goto(f"{base}/lab/tree/notebooks/{name}?reset")
        page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=120_000)
        page.wait_for_selector(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
        time.sleep(2)
        dirty = ".lm-TabBar-tab.jp-mod-current.jp-mod-dirty"
        dirty_on_open = page.locator(dirty).count() > 0
        page.screenshot(path=str(out / f"{stem}_opened.png"))
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        started = time.time()
        time.sleep(2)
        while time.time() - started < timeout_s:
            busy = page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='busy']").count()
            if not busy and not page.locator(f"{PANEL} .jp-InputPrompt", has_text="[*]").count():
                break
            time.sleep(1)
        else:
            return {"notebook": stem, "finished": False, "seconds": timeout_s}
        seconds = time.time() - started
        errors = page.locator(f"{PANEL} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
        stderr = page.locator(f"{PANEL} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        scroller = page.locator(f"{PANEL} .jp-WindowedPanel-outer").first
        height, view = scroller.evaluate("el => el.scrollHeight"), scroller.evaluate("el => el.clientHeight")
        shots = []
        for i, top in enumerate(range(0, max(1, height), max(1, view - 80))):
            scroller.evaluate(f"el => el.scrollTo(0, {top})")
            time.sleep(0.6)
            page.screenshot(path=str(out / f"{stem}_run_{i:02d}.png"))
            shots.append(f"{stem}_run_{i:02d}.png")
        result = {"notebook": stem, "finished": True, "seconds": round(seconds, 1), "dirty_on_open": dirty_on_open,
                  "errors": [errors.nth(i).inner_text()[:300] for i in range(errors.count())],
                  "stderr": [stderr.nth(i).inner_text().strip().splitlines()[:1] for i in range(stderr.count())],
                  "screenshots": [f"{stem}_opened.png", *shots]}
        if save_copy:
            before = copy.read_text()
            page.keyboard.press("Control+s")
            for _ in range(20):
                time.sleep(0.5)
                if copy.read_text() != before:
                    break
            saved = copy.read_text()
            result["saved_copy_has_outputs"] = '"output_type"' in saved      # Lab saved the run
            result["saved_copy_through_filter_equals_committed"] = (
                strip_like_the_filter(saved) == (REPO / "notebooks" / f"{stem}.ipynb").read_text())
        return result
    finally:
        page.close(run_before_unload=False)
        copy.unlink(missing_ok=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", help="notebook stems, e.g. 00_quickstart")
    parser.add_argument("--out", default="lab-check", help="folder for screenshots and report.json")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for Run All of one notebook")
    args = parser.parse_args(argv)
    missing = [s for s in args.notebooks if not (REPO / "notebooks" / f"{s}.ipynb").exists()]
    if missing:
        parser.error(f"unknown notebooks {missing}")
    if not Path(args.chromium).exists():
        parser.error(f"no Chromium at {args.chromium!r} (apt-get install chromium, or pass --chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        parser.error("needs Playwright's Python package: pip install playwright (no browser download needed)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port, token = free_port(), secrets.token_hex(16)
    settings = Path(tempfile.mkdtemp(prefix="lab-check-"))
    lab = start_lab(port, token, out / "jupyterlab.log", settings)
    report = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium, headless=True, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            login = context.new_page()
            login.goto(f"http://127.0.0.1:{port}/lab?token={token}")         # sets the session cookie
            login.wait_for_selector(".jp-LabShell", timeout=120_000)
            for i, stem in enumerate(args.notebooks):
                report.append(check_notebook(context, f"http://127.0.0.1:{port}", stem, out, args.timeout,
                                             save_copy=i == 0))
                print(json.dumps(report[-1], indent=1), flush=True)
            browser.close()
    finally:
        lab.terminate()
        lab.wait(timeout=30)
        shutil.rmtree(settings, ignore_errors=True)
    changed = subprocess.run(["git", "status", "--porcelain", "notebooks"], cwd=REPO, capture_output=True,
                             text=True).stdout.strip()
    report.append({"notebooks_changed_on_disk": changed or None})
    (out / "report.json").write_text(json.dumps(report, indent=2))
    runs = report[:-1]
    return 0 if all(r["finished"] and not r["errors"] for r in runs) and not changed else 1


if __name__ == "__main__":
    sys.exit(main())
