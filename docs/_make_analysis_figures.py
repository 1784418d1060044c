"""The figures of docs/analysis.md: a frame of the default run's animation in
its first focus, and a screenshot of its explorer (headless Chromium).

    PYTHONPATH=. python docs/_make_analysis_figures.py

Runs `gradflow run --out runs/default` first when that run is missing; needs
the `analysis` extra and Debian's `chromium` and `chromium-driver`. Prints
the page's size and its load time in headless Chromium.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

import gradflow as gf
from gradflow import plot


ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "runs" / "default"
FIGURES = ROOT / "docs" / "figures"


def focus_frames(page: Path) -> tuple[int, int]:
    """The first frame of the page (the animation's frame times) in the
    run's first focus, and the frame at its middle (in log time)."""
    raw = re.search(r'id="gradflow-data">(.*?)</script>', page.read_text(), re.S)
    run = json.loads(raw.group(1).replace("<\\/", "</"))["run"]
    focus = next(s for s in run["stages"] if s["name"] == "focus")
    middle = (focus["t_start"] * focus["t_end"]) ** 0.5
    times = run["frames"]["t"]
    first = next(i for i, t in enumerate(times) if t >= focus["t_start"])
    return first, next(i for i, t in enumerate(times) if t >= middle)


def screenshot(page: Path, out: Path) -> None:
    """The page with the time moved to the first focus (a click on its
    row), then to its middle (the arrow keys on the slider)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                "--window-size=1200,1060", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium") or "chromium"
    driver = webdriver.Chrome(
        service=Service(shutil.which("chromedriver")), options=options
    )
    try:
        start = time.perf_counter()
        driver.get(page.as_uri())
        load = time.perf_counter() - start
        print(f"{page}: {page.stat().st_size / 1e3:.0f} kB, loaded in {load:.2f} s")
        rows = driver.find_elements(By.CSS_SELECTOR, "#stages tbody tr")
        next(r for r in rows if r.text.startswith("focus")).click()
        first, middle = focus_frames(page)
        driver.find_element(By.ID, "slider").send_keys(Keys.RIGHT * (middle - first))
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


def main() -> None:
    if not (RUN / "trajectory.npz").exists():
        subprocess.run(["gradflow", "run", "--out", str(RUN)], check=True)
    traj = gf.load(RUN / "trajectory.npz")
    page = plot.report(RUN)
    FIGURES.mkdir(exist_ok=True)
    screenshot(page, FIGURES / "analysis_explorer.png")
    with tempfile.TemporaryDirectory() as tmp:
        gif = plot.animate(traj, Path(tmp) / "run.gif")
        with Image.open(gif) as film:
            film.seek(focus_frames(page)[1])
            film.convert("RGB").save(FIGURES / "analysis_animation_frame.png")
    print(f"wrote {FIGURES / 'analysis_explorer.png'} and analysis_animation_frame.png")


if __name__ == "__main__":
    sys.exit(main())
