"""End to end in a real headless Chromium (Debian's chromium + chromium-driver, driven by Selenium
with an explicit chromedriver path, so nothing is downloaded): a rater enters an id, answers pairs by
clicking, closes the tab, comes back in a new one (progress kept), and votes.sqlite holds exactly
the clicks, with each side resolved to the clip that was shown there."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from launch_support import free_port
from study_support import build_suite

from grpo_bench.study.export import ExportOptions, export_kit
from grpo_bench.study.server import create_app

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[study]')")
if not (CHROMIUM.is_file() and DRIVER.is_file()):
    pytest.skip("needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver); "
                "apt-get install chromium chromium-driver", allow_module_level=True)

from selenium.common.exceptions import (  # noqa: E402  (after the skip above)
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def server(tmp_path):
    import uvicorn

    root = build_suite(tmp_path / "suite", rows={"dance_grpo kl=none": ("dance_grpo", "none", -0.6),
                                                 "sage_grpo kl=dual": ("sage_grpo", "dual", 0.6)})
    kit = root / "kit"
    export_kit(root, kit, ExportOptions(pairs=4, checks=1, repeats=1, seed=5))
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(kit), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    yield kit, f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


@pytest.fixture
def browser(tmp_path):
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--mute-audio",
                f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)


def _answer(driver, choices: dict[str, str]) -> tuple:
    """Click one answer per question and submit; returns what the page showed."""
    pair = driver.find_element(By.NAME, "pair_id").get_attribute("value")
    left = driver.find_element(By.ID, "left").get_attribute("src").rsplit("/", 1)[1].removesuffix(".mp4")
    right = driver.find_element(By.ID, "right").get_attribute("src").rsplit("/", 1)[1].removesuffix(".mp4")
    done = int(driver.find_element(By.ID, "progress").get_attribute("value"))
    for dim, choice in choices.items():
        driver.find_element(By.ID, f"{dim}-{choice}").click()
    driver.find_element(By.ID, "submit").click()
    WebDriverWait(driver, 15, ignored_exceptions=(StaleElementReferenceException, NoSuchElementException)).until(
        lambda d: d.find_elements(By.ID, "done")
        or d.find_element(By.ID, "progress").get_attribute("value") == str(done + 1))
    return pair, left, right, choices


def test_rater_clicks_close_the_tab_come_back_and_the_votes_match(server, browser):
    kit, url = server
    rater = "rater <7> & co"
    browser.get(url + "/")
    browser.find_element(By.ID, "rater").send_keys(rater)
    browser.find_element(By.ID, "begin").click()
    WebDriverWait(browser, 15).until(lambda d: d.find_elements(By.ID, "progress"))
    assert browser.find_element(By.ID, "who").text == rater  # shown as text, not markup
    clicks = [_answer(browser, {"vq": "left", "mq": "right", "ta": "tie"}),
              _answer(browser, {"vq": "right", "mq": "right", "ta": "left"})]
    first_tab = browser.current_window_handle
    browser.switch_to.new_window("tab")
    browser.switch_to.window(first_tab)
    browser.close()  # the rater closes the tab ...
    browser.switch_to.window(browser.window_handles[0])
    browser.get(url + "/")  # ... and comes back: the id is remembered, the progress kept
    assert browser.find_element(By.ID, "rater").get_attribute("value") == rater
    browser.find_element(By.ID, "begin").click()
    WebDriverWait(browser, 15).until(lambda d: d.find_elements(By.ID, "progress"))
    assert browser.find_element(By.ID, "progress").get_attribute("value") == "2"
    assert browser.find_element(By.NAME, "pair_id").get_attribute("value") not in {c[0] for c in clicks}
    clicks.append(_answer(browser, {"vq": "tie", "mq": "left", "ta": "right"}))

    con = sqlite3.connect(kit / "votes.sqlite")
    rows = con.execute("SELECT rater, pair_id, dimension, choice, left_clip, right_clip FROM votes").fetchall()
    con.close()
    expected = {(rater, pair, dim, choice, left, right) for pair, left, right, choices in clicks
                for dim, choice in choices.items()}
    assert set(rows) == expected and len(rows) == 9
    # sides resolved: the clip recorded on the clicked side is the one the rater saw there, and it is a clip of the pair
    pairs = {p["id"]: set(p["clips"]) for p in json.loads((kit / "pairs.json").read_text())["pairs"]}
    key = json.loads((kit / "key.json").read_text())["clips"]
    for _, pair, _, choice, left, right in rows:
        assert {left, right} == pairs[pair] or left == right
        if choice != "tie":
            assert key[left if choice == "left" else right]["row"] in ("dance_grpo kl=none", "sage_grpo kl=dual")
