"""`gradflow sweep`: many flows of one problem in one batched call (a grid of
its options, init scales and seeds); writes the saved sweep, the stage table
and the figures."""

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import common
from .common import INPUT_ERRORS, Output, fail
from .problems import (
    GENERIC_PHASES,
    add_problem_arguments,
    choose,
    parse_values,
    shown_flow_defaults,
)


FILES = (
    "sweep.npz (gradflow.load_sweep), stages.csv (one row per member and stage), "
    "command.json and the figures, and sweep.nc with --netcdf (a subfolder per "
    "group of equal shapes when there are several)"
)


def parse_seeds(text: str) -> list[int]:
    """`N` (seeds 0 .. N-1) or a comma list of seeds."""
    text = str(text).strip()
    if "," in text or ":" in text:
        return parse_values("--seeds", text, integer=True)
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
    p = common.add_subcommand(
        subparsers,
        "sweep",
        (
            "many flows in one batched call; phase diagrams",
            "Integrate one problem over a grid of its options, init scales and "
            "seeds in one batched (and device-sharded) solve per group of equal "
            f"shapes, and write into --out: {FILES} (sweep_summary and phase "
            "diagrams; PNG, PDF too with --pdf). Every numeric option of a problem "
            "that takes one number, and --init-scale, takes start:stop:num or a "
            "comma list, e.g. --delta 0:0.1:11 --seeds 8, or --problem committee "
            "--teacher-norm 0.5,1,2.",
        ),
        run,
    )
    add_problem_arguments(p, "sweep")
    common.add_flow_arguments(p, "sweep", shown_flow_defaults("sweep"))
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="members of a device stepped together under vmap (default: 1 on a "
        "CPU, all on a GPU or TPU)",
    )
    common.add_lr_correction_arguments(p)
    common.add_checkpoint_arguments(p, "sweep")
    common.add_output_arguments(p, "sweep", "gradflow_sweep", "the files above")


def _signature(problem):
    """What members of one batched solve share: the problem's class, static
    configuration and array shapes."""
    import equinox as eqx
    import jax

    arrays, static = eqx.partition(problem, eqx.is_array)
    return (
        jax.tree.structure(static),
        [np.shape(x) for x in jax.tree.leaves(arrays)],
        static,
    )


def groups(choice, problems) -> list[tuple[str, list[int]]]:
    """The points of the grid in groups of one signature (one batched solve
    each), each named by the swept options that are constant inside it and
    differ between groups (`d4_width8`)."""
    import equinox as eqx

    found: list[tuple[tuple, list[int]]] = []
    for i, p in enumerate(problems):
        sig = _signature(p)
        for key, members in found:
            if (
                key[0] == sig[0]
                and key[1] == sig[1]
                and eqx.tree_equal(key[2], sig[2]) is True
            ):
                members.append(i)
                break
        else:
            found.append((sig, [i]))
    if len(found) == 1:
        return [("", found[0][1])]
    names = []
    for _, members in found:
        parts = []
        for name in choice.swept:
            values = {getattr(choice.points[i], name) for i in members}
            if len(values) == 1:
                value = values.pop()
                shown = f"{value:g}" if isinstance(value, float) else str(value)
                parts.append(f"{name.replace('_', '-')}{shown}")
        names.append("_".join(parts))
    if len(set(names)) < len(names):
        names = [f"group{j}" for j in range(len(found))]
    return [(n, m) for n, (_, m) in zip(names, found, strict=True)]


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _checkpoint(path: Path | None, group: str) -> Path | None:
    if path is None or not group:
        return path
    path = Path(path)
    return path.with_name(f"{path.stem}_{group}{path.suffix}")


