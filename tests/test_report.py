"""``make report``: the executed notebooks as a static site, opened in headless Chromium as a reader would.

Built from the smoke run's executed notebooks (the ``smoke_outputs`` fixture); ``make report`` builds
the same pages from the cpu run that ``make reproduce`` keeps.  Needs Debian's Chromium at
:data:`CHROMIUM` (``make test`` installs it when missing) and Playwright's Python package (no
browser download).
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from spec_lib.io import REPO_ROOT
from spec_lib.notebook import report

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def test_progress_bars_are_dropped_and_warnings_kept():
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    bar = "\rdecoding:   0%|          | 0/6 [00:00<?, ?it/s]\rdecoding: 100%|██████████| 6/6 [00:01<00:00,  3.70it/s]\n"
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=bar),
                    nbformat.v4.new_output("stream", name="stderr", text="\x1b[A"),      # a nested bar's cursor move
                    nbformat.v4.new_output("stream", name="stderr", text="UserWarning: something\n"),
                    nbformat.v4.new_output("stream", name="stderr", text="\x1b[AUserWarning: kept\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="10%|x| printed by the cell\n")]
    nb.cells = [cell]
    kept = report.drop_progress_bars(nb).cells[0].outputs
    assert [o.text for o in kept] == ["UserWarning: something\n", "\x1b[AUserWarning: kept\n",
                                      "10%|x| printed by the cell\n"]


def test_report_refuses_what_it_cannot_build(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_LIB_OUTPUT_ROOT", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="make reproduce PROFILE=smoke"):
        report.build("smoke")
    with pytest.raises(ValueError, match="unknown"):
        report.build("smoke", ["99_nothing"])
    with pytest.raises(ValueError, match="profile"):
        report.build("laptop")


@pytest.fixture(scope="module")
def site(smoke_outputs):
    """The report of the smoke run, served on a free localhost port."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPEC_LIB_OUTPUT_ROOT", str(smoke_outputs))
        index = report.build("smoke")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(index.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield index.parent, f"http://127.0.0.1:{server.server_address[1]}", smoke_outputs
    server.shutdown()


@pytest.mark.slow
def test_every_report_page_opens_with_its_figures_and_no_traceback(site, tmp_path):
    """Every page opens; every figure is loaded and visible; no traceback, no stderr box (a warning
    a notebook printed), no absolute path of this machine; index and one notebook page look like
    pages (screenshots with content, not blank)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    folder, base, outputs = site
    pages = sorted(p.name for p in folder.glob("*.html"))
    assert "index.html" in pages and len(pages) == 1 + len(list((outputs / "runs" / "smoke").glob("*.ipynb")))
    forbidden = [str(REPO_ROOT), str(outputs)]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{base}/index.html")
        links = page.eval_on_selector_all("td.nb a", "els => els.map(e => e.getAttribute('href'))")
        assert sorted(links) == sorted(n for n in pages if n != "index.html")
        index_shot = tmp_path / "index.png"
        page.screenshot(path=str(index_shot), full_page=True)
        for name in links:
            response = page.goto(f"{base}/{name}")
            assert response is not None and response.ok, name
            text = page.inner_text("body")
            assert "Traceback" not in text and not re.search(r"\w+Error: ", text), f"{name}: an error in the outputs"
            assert not any(root in page.content() for root in forbidden), f"{name}: a path of this machine"
            assert page.locator("[data-mime-type='application/vnd.jupyter.stderr']").count() == 0, \
                f"{name}: a stderr box (a warning)"
            assert "Findings" in text, f"{name}: no findings section"
            for i, image in enumerate(page.locator("img").all()):
                image.scroll_into_view_if_needed()
                loaded = image.evaluate("img => img.complete && img.naturalWidth > 0")
                box = image.bounding_box()
                assert loaded and box and box["width"] > 50 and box["height"] > 50, f"{name}: figure {i} not visible"
        page.goto(f"{base}/11_packed_ss_greedy.html")
        page_shot = tmp_path / "11.png"
        page.screenshot(path=str(page_shot))
        browser.close()
    assert not errors, errors
    for shot in (index_shot, page_shot):
        from PIL import Image

        pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
        assert pixels.shape[1] == 1280 and pixels.std() > 10, f"{shot.name}: a blank page"
        assert (pixels < 128).mean() > 0.005, f"{shot.name}: no text drawn"
