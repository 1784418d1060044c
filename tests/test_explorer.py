"""The run explorer (`gradflow.plot.report`, `gradflow report`): the page (self-contained, its data), a run folder with its
command line, a sweep's phase diagram, an ensemble folder's SGD runs, SDE
band and crossing table, the one-line errors; and the page in a real browser
(headless Chromium driven by Selenium): no console error, the slider and the
play button move the marker and change the attention panel, a stage row
moves the time to its stage, a sweep's cell opens its member, an ensemble's
band, runs and table are drawn, and the screenshots are not blank.

The browser tests need Debian's `chromium` and `chromium-driver`; without them
they are skipped, saying so, unless `GRADFLOW_REQUIRE_BROWSER` is set (as
`.ci/run` does, which installs them). `GRADFLOW_SCREENSHOTS=DIR` keeps the
screenshots there (to look at them).
"""

import base64
import io
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gradflow import plot


sys.path.insert(0, str(Path(__file__).parent))
import analysis_data as data  # noqa: E402


def page_data(path: Path) -> dict:
    html = path.read_text()
    raw = re.search(r'id="gradflow-data">(.*?)</script>', html, re.S).group(1)
    return json.loads(raw.replace("<\\/", "</"))


@pytest.fixture(scope="module")
def traj():
    return data.markov_run()


@pytest.fixture(scope="module")
def pages(traj, tmp_path_factory):
    """A run folder as `gradflow run` writes it, its page, and a sweep's."""
    folder = tmp_path_factory.mktemp("run")
    traj.save(folder / "trajectory.npz")
    argv = ["run", "--d", "4", "--width", "3", "--out", str(folder)]
    (folder / "command.json").write_text(json.dumps({"argv": argv}))
    run_page = plot.report(folder)
    sweep_page = plot.report(data.sweep16(), folder / "sweep.html")
    return run_page, sweep_page


def test_a_run_folder_gives_its_page(pages, traj):
    run_page, _ = pages
    assert run_page.name == "report.html"
    html = run_page.read_text()
    # self-contained: no script, style or image is fetched
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html
    page = page_data(run_page)
    assert page["kind"] == "run"
    assert page["command"].startswith("gradflow run --d 4 --width 3 --out ")
    run = page["run"]
    assert [s["name"] for s in run["stages"]] == [s.name for s in traj.stages]
    assert len(run["events"]) == len(traj.events)
    assert len(run["frames"]["t"]) == 150
    kinds = [v["type"] for v in run["views"]]
    assert kinds == ["heatmap", "scatter", "bars", "bars"]
    attention = run["views"][0]
    assert attention["shape"] == [150, data.D, data.D]
    assert len(base64.b64decode(attention["data"])) == 150 * data.D**2
    assert run["settings"] == json.loads(json.dumps(traj.settings.to_dict()))
    assert "ensemble" not in run  # a run folder without SGD runs beside it


# An ensemble folder as `gradflow sgd --seeds N --sde` writes it: the deep
# linear network of analysis_data (3-2-3, singular values 3 and 1.5), 3 SGD
# runs and 3 SDE paths through its first two drops (t1 = 8, 60 saves).
ENSEMBLE = ["sgd", "--problem", "deep-linear", "--singular-values", "3", "1.5"]
ENSEMBLE += ["--inputs", "3", "--outputs", "3", "--hidden", "2", "--seeds", "3"]
ENSEMBLE += ["--sde", "--t1", "8", "--lr", "0.05", "--batch-size", "4"]
ENSEMBLE += ["--num-saves", "60", "--no-progress", "--no-figures"]


@pytest.fixture(scope="module")
def ensemble_page(tmp_path_factory):
    from gradflow.cli import main

    folder = tmp_path_factory.mktemp("ensemble")
    assert main([*ENSEMBLE, "--out", str(folder), "--overwrite"]) == 0
    return plot.report(folder)


