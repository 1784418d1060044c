"""`gradflow run --problem`: the flow of a problem other than the paper's model
(a deep linear network, a soft committee machine, or a user's own
`gf.Problem` made by a factory function), with the generic stage table,
trajectory file and figures.

`add_problem_arguments` adds the options to `gradflow run`; `run_problem`
runs one when `--problem` is given.
"""

import argparse
import csv
import importlib
import io
import json
import os
import sys
from pathlib import Path

from .._problem.functions import loss_floor
from .common import fail, flow_options
from .report import write_outputs


BUILT_IN = ("deep-linear", "committee")
STAGE_FIELDS = (
    "name",
    "cycle",
    "t_start",
    "t_end",
    "loss_start",
    "loss_end",
    "complete",
    "leaf",
    "rank",
)
EVENT_FIELDS = ("name", "t", "loss", "located")


def add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    """The `--problem` option and the parameters of the built-in problems."""
    g = parser.add_argument_group(
        "problem (instead of the paper's model on a chain)",
        "--problem deep-linear | committee | package.module:factory. The flow "
        "options (--init-scale, --t1, --seed, --solver, --rtol, --atol, --num-saves, "
        "--max-steps), checkpoints and output apply as for a chain.",
    )
    g.add_argument(
        "--problem",
        metavar="NAME",
        default=None,
        help="a built-in problem (deep-linear, committee) or a factory "
        "'package.module:function' returning a gradflow.Problem (the current "
        "folder is importable) (default: none, the paper's model on a chain)",
    )
    g.add_argument(
        "--singular-values",
        metavar="S",
        type=float,
        nargs="+",
        default=[3.0, 1.0, 0.3],
        help="deep-linear: the singular values of sigma_yx (random bases, "
        "sigma_xx = I)",
    )
    g.add_argument(
        "--inputs",
        type=int,
        default=None,
        help="deep-linear: n_in; committee: N (default: singular values + 2 for "
        "deep-linear, 2 * teachers for committee)",
    )
    g.add_argument(
        "--outputs",
        type=int,
        default=None,
        help="deep-linear: n_out (default: singular values + 1)",
    )
    g.add_argument(
        "--hidden",
        metavar="H",
        type=int,
        nargs="+",
        default=None,
        help="deep-linear: hidden widths, one per hidden layer (default: one "
        "layer of n_out units)",
    )
    g.add_argument(
        "--sigma-xx",
        metavar="FILE.npy",
        type=Path,
        default=None,
        help="deep-linear: the input covariance (default: identity)",
    )
    g.add_argument(
        "--sigma-yx",
        metavar="FILE.npy",
        type=Path,
        default=None,
        help="deep-linear: the input-output covariance, instead of --singular-values "
        "(default: none, built from --singular-values)",
    )
    g.add_argument("--students", type=int, default=3, help="committee: students K")
    g.add_argument("--teachers", type=int, default=3, help="committee: teachers M")
    g.add_argument(
        "--teacher-norm",
        type=float,
        default=1.0,
        help="committee: the norm of every (orthogonal) teacher vector",
    )
    g.add_argument(
        "--teacher",
        metavar="FILE.npy",
        type=Path,
        default=None,
        help="committee: the teacher's (M, N) weights, instead of "
        "--teachers, --inputs and --teacher-norm (default: none, built from them)",
    )
    g.add_argument(
        "--problem-seed",
        type=int,
        default=None,
        help="deep-linear: seed of the random singular bases; committee: seed of "
        "a random orthogonal teacher (default: none, deep-linear seed 0 and the "
        "committee's first unit vectors)",
    )
    g.add_argument(
        "--problem-arg",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="factory: a keyword argument (VALUE read as JSON, else a string); "
        "repeat for several",
    )


def _npy(flag: str, path: Path):
    import numpy as np

    if not path.exists():
        raise ValueError(f"{flag}: no such file: '{path}'")
    try:
        return np.load(path, allow_pickle=False)
    except Exception as e:
        raise ValueError(
            f"{flag}: could not read '{path}' as a .npy array: {e}"
        ) from None


def _deep_linear(args):
    import numpy as np

    import gradflow as gf

    if args.sigma_yx is not None:
        syx = _npy("--sigma-yx", args.sigma_yx)
        shape = np.shape(syx) if np.ndim(syx) == 2 else (1, 1)  # else refused below
        sxx = (
            np.eye(shape[1])
            if args.sigma_xx is None
            else _npy("--sigma-xx", args.sigma_xx)
        )
        hidden = tuple(args.hidden or [min(shape)])
        problem = gf.problems.DeepLinear(sxx, syx, hidden)
        return problem, f"{problem} from {args.sigma_yx}"
    s = args.singular_values
    n_in = len(s) + 2 if args.inputs is None else args.inputs
    n_out = len(s) + 1 if args.outputs is None else args.outputs
    for flag, value in (("--inputs", n_in), ("--outputs", n_out)):
        if value < len(s):
            raise ValueError(
                f"{flag} must be >= the number of singular values ({len(s)}), got "
                f"{value}"
            )
    seed = 0 if args.problem_seed is None else args.problem_seed
    hidden = tuple(args.hidden or [n_out])
    problem = gf.problems.DeepLinear.random(
        s, n_in=n_in, n_out=n_out, hidden=hidden, seed=seed
    )
    what = " ".join(f"{x:g}" for x in s)
    return problem, f"{problem}, singular values {what}, seed {seed}"


