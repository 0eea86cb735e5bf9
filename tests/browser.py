"""Headless Chromium for the tests that look at pages as a reader does: Debian's `chromium`,
driven from the command line (no driver, no extra Python package)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# Runs in the page once everything has loaded and writes what it found into the DOM, where
# --dump-dom shows it.
CHECK = """<script>
window.addEventListener('load', () => {
  const images = [...document.images];
  const width = document.documentElement.clientWidth;
  const found = {
    images: images.length,
    broken: images.filter(i => !i.complete || i.naturalWidth === 0).length,
    page_overflows: document.documentElement.scrollWidth > width,
    wider_than_page: [...document.querySelectorAll('img, h1, h2, p, figure')]
      .filter(e => e.getBoundingClientRect().right > width + 1).map(e => e.tagName),
  };
  // The first table, the headline: its size, its rows, and the header cells a reader sees
  // without scrolling it (tables scroll inside themselves when wider than the page).
  const table = document.querySelector('table');
  if (table) {
    // The box a reader sees it in: a table wider than the page scrolls inside its own box.
    const box = (table.closest('.table') || table).getBoundingClientRect();
    found.headline = {
      width: box.width,
      height: box.height,
      right: box.right,
      rows: table.querySelectorAll('tbody tr').length,
      visible_headers: [...table.querySelectorAll('thead th')].filter(th => {
        const cell = th.getBoundingClientRect();
        return cell.width > 0 && cell.height > 0 && cell.left >= box.left - 1 && cell.right <= box.right + 1;
      }).map(th => th.textContent),
    };
  }
  // What a reader finds at the top, how the page links to itself, and whether tables fit.
  const box = document.querySelector('.headline');
  found.headline_box = box && {
    text: box.textContent,
    after_title: box.previousElementSibling && box.previousElementSibling.tagName === 'H1',
  };
  const links = [...document.querySelectorAll('nav a')].map(a => a.getAttribute('href'));
  found.contents = links;
  found.contents_resolve = links.every(h => h.startsWith('#') && document.getElementById(h.slice(1)) !== null);
  found.headings = [...document.querySelectorAll('h2')].map(h => ({
    id: h.id,
    anchor: (h.querySelector('a.anchor') || {getAttribute: () => null}).getAttribute('href'),
  }));
  found.figures = [...document.querySelectorAll('figure')].map(f => {
    const caption = f.querySelector('figcaption');
    return caption ? caption.textContent : '';
  });
  const tables = [...document.querySelectorAll('.table')];
  found.tables = tables.length;
  found.tables_scrolling = tables.filter(t => t.scrollWidth > t.clientWidth + 1).length;
  document.body.setAttribute('data-check', JSON.stringify(found));
});
</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it: apt-get install chromium)")
    return found


def run_chromium(*args: str) -> subprocess.CompletedProcess:
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def check_page(html: Path, scratch: Path, width: int = 1280) -> dict:
    """Load a copy of the page with the check script added; what the script found. A page is
    loaded once per width and content in a run: several tests read what one load found."""
    key = (hashlib.sha256(html.read_bytes()).hexdigest(), width)
    if key not in CHECKED:
        checked = scratch / f"checked-{html.name}"
        checked.write_text(html.read_text().replace("</body>", CHECK + "</body>"))
        dom = run_chromium(
            f"--window-size={width},900", "--virtual-time-budget=10000", "--dump-dom", checked.as_uri()
        ).stdout
        match = re.search(r"data-check=\"([^\"]*)\"", dom)
        assert match, "the check script did not run"
        CHECKED[key] = json.loads(match.group(1).replace("&quot;", '"'))
    return CHECKED[key]


CHECKED: dict[tuple[str, int], dict] = {}


def devtools_pipe_on_3_and_4(reads: int, writes: int) -> None:
    """In the child before exec: the pipe's ends on the descriptors Chromium reads (3) and writes
    (4), inheritable. Moved up first, as either end may already be 3 or 4."""
    import os

    reads, writes = os.dup(reads), os.dup(writes)
    for source, target in ((reads, 3), (writes, 4)):
        os.dup2(source, target, inheritable=True)


def evaluate_in_page(url: str, expression: str, size: tuple[int, int], ready: str, timeout_s: float = 180) -> object:
    """Open url in headless Chromium at size (width, height), wait until the JavaScript expression
    `ready` is true (a single-page app renders late, later on a loaded machine; at most timeout_s),
    then evaluate `expression` in it and return its value. Talks the DevTools protocol over
    Chromium's --remote-debugging-pipe (file descriptors 3 and 4, NUL-separated JSON): what a page
    lays out, where --dump-dom gives only its markup."""
    import os
    import time

    to_browser_read, to_browser = os.pipe()
    from_browser, from_browser_write = os.pipe()
    browser = subprocess.Popen(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--remote-debugging-pipe"],
        preexec_fn=lambda: devtools_pipe_on_3_and_4(to_browser_read, from_browser_write),
        close_fds=False,  # closing the child's other descriptors would close 3 and 4 too
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(to_browser_read)
    os.close(from_browser_write)
    pending = b""
    calls = iter(range(1, 1_000_000))

    def call(method: str, session: str | None = None, **params) -> dict:
        nonlocal pending
        number = next(calls)
        message = {"id": number, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(to_browser, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in pending:
                chunk = os.read(from_browser, 1 << 16)
                assert chunk, "Chromium closed its DevTools pipe"
                pending += chunk
            raw, pending = pending.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == number:
                assert "error" not in answer, answer
                return answer["result"]

    try:
        width, height = size
        target = call("Target.createTarget", url="about:blank", width=width, height=height)["targetId"]
        session = call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        call(
            "Emulation.setDeviceMetricsOverride", session, width=width, height=height, deviceScaleFactor=1, mobile=False
        )
        call("Page.navigate", session, url=url)
        deadline = time.monotonic() + timeout_s
        while not call("Runtime.evaluate", session, expression=f"!!({ready})", returnByValue=True)["result"]["value"]:
            assert time.monotonic() < deadline, f"{url}: not ready ({ready}) within {timeout_s:.0f} s"
            time.sleep(0.5)
        time.sleep(1)  # the frame after: layout settled
        found = call("Runtime.evaluate", session, expression=expression, returnByValue=True)
        assert "exceptionDetails" not in found, found
        return found["result"].get("value")
    finally:
        browser.kill()
        browser.wait(timeout=60)
        os.close(to_browser)
        os.close(from_browser)
