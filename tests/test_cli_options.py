"""The command line's options, read from its parser (nothing runs, nothing is
compiled; well under a second): every `--help` shows every default once; an
option that several subcommands have takes the same form in each; negative
numbers are values; no flag is guessed from an abbreviation."""

import argparse

import numpy as np
import pytest

from gradflow.cli import build_parser


COMMANDS = ("run", "sgd", "sweep", "theory", "report")
# `gradflow sweep` takes lists and ranges (start:stop:num) for these: the same
# name as in `run`, a different form on purpose (one value there, a grid here).
GRID_OPTIONS = {"--init-scale", "--width", "--d", "--top-mass", "--rho", "--delta",
                "--exponent", "--concentration", "--chain-seed"}  # fmt: skip


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    )
    return {name: action.choices[name] for name in COMMANDS}


def _options(parser):
    # (not the hidden flags of another command that a command refuses in one
    # line, such as `theory --problem`: they are not its options)
    return {
        s: a
        for a in parser._actions
        for s in a.option_strings
        if s.startswith("--") and s != "--help" and a.help != argparse.SUPPRESS
    }


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_every_default_once(command):
    parser = _subparsers()[command]
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0 or action.help is None:
            continue  # positionals, flags (default off) and --help
        if action.help == argparse.SUPPRESS:
            continue  # a hidden flag of another command, refused in one line
        text = formatter._expand_help(action)
        assert text.lower().count("default") == 1, (command, action.dest, text)
        assert "(default 30)" not in text and "%(" not in text


def test_shared_options_take_one_form():
    parsers = _subparsers()
    seen: dict[str, tuple[str, tuple]] = {}
    for command, parser in parsers.items():
        for flag, action in _options(parser).items():
            if command == "sweep" and flag in GRID_OPTIONS:
                continue
            # (defaults may differ: sgd's t1 is not run's)
            form = (action.metavar, action.nargs, action.type)
            if flag in seen and flag not in ("--out", "--batch-size"):
                assert form == seen[flag][1], (flag, command, seen[flag][0])
            seen.setdefault(flag, (command, form))
    # the same name for the same thing everywhere, and folders named DIR
    for command in ("run", "sweep"):
        assert "--num-saves" in _options(parsers[command])
    for command in ("run", "sgd", "sweep"):
        options = _options(parsers[command])
        assert options["--checkpoint"].metavar == "PATH"
        assert options["--checkpoint"].nargs is None  # takes a value everywhere
        assert options["--out"].metavar == "DIR"
        assert "--no-progress" in options and "--no-figures" in options
        assert "--netcdf" in options and "--overwrite" in options
    assert "--animate" in _options(parsers["run"])
    assert _options(parsers["theory"])["--out"].metavar == "DIR"
    # (report writes one file: its --out is that file)
    assert _options(parsers["report"])["--out"].metavar == "FILE"
    assert "--saves" not in _options(parsers["run"])


def test_stated_defaults_are_the_library_s():
    import gradflow as gf

    options = _options(_subparsers()["run"])
    assert f"(default: {gf.DEFAULT_SOLVER}," in options["--solver"].help
    rtol, _ = gf.default_tolerances(np.float64, 1e-3)
    assert f"{rtol:g} for {gf.DEFAULT_SOLVER}" in options["--rtol"].help
    assert f"{gf.Solver().max_steps})" in options["--max-steps"].help


def test_negative_numbers_are_values_and_flags_are_not_guessed():
    parser = build_parser()
    args = parser.parse_args(["run", "--init-scale", "-1e-3", "--delta", "-.5"])
    # (a problem's option stays text until its problem converts it)
    assert args.init_scale == -1e-3 and float(args.delta) == -0.5
    args = parser.parse_args(["sgd", "--lr", "-2E+1"])
    assert args.lr == -20.0
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--vocab", "3"])  # not --vocab-size


def test_every_problem_in_every_subcommand():
    """`run`, `sweep` and `sgd` take `--problem` and every built-in problem's
    options (a text's chain in run and sgd, not swept; the context length of
    the paper's model in sgd, of in-context regression everywhere), and the
    options they share are defined once: the same flags, forms and help."""
    parsers = _subparsers()
    own = {
        "markov": ["--chain", "--delta", "--width", "--heads", "--norm"],
        "deep-linear": ["--singular-values", "--hidden", "--sigma-yx"],
        "committee": ["--students", "--teacher-norm", "--teacher"],
        "in-context": ["--eigenvalues", "--key-dim", "--noise", "--context"],
        "factory": ["--problem-arg"],
    }
    shared = ["--problem", "--init-scale", "--t1", "--num-saves", "--no-stages",
              "--solver", "--rtol", "--atol", "--max-steps", "--dtype",
              "--checkpoint", "--checkpoint-every", "--chunk-steps", "--out",
              "--overwrite", "--no-figures", "--pdf", "--no-progress"]  # fmt: skip
    for command in ("run", "sweep", "sgd"):
        options = _options(parsers[command])
        for flags in (*own.values(), shared):
            missing = [f for f in flags if f not in options]
            assert not missing, (command, missing)
        assert ("--text" in options) == (command != "sweep")
    helps = {c: _options(parsers[c]) for c in ("run", "sweep", "sgd")}
    for flag in ("--overwrite", "--pdf", "--no-figures", "--solver", "--rtol"):
        assert helps["run"][flag].help == helps["sweep"][flag].help, flag
        assert helps["run"][flag].help == helps["sgd"][flag].help, flag
    # a flag two problems share is one option whose help names both
    assert "deep-linear: n_in; committee: N" in helps["run"]["--inputs"].help
    problem = helps["run"]["--problem"]
    assert problem.default == "markov"
    for name in ("deep-linear", "committee", "in-context", "package.module:factory"):
        assert name in problem.help
