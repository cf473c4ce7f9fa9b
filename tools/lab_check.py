"""Open notebooks in JupyterLab in a headless browser, Run All, and take screenshots: the
first hour of a new user, checked the way a person would check it.

Needs what ``make lab`` installs (JupyterLab, ipywidgets), Playwright's Python package and a
Chromium (Debian's works: ``apt-get install chromium``; Playwright's own browser download is
not needed).  It starts JupyterLab on a free port with a fresh token, opens each notebook,
records whether the document is marked modified right after opening (the unsaved dot), runs
every cell, waits until the kernel is idle, and records

* error outputs, and stderr outputs (warnings, text progress bars) with their first line,
* screenshots of the whole notebook, a viewport at a time, into ``--out``,
* a JSON report (``report.json``) with all of the above.

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


def check_notebook(page, base: str, stem: str, out: Path, timeout_s: float) -> dict:
    page.goto(f"{base}/lab/tree/notebooks/{stem}.ipynb")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    time.sleep(2)
    dirty_on_open = page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() > 0
    page.screenshot(path=str(out / f"{stem}_opened.png"))
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    started = time.time()
    time.sleep(2)
    while time.time() - started < timeout_s:
        busy = page.locator(".jp-Notebook-ExecutionIndicator[data-status='busy']").count()
        running = page.locator(".jp-InputPrompt", has_text="[*]").count()
        if not busy and not running:
            break
        time.sleep(1)
    else:
        return {"notebook": stem, "finished": False, "seconds": timeout_s}
    seconds = time.time() - started
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
    stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    shots, scroller = [], page.locator(".jp-WindowedPanel-outer").first
    height = scroller.evaluate("el => el.scrollHeight")
    view = scroller.evaluate("el => el.clientHeight")
    for i, top in enumerate(range(0, max(1, height), max(1, view - 80))):
        scroller.evaluate(f"el => el.scrollTo(0, {top})")
        time.sleep(0.6)
        path = out / f"{stem}_run_{i:02d}.png"
        page.screenshot(path=str(path))
        shots.append(path.name)
    dirty_after_run = page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() > 0
    return {"notebook": stem, "finished": True, "seconds": round(seconds, 1), "dirty_on_open": dirty_on_open,
            "dirty_after_run": dirty_after_run,
            "errors": [errors.nth(i).inner_text()[:300] for i in range(errors.count())],
            "stderr": [stderr.nth(i).inner_text().strip().splitlines()[:1] for i in range(stderr.count())],
            "screenshots": [f"{stem}_opened.png", *shots]}


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
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/lab?token={token}")
            for stem in args.notebooks:
                report.append(check_notebook(page, f"http://127.0.0.1:{port}", stem, out, args.timeout))
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
