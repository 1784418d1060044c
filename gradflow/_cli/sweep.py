"""`gradflow sweep`: many flows in one batched call (a chain family over a grid
of its parameters, init scales, widths and seeds); writes the saved sweep, the
stage table and the figures."""

import itertools
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .common import (
    add_chunk_steps_argument,
    add_subcommand,
    fail,
    flag_names,
    flow_options,
)
from .report import add_output_arguments, check_outputs, write_outputs
from .sgd import add_model_arguments, model_from_args


# Each family's parameters, in the order their grids are crossed, with their
# defaults and whether they are integers.
FAMILIES = {
    "sticky": {"top_mass": (0.5, False), "rho": (0.5, False), "delta": (0.05, False)},
    "zipf": {"exponent": (1.0, False), "rho": (0.0, False)},
    "random": {
        "concentration": (1.0, False),
        "exponent": (1.0, False),
        "chain_seed": (0, True),
    },
}
DEFAULT_D = {"sticky": 6, "zipf": 8, "random": 8}
_ALL_PARAMS = sorted({p for f in FAMILIES.values() for p in f})


def parse_values(name: str, text: str | int, integer: bool = False) -> list:
    """`start:stop:num` (num evenly spaced values, both ends included), a
    comma list `a,b,c`, or one value."""
    text = str(text).strip()
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 3:
                raise ValueError
            start, stop, num = float(parts[0]), float(parts[1]), int(parts[2])
            if num < 1:
                raise ValueError
            values = np.linspace(start, stop, num).tolist()
        else:
            values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(
            f"--{name.replace('_', '-')} must be start:stop:num, a comma list or a "
            f"number, got {text!r}"
        ) from None
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(
            f"--{name.replace('_', '-')} needs finite values, got {text!r}"
        )
    if integer:
        if any(v != round(v) for v in values):
            raise ValueError(f"--{name.replace('_', '-')} takes integers, got {text!r}")
        values = [int(round(v)) for v in values]
    if len(set(values)) != len(values):
        raise ValueError(f"--{name.replace('_', '-')} repeats a value: {text!r}")
    return values


def parse_seeds(text: str) -> list[int]:
    """`N` (seeds 0 .. N-1) or a comma list of seeds."""
    text = str(text).strip()
    if "," in text or ":" in text:
        return parse_values("seeds", text, integer=True)
    try:
        n = int(text)
    except ValueError:
        raise ValueError(
            f"--seeds must be a count or a comma list, got {text!r}"
        ) from None
    if n < 1:
        raise ValueError(f"--seeds must be >= 1, got {n}")
    return list(range(n))


def register(subparsers) -> None:
    p = add_subcommand(
        subparsers,
        "sweep",
        help="many flows in one batched call; phase diagrams",
        description=(
            "Integrate a chain family over a grid of its parameters, init scales, "
            "widths and seeds in one batched (and device-sharded) solve per (d, "
            "width), and write into --out: sweep.npz (gradflow.load_sweep), "
            "stages.csv (one row per member and stage), command.json and the "
            "figures (sweep_summary, phase diagrams; PNG and PDF). Every family "
            "parameter, --init-scale, --width and --d takes start:stop:num or a "
            "comma list, e.g. --delta 0:0.1:11 --seeds 8."
        ),
    )
    p.add_argument(
        "--chain", choices=sorted(FAMILIES), default="sticky", help="chain family"
    )
    p.add_argument(
        "--d",
        default=None,
        help="vocabulary size(s) (default: "
        + ", ".join(f"{k} {v}" for k, v in DEFAULT_D.items())
        + ")",
    )
    for name in _ALL_PARAMS:
        fams = [f for f, ps in FAMILIES.items() if name in ps]
        defaults = ", ".join(f"{f} {FAMILIES[f][name][0]}" for f in fams)
        p.add_argument(
            f"--{name.replace('_', '-')}",
            default=None,
            help=f"{', '.join(fams)}: values (default: {defaults})",
        )
    p.add_argument("--init-scale", default="1e-3", help="initial scale(s)")
    p.add_argument("--width", default="8", help="embedding width(s)")
    p.add_argument("--seeds", default="1", help="N (seeds 0..N-1) or a comma list")
    p.add_argument("--t1", type=float, default=5000.0, help="final time")
    p.add_argument(
        "--num-saves",
        type=int,
        default=798,
        help="save times per member (0, then log-spaced)",
    )
    p.add_argument(
        "--solver",
        default=None,
        help="solver name (see gradflow.SOLVERS) (default: ros34pw2, gradflow's)",
    )
    p.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="relative tolerance (default: the solver's, 1e-05 for ros34pw2)",
    )
    p.add_argument(
        "--atol",
        type=float,
        default=None,
        help="absolute tolerance (default: tied to the initial scale)",
    )
    p.add_argument(
        "--max-steps", type=int, default=4_000_000, help="the most solver steps"
    )
    p.add_argument("--no-stages", action="store_true", help="skip stage detection")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="members of a device stepped together under vmap (default: 1 on a "
        "CPU, all on a GPU or TPU)",
    )
    p.add_argument(
        "--checkpoint",
        metavar="PATH",
        type=Path,
        default=None,
        help="checkpoint file of the sweep: written as it runs; if it exists, the "
        "sweep resumes from it. With several (d, width) groups each has its own, "
        "PATH with _d<d>_w<width> before the suffix (default: none, not "
        "resumable)",
    )
    add_chunk_steps_argument(p, "1000, fewer for large models")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    add_output_arguments(p, animate=False)
    add_model_arguments(p)
    p.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=Path("gradflow_sweep"),
        help="output folder (a subfolder d<d>_w<width> per group when there are "
        "several)",
    )
    p.set_defaults(func=run, flags=flag_names(p))