def test_an_ensemble_folder_shows_its_runs_band_and_table(ensemble_page, capsys):
    """Beside the flow's loss: each SGD run's population loss, the SDE's
    band (10-90 % of its paths, and the median) and the modified flow, at
    the saved times only (not the parameters); the crossing table is the
    one `escapes.md` holds, cell for cell."""
    import gradflow as gf

    capsys.readouterr()
    folder = ensemble_page.parent
    run = page_data(ensemble_page)["run"]
    ens = run["ensemble"]
    sgd = [gf.load_sgd(folder / f"sgd_run_{s}.npz") for s in range(3)]
    sde = gf.load_sweep(folder / "sde.npz")
    assert ens["seeds"] == [0, 1, 2] and len(ens["sgd"]["loss"]) == 3
    keep = sgd[0].ts > 0
    assert ens["sgd"]["t"] == pytest.approx(sgd[0].ts[keep], rel=1e-6)
    for got, r in zip(ens["sgd"]["loss"], sgd, strict=True):
        assert got == pytest.approx(r.loss[keep], rel=1e-4)
    band = ens["sde"]
    assert band["members"] == 3 and ens["band"] == [10, 90]
    # (within the flow's times: the SDE saves where asked, SGD at whole steps)
    within = (sde.ts >= sgd[0].ts[keep][0]) & (sde.ts <= sgd[0].ts[-1])
    assert band["t"] == pytest.approx(sde.ts[within], rel=1e-6)
    lo, mid, hi = np.quantile(sde.loss[:, within], (0.1, 0.5, 0.9), axis=0)
    for name, want in (("lo", lo), ("median", mid), ("hi", hi)):
        assert band[name] == pytest.approx(want, rel=1e-4)
    modified = gf.load(folder / "modified_flow.npz")
    assert ens["modified"]["loss"] == pytest.approx(modified.loss[keep], rel=1e-6)
    lines = (folder / "escapes.md").read_text().strip().splitlines()
    table = ens["table"]
    assert " | ".join(table["columns"]) == lines[0].strip("| ")
    cells = [" | ".join(row[c] for c in table["columns"]) for row in table["rows"]]
    assert cells == [line.strip("| ") for line in lines[2:]] and len(cells) == 4
    # the loss curves only: the page stays small
    assert ensemble_page.stat().st_size < 200_000


def test_a_sweep_page_has_its_phase_diagram(pages):
    _, sweep_page = pages
    page = page_data(sweep_page)
    sweep = page["sweep"]
    assert len(sweep["members"]) == 16
    phase = sweep["phase"]
    assert phase["x_name"] == "delta" and phase["y_name"] == "seed"
    assert sorted(set(phase["x"])) == list(data.DELTAS)
    assert "escape time (first saddle escape)" in phase["values"]
    escape = phase["values"]["escape time (first saddle escape)"]
    first = next(e.t for e in data.sweep16()[5].events if e.name == "saddle_escape")
    assert escape[5] == pytest.approx(first, rel=1e-5)


def test_errors_are_one_line(traj, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        FileNotFoundError, match="source: '.*empty' holds no gradflow result"
    ):
        plot.report(tmp_path / "empty")
    with pytest.raises(
        FileNotFoundError, match="source: no such file or folder: '.*nowhere'"
    ):
        plot.report(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="path is required when source is a result"):
        plot.report(traj)
    with pytest.raises(ValueError, match="path must end in .html, got"):
        plot.report(traj, tmp_path / "x.pdf")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="path: '.*file/x.html' cannot be written"):
        plot.report(traj, tmp_path / "file" / "x.html")
    with pytest.raises(ValueError, match="source must be a run with at least 2 saves"):
        plot.report(data.cut(traj, [0]), tmp_path / "x.html")
    with pytest.raises(TypeError, match="source must be a run folder, a result file"):
        plot.report(3, tmp_path / "x.html")
    assert not list(tmp_path.glob("x.*"))


