"""What every `gradflow` subcommand shares: the parser class (negative numbers
such as `-1e-3` are values, not flags), the help formatter (every default
shown once), errors that name the flag the user typed instead of the Python
argument behind it, and the options that run, sweep and sgd share, each
defined once here: the flow (`--init-scale`, `--seed`, `--t1`, the saves
and the solver), checkpoints and output (`--out`, `--overwrite`, figures,
progress), with the output folder they write into."""

import argparse
import contextlib
import json
import os
import re
import sys
import warnings
from pathlib import Path

from .._core.files import existing_path as existing_path


# argparse reads "-1e-3" as an unknown flag (its pattern for negative numbers
# has no exponent), so `--init-scale -1e-3` failed with "expected one
# argument" instead of reaching the check that says what is wrong.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$")


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` that takes `-1e-3` and `-inf` as values, takes
    no abbreviation of a flag, and whose subparsers are of the same class."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        # no guessing: `--vocab 3` is not taken for `--vocab-size 3`
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER


class HelpFormatter(argparse.HelpFormatter):
    """Appends `(default: X)` to an option's help unless the help already
    says its default (every option whose default is not obvious says it once:
    a flag's default is off, and an option without a value says in its help
    what happens without it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (
            "default" in text.lower()
            or not action.option_strings
            or action.default is None
            or action.default is False
            or action.default == argparse.SUPPRESS
            or action.nargs == 0
        ):
            return text
        return f"{text} (default: %(default)s)"


def add_subcommand(subparsers, name: str, texts: tuple[str, str], func) -> Parser:
    """`subparsers.add_parser(name, ...)` with gradflow's parser class and
    help formatter; `texts` is its line in `gradflow --help` and its
    description, `func(args) -> exit status` runs it."""
    summary, description = texts
    parser = subparsers.add_parser(
        name, help=summary, description=description, formatter_class=HelpFormatter
    )
    parser.set_defaults(func=func, parser=parser)
    return parser


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each Python argument name a subcommand's options stand for, with the
    flag that sets it: `{"init_scale": "--init-scale", ...}`."""
    out = {}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if longs:
            out[action.dest] = longs[0]
    return out


def speak_flags(message: str, names: dict[str, str]) -> str:
    """`message` with the Python argument names it starts a clause with
    (`init_scale must ...`, `vocab_size = 64 is ...`, `path_or_text: no such
    file`) replaced by the flags in `names` (from [`flag_names`][]); a name of
    one letter (`d`, a word in messages) only at the start of the message."""
    for name, flag in sorted(names.items(), key=lambda kv: -len(kv[0])):
        # where a clause starts: the message, after "; ", "got " or "(";
        # a one-letter name (`d`) only at the start of the message
        start = "^" if len(name) == 1 else r"(?:^|(?<=; )|(?<=got )|(?<=\())"
        message = re.sub(
            rf"{start}{re.escape(name)}(?=( must| =| is | has |: | needs))",
            flag,
            message,
        )
    return message


class UserCodeError(ValueError):
    """An error of the user's own code (a factory of `--problem`): its message
    is reported as it is, its argument names not taken for flags."""


def fail(args: argparse.Namespace, error: BaseException | str) -> int:
    """Prints `gradflow COMMAND: error: MESSAGE` (one line, the Python
    argument names in it spoken as the flags of the command's parser, and
    as the command's own `library_names`, a default its parser may set) on
    stderr and returns 2, the exit status for bad input."""
    message = str(error)
    if not isinstance(error, UserCodeError):
        names = {
            **flag_names(args.parser),
            **LIBRARY_NAMES,
            **getattr(args, "library_names", {}),
        }
        message = speak_flags(message, names)
    message = " ".join(message.split())
    print(f"gradflow {args.command}: error: {message}", file=sys.stderr)
    return 2


class MisplacedFlag(Exception):
    """A flag of another command given to this one (`gradflow theory
    --problem P`): [`gradflow.cli.main`][] prints its message (one line) and
    returns 2, before the parser's own checks."""


class _Misplaced(argparse.Action):
    def __init__(self, option_strings, dest, *, command: str, hint: str, **kwargs):
        kwargs.update(nargs="?", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)
        self.command, self.hint = command, hint

    def __call__(self, parser, namespace, values, option_string=None):
        raise MisplacedFlag(
            f"gradflow {self.command}: error: {option_string}: {self.hint}"
        )


def refuse_flag(parser, flag: str, command: str, hint: str) -> None:
    """`flag` (with or without a value), which belongs to another command,
    refused in one line saying what to do instead (not argparse's usage and
    "unrecognized arguments"). Hidden from `--help`."""
    parser.add_argument(flag, action=_Misplaced, command=command, hint=hint)


def current_folder_on_path() -> None:
    """Puts the folder the command runs from first on the import path, as
    `python` does for a script's folder: a factory `--problem mymod:make`
    and the class a result file names (`mymod:Net`) are found there, by
    every command alike."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)


@contextlib.contextmanager
def one_line_warnings(command: str):
    """Every warning inside (a result file whose problem cannot be imported)
    printed on stderr as one line `gradflow COMMAND: warning: ...`, without
    Python's source line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        message = " ".join(str(w.message).split())
        print(f"gradflow {command}: warning: {message}", file=sys.stderr)


# Python argument names in the library's messages that no option's `dest`
# spells: the text to read is `path_or_text` in `gradflow.text`. (A command
# whose library call names its arguments otherwise sets its own with
# `parser.set_defaults(library_names={...})`: `gradflow report`.)
LIBRARY_NAMES = {"path_or_text": "--text"}

INPUT_ERRORS = (ValueError, TypeError, FileNotFoundError)
"""What bad input raises (a one-line message naming the argument): exit 2."""


# -- the options run, sweep and sgd share ----------------------------------------


def add_flow_arguments(parser, command: str, defaults: dict[str, str]) -> None:
    """The start, the final time, the saves and the solver: `--init-scale`,
    `--seed` (`--seeds` in a sweep), `--t1`, `--num-saves`, `--no-stages`,
    `--solver`, `--rtol`, `--atol`, `--max-steps`, `--dtype`. `defaults`
    says the problem-dependent defaults (`init_scale`, `t1`) as help shows
    them. In `gradflow sgd` the solver options apply to `--flow`."""
    sweep = command == "sweep"
    g = parser.add_argument_group(
        "flow" if command != "sgd" else "start, time and saves (SGD and --flow)"
    )
    g.add_argument(
        "--init-scale",
        type=str if sweep else float,
        default=None,
        help="standard deviation of the i.i.d. normal initialisation"
        + ("; start:stop:num or a comma list" if sweep else "")
        + f" (default: {defaults['init_scale']})",
    )
    if sweep:
        g.add_argument("--seeds", default="1", help="N (seeds 0..N-1) or a comma list")
    else:
        g.add_argument(
            "--seed",
            type=int,
            default=0,
            help="seed of the initialisation"
            + (" and the data" if command == "sgd" else ""),
        )
    g.add_argument(
        "--t1",
        type=float,
        default=None,
        help=("final time lr x steps" if command == "sgd" else "final time")
        + f" (default: {defaults['t1']})",
    )
    g.add_argument(
        "--num-saves",
        type=int,
        default=798,
        help="number of save times (0, then log-spaced)",
    )
    g.add_argument(
        "--no-stages", action="store_true", help="skip the stages and their events"
    )
    g.add_argument(
        "--dtype",
        choices=("float64", "float32"),
        default="float64",
        help="floating-point type"
        + (" of SGD (the flow stays in float64)" if command == "sgd" else ""),
    )
    s = parser.add_argument_group(
        "solver" + (" (of --flow)" if command == "sgd" else "")
    )
    s.add_argument(
        "--solver",
        default=None,
        help="solver name (see gradflow.SOLVERS) (default: ros34pw2, gradflow's)",
    )
    s.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="relative tolerance (default: the solver's, 1e-05 for ros34pw2)",
    )
    s.add_argument(
        "--atol",
        type=float,
        default=None,
        help="absolute tolerance (default: tied to the initial scale)",
    )
    s.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="the most solver steps; the partial trajectory is saved if they run "
        "out (default: gradflow's, 4000000)",
    )


SOLVER_FLAGS = ("solver", "rtol", "atol", "max_steps")


def add_lr_correction_arguments(parser) -> None:
    """`--lr-correction LR [--order K]` (`gradflow run` and `gradflow sweep`):
    the modified flow of gradient descent at step LR instead of the flow
    (`docs/sgd.md`, "Modified flows"); read by `lr_corrected`."""
    g = parser.add_argument_group("finite learning rate (docs/sgd.md, Modified flows)")
    g.add_argument(
        "--lr-correction",
        type=float,
        default=None,
        metavar="LR",
        help="solve the modified flow of gradient descent at step LR instead of "
        "the flow (gradflow.modified_loss); the loss reported is the original "
        "one (default: the flow)",
    )
    g.add_argument(
        "--order",
        type=int,
        default=1,
        help="the modified flow's order with --lr-correction: 0 (the flow), 1, 2 "
        "(default: 1)",
    )


def lr_corrected(args: argparse.Namespace, made: list[tuple]) -> list[tuple]:
    """`--lr-correction LR --order K`: each `(problem, description)` of `made`
    as the modified flow of GD at step LR (`gradflow.modified_loss`), the
    description saying so; `made` itself without `--lr-correction`. Bad values
    raise a one-line `ValueError` before anything is compiled."""
    import math

    import gradflow as gf

    if args.lr_correction is None:
        if args.order != 1:
            raise ValueError(
                f"--order {args.order} is the order of --lr-correction; add --lr-correction LR"
            )
        return made
    lr = args.lr_correction
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"--lr-correction must be finite and > 0, got {lr:g}")
    if args.order not in (0, 1, 2):
        raise ValueError(f"--order must be 0, 1 or 2, got {args.order}")
    what = f"modified flow of GD at lr {lr:g}, order {args.order}"
    return [
        (gf.modified_loss(problem, lr, args.order), f"{description}; {what}")
        for problem, description in made
    ]


def add_checkpoint_arguments(parser, command: str) -> None:
    """`--checkpoint PATH`, `--checkpoint-every SECONDS` and `--chunk-steps
    N` ([`gradflow.Run`][]'s `checkpoint`, `checkpoint_every` and
    `chunk_steps`)."""
    g = parser.add_argument_group("checkpoints")
    what = {
        "run": "the solver state",
        "sweep": "the state of the sweep (with several groups, one file each: "
        "PATH with _<group> before the suffix)",
        "sgd": "the state of the SGD run (not of --flow)",
    }[command]
    g.add_argument(
        "--checkpoint",
        metavar="PATH",
        type=Path,
        default=None,
        help=f"write {what} to PATH as it runs (every --checkpoint-every seconds, "
        "at the end and on Ctrl-C); if PATH exists, resume from it, to the same "
        "result (docs/reliability.md) (default: none, not resumable)",
    )
    g.add_argument(
        "--checkpoint-every",
        metavar="SECONDS",
        type=float,
        default=120.0,
        help="seconds of wall time between checkpoint writes",
    )
    g.add_argument(
        "--chunk-steps",
        metavar="N",
        type=int,
        default=None,
        help="steps per compiled chunk: how often the host looks in (progress, "
        "Ctrl-C, checkpoints); the results do not depend on it (default: "
        + ("2000" if command == "sgd" else "1000, fewer for large models")
        + ")",
    )


def add_output_arguments(parser, command: str, out: str | None, files: str):
    """`--out DIR` (default `out`, or none: nothing written), `--overwrite`,
    `--no-figures`, `--pdf`, `--netcdf` (`--animate [FILE]` too in `gradflow
    run`) and `--no-progress`; `files` says what is written into `--out`.
    Returns the group (a command adds its own output options to it)."""
    g = parser.add_argument_group("output")
    g.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=None if out is None else Path(out),
        help=f"output folder for {files}"
        + (" (default: none, nothing written)" if out is None else ""),
    )
    g.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a --out that is not empty: the files gradflow wrote "
        "there before (listed in its command.json) are replaced, others kept",
    )
    g.add_argument("--no-figures", action="store_true", help="skip the figures")
    g.add_argument("--pdf", action="store_true", help="also write the figures as PDF")
    stem = {"run": "trajectory", "sweep": "sweep", "sgd": "sgd_run"}[command]
    g.add_argument(
        "--netcdf",
        action="store_true",
        help=f"also write the result as {stem}.nc beside {stem}.npz"
        + (" (and trajectory.nc with --flow)" if command == "sgd" else "")
        + ": its to_xarray(), which gradflow.load and xarray read (needs "
        "gradflow[analysis]; docs/analysis.md)",
    )
    if command == "run":
        g.add_argument(
            "--animate",
            metavar="FILE",
            nargs="?",
            const=ANIMATION,
            default=None,
            help="also write an animation of the run into --out: FILE, .mp4 (needs "
            f"gradflow[analysis]) or .gif (default FILE: {ANIMATION})",
        )
        g.add_argument(
            "--frames",
            metavar="N",
            type=int,
            default=150,
            help="frames of the --animate film, paced by stage; the last is held "
            "for a second (default: 150, 11 s at 15 frames a second)",
        )
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    return g


ANIMATION = "animation.mp4"


def check_start_and_time(args: argparse.Namespace) -> None:
    """`--init-scale` (each, in a sweep) and `--t1`, checked as the library
    checks them (the same messages), before the output folder is looked at."""
    from .._core.validate import check_init_scale, check_positive_finite

    scales = args.init_scale if isinstance(args.init_scale, list) else [args.init_scale]
    for scale in scales:
        check_init_scale(scale)
    check_positive_finite("t1", args.t1)


def flow_options(args: argparse.Namespace, *, batch_size: int | None = None):
    """`(saveat, solver, run)` of the shared options: the library's
    [`gradflow.SaveAt`][], [`gradflow.Solver`][] and [`gradflow.Run`][];
    `--init-scale` and `--t1` checked as the library checks them, so that
    bad values are refused before the output folder is looked at."""
    import gradflow as gf

    check_start_and_time(args)
    if args.num_saves < 2:
        raise ValueError(f"--num-saves must be at least 2, got {args.num_saves}")
    ts = gf.default_save_times(args.t1, args.num_saves) if args.t1 > 0 else None
    saveat = gf.SaveAt(ts, stages=not args.no_stages)
    extra = {} if args.max_steps is None else {"max_steps": args.max_steps}
    solver = gf.Solver(
        args.solver, rtol=args.rtol, atol=args.atol, dtype=args.dtype, **extra
    )
    return saveat, solver, run_options(args, batch_size=batch_size)


def run_options(args: argparse.Namespace, checkpoint=None, batch_size=None):
    """The [`gradflow.Run`][] of the shared options (`checkpoint`: another
    path than `--checkpoint`, e.g. a sweep group's)."""
    import gradflow as gf

    return gf.Run(
        progress=not args.no_progress,
        checkpoint=args.checkpoint if checkpoint is None else checkpoint,
        checkpoint_every=args.checkpoint_every,
        chunk_steps=args.chunk_steps,
        **({} if batch_size is None else {"batch_size": batch_size}),
    )


# -- the output folder -------------------------------------------------------------


COMMAND_FILE = "command.json"


def is_file(path) -> bool:
    """Whether `path` (e.g. a `--checkpoint`, whose existence means resuming)
    is given and exists."""
    return path is not None and Path(path).exists()


class Output:
    """The folder a command writes into (`--out`), checked before anything
    runs: a file is refused, and so is a folder that is not empty unless
    `--overwrite` is given or the command resumes from its checkpoint (it
    continues the run that wrote there). Records what it writes, in
    `command.json` with the command line, so that `--overwrite` replaces
    exactly what gradflow wrote there before: those files are deleted when
    the command writes its first file (or its `command.json`), not before,
    so that a command refused later (a bad `--animate`, say) or interrupted
    before its solve leaves them as they were."""

    def __init__(
        self,
        folder: Path | None,
        *,
        overwrite: bool,
        resuming: bool,
        argv: list[str] | None = None,
    ):
        self.folder = folder
        self.written: list[Path] = []
        # the command line to record (`gradflow.cli.main(argv)` gives its own;
        # else the process's)
        self.argv = list(sys.argv[1:] if argv is None else argv)
        self._stale = False  # files of the previous command still to delete
        if folder is None:
            return
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"--out: '{folder}' is a file, not a folder")
        entries = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        if entries and not (overwrite or resuming):
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise ValueError(
                f"--out: '{folder}' is not empty (it holds {shown}); give "
                "--overwrite to replace what gradflow wrote there, or another --out"
            )
        self._stale = overwrite

    def _remove_previous(self) -> None:
        """Deletes the files a previous gradflow command listed in its
        `command.json` (only files inside the folder), and the folders they
        leave empty; once, before the first file is written."""
        if not self._stale:
            return
        self._stale = False
        assert self.folder is not None
        try:
            listed = json.loads((self.folder / COMMAND_FILE).read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return
        root = self.folder.resolve()
        for name in listed if isinstance(listed, list) else []:
            path = (self.folder / str(name)).resolve()
            if root in path.parents and path.is_file():
                path.unlink()
                parent = path.parent
                while parent != root and not any(parent.iterdir()):
                    parent.rmdir()
                    parent = parent.parent

    @property
    def root(self) -> Path:
        """The folder (a command that always writes has one)."""
        assert self.folder is not None
        return self.folder

    def path(self, name: str | Path) -> Path:
        """`folder / name`, its folder made, recorded as written (the first
        call deletes what the previous command wrote, with `--overwrite`)."""
        self._remove_previous()
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        self.record(path)
        return path

    def record(self, *paths: Path) -> None:
        self.written += [Path(p) for p in paths]

    def finish(self) -> None:
        """Writes `command.json`: the command line and the files written
        inside the folder (none without a folder; an `--animate` FILE given
        as a path elsewhere is not listed, so `--overwrite` never deletes
        it)."""
        if self.folder is None:
            return
        from .._core.files import atomic_write

        self._remove_previous()
        root = self.folder.resolve()
        names = sorted(
            {
                str(p.resolve().relative_to(root))
                for p in self.written
                if p.name != COMMAND_FILE and root in p.resolve().parents
            }
        )
        text = json.dumps({"argv": self.argv, "files": names}, indent=1)
        path = self.folder / COMMAND_FILE
        atomic_write(path, lambda f: f.write(text.encode()))
        self.record(path)

    def names(self) -> str:
        return ", ".join(p.name for p in self.written)


# -- what --netcdf and --animate write beside the .npz file -------------------------


def check_analysis_outputs(args: argparse.Namespace, out: Output) -> None:
    """What `--netcdf` and `--animate` will need, checked before anything is
    solved (one-line errors naming the flag): a folder to write in, xarray
    and a netCDF engine, the animation's suffix, a place it can be written
    and its encoder. A missing library is a `ValueError` here: bad input to
    the command, exit status 2. (Nothing is imported without the flags.)"""
    try:
        if getattr(args, "netcdf", False):
            if out.folder is None:
                raise ValueError(
                    "--netcdf needs --out, the folder to write the file in"
                )
            from .._result.labelled import check_netcdf

            try:
                check_netcdf()
            except ModuleNotFoundError as e:
                raise ModuleNotFoundError(f"--netcdf: {e}") from None
        if getattr(args, "animate", None) is not None:
            from ..plot._animate import FORMATS, check_output, encoder

            if args.frames < 2:
                raise ValueError(f"--frames must be >= 2, got {args.frames}")

            path = out.root / args.animate
            encoder(check_output(path, FORMATS, "--animate"), "--animate")
    except ModuleNotFoundError as e:
        raise ValueError(str(e)) from None


def open_output(args: argparse.Namespace, *, resuming: bool) -> Output:
    """The command's `--out` folder, checked before anything is solved (see
    `Output`; `resuming`: the command continues from its checkpoint) with
    what `--netcdf` and `--animate` need (`check_analysis_outputs`); kept
    as `args.output`, where a Ctrl-C reads what was written."""
    out = Output(
        args.out,
        overwrite=args.overwrite,
        resuming=resuming,
        argv=getattr(args, "argv", None),
    )
    args.output = out
    check_analysis_outputs(args, out)
    return out


def write_analysis_outputs(
    result, args: argparse.Namespace, out: Output, stem: str | Path
) -> list[Path]:
    """Writes what `--netcdf` (`out/stem.nc`, the result's `to_xarray()`)
    and, for a run, `--animate` ask for, recorded in `out`; returns the
    paths. A run of fewer than 2 saves has no animation (said on stderr)."""
    from .._result.labelled import write_netcdf

    written = []
    if getattr(args, "netcdf", False) and out.folder is not None:
        written.append(write_netcdf(result, out.path(f"{stem}.nc")))
    if getattr(args, "animate", None) is not None:
        if len(result) < 2:
            print(
                f"gradflow {args.command}: --animate: no animation: the run has "
                f"{len(result)} save, at least 2 are needed",
                file=sys.stderr,
            )
        else:
            from ..plot import animate

            path = animate(result, out.root / args.animate, frames=args.frames)
            out.record(path)
            written.append(path)
    return written


def write_csv(path: Path, rows, fields) -> None:
    """Records (typed records with `to_dict`, or dicts) as CSV with the given
    columns, written atomically."""
    import csv
    import io

    from .._core.files import atomic_write

    def cell(value):
        if isinstance(value, (list, tuple)):
            return " ".join(str(v) for v in value)
        if isinstance(value, float):
            return repr(value)
        return "" if value is None else str(value)

    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(fields)
    for r in rows:
        r = r.to_dict() if hasattr(r, "to_dict") else r
        w.writerow([cell(r.get(k)) for k in fields])
    atomic_write(path, lambda f: f.write(text.getvalue().encode()))


__all__ = [
    "ANIMATION",
    "COMMAND_FILE",
    "INPUT_ERRORS",
    "LIBRARY_NAMES",
    "Output",
    "Parser",
    "SOLVER_FLAGS",
    "UserCodeError",
    "add_checkpoint_arguments",
    "add_flow_arguments",
    "add_output_arguments",
    "add_subcommand",
    "check_analysis_outputs",
    "check_start_and_time",
    "existing_path",
    "fail",
    "is_file",
    "flag_names",
    "flow_options",
    "open_output",
    "run_options",
    "speak_flags",
    "write_analysis_outputs",
    "write_csv",
]