def _figures(sw, out: Output, folder: str, phases: dict, pdf: bool) -> None:
    import gradflow.plot as plot

    formats = ("png", "pdf") if pdf else ("png",)
    stem = out.root / folder
    paths = plot.save_figure(plot.sweep_summary(sw), stem / "sweep_summary", formats)
    if sw.labels:
        x = next(iter(sw.labels))
        several_seeds = len({m.seed for m in sw.members}) > 1
        for value in phases["values"]:
            fig = plot.phase_diagram(
                sw, x=x, y="seed" if several_seeds else None, value=value
            )
            name = f"phase_{x}_{value.split('.')[0]}"
            paths += plot.save_figure(fig, stem / name, formats)
    if len(set(sw.settings.init_scale or ())) > 1:
        value, theory = phases["init_scale"]
        fig = plot.phase_diagram(sw, x="init_scale", value=value, theory=theory)
        name = f"phase_init_scale_{value.split('.')[0]}"
        paths += plot.save_figure(fig, stem / name, formats)
    out.record(*paths)


def run(args) -> int:
    import gradflow as gf

    try:
        choice = choose(args, "sweep")
        choice.fill_defaults(args, "sweep")
        scales = parse_values("--init-scale", args.init_scale)
        seeds = parse_seeds(args.seeds)
        args.init_scale = scales
        saveat, solver, _ = common.flow_options(args)
        built = common.lr_corrected(args, choice.build())
        grouped = groups(choice, [p for p, _ in built])
        again = any(common.is_file(_checkpoint(args.checkpoint, g)) for g, _ in grouped)
        out = common.open_output(args, resuming=again)
    except INPUT_ERRORS as e:
        return fail(args, e)
    phases = getattr(choice.plugin, "SWEEP_PHASES", GENERIC_PHASES)
    status = 0
    for group, members in grouped:
        labels: dict[str, Sequence] = {
            name: [getattr(choice.points[i], name) for i in members]
            for name in choice.swept
        }
        labels = {k: v for k, v in labels.items() if len(set(v)) > 1}
        problems = [built[i][0] for i in members]
        interrupted = None
        try:
            start = time.perf_counter()
            sw = gf.sweep(
                problems,
                init_scale=scales,
                seeds=seeds,
                t1=args.t1,
                labels=labels or None,
                saveat=saveat,
                solver=solver,
                run=common.run_options(
                    args, _checkpoint(args.checkpoint, group), args.batch_size
                ),
            )
        except INPUT_ERRORS as e:
            return fail(args, e)
        except gf.Interrupted as e:
            interrupted, sw = e, e.result
        wall = time.perf_counter() - start
        folder = Path(group)
        files = [sw.save(out.path(folder / "sweep.npz"))]
        table = sw.table()
        table.to_csv(out.path(folder / "stages.csv"), index=False)
        files.append(out.root / folder / "stages.csv")
        if interrupted is not None:
            out.finish()
            again = (
                "run the same command to resume from its checkpoint"
                if args.checkpoint is not None
                else "not resumable (no --checkpoint)"
            )
            print(
                f"gradflow sweep: interrupted (Ctrl-C); the partial sweep is in "
                f"{files[0]}; {again}",
                file=sys.stderr,
            )
            return 130
        if not args.no_figures:
            before = len(out.written)
            _figures(sw, out, group, phases, args.pdf)
            files += out.written[before:]
        files += common.write_analysis_outputs(sw, args, out, folder / "sweep")
        n_ok = int(sw.ok.sum())
        print(f"problem: {built[members[0]][1]}")
        for name, values in labels.items():
            shown = ", ".join(
                f"{v:g}" if isinstance(v, float) else str(v)
                for v in dict.fromkeys(values)
            )
            print(f"  swept: {name} = {shown}")
        what = f"group {group}: " if group else ""
        sizes = " x ".join(
            _count(n, word)
            for n, word in (
                (len(problems), "problem"),
                (len(scales), "init scale"),
                (len(seeds), "seed"),
            )
        )
        print(
            f"{what}{_count(len(sw), 'member')} ({sizes}) on "
            f"{sw.stats.num_devices} device(s), {n_ok} ok, {len(sw) - n_ok} "
            f"failed, {wall:.1f} s"
        )
        for i in np.flatnonzero(~sw.ok):
            print(f"  member {i} ({sw.members[i]}): {sw[i].message}")
            status = 1
        for f in files:
            print(f"  wrote {f}")
    out.finish()
    return status
