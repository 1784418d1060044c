"""The explorer's size and load time in headless Chromium, and the animation's
frame count, length and encoding time, for the default run and a d = 64 text
run.

Each run is `gradflow run` in a subprocess (the default scenario, and
`--text builtin --vocab-size 64`) into a temporary folder, then in this
process `gradflow.plot.report` writes its page and `gradflow.plot.animate`
its MP4. The page is loaded `--repeat` times in Debian's headless Chromium
(Selenium, as `tests/test_explorer.py` does); the load time is the
Navigation Timing's `loadEventEnd` (from the start of navigation, the file
read from disk: the page's parsing, its script and the first drawing), the
median over the repeats. The frame count and length are read back from the
MP4 with imageio-ffmpeg.

    PYTHONPATH=. python benchmarks/explorer.py [--repeat 5] [--keep DIR]

Prints one row per run with the 1-minute load before and after
(`gf.LoadGuard`); it writes nothing into `docs/`.
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gradflow as gf
from gradflow import plot


RUNS = {
    "default run": [],
    "text, d = 64": ["--text", "builtin", "--vocab-size", "64"],
}


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1280,1500"):  # fmt: skip
        options.add_argument(arg)
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        sys.exit("needs Debian's chromium and chromium-driver (apt-get install ...)")
    options.binary_location = chromium
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def load_ms(driver, page: Path, repeat: int) -> tuple[float, int]:
    """The median load time in ms and the count of console errors."""
    times, errors = [], 0
    for _ in range(repeat):
        driver.get("about:blank")
        driver.get(page.resolve().as_uri())
        times.append(
            driver.execute_script(
                "const n = performance.getEntriesByType('navigation')[0];"
                "return n.loadEventEnd - n.startTime;"
            )
        )
        errors += sum(e["level"] == "SEVERE" for e in driver.get_log("browser"))
    return statistics.median(times), errors


def frames(path: Path) -> tuple[int, float]:
    """The frame count and the length in seconds of an MP4."""
    import imageio_ffmpeg

    n, seconds = imageio_ffmpeg.count_frames_and_secs(str(path))
    return int(n), float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs here")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="gf-explorer-"))
    guard = gf.LoadGuard()  # prints the load; this script writes no page
    driver = browser()
    rows = []
    try:
        for name, flags in RUNS.items():
            with guard.row() as load:
                n, seconds, t_page, t_movie, ms, errors, page, movie = measure(
                    driver, root, name, flags, args.repeat
                )
            rows.append(
                f"| {name} | {page.stat().st_size:,} | {t_page:.2f} | {ms:.0f} "
                f"| {errors} | {n} | {seconds:.1f} | {movie.stat().st_size:,} "
                f"| {t_movie:.1f} | {guard.label(load)} |"
            )
            print(rows[-1], flush=True)
    finally:
        driver.quit()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(
        "\n| run | HTML, bytes | writing it, s | load in Chromium, ms (median) "
        "| console errors | MP4 frames | MP4 length, s | MP4, bytes | encoding, s "
        "| load |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    print("\n".join(rows))


def measure(driver, root: Path, name: str, flags: list[str], repeat: int):
    """One run: `gradflow run` into a folder, its page and its animation."""
    out = root / name.replace(" ", "").replace(",", "_").replace("=", "")
    cmd = [sys.executable, "-m", "gradflow.cli", "run", "--out", str(out),
           "--no-progress", "--overwrite", *flags]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    t0 = time.perf_counter()
    page = plot.report(out)
    t_page = time.perf_counter() - t0
    ms, errors = load_ms(driver, page, repeat)
    t0 = time.perf_counter()
    movie = plot.animate(gf.load(out / "trajectory.npz"), out / "run.mp4")
    t_movie = time.perf_counter() - t0
    n, seconds = frames(movie)
    return n, seconds, t_page, t_movie, ms, errors, page, movie


if __name__ == "__main__":
    main()
