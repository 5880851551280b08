"""`make lab` in a real browser: JupyterLab started as the Makefile's `lab` target starts
it (its `jupyter lab` line, on a loopback port with a token, serving a copy of
`notebooks/` so the committed notebooks keep no outputs), `explore.ipynb` opened in
headless Chromium from Debian's packages (`chromium`, `chromium-driver`) through
Selenium (no browser download), every cell run from the Run menu; then the figures
must render in the page and no cell may end in an error (the notebook as saved)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from odestudy.measure.environment import ROOT

CHROMIUM = Path("/usr/bin/chromium")
DRIVER = Path("/usr/bin/chromedriver")
pytestmark = pytest.mark.long  # JupyterLab, a kernel and a browser: about half a minute


def lab_command(root: Path, port: int, token: str) -> list[str]:
    """The Makefile's `make lab` line (`jupyter lab --ServerApp.root_dir=notebooks`,
    `--allow-root` as root) with `LAB_ARGS` for a headless server on `port`."""
    jupyter = Path(sys.executable).with_name("jupyter")
    command = [str(jupyter), "lab", f"--ServerApp.root_dir={root}"]
    if os.getuid() == 0:
        command.append("--allow-root")
    return command + [
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
    ]


def test_the_makefile_lab_line_is_the_one_started():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert "$(BIN)/jupyter lab --ServerApp.root_dir=notebooks" in recipe
    assert "--allow-root" in recipe and "$(LAB_ARGS)" in recipe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(port: int, token: str, proc: subprocess.Popen) -> None:
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            url = f"http://127.0.0.1:{port}/api/status?token={token}"
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"JupyterLab did not answer (exit {proc.poll()})")


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on a copy of `notebooks/`: `(url base, token, folder)`."""
    folder = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", folder)
    port, token = _free_port(), "odestudy-browser-test"
    # The kernel imports this checkout's package, whatever the environment installed.
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    env["JUPYTERLAB_WORKSPACES_DIR"] = str(tmp_path / "lab-workspaces")  # none saved
    proc = subprocess.Popen(
        lab_command(folder, port, token),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for_server(port, token, proc)
        yield f"http://127.0.0.1:{port}", token, folder
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _browser(tmp_path: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager downloads nothing
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(str(DRIVER)), options=options)


def _menu(driver, wait, menu: str, *commands: str) -> None:
    """Click `menu` in JupyterLab's menu bar, then its item running one of `commands`."""
    from selenium.webdriver.common.by import By

    # A dialog JupyterLab opened meanwhile (a kernel to select, a kernel restarted on a
    # busy machine) covers the menu bar: take its default answer first.
    for button in driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept"):
        button.click()
    items = driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item")
    next(i for i in items if i.text.strip() == menu).click()
    selector = ", ".join(f'.lm-Menu-item[data-command="{c}"]' for c in commands)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, selector))[0].click()


def _state(driver) -> dict:
    """The notebook panel's code cells: their prompts, rendered images and error outputs."""
    return driver.execute_script(
        """
        const panel = document.querySelector(".jp-NotebookPanel:not(.lm-mod-hidden)");
        if (!panel) return {cells: 0, prompts: [], images: 0, errors: [], dialogs: []};
        const code = [...panel.querySelectorAll(".jp-CodeCell")];
        const prompts = code.map(c => (c.querySelector(".jp-InputPrompt") || {}).textContent);
        const images = [...panel.querySelectorAll(".jp-RenderedImage img")]
            .filter(i => i.complete && i.naturalWidth > 0).length;
        const errors = [...panel.querySelectorAll(".jp-OutputArea-output")]
            .map(o => o.textContent).filter(t => /Traceback|Error:/.test(t));
        const dialogs = [...document.querySelectorAll(".jp-Dialog")].map(d => d.textContent);
        return {cells: code.length, prompts, images, errors, dialogs};
        """
    )


def _kernels(base: str, token: str) -> list[str]:
    """The server's kernels' execution states (JupyterLab's REST API)."""
    with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as answer:
        return [k.get("execution_state", "?") for k in json.load(answer)]


def _until(driver, seconds: float, what: str, done, base: str, token: str) -> None:
    """Poll `done(state)` for `seconds`; on timeout fail with what the page and the server
    showed (prompts, dialogs, kernel states), so a slow or stuck run says which it was."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done(_state(driver)):
            return
        time.sleep(1)
    state = _state(driver)
    pytest.fail(
        f"{what} not within {seconds:.0f} s: prompts {state['prompts']}, dialogs "
        f"{state['dialogs']}, kernels {_kernels(base, token)}"
    )


@pytest.mark.skipif(
    not (CHROMIUM.exists() and DRIVER.exists()),
    reason="chromium and chromium-driver not installed (Debian's packages; .ci/run installs them)",
)
def test_make_lab_runs_the_explore_notebook_in_a_browser(lab, tmp_path):
    pytest.importorskip("selenium")
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    base, token, folder = lab
    driver = _browser(tmp_path)
    try:
        driver.get(f"{base}/lab/tree/explore.ipynb?token={token}")
        wait = WebDriverWait(driver, 90, poll_frequency=0.5)
        wait.until(lambda d: _state(d)["cells"] > 0)
        idle = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, idle))
        WebDriverWait(driver, 120, poll_frequency=0.5).until(
            lambda d: _kernels(base, token) and set(_kernels(base, token)) == {"idle"}
        )
        started = WebDriverWait(driver, 20, poll_frequency=0.5, ignored_exceptions=[])
        for _ in range(6):  # a Run All before the kernel connects runs nothing: again
            _menu(driver, wait, "Run", "runmenu:run-all", "notebook:run-all-cells")
            try:
                started.until(lambda d: any("[ ]" not in p for p in _state(d)["prompts"]))
                break
            except TimeoutException:
                continue
        # About 15 s alone; the long tests run it beside SLURM clusters on 2 cores.
        _until(
            driver,
            480,
            "every cell run",
            lambda s: (
                s["prompts"] and all(p and "*" not in p and "[ ]" not in p for p in s["prompts"])
            ),
            base,
            token,
        )
        state = _state(driver)
        assert not state["errors"], state["errors"]
        assert state["images"] >= 1, "no figure rendered in the page"
        driver.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Notebook").click()
        ActionChains(driver).key_down(Keys.CONTROL).send_keys("s").key_up(Keys.CONTROL).perform()
        saved = folder / "explore.ipynb"
        wait.until(lambda d: any(c.get("outputs") for c in json.loads(saved.read_text())["cells"]))
    finally:
        driver.quit()
    saved = json.loads((folder / "explore.ipynb").read_text())
    outputs = [o for c in saved["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    # The committed notebook is untouched: the server served a copy.
    committed = json.loads((ROOT / "notebooks" / "explore.ipynb").read_text())
    assert not [o for c in committed["cells"] for o in c.get("outputs", [])]
