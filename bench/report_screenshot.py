"""Render a comparison's report.html in headless Chromium and save a screenshot, to check that a
person sees the table and the plots (issue 4's acceptance). Needs Debian's chromium package.

    .venv/bin/python -m bench.report_screenshot results/compare-*/report.html
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path


def screenshot(page: Path, out: Path, width: int = 1200, height: int = 4000) -> Path:
    """Headless Chromium screenshot of a local page (no network, throwaway profile)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed: apt-get install chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                f"--window-size={width},{height}", f"--screenshot={out.resolve()}",
                page.resolve().as_uri(),
            ],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a report.html written by zcube-lab compare")
    parser.add_argument("--out", type=Path, help="PNG path (default: beside the report)")
    args = parser.parse_args()
    out = args.out or args.report.with_name("report-screenshot.png")
    screenshot(args.report, out)
    print(f"{out} ({out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
