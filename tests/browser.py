"""Headless Chromium for the tests that look at pages as a reader does: Debian's `chromium`,
driven from the command line (no driver, no extra Python package)."""

from __future__ import annotations

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
    const box = table.getBoundingClientRect();
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
    """Load a copy of the page with the check script added; what the script found."""
    checked = scratch / f"checked-{html.name}"
    checked.write_text(html.read_text().replace("</body>", CHECK + "</body>"))
    dom = run_chromium(
        f"--window-size={width},900", "--virtual-time-budget=10000", "--dump-dom", checked.as_uri()
    ).stdout
    match = re.search(r"data-check=\"([^\"]*)\"", dom)
    assert match, "the check script did not run"
    return json.loads(match.group(1).replace("&quot;", '"'))
