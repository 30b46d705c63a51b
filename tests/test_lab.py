"""`make lab`: JupyterLab opens the MyST chapters as notebooks with no manual step."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from conftest import ROOT

SETTINGS = ROOT / ".jupyter" / "lab" / "user-settings"


def test_makefile_points_jupyterlab_at_the_repository_settings():
    makefile = (ROOT / "Makefile").read_text()
    assert "JUPYTERLAB_SETTINGS_DIR=$(CURDIR)/.jupyter/lab/user-settings" in makefile


def test_jupyterlab_serves_jupytext_as_the_default_viewer(tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"JUPYTERLAB_SETTINGS_DIR": str(SETTINGS),
                        "JUPYTER_RUNTIME_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=t0ken", "--allow-root",
         f"--ServerApp.root_dir={ROOT}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = (f"http://127.0.0.1:{port}/lab/api/settings/"
           "@jupyterlab/docmanager-extension:plugin?token=t0ken")
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    data = json.load(r)
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise AssertionError("JupyterLab did not answer")
        viewers = data["settings"]["defaultViewers"]
        assert viewers["markdown"] == "Jupytext Notebook"
        assert viewers["myst"] == "Jupytext Notebook"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
