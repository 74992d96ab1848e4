"""The MLflow UI and report.html as a person sees them: a real search, the real
MLflow server (`autospeed ui`), and headless Chromium driven by Selenium.

Needs Debian's `chromium` and `chromium-driver` (installed by .ci/run); skipped
where they are missing. Screenshots go to tests/artifacts/ (ignored by git).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).parent / "artifacts"
WAIT_SECONDS = 90  # the React app's first render on a loaded CI machine

HAVE_BROWSER = os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)
NEED_BROWSER = "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
if not HAVE_BROWSER and os.environ.get("AUTOSPEED_REQUIRE_BROWSER") == "1":  # .ci/run: fail, never skip
    raise RuntimeError(NEED_BROWSER)
pytestmark = pytest.mark.skipif(not HAVE_BROWSER, reason=NEED_BROWSER)


@pytest.fixture(scope="module")
def searched(finished_search, tmp_path_factory):
    """The test run's finished search (tests/conftest.py: Ray, Optuna, ASHA, the probe, MLflow,
    confirmation) and its report, written here by `autospeed report` (its main() in this process: it never
    trains)."""
    out = tmp_path_factory.mktemp("browser") / "report"
    r = finished_search.main("report", "--name", finished_search.name, "--tracking-uri", finished_search.uri,
                             "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr

    from mlflow.tracking import MlflowClient

    from autospeed.track import runs as res

    client = MlflowClient(finished_search.uri)
    parent = res.find_parent(client, finished_search.name)
    rows = res.trial_rows(client, parent)
    assert any(r.reached for r in rows), "no trial reached the target, so no TTA could be shown"
    return {"tmp": finished_search.folder, "uri": finished_search.uri, "name": finished_search.name,
            "parent": parent, "rows": rows, "report": out / "report.html"}


@pytest.fixture(scope="module")
def ui_url(searched):
    """`autospeed ui` on a free loopback port; its printed URL."""
    from autospeed.show.ui import free_port

    proc = subprocess.Popen([sys.executable, "-m", "autospeed", "ui", "--tracking-uri", searched["uri"],
                             "--port", str(free_port()), "--name", searched["name"]], cwd=searched["tmp"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    url, seen, deadline = None, [], time.monotonic() + 150
    while url is None and time.monotonic() < deadline and proc.poll() is None:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        m = re.search(r"MLflow UI for \S+: (http://127\.0\.0\.1:\d+\S*)", line)
        url = m.group(1) if m else None
    try:
        assert url, "autospeed ui printed no URL:\n" + "".join(seen)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)  # autospeed ui stops its mlflow server on SIGTERM
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--window-size=2200,1100",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    ARTIFACTS.mkdir(exist_ok=True)
    yield driver
    driver.quit()


def _shot(driver, name: str) -> Path:
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    return path


def _row_index(link) -> str:
    return link.find_element("xpath", "./ancestor::div[contains(@class,'ag-row')][1]").get_attribute("row-index")


def test_mlflow_ui_shows_the_trials_nested_under_the_search_with_their_tta(searched, ui_url, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT_SECONDS)
    parent_id = searched["parent"].info.run_id
    assert "/runs?workflowType=machine_learning" in ui_url  # straight to the runs table, not the GenAI overview
    browser.get(ui_url)
    parent_link = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, f"a[href*='/runs/{parent_id}']")))
    assert parent_link.text.startswith("search-")
    child = {r.run_id: r for r in searched["rows"]}
    # Collapsed: the trials are not rows of their own until the search run is expanded.
    assert not [e for e in browser.find_elements(By.CSS_SELECTOR, "a[href*='/runs/']")
                if any(rid in e.get_attribute("href") for rid in child) and e.is_displayed()]
    parent_row = parent_link.find_element(By.XPATH, "./ancestor::div[contains(@class,'ag-cell')][1]")
    parent_row.find_element(By.CSS_SELECTOR, "button[data-component-id*='runnamecellrenderer']").click()
    links = {rid: wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, f"a[href*='/runs/{rid}']")))
             for rid in child}
    names = {links[rid].text for rid in child}
    assert "baseline" in names and sum(n.startswith("trial-") for n in names) == len(child) - 1
    for link in links.values():  # nested: indented under the search run
        assert link.location["x"] > parent_link.location["x"] + 5

    # The tta_seconds column, picked the way a user does: Columns -> search -> tick.
    next(b for b in browser.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Columns").click()
    box = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "input[placeholder='Search columns']")))
    box.send_keys("tta_seconds")

    def tta_node(driver):  # the tree node named exactly tta_seconds (best_tta_seconds matches the search too)
        nodes = [n for n in driver.find_elements(By.CSS_SELECTOR, "[class*='tree-treenode']")
                 if n.text.strip() == "tta_seconds" and n.is_displayed()]
        return nodes[0] if nodes else False

    try:
        wait.until(tta_node).find_element(By.CSS_SELECTOR, "[class*='tree-checkbox']").click()
    except Exception:
        _shot(browser, "mlflow_columns_failure.png")
        (ARTIFACTS / "mlflow_columns_failure.html").write_text(browser.page_source)
        raise
    box.send_keys(Keys.ESCAPE)
    column = "metrics.`tta_seconds`"
    wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, f".ag-header-cell[col-id='{column}']")))

    def tta_cells(driver):  # the new column's cells, once every reached trial's shows its value
        cells = {rid: driver.find_elements(By.CSS_SELECTOR, f".ag-center-cols-container .ag-row[row-index="
                                           f"'{_row_index(links[rid])}'] [col-id='{column}']") for rid in child}
        if any(len(found) != 1 or (child[rid].reached and not found[0].text.strip()) for rid, found in cells.items()):
            return False
        return {rid: found[0] for rid, found in cells.items()}

    cells = WebDriverWait(browser, WAIT_SECONDS, ignored_exceptions=(StaleElementReferenceException,)).until(tta_cells)
    _shot(browser, "mlflow_runs.png")
    shown = 0
    for rid, row in child.items():
        cell = cells[rid]
        if row.reached:
            assert float(cell.text) == pytest.approx(row.tta_seconds, rel=1e-3), (links[rid].text, cell.text)
            shown += 1
        else:
            assert cell.text.strip() in ("", "-"), (links[rid].text, cell.text)
    assert shown >= 1


def test_report_html_shows_its_figures_offline(searched, browser):
    from selenium.webdriver.common.by import By

    browser.get(searched["report"].as_uri())
    imgs = browser.find_elements(By.TAG_NAME, "img")
    assert len(imgs) >= 6  # curves, tta, tradeoff, importance, confirm, probe
    for img in imgs:
        assert img.get_attribute("src").startswith("data:image/png;base64,")
        assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 0
    assert f"autospeed report: {searched['name']}" in browser.title
    assert "Leaderboard" in browser.find_element(By.TAG_NAME, "body").text
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1300, min(height + 150, 12000))
    _shot(browser, "report.png")
    browser.set_window_size(2200, 1100)


@pytest.fixture(scope="module", autouse=True)
def _copy_screenshots_for_review():
    """AUTOSPEED_SCREENSHOTS=DIR copies the screenshots there after the tests (for review, not for CI)."""
    yield
    target = os.environ.get("AUTOSPEED_SCREENSHOTS")
    if target and ARTIFACTS.exists():
        Path(target).mkdir(parents=True, exist_ok=True)
        for png in ARTIFACTS.glob("*.png"):
            shutil.copy2(png, Path(target) / png.name)
