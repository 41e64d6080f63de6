"""The approval inbox in a real browser: Debian's headless Chromium, no script on any page.

Sign in with a token, open the inbox, open a draft, see its chart drawn, approve, and land on the
published report. Screenshots of the inbox and the draft go to .cache/test-artifacts/."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from tests.support import REPO
from tests.support.browser import chromium, save_screenshot, unavailable
from tests.support.cli import Cli, unique_id


def arrive(browser, path: str) -> None:
    """Wait until a click's navigation has loaded a page under `path`."""
    WebDriverWait(browser, 30).until(expected_conditions.url_contains(path))
    WebDriverWait(browser, 30).until(lambda b: b.execute_script("return document.readyState") == "complete")


def test_sign_in_open_a_draft_see_its_chart_and_approve(cli: Cli, serve, tmp_path: Path):
    token = cli.ok("approvers", "add", "olivia").stdout.strip()
    cli.ok(
        "profile", "set", "--user", "ann", "--risk-tolerance", "conservative", "--notes", "long-term holder"
    )
    thread = unique_id("browser")
    cli.ok("analyze", "NVDA", "--thread-id", thread, "--user", "ann", "--question", "Add to the position?")
    cli.ok("revise", thread, "--feedback", "Say more about the summer drawdown.")
    cli.ok("analyze", "MSFT", "--thread-id", unique_id("browser-b"), "--user", "bob")
    server = serve(cli)

    with chromium(tmp_path / "chromium") as browser:
        browser.get(server.url + "/inbox")
        assert browser.current_url.endswith("/login")
        browser.find_element(By.ID, "token").send_keys(token)
        browser.find_element(By.ID, "sign-in").click()
        arrive(browser, "/inbox")
        assert browser.find_element(By.ID, "approver").text == "olivia"
        rows = browser.find_elements(By.CSS_SELECTOR, "#inbox tbody tr")
        assert len(rows) == 2 and "Add to the position?" in browser.page_source
        save_screenshot(browser, "inbox.png")

        browser.find_element(By.LINK_TEXT, thread).click()
        arrive(browser, f"/threads/{thread}")
        assert browser.find_element(By.ID, "thread-id").text == thread
        chart = browser.find_element(By.ID, "chart")
        assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", chart) > 0
        assert "long-term holder" in browser.find_element(By.ID, "profile-notes").text
        assert "summer drawdown" in browser.find_element(By.ID, "feedback").text
        assert browser.find_elements(By.CSS_SELECTOR, "#diff .add")
        save_screenshot(browser, "draft.png")

        browser.find_element(By.ID, "note").send_keys("Checked the figures.")
        browser.find_element(By.ID, "approve").click()
        arrive(browser, "/reports/")
        assert browser.find_element(By.ID, "approved-by").text == "olivia"
        assert browser.find_element(By.ID, "approval-note").text == "Checked the figures."
        chart = browser.find_element(By.ID, "chart")
        assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", chart) > 0
        save_screenshot(browser, "report.png")
        console = [entry["message"] for entry in browser.get_log("browser")]
        assert not [m for m in console if "Content Security Policy" in m], console
    [document] = cli.archive_files()
    assert '"approved_by": "olivia"' in document.read_text()


def test_signing_out_in_the_browser_ends_the_session_for_a_copy_of_its_cookie(
    cli: Cli, serve, tmp_path: Path
):
    token = cli.ok("approvers", "add", "pat").stdout.strip()
    thread = unique_id("browser-out")
    cli.ok("analyze", "NVDA", "--thread-id", thread)
    server = serve(cli)

    with chromium(tmp_path / "chromium") as browser:
        browser.get(server.url + "/login")
        browser.find_element(By.ID, "token").send_keys(token)
        browser.find_element(By.ID, "sign-in").click()
        arrive(browser, "/inbox")
        cookie = browser.get_cookie("ma_session")
        assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        copy = httpx.Client(base_url=server.url, cookies={"ma_session": cookie["value"]})
        assert copy.get("/inbox").status_code == 200  # the copy works while the session lives

        browser.find_element(By.CSS_SELECTOR, "form[action='/logout'] button").click()
        arrive(browser, "/login")
        assert (
            browser.get_cookie("ma_session") is None
            or browser.get_cookie("ma_session")["value"] != cookie["value"]
        )
        refused = copy.get("/inbox")
        assert refused.status_code == 303 and refused.headers["location"] == "/login"
        assert copy.get(f"/threads/{thread}").status_code == 303

        # Put the old cookie back into the browser: it opens nothing.
        browser.delete_all_cookies()
        browser.add_cookie({"name": "ma_session", "value": cookie["value"], "path": "/"})
        browser.get(server.url + "/inbox")
        arrive(browser, "/login")
        assert not browser.find_elements(By.ID, "approver")
    assert cli.ok("status", thread, "--json").json()["status"] == "awaiting_approval"


def test_a_missing_browser_fails_in_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="browser tests cannot run: gone"):
        unavailable("gone")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium chromium-driver"):
        unavailable("gone")


def test_ci_installs_the_browser_and_runs_as_ci():
    script = (REPO / ".ci" / "run").read_text()
    assert "apt-get install -y chromium chromium-driver" in script and 'export CI="${CI:-true}"' in script
    assert script.index("chromium-driver") < script.index("make test")
