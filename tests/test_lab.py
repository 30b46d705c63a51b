"""`make lab`: JupyterLab opens the MyST chapters as notebooks with no manual step."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT

SETTINGS = ROOT / ".jupyter" / "lab" / "user-settings"
TOKEN = "t0ken"


@pytest.fixture
def lab(tmp_path: Path):
    """A JupyterLab server on loopback with the repository's settings, as
    `make lab` starts it; yields its base URL once its API answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"JUPYTERLAB_SETTINGS_DIR": str(SETTINGS),
                        "JUPYTER_RUNTIME_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", "--allow-root",
         f"--ServerApp.root_dir={ROOT}", "--LabApp.expose_app_in_browser=True"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api?token={TOKEN}", timeout=2).close()
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise AssertionError("JupyterLab did not answer")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_makefile_points_jupyterlab_at_the_repository_settings():
    makefile = (ROOT / "Makefile").read_text()
    assert "JUPYTERLAB_SETTINGS_DIR=$(CURDIR)/.jupyter/lab/user-settings" in makefile


def test_jupyterlab_serves_jupytext_as_the_default_viewer(lab):
    url = f"{lab}/lab/api/settings/@jupyterlab/docmanager-extension:plugin?token={TOKEN}"
    with urllib.request.urlopen(url, timeout=10) as r:
        viewers = json.load(r)["settings"]["defaultViewers"]
    assert viewers["markdown"] == "Jupytext Notebook"
    assert viewers["myst"] == "Jupytext Notebook"


@pytest.mark.browser
def test_a_chapter_runs_in_jupyterlab_with_live_sliders(lab, tmp_path: Path):
    """`make lab` as a reader uses it: the chapter opens as a notebook, runs,
    and moving a live slider redraws the explorer's image."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.keys import Keys

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--disable-background-networking", "--disable-dev-shm-usage",
                 "--window-size=1400,1200", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(flag)
    drv = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)

    def wait_for(script: str, timeout: float):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if drv.execute_script(script):
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for: {script}")

    try:
        drv.get(f"{lab}/lab/tree/chapters/01_softmax_jacobian.md?token={TOKEN}")
        # opened as a notebook (jupytext), not as a Markdown file
        wait_for("return window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell')",
                 120)
        drv.set_script_timeout(600)
        ran = drv.execute_async_script(  # true when every cell ran without error
            "const done = arguments[arguments.length - 1];"
            "const nb = window.jupyterapp.shell.currentWidget;"
            "nb.sessionContext.ready"
            "  .then(() => window.jupyterapp.commands.execute('notebook:run-all-cells'))"
            "  .then(ok => done(ok), err => done('error: ' + err));")
        assert ran is True, ran
        wait_for("return document.querySelectorAll('.jp-Notebook .widget-image').length >= 2",
                 60)
        image = drv.find_elements("css selector", ".jp-Notebook .widget-image")[0]
        drv.execute_script("arguments[0].scrollIntoView({block: 'center'})", image)
        before = image.get_attribute("src")
        handle = drv.find_elements("css selector", ".jp-Notebook .widget-slider .noUi-handle")[0]
        handle.click()
        handle.send_keys(Keys.ARROW_RIGHT)
        end = time.monotonic() + 30
        while image.get_attribute("src") == before and time.monotonic() < end:
            time.sleep(0.3)
        assert image.get_attribute("src") != before, "the live slider did not redraw"
        # no cell shows an error
        assert not drv.find_elements("css selector", ".jp-Notebook .jp-OutputArea-output"
                                                     "[data-mime-type*='error']")
    finally:
        drv.quit()