def test_the_command_line_writes_the_page(traj, tmp_path, capsys):
    from gradflow.cli import main

    traj.save(tmp_path / "trajectory.npz")
    assert main(["report", str(tmp_path), "--frames", "20"]) == 0
    assert f"wrote {tmp_path / 'report.html'}" in capsys.readouterr().out
    assert len(page_data(tmp_path / "report.html")["run"]["frames"]["t"]) == 20
    assert main(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradflow report: error: RUN_DIR: no such file or folder")


# -- in a real browser ---------------------------------------------------------------


def _browser_paths():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return chromium, driver


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = _browser_paths()
    if chromium is None or driver_path is None:
        reason = (
            "the browser tests need Debian's chromium and chromium-driver (apt-get "
            "install chromium chromium-driver); .ci/run installs them"
        )
        if os.environ.get("GRADFLOW_REQUIRE_BROWSER"):
            pytest.fail(reason)
        pytest.skip(reason)
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1280,1500"):  # fmt: skip
        options.add_argument(arg)
    options.binary_location = chromium
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    yield driver
    driver.quit()


def _errors(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _screenshot(driver, name: str, tmp_path: Path) -> np.ndarray:
    from PIL import Image

    png = driver.get_screenshot_as_png()
    folder = Path(os.environ.get("GRADFLOW_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.png").write_bytes(png)
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def _not_blank(image: np.ndarray) -> None:
    colours = np.unique(image.reshape(-1, 3), axis=0)
    assert len(colours) > 50, f"{len(colours)} colours: blank?"
    assert (image < 200).any(axis=2).mean() > 0.01  # some ink


def test_the_run_page_in_a_browser(browser, pages, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    run_page, _ = pages
    start = time.perf_counter()
    browser.get(run_page.as_uri())
    load = time.perf_counter() - start
    assert _errors(browser) == []
    assert browser.execute_script("return document.readyState") == "complete"
    print(f"loaded {run_page.stat().st_size} bytes in {load:.2f} s")
    panels = browser.find_elements(By.CSS_SELECTOR, "#views .panel")
    assert len(panels) == 4
    marker = browser.find_element(By.ID, "marker")
    canvas = browser.find_element(By.CSS_SELECTOR, "canvas.heatmap")
    pixels = lambda: browser.execute_script("return arguments[0].toDataURL()", canvas)  # noqa: E731
    before = (marker.get_attribute("cx"), pixels())
    _not_blank(_screenshot(browser, "run_start", tmp_path))
    slider = browser.find_element(By.ID, "slider")
    slider.click()  # (moves it to the middle, where it is clicked)
    slider.send_keys(Keys.END)
    slider.send_keys(Keys.LEFT * 5)
    assert slider.get_attribute("value") == "144"
    assert canvas.get_attribute("data-frame") == "144"
    after = (marker.get_attribute("cx"), pixels())
    assert after[0] != before[0]  # the marker moved
    assert after[1] != before[1]  # the attention map changed
    assert "t = " in browser.find_element(By.ID, "now").text
    # a stage row moves the time to that stage
    rows = browser.find_elements(By.CSS_SELECTOR, "#stages tbody tr")
    focus = [r for r in rows if r.text.startswith("focus")][0]
    focus.click()
    frame = int(slider.get_attribute("value"))
    stage = next(s for s in data.markov_run().stages if s.name == "focus")
    times = page_data(run_page)["run"]["frames"]["t"]
    assert times[frame] >= stage.t_start > times[frame - 1]
    assert "focus (cycle 1)" in browser.find_element(By.ID, "now").text
    assert "active" in focus.get_attribute("class")
    _not_blank(_screenshot(browser, "run_focus", tmp_path))
    # the play button moves the time on, and pauses
    play = browser.find_element(By.ID, "play")
    play.click()
    time.sleep(0.6)
    play.click()
    assert int(slider.get_attribute("value")) > frame
    assert play.text == "Play"
    assert _errors(browser) == []


def test_the_sweep_page_in_a_browser(browser, pages, tmp_path):
    from selenium.webdriver.common.by import By

    _, sweep_page = pages
    browser.get(sweep_page.as_uri())
    assert _errors(browser) == []
    cells = browser.find_elements(By.CSS_SELECTOR, "#phase-svg rect.cell")
    assert len(cells) == 16
    _not_blank(_screenshot(browser, "sweep_phase", tmp_path))
    cells[6].click()
    assert browser.find_element(By.ID, "run").is_displayed()
    assert not browser.find_element(By.ID, "phase").is_displayed()
    member = int(cells[6].get_attribute("data-member"))
    assert f"member {member}:" in browser.find_element(By.ID, "run-title").text
    assert browser.current_url.endswith(f"#member={member}")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#views .panel")) == 4
    _not_blank(_screenshot(browser, "sweep_member", tmp_path))
    browser.find_element(By.CSS_SELECTOR, "#back a").click()
    assert browser.find_element(By.ID, "phase").is_displayed()
    assert _errors(browser) == []


def _user_run():
    """A user's problem (matrix factorisation with tuple parameters, a
    function among its fields), whose loss falls by many decades."""
    from collections.abc import Callable

    import jax
    import jax.numpy as jnp

    import gradflow as gf

    class Factors(gf.Problem):
        M: jax.Array
        activation: Callable = jnp.tanh

        def loss(self, params):
            U, V = params
            return 0.5 * jnp.sum((self.activation(U) @ V.T - self.M) ** 2)

        def init(self, key, init_scale):
            ku, kv = jax.random.split(key)
            return (init_scale * jax.random.normal(ku, (3, 2)),
                    init_scale * jax.random.normal(kv, (3, 2)))  # fmt: skip

    problem = Factors(jnp.diag(jnp.array([2.0, 0.5, 0.0])))
    return gf.flow(problem, 1e-3, t1=40.0, saveat=data.saves(40.0, 120),
                   run=gf.Run(progress=False))  # fmt: skip


def test_a_user_problem_s_page_speaks_of_its_own_parts(browser, tmp_path):
    """The page of a user's problem is named by the problem's class and its
    parameter leaves (`params[0]`, not `params['[0]']`), its tables carry
    only the columns that apply (no `tokens` of the paper's model), and its
    loss axis stays within the data: a log axis for a loss that falls by
    decades (never below 0)."""
    from selenium.webdriver.common.by import By

    traj = _user_run()
    assert traj.loss[-1] < 1e-6 * traj.loss[0]
    page = plot.report(traj, tmp_path / "user.html")
    browser.get(page.as_uri())
    assert _errors(browser) == []
    assert browser.title.startswith("gradient flow of Factors(")
    titles = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#views h4")]
    assert titles == ["singular values of params[0]", "singular values of params[1]"]
    heads = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#stages th")]
    assert "tokens" not in heads and heads[-1] == "rank"
    ranks = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#stages tr")]
    assert any(r.startswith("rank") and "params[0]: 1" in r for r in ranks)
    events = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#events th")]
    assert "token" not in events
    texts = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#loss-svg text")]
    assert "population loss (log scale)" in texts
    # the loss axis's ticks (right-aligned; the time axis's are centred)
    y_ticks = browser.find_elements(By.CSS_SELECTOR, "#loss-svg text[text-anchor=end]")
    ticks = [float(e.text) for e in y_ticks]
    assert all(re.fullmatch(r"1e-?\d+", e.text) for e in y_ticks)
    assert len(ticks) >= 3 and min(ticks) > 0
    # within the data: the top tick at or below the loss's top, decades down
    assert max(ticks) <= traj.loss.max() and min(ticks) >= traj.loss.min()
    _not_blank(_screenshot(browser, "user_problem", tmp_path))


def test_the_ensemble_page_in_a_browser(browser, ensemble_page, tmp_path):
    """The SDE's band and median, the modified flow, the three SGD runs on
    top of the flow, their legend, and the crossing table, in the loss
    panel's axes."""
    from selenium.webdriver.common.by import By

    browser.get(ensemble_page.as_uri())
    assert _errors(browser) == []
    chart = "#loss-svg "
    for name, count in (("sde-band", 1), ("sde-median", 1), ("flow", 1),
                        ("modified-flow", 1), ("sgd-run", 3)):  # fmt: skip
        paths = browser.find_elements(By.CSS_SELECTOR, f"{chart}path.{name}")
        assert len(paths) == count, name
        assert all(len(p.get_attribute("d")) > 100 for p in paths), name
    # the runs on top: drawn after the band and the flow
    order = browser.execute_script(
        "return [...document.querySelectorAll('#loss-svg path')].map(p => p.getAttribute('class'))"
    )
    assert order.index("sde-band") < order.index("flow") < order.index("sgd-run")
    keys = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".ensemble-key")]
    assert keys == [
        "flow",
        "modified flow (order 1)",
        "SDE: 10 %–90 % of its 3 paths at each time (band), median (line)",
        "SGD: 3 runs (seeds 0, 1, 2)",
    ]
    assert browser.find_element(By.ID, "ensemble").is_displayed()
    heads = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#crossings th")]
    assert heads[:3] == ["level (fraction of the first drop)", "flow", "modified flow"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#crossings tbody tr")
    assert len(rows) == 4 and " ± " in rows[1].text
    # the loss axis holds every curve: no path leaves the plot's frame
    box = browser.execute_script(
        "const r = document.querySelector('#loss-svg rect[fill=none]').getBBox();"
        "return [...document.querySelectorAll('#loss-svg path')].every(p => {"
        " const b = p.getBBox(); return b.y >= r.y - 0.5 && b.y + b.height <= r.y + r.height + 0.5; })"
    )
    assert box
    _not_blank(_screenshot(browser, "ensemble", tmp_path))
    assert _errors(browser) == []