def _committee(args):
    import gradflow as gf

    if args.teacher is not None:
        V = _npy("--teacher", args.teacher)
        problem = gf.problems.Committee(V, students=args.students)
        return problem, f"{problem}, teacher from {args.teacher}"
    inputs = 2 * args.teachers if args.inputs is None else args.inputs
    if args.teachers < 1 or inputs < args.teachers:
        raise ValueError(
            f"--inputs must be >= --teachers >= 1, got --inputs {inputs} and "
            f"--teachers {args.teachers}"
        )
    problem = gf.problems.Committee.isotropic(
        args.teachers,
        inputs,
        args.students,
        norm=args.teacher_norm,
        seed=args.problem_seed,
    )
    how = "first unit vectors" if args.problem_seed is None else "random"
    return problem, (
        f"{problem}, orthogonal teacher of norm {args.teacher_norm:g} ({how})"
    )


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def _factory(args):
    import gradflow as gf

    path = args.problem
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        raise ValueError(
            f"--problem must be one of {', '.join(BUILT_IN)} or "
            f"'package.module:factory', got {path!r}"
        )
    kwargs = {}
    for item in args.problem_arg:
        key, sep, text = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--problem-arg must be KEY=VALUE, got {item!r}")
        kwargs[key] = _value(text)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"--problem: cannot import {module_name!r} ({e})") from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"--problem: {module_name!r} has no {qualname!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"--problem: {path!r} is not callable")
    problem = obj(**kwargs)
    if not isinstance(problem, gf.Problem):
        raise TypeError(
            f"--problem: {path}(...) returned a {type(problem).__name__}, not a "
            "gradflow.Problem"
        )
    what = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return problem, f"{problem} from {path}({what})"


def build_problem(args):
    """`(problem, description)` of the `--problem` options."""
    if args.problem == "deep-linear":
        return _deep_linear(args)
    if args.problem == "committee":
        return _committee(args)
    return _factory(args)


def _cell(value) -> str:
    if isinstance(value, float):
        return repr(value)
    return "" if value is None else str(value)


def write_csv(path: Path, rows, fields) -> None:
    """Records (with `to_dict`) as CSV with the given columns, written
    atomically."""
    from .._core.files import atomic_write

    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(fields)
    for r in rows:
        d = r.to_dict()
        w.writerow([_cell(d.get(k)) for k in fields])
    atomic_write(path, lambda f: f.write(text.getvalue().encode()))


def run_problem(args) -> int:
    """`gradflow run --problem ...`: solve, print the stage table, write
    `trajectory.npz`, `stages.csv`, `events.csv` and the figures."""
    import gradflow as gf

    interrupted = None
    try:
        problem, description = build_problem(args)
        if args.num_saves < 2:
            raise ValueError(f"--num-saves must be at least 2, got {args.num_saves}")
        saveat, solver, run = flow_options(args)
        traj = gf.flow(
            problem,
            args.init_scale,
            seed=args.seed,
            t1=args.t1,
            saveat=saveat,
            solver=solver,
            run=run,
        )
    except (ValueError, TypeError, FileNotFoundError) as e:
        return fail("run", e, args.flags)
    except gf.Interrupted as e:
        interrupted, traj = e, e.result
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    traj.save(out / "trajectory.npz")
    write_csv(out / "stages.csv", traj.stages, STAGE_FIELDS)
    write_csv(out / "events.csv", traj.events, EVENT_FIELDS)
    (out / "command.json").write_text(json.dumps({"argv": sys.argv[1:]}, indent=1))
    if interrupted is not None:
        print(
            f"gradflow run: interrupted: {traj.message}; the partial trajectory is "
            f"in {out / 'trajectory.npz'}",
            file=sys.stderr,
        )
        return 130
    floor = loss_floor(problem)
    print(f"problem: {description}")
    print(
        f"loss {traj.loss[0]:.6g} -> {traj.loss[-1]:.6g} at t = {traj.t_final:.6g}"
        + ("" if floor is None else f" (floor {floor:.6g})")
    )
    print(
        f"{traj.stats.num_steps} steps, {len(traj.events)} events, "
        f"{traj.stats.wall_time:.1f} s"
    )
    print(gf.stage_table(traj.stages))
    written = ["trajectory.npz", "stages.csv", "events.csv"]
    if not args.no_figures:
        import gradflow.plot as plot

        written += [p.name for p in plot.plot_all(traj, out, pdf=args.pdf)]
    written += [p.name for p in write_outputs(traj, args, out, "trajectory")]
    print(f"wrote {', '.join(written)} to {out}/")
    if not traj.ok:
        print(
            f"gradflow run: error: {traj.message} (the partial trajectory is in "
            f"{out / 'trajectory.npz'})",
            file=sys.stderr,
        )
        return 1
    return 0


__all__ = [
    "BUILT_IN",
    "add_problem_arguments",
    "build_problem",
    "run_problem",
    "write_csv",
]
