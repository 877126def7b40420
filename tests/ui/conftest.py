"""The Dagster UI in a real browser: Debian's chromium driven by the `playwright` package (no
browser download), against a real `dagster-webserver` + `dagster-daemon` on a demo instance.

Every screenshot goes to `.ctx/ui-screens/` in the repository and into the test's report
(`user_properties`, and a report section printed with the test's outcome)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

SCREENS = REPO_ROOT / ".ctx" / "ui-screens"
# Without the background-networking flags chromium keeps dialling Google's hosts, which this
# closed network refuses; --no-sandbox because CI runs as root.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage"]


def chromium_path() -> str:
    configured = os.environ.get("CTX_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(configured).exists():
        pytest.fail(f"chromium not found at {configured}: `make test` installs Debian's chromium "
                    "(apt-get install chromium); set CTX_CHROMIUM to another Chromium binary")
    return configured


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


class Screens:
    """Numbered screenshots of one test, recorded in its report."""

    def __init__(self, page, request):
        self.page, self.request = page, request
        self.taken: list[Path] = []

    def shot(self, label: str) -> Path:
        SCREENS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^a-z0-9]+", "_", f"{self.request.node.name}_{len(self.taken) + 1:02d}_{label}".lower())
        path = SCREENS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=False)
        self.taken.append(path)
        self.request.node.user_properties.append(("screenshot", str(path)))
        return path


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    opened = context.new_page()
    # Generous: on two cores the webserver, the daemon, run processes and chromium share the CPU.
    opened.set_default_timeout(90_000)
    screens = Screens(opened, request)
    opened.screens = screens
    yield opened
    try:
        screens.shot("end")  # what the browser showed when the test ended, passed or failed
    finally:
        context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    shots = [value for name, value in item.user_properties if name == "screenshot"]
    if report.when == "call" and shots:
        report.sections.append(("screenshots", "\n".join(shots)))


def run_demo(env: dict[str, str], cwd: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "contextual_assets.cli.demo"], env=env, cwd=cwd,
                            capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout
