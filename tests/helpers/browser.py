"""Headless Chromium for the report tests: measure a page's layout at a width, take a screenshot.

Headless Chromium will not make a window narrower than 500 px: the page goes in an iframe of the width
under test, and a probe script appended to the page posts its measurements to the frame page, which
``--dump-dom`` prints.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
#: Every table's own width against its box and the window; the page's width; each answer card's width.
TABLE_PROBE = """<script>
(function () {
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  var tables = Array.from(document.querySelectorAll('table')).map(function (t) {
    return {scroll_w: t.scrollWidth, box_w: t.parentElement.clientWidth,
            right: t.getBoundingClientRect().right, card: !!t.closest('.answer')};
  });
  var cards = Array.from(document.querySelectorAll('.answer')).map(function (c) {
    return c.getBoundingClientRect().width;
  });
  parent.postMessage(JSON.stringify({tables: tables, cards: cards, view_w: window.innerWidth,
    page_w: document.documentElement.scrollWidth, body_w: document.body.clientWidth}), '*');
})();
</script>"""
FRAME = """<!DOCTYPE html><html><body style="margin:0">
<pre id="probe" style="display:none">none</pre><script>
window.addEventListener('message', function (e) { document.getElementById('probe').textContent = e.data; });
</script><iframe src="SRC" style="border:0;width:Wpx;height:Hpx"></iframe></body></html>"""


def need_chromium() -> str:
    """Chromium's path; without it the test fails on CI (.ci/run installs it) and is xfailed here."""
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
        pytest.xfail("chromium is not installed here (apt-get install chromium); CI runs this check")
    return CHROMIUM


def _chromium(user_dir: Path, width: int, height: int, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        need_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
        f"--user-data-dir={user_dir / 'ud'}", f"--window-size={max(width, 500)},{height}", *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _frame(page: Path, width: int, height: int) -> Path:
    frame = page.parent / f".frame-{page.stem}-{width}.html"
    text = FRAME.replace("SRC", page.name).replace("Wpx", f"{width}px").replace("Hpx", f"{height}px")
    frame.write_text(text)
    return frame


def measure(page: Path, work: Path, width: int, probe: str = TABLE_PROBE) -> dict:
    """Open ``page`` at ``width`` CSS px with ``probe`` appended; what it measured after layout."""
    probed = page.parent / f".probe-{page.stem}.html"  # beside the page: relative links resolve the same
    probed.write_text(page.read_text().replace("</body>", probe + "</body>"))
    frame = _frame(probed, width, 2000)
    dom = _chromium(work, width, 2000, "--virtual-time-budget=10000", "--dump-dom", frame.as_uri()).stdout
    probed.unlink()
    frame.unlink()
    start = dom.index(">", dom.index('id="probe"')) + 1
    return json.loads(html.unescape(dom[start : dom.index("</pre>", start)]))


def screenshot(page: Path, out: Path, width: int, height: int = 3000) -> Path:
    """A PNG of the page's first ``height`` CSS px at ``width`` (to look at; tests check its size)."""
    frame = _frame(page, width, height)
    _chromium(out.parent, width, height, f"--screenshot={out}", frame.as_uri())
    frame.unlink()
    return out
