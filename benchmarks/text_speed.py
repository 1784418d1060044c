"""The word-level text flows of docs/text.md before and after issue 27, side
by side, and a larger vocabulary.

`--compare OLD`: the command of docs/text.md for the 1,024-word flow
(`examples/real_text.py --levels word --sizes 1024 --jacobian-tol 5`),
shortened to `--t1` (past its first new direction), run at the same time by
two processes: one with the checkout `OLD` (the code before), one with this
one. Both see the same machine, so the ratio of their wall times is the
speed-up; the analysis (focus token, the entropies and times of the first
focus and dilution, the next direction's time and tokens) must agree to the
printed digits.

    PYTHONPATH=. python benchmarks/text_speed.py --compare /tmp/old --t1 720 \\
        --out out/text_speed [--doc docs/text.md]

`--single D`: this checkout's flow at `D` words (default settings, or
`--jacobian-tol` as the 1,024-word flow of docs/text.md), with its wall
time, CPU time and peak memory (the process's maximum resident set size).
With `--checkpoint-dir` the flow checkpoints and the same command resumes
it after a kill or a `--budget`: every such segment (its flow wall time,
CPU time, peak memory and load) is appended to `OUT/segments.json` (and its
output to `OUT/log.txt`), and the table sums them.

    PYTHONPATH=. python benchmarks/text_speed.py --single 2048 --t1 2500 \\
        --jacobian-tol 5 --checkpoint-dir out/text_2048/ckpt --budget 4800 \\
        --out out/text_2048 [--doc docs/text.md]

`--doc` writes the table between `<!-- text-speed -->` and `<!-- /text-speed -->`
(compare) or `<!-- text-large -->` and `<!-- /text-large -->` (single).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _git import short_head


ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def start(checkout: Path, out: Path, extra: list[str]) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(checkout), OPENBLAS_NUM_THREADS="1")
    cmd = ["nice", "-n", "0", sys.executable, str(checkout / "examples" / "real_text.py"),
           "--levels", "word", "--out", str(out), "--figure-dir", str(out / "figures"),
           *extra]  # fmt: skip
    mode = "a" if "--checkpoint-dir" in extra else "w"  # a resumed run adds its log
    log = open(out / "log.txt", mode)  # noqa: SIM115  (closed by the child's end)
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=out)


def wait(proc: subprocess.Popen, usage_out: dict | None = None) -> tuple[int, float]:
    """The exit status and the peak resident memory (MB) of a child; its CPU
    seconds (user, system) into `usage_out`."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if usage_out is not None:
        usage_out.update(user_s=usage.ru_utime, system_s=usage.ru_stime)
    return proc.returncode, usage.ru_maxrss / 1024


def result(out: Path) -> dict:
    return json.loads((out / "real_text.json").read_text())["runs"][0]


def summary(r: dict) -> dict:
    """The analysis to the digits docs/text.md prints."""
    nx = r.get("next") or {}
    return {
        "focus token": r.get("focus_token"),
        "first focus (t, H)": _pair(r.get("focus")),
        "dilution (t, H)": _pair(r.get("dilution")),
        "next direction t": None if not nx else f"{nx['t']:.4g}",
        "next direction tokens": None if not nx else ", ".join(nx["tokens"][:3]),
    }


def _pair(x) -> str | None:
    return None if not x else f"{x['t']:.4g}, {x['H']:.4f}"


def compare(args) -> None:
    out = Path(args.out)
    extra = ["--sizes", "1024", "--t1", str(args.t1), "--jacobian-tol", "5"]
    print(f"start: load {load()}", flush=True)
    t0 = time.perf_counter()
    procs = {
        "before": start(Path(args.compare).resolve(), out / "before", extra),
        "after": start(ROOT, out / "after", extra),
    }
    rss = {}
    for name, p in procs.items():
        code, rss[name] = wait(p)
        if code != 0:
            raise SystemExit(f"{name} failed; see {out / name / 'log.txt'}")
        print(f"{name} done after {time.perf_counter() - t0:.0f} s; load {load()}")
    rows = {name: result(out / name) for name in procs}
    (out / "text_speed.json").write_text(
        json.dumps(
            {"rows": rows, "rss_mb": rss, "load": load()}, indent=1, default=str
        )  # fmt: skip
    )
    report(out, args.doc)