def _checkpoint_path(args, d: int, width: int, several: bool) -> Path | None:
    if args.checkpoint is None:
        return None
    path = Path(args.checkpoint)
    if not several:
        return path
    return path.with_name(f"{path.stem}_d{d}_w{width}{path.suffix}")


def _grids(args):
    family = FAMILIES[args.chain]
    for name in _ALL_PARAMS:
        if name not in family and getattr(args, name) is not None:
            raise ValueError(
                f"--{name.replace('_', '-')} is not a parameter of {args.chain}"
            )
    ds = parse_values(
        "d", args.d if args.d is not None else DEFAULT_D[args.chain], True
    )
    grid = {
        name: parse_values(name, getattr(args, name), integer)
        if getattr(args, name) is not None
        else [default]
        for name, (default, integer) in family.items()
    }
    scales = parse_values("init_scale", args.init_scale)
    widths = parse_values("width", args.width, integer=True)
    seeds = parse_seeds(args.seeds)
    return ds, grid, scales, widths, seeds


def _chain(family: str, d: int, values: dict):
    import gradflow as gf

    if family == "random":
        return gf.chains.random(
            d,
            seed=values["chain_seed"],
            concentration=values["concentration"],
            exponent=values["exponent"],
        )
    return getattr(gf.chains, family)(d, **values)


def _figures(sw, out: Path, labels: dict, n_scales: int, n_seeds: int) -> list[Path]:
    import gradflow.plot as plot

    paths = plot.save_figure(plot.sweep_summary(sw), out / "sweep_summary")
    if labels:
        x = next(iter(labels))
        for value in ("new_direction.t_start", "focus.t_start"):
            fig = plot.phase_diagram(
                sw, x=x, y="seed" if n_seeds > 1 else None, value=value
            )
            paths += plot.save_figure(fig, out / f"phase_{x}_{value.split('.')[0]}")
    if n_scales > 1:
        fig = plot.phase_diagram(
            sw, x="init_scale", value="condensation.t_end", theory="escape"
        )
        paths += plot.save_figure(fig, out / "phase_init_scale_condensation")
    return paths


def run(args) -> int:
    try:
        ds, grid, scales, widths, seeds = _grids(args)
        model = model_from_args(args)
        check_outputs(args, args.out)
    except (ValueError, ModuleNotFoundError) as e:
        return fail("sweep", e, args.flags)
    import gradflow as gf

    swept = [name for name, vals in grid.items() if len(vals) > 1]
    groups = list(itertools.product(ds, widths))
    status = 0
    for d, width in groups:
        out = args.out if len(groups) == 1 else args.out / f"d{d}_w{width}"
        out.mkdir(parents=True, exist_ok=True)
        combos = list(itertools.product(*grid.values()))
        try:
            chains = [_chain(args.chain, d, dict(zip(grid, c))) for c in combos]
            labels: dict[str, Sequence] = {
                name: [c[list(grid).index(name)] for c in combos] for name in swept
            }
            saveat, solver, options = flow_options(args)
            start = time.perf_counter()
            sw = gf.sweep(
                chains,
                init_scale=scales,
                seeds=seeds,
                t1=args.t1,
                labels=labels,
                saveat=saveat,
                solver=solver,
                run=gf.Run(
                    progress=not args.no_progress,
                    checkpoint=_checkpoint_path(args, d, width, len(groups) > 1),
                    batch_size=args.batch_size,
                    chunk_steps=options.chunk_steps,
                ),
                width=width,
                model=model,
            )
        except (TypeError, ValueError, FileNotFoundError) as e:
            return fail("sweep", e, args.flags)
        wall = time.perf_counter() - start
        files = [sw.save(out / "sweep.npz"), *write_outputs(sw, args, out, "sweep")]
        (out / "command.json").write_text(json.dumps({"argv": sys.argv[1:]}, indent=1))
        table = sw.table()
        table.to_csv(out / "stages.csv", index=False)
        files.append(out / "stages.csv")
        if not args.no_figures:
            files += _figures(sw, out, labels, len(scales), len(seeds))
        n_ok = int(sw.ok.sum())
        print(
            f"{args.chain} d={d} width={width}: {len(sw)} members "
            f"({len(chains)} chains x {len(scales)} init scales x {len(seeds)} seeds) "
            f"on {sw.stats.num_devices} device(s), {n_ok} ok, "
            f"{len(sw) - n_ok} failed, {wall:.1f} s"
        )
        for i in np.flatnonzero(~sw.ok):
            print(f"  member {i} ({sw.members[i]}): {sw[i].message}")
            status = 1
        for f in files:
            print(f"  wrote {f}")
    return status
