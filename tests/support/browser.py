"""Debian's headless Chromium, driven by Selenium through the system chromedriver: nothing is
downloaded at run time (no Selenium Manager, no browser fetch), and the browser may reach only
loopback. With CI=true a missing browser fails the run instead of skipping the browser tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import REPO

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = REPO / ".cache" / "test-artifacts"
INSTALL_HINT = "apt-get install chromium chromium-driver"


def unavailable(reason: str) -> None:
    """Fail in CI, where the browser tests must run; elsewhere skip with the reason."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser tests cannot run: {reason}", pytrace=False)
    pytest.skip(f"browser tests need Chromium: {reason} ({INSTALL_HINT})")


@contextmanager
def chromium(profile_dir: Path, width: int = 1280, height: int = 1000) -> Iterator[object]:
    """A headless Chromium session, its profile and HOME in `profile_dir`."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        unavailable(f"{', '.join(missing)} not found")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile_dir.mkdir(parents=True, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile_dir / 'profile'}",
        f"--window-size={width},{height}",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    ):
        options.add_argument(argument)
    # An explicit driver path: Selenium Manager (which downloads drivers) never runs. HOME keeps the
    # browser's own files out of the real home directory.
    env = dict(os.environ, HOME=str(profile_dir), SE_OFFLINE="true")
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER), env=env))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile_dir / "profile", ignore_errors=True)


def save_screenshot(driver: object, name: str) -> Path:
    """A full-page PNG under .cache/test-artifacts/ (kept after the run, ignored by git)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    # The window's size includes the browser's own frame: grow it by the page's height beyond the view.
    content, view = driver.execute_script(  # type: ignore[attr-defined]
        "return [document.body.scrollHeight, window.innerHeight]"
    )
    frame = int(driver.get_window_size()["height"]) - int(view)  # type: ignore[attr-defined]
    driver.set_window_size(1280, int(content) + frame + 24)  # type: ignore[attr-defined]
    assert driver.save_screenshot(str(path)), f"could not save {path}"  # type: ignore[attr-defined]
    return path