def report(out: Path, doc: str | None) -> None:
    """The table of a comparison from its saved results (`--report OUT`)."""
    saved = json.loads((out / "text_speed.json").read_text())
    rows, rss = saved["rows"], saved["rss_mb"]
    sums = {name: summary(r) for name, r in rows.items()}
    same = sums["before"] == sums["after"]
    speed = rows["before"]["flow_wall_s"] / rows["after"]["flow_wall_s"]
    lines = [
        "| code | flow wall s | steps (rejected) | gradient evaluations | HVPs | peak "
        "RSS, MB | " + " | ".join(sums["before"]) + " |",
        "| --- | --- | --- | --- | --- | --- | " + " --- |" * len(sums["before"]),
    ]
    for name, r in rows.items():
        st = r["flow_stats"]
        lines.append(
            f"| {name} | {r['flow_wall_s']:.0f} | {st['num_steps']} "
            f"({st['num_rejected_steps']}) | {st['num_grad_evals']} | "
            f"{st['num_hvps']} | {rss[name]:.0f} | "
            + " | ".join(str(v) for v in sums[name].values())
            + " |"
        )
    lines += [
        "",
        f"Speed-up (before / after wall time of the flow): **{speed:.2f}x**; the "
        f"analysis is {'the same' if same else 'NOT the same'} to the printed "
        f"digits. Load average at the end: {saved.get('load', 'not recorded')}.",
    ]
    table = "\n".join(lines)
    print("\n" + table)
    if doc:
        import gradflow as gf  # only here: this process measures others

        gf.replace_between_markers(
            doc, "<!-- text-speed -->", "<!-- /text-speed -->", table
        )


def single(args) -> None:
    out = Path(args.out)
    extra = ["--sizes", str(args.single), "--t1", str(args.t1)]
    for flag, value in (
        ("--budget", args.budget),
        ("--jacobian-tol", args.jacobian_tol),
        ("--checkpoint-dir", args.checkpoint_dir),
    ):
        if value is not None:
            extra += [flag, str(value)]
    first, commit = load(), short_head(ROOT)  # the code the child imports
    print(f"start: load {first}, commit {commit}", flush=True)
    t0 = time.perf_counter()
    p = start(ROOT, out, extra)
    usage: dict = {}
    code, rss = wait(p, usage)
    if code != 0:
        raise SystemExit(f"failed; see {out / 'log.txt'}")
    r = result(out)
    segment = {
        "t_reached": r["t_reached"],
        "flow_wall_s": r["flow_wall_s"],
        "process_wall_s": time.perf_counter() - t0,
        "cpu_user_s": usage["user_s"],
        "cpu_system_s": usage["system_s"],
        "peak_rss_mb": rss,
        "load_start": first,
        "load_end": load(),
        "commit": commit,
    }
    path = out / "segments.json"
    segments = []  # without a checkpoint this run is the whole flow
    if args.checkpoint_dir is not None and path.exists():
        segments = json.loads(path.read_text())
    segments.append(segment)
    path.write_text(json.dumps(segments, indent=1))
    st = r["flow_stats"]
    s = summary(r)
    wall = sum(g["flow_wall_s"] for g in segments)
    cpu = sum(g["cpu_user_s"] + g["cpu_system_s"] for g in segments)
    peak = max(g["peak_rss_mb"] for g in segments)
    loads = ", ".join(f"{g['load_start']} -> {g['load_end']}" for g in segments)
    lines = [
        "| d | t reached | segments | flow wall s | CPU s | steps (rejected) | "
        "gradient evaluations | HVPs | peak RSS, MB | " + " | ".join(s) + " |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | " + " --- |" * len(s),
        f"| {args.single} | {r['t_reached']:.4g} of {args.t1:g} | {len(segments)} | "
        f"{wall:.0f} | {cpu:.0f} | {st['num_steps']} ({st['num_rejected_steps']}) | "
        f"{st['num_grad_evals']} | {st['num_hvps']} | {peak:.0f} | "
        + " | ".join(str(v) for v in s.values())
        + " |",
        "",
        f"Load (1, 5, 15 min) at the start -> end of each segment: {loads}.",
    ]
    table = "\n".join(lines)
    print("\n" + table)
    if args.doc:
        import gradflow as gf  # only here: this process measures others

        gf.replace_between_markers(
            args.doc, "<!-- text-large -->", "<!-- /text-large -->", table
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", default=None, metavar="OLD")
    parser.add_argument("--single", type=int, default=None, metavar="D")
    parser.add_argument("--report", default=None, metavar="OUT",
                        help="the table of an earlier --compare into OUT")  # fmt: skip
    parser.add_argument("--t1", type=float, default=None)
    parser.add_argument("--budget", type=float, default=None)
    parser.add_argument("--jacobian-tol", type=float, default=None)
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--doc", default=None)
    args = parser.parse_args()
    if args.report:
        report(Path(args.report), args.doc)
        return
    if args.t1 is None or args.out is None:
        parser.error("--t1 and --out are required")
    if args.compare:
        compare(args)
    elif args.single:
        single(args)
    else:
        parser.error("give --compare OLD or --single D")


if __name__ == "__main__":
    main()
