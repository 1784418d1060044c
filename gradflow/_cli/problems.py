"""`--problem NAME`: the problems of every subcommand (run, sweep, sgd).

A built-in problem's options live beside the problem, in its plugin (a
module re-exported by `registry.py`: `gradflow/markov/cli.py`,
`gradflow/problems/_deep_linear/cli.py`, ...). A plugin holds

- `NAME` (what `--problem` takes) and `TITLE` (one line of help);
- `OPTIONS`: `{flag: spec}`, each spec the keywords of argparse's
  `add_argument` that apply (`type`: `int`, `float`, `bool` for a switch,
  `Path`, or a function of the text that raises a one-line `ValueError`;
  `nargs`, `metavar`, `choices`, `default`, `help`) and gradflow's own:
  `shown` (the default as help shows it, when it is not the value itself),
  `commands` (the subcommands it applies to; default all), `grid` (in
  `gradflow sweep` it takes `start:stop:num` or a comma list), `min`,
  `max` (inclusive bounds) and `above` (an exclusive lower bound);
- `FLOW_DEFAULTS` and `SGD_DEFAULTS`: its defaults of the shared options
  (`init_scale`, `t1`; `lr`, `batch_size`);
- `build(options) -> (problem, description)`: `options` holds each of its
  options (given or default), `given` (the set of those given), `command`
  and `progress`;
- optionally `levels_text(problem)` (the reference levels printed after
  the loss), `STAGE_FIELDS` and `EVENT_FIELDS` (the CSV columns) and
  `SWEEP_PHASES` (the sweep's phase diagrams).

Here the options of every plugin are added to a subcommand's parser once (a
flag two problems share, such as `--inputs`, once, its help naming both), with
no argparse default, so that an option given for another problem is an error
naming it; values are converted and checked here (one-line errors naming
the flag), then the plugin builds the problem. `--problem
package.module:factory` calls a user's factory with the `--problem-arg
KEY=VALUE` keywords, each value parsed per the factory's parameter (its
annotation, else its default's type).
"""

import argparse
import dataclasses
import importlib
import inspect
import itertools
import json
import math
import types
import typing
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import registry
from .common import UserCodeError, current_folder_on_path


ALL_COMMANDS = ("run", "sweep", "sgd")
FACTORY = "package.module:factory"
_GENERIC_FLOW = {"init_scale": 1e-3, "t1": 5000.0}
_GENERIC_SGD = {"init_scale": 1e-3, "t1": 300.0, "lr": 0.2, "batch_size": 512}
GENERIC_STAGE_FIELDS = tuple(
    "name cycle t_start t_end loss_start loss_end complete leaf rank".split()
)
GENERIC_EVENT_FIELDS = ("name", "t", "loss", "located")
GENERIC_PHASES = {"values": ("plateau.t_end",), "init_scale": ("plateau.t_end", None)}


def plugins() -> dict[str, types.ModuleType]:
    """The built-in problems' plugins by name, the default first."""
    return {m.NAME: m for m in (getattr(registry, n) for n in registry.__all__)}


DEFAULT = next(iter(plugins()))


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def _applies(spec: dict, command: str) -> bool:
    return command in spec.get("commands", ALL_COMMANDS)


def _table(command: str) -> dict[str, list[tuple[str, dict]]]:
    """Each problem flag of `command` with the `(problem, spec)` of every
    problem that has it."""
    table: dict[str, list[tuple[str, dict]]] = {}
    for name, plugin in plugins().items():
        for flag, spec in plugin.OPTIONS.items():
            if _applies(spec, command):
                table.setdefault(flag, []).append((name, spec))
    return table


def _shown(spec: dict) -> str:
    if "shown" in spec:
        return spec["shown"]
    value = spec.get("default")
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _help(owners: list[tuple[str, dict]]) -> str:
    switch = owners[0][1].get("type") is bool
    if len(owners) == 1:
        name, spec = owners[0]
        text = f"{name}: {spec['help']}"
        return text if switch else f"{text} (default: {_shown(spec)})"
    text = "; ".join(f"{name}: {spec['help']}" for name, spec in owners)
    if switch:
        return text
    return f"{text} (default: {', '.join(f'{n} {_shown(s)}' for n, s in owners)})"


def add_problem_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """`--problem`, `--problem-arg` and every built-in problem's options that
    apply to `command`, each in its problem's group."""
    names = ", ".join(plugins())
    g = parser.add_argument_group(
        "problem",
        f"--problem {' | '.join(plugins())} | {FACTORY}. An option of another "
        "problem than the one chosen is an error.",
    )
    g.add_argument(
        "--problem",
        metavar="NAME",
        default=DEFAULT,
        help=f"a built-in problem ({names}) or a factory '{FACTORY}' returning a "
        "gradflow.Problem (the current folder is importable)",
    )
    g.add_argument(
        "--problem-arg",
        metavar="KEY=VALUE",
        action="append",
        default=argparse.SUPPRESS,
        help="a keyword argument of a factory: VALUE read per the parameter's "
        "annotation (or the type of the value it takes when omitted), else as "
        "JSON, else as a string; repeat for several (default: none)",
    )
    groups = {
        name: parser.add_argument_group(f"--problem {name}: {plugin.TITLE}")
        for name, plugin in plugins().items()
    }
    for flag, owners in _table(command).items():
        spec = owners[0][1]
        # a flag two problems share is one option: one form
        forms = {(s.get("nargs"), s.get("type") is bool) for _, s in owners}
        assert len(forms) == 1, f"{flag} takes different forms in {owners}"
        kwargs: dict = {"dest": _dest(flag), "default": argparse.SUPPRESS}
        if spec.get("type") is bool:
            kwargs["action"] = "store_true"
        else:
            kwargs["metavar"] = spec.get("metavar") or (
                "{" + ",".join(spec["choices"]) + "}"
                if "choices" in spec
                else _dest(flag).upper()
            )
            if spec.get("nargs") and not (command == "sweep" and spec.get("grid")):
                kwargs["nargs"] = spec["nargs"]
        groups[owners[0][0]].add_argument(flag, help=_help(owners), **kwargs)


def shown_defaults(key: str, command: str) -> str:
    """The defaults of a shared option (`init_scale`, `t1`, `lr`,
    `batch_size`) per problem, as help shows them."""
    table = "SGD_DEFAULTS" if command == "sgd" else "FLOW_DEFAULTS"
    generic = _GENERIC_SGD if command == "sgd" else _GENERIC_FLOW
    parts = [f"{n} {getattr(p, table)[key]:g}" for n, p in plugins().items()]
    return f"the problem's: {', '.join(parts)}, a factory {generic[key]:g}"


def shown_flow_defaults(command: str) -> dict[str, str]:
    """`{"init_scale": ..., "t1": ...}`: their defaults per problem, as help
    shows them."""
    return {key: shown_defaults(key, command) for key in ("init_scale", "t1")}


# -- values -------------------------------------------------------------------


def _bounds(spec: dict) -> str:
    low, high, above = spec.get("min"), spec.get("max"), spec.get("above")
    if low is not None and high is not None:
        return f" {low} or {high}" if high - low == 1 else f" between {low} and {high}"
    if low is not None:
        return f" >= {low:g}" if isinstance(low, float) else f" >= {low}"
    if above is not None:
        return f" > {above:g}"
    return ""


def _number(flag: str, spec: dict, text: str):
    kind = spec["type"]
    bounds = _bounds(spec)
    if kind is int:
        wanted = f"an integer{bounds}"
    else:
        wanted = f"finite and{bounds}" if bounds else "a finite number"
    try:
        value = kind(text)
    except (TypeError, ValueError):
        value = None
    low, high, above = spec.get("min"), spec.get("max"), spec.get("above")
    if (
        value is None
        or not math.isfinite(value)
        or (low is not None and value < low)
        or (high is not None and value > high)
        or (above is not None and not value > above)
    ):
        raise ValueError(f"{flag} must be {wanted}, got {text!r}")
    return value


def convert(flag: str, spec: dict, text):
    """One value of a problem option, from its text: converted and checked
    (a one-line `ValueError` naming `flag`)."""
    kind = spec.get("type", str)
    if kind is bool:
        return bool(text)
    if isinstance(text, (list, tuple)):
        return tuple(convert(flag, spec, t) for t in text)
    text = str(text)
    if "choices" in spec and text not in spec["choices"]:
        raise ValueError(
            f"{flag} must be one of {', '.join(spec['choices'])}, got {text!r}"
        )
    if kind in (int, float):
        return _number(flag, spec, text)
    if kind is Path:
        return Path(text)
    if kind is str:
        return text
    return kind(text)


def parse_values(flag: str, text, integer: bool = False) -> list:
    """A grid: `start:stop:num` (num evenly spaced values, both ends
    included), a comma list `a,b,c`, or one value."""
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
            f"{flag} must be start:stop:num, a comma list or a number, got {text!r}"
        ) from None
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"{flag} needs finite values, got {text!r}")
    if integer:
        if any(v != round(v) for v in values):
            raise ValueError(f"{flag} takes integers, got {text!r}")
        values = [int(round(v)) for v in values]
    if len(set(values)) != len(values):
        raise ValueError(f"{flag} repeats a value: {text!r}")
    return values


def _grid_values(flag: str, spec: dict, text) -> list:
    kind = spec.get("type")
    values = parse_values(flag, text, integer=kind is int)
    return [convert(flag, spec, repr(v) if kind is float else str(v)) for v in values]


# -- the chosen problem -----------------------------------------------------------


@dataclasses.dataclass
class Choice:
    """The problem of a command line: its plugin, and one set of options per
    point of its grid (one point but in `gradflow sweep`), with the swept
    options' values per point."""

    name: str
    plugin: typing.Any
    points: list[argparse.Namespace]
    swept: list[str]

    def build(self) -> list[tuple[typing.Any, str]]:
        """`(problem, description)` of every point."""
        return [self.plugin.build(options) for options in self.points]

    def defaults(self, command: str) -> dict:
        """The plugin's defaults of the shared options for `command`."""
        if command == "sgd":
            return getattr(self.plugin, "SGD_DEFAULTS", _GENERIC_SGD)
        return getattr(self.plugin, "FLOW_DEFAULTS", _GENERIC_FLOW)

    def fill_defaults(self, args: argparse.Namespace, command: str) -> None:
        """The shared options left unset take the problem's defaults."""
        for key, value in self.defaults(command).items():
            if getattr(args, key, None) is None:
                setattr(args, key, value)


def choose(args: argparse.Namespace, command: str) -> Choice:
    """The problem `--problem` names, with its options (each given value
    converted and checked, the others their defaults); a one-line
    `ValueError` for an unknown problem, an option of another problem, or a
    bad value. In `gradflow sweep` each option that takes a grid may hold
    several values: one point per combination."""
    name = args.problem
    known = plugins()
    table = _table(command)
    if name in known:
        plugin = known[name]
    elif ":" in str(name):
        plugin = Factory(str(name))
    else:
        raise ValueError(
            f"--problem must be one of {', '.join(known)} or '{FACTORY}', got {name!r}"
        )
    own = {
        flag: spec
        for flag, spec in getattr(plugin, "OPTIONS", {}).items()
        if _applies(spec, command)
    }
    for flag, owners in table.items():
        if flag in own or not hasattr(args, _dest(flag)):
            continue
        where = ""
        if flag in getattr(plugin, "OPTIONS", {}):
            where = f" in gradflow {command}"
        which = ", ".join(n for n, _ in owners)
        raise ValueError(
            f"{flag} does not apply to --problem {name}{where} (it is an option of "
            f"{which})"
        )
    if hasattr(args, "problem_arg") and not isinstance(plugin, Factory):
        raise ValueError(
            f"--problem-arg does not apply to --problem {name} (it passes keywords "
            f"to a factory, --problem {FACTORY})"
        )
    given = frozenset(_dest(f) for f in own if hasattr(args, _dest(f)))
    single: dict = {}
    grids: dict[str, list] = {}
    for flag, spec in own.items():
        dest = _dest(flag)
        if dest not in given:
            single[dest] = False if spec.get("type") is bool else spec.get("default")
        elif command == "sweep" and spec.get("grid"):
            values = _grid_values(flag, spec, getattr(args, dest))
            if len(values) == 1:
                single[dest] = values[0]
            else:
                grids[dest] = values
        else:
            single[dest] = convert(flag, spec, getattr(args, dest))
    common = dict(
        given=given,
        command=command,
        progress=not getattr(args, "no_progress", False),
        problem=name,
        problem_arg=list(getattr(args, "problem_arg", [])),
    )
    points = [
        argparse.Namespace(**single, **dict(zip(grids, combo)), **common)
        for combo in itertools.product(*grids.values())
    ]
    return Choice(str(name), plugin, points, list(grids))


def levels_text(plugin, problem) -> str:
    """The reference levels of a problem as its plugin prints them, else its
    floor (empty when it has none)."""
    import gradflow as gf

    own = getattr(plugin, "levels_text", None)
    if own is not None:
        return own(problem)
    floor = gf.loss_levels(problem).get("floor")
    return "" if floor is None else f"floor {floor[1]:.6g}"


# -- a user's factory ---------------------------------------------------------------


class Factory:
    """`--problem package.module:factory`: a user's function returning a
    `gradflow.Problem`, called with the `--problem-arg` keywords."""

    OPTIONS: dict = {}
    FLOW_DEFAULTS = _GENERIC_FLOW
    SGD_DEFAULTS = _GENERIC_SGD

    def __init__(self, path: str):
        self.NAME = path

    def function(self):
        path = self.NAME
        module_name, _, qualname = path.partition(":")
        if not module_name or not qualname:
            raise ValueError(
                f"--problem must be one of {', '.join(plugins())} or '{FACTORY}', "
                f"got {path!r}"
            )
        current_folder_on_path()
        try:
            obj = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(
                f"--problem: cannot import {module_name!r} ({e})"
            ) from None
        except Exception as e:  # noqa: BLE001  (the user's module failed)
            raise UserCodeError(
                f"--problem: importing {module_name!r} raised {type(e).__name__}: {e}"
            ) from None
        for part in qualname.split("."):
            if not hasattr(obj, part):
                raise ValueError(f"--problem: {module_name!r} has no {qualname!r}")
            obj = getattr(obj, part)
        if not callable(obj):
            raise ValueError(f"--problem: {path!r} is not callable")
        return obj

    def build(self, options):
        import gradflow as gf

        fn = self.function()
        kwargs = factory_kwargs(self.NAME, fn, options.problem_arg)
        try:
            problem = fn(**kwargs)
        except (TypeError, ValueError) as e:
            message = " ".join(str(e).split())
            raise UserCodeError(
                f"--problem: {self.NAME}(...) raised {type(e).__name__}: {message}"
            ) from None
        if not isinstance(problem, gf.Problem):
            raise TypeError(
                f"--problem: {self.NAME}(...) returned a {type(problem).__name__}, "
                "not a gradflow.Problem"
            )
        from .._problem.functions import describe

        what = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        # by its class and fields (arrays by shape), as pages and results
        return problem, f"{describe(problem)} from {self.NAME}({what})"


def factory_kwargs(path: str, fn, items: Sequence[str]) -> dict:
    """The keyword arguments of `--problem-arg KEY=VALUE ...` for the factory
    `fn`: each key one of its parameters, each value parsed per the
    parameter's annotation, else its default's type, else JSON, else a
    string; a one-line `ValueError` naming the key otherwise."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        parameters = {}
    try:  # a class's parameters are its __init__'s (not its fields')
        hints = typing.get_type_hints(fn.__init__ if isinstance(fn, type) else fn)
    except Exception:  # noqa: BLE001  (unresolvable annotations: none used)
        hints = {}
    open_kw = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    named = [
        n
        for n, p in parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    kwargs = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--problem-arg must be KEY=VALUE, got {item!r}")
        if parameters and key not in named and not open_kw:
            raise ValueError(
                f"--problem-arg {key}: {path} has no parameter {key!r} (it takes "
                f"{', '.join(named) or 'none'})"
            )
        param = parameters.get(key)
        kind = hints.get(key)
        default = inspect.Parameter.empty if param is None else param.default
        if not _understood(kind) and default not in (inspect.Parameter.empty, None):
            kind = type(default)
        try:
            kwargs[key] = _typed(kind, text)
        except ValueError:
            raise ValueError(
                f"--problem-arg {key}={text}: {key} must be {_type_name(kind)}, got "
                f"{text!r}"
            ) from None
    missing = [
        n
        for n in named
        if parameters[n].default is inspect.Parameter.empty and n not in kwargs
    ]
    if missing:
        raise ValueError(
            f"--problem-arg: {path} needs {', '.join(f'{n}=VALUE' for n in missing)} "
            "(no default)"
        )
    return kwargs


def _json_or_text(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def _type_name(kind) -> str:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        return " or ".join(_type_name(a) for a in inner) + " or none"
    if origin in (list, tuple, Sequence) or kind in (list, tuple):
        args = [a for a in typing.get_args(kind) if a is not Ellipsis]
        return f"a list of {_type_name(args[0]) if args else 'values'}"
    return {
        int: "an integer",
        float: "a number",
        bool: "true or false",
        str: "a string",
    }.get(kind, "a JSON value")


def _understood(kind) -> bool:
    """Whether `_typed` reads values of the annotation `kind` (else the
    default's type is used, when there is one)."""
    if kind in (int, float, bool, str, list, tuple):
        return True
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return all(a is type(None) or _understood(a) for a in typing.get_args(kind))
    return origin in (list, tuple, Sequence)


def _typed(kind, text: str):
    """`text` as a value of the type `kind` (`None`: JSON, else the text)."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        if text.strip().lower() in ("none", "null"):
            return None
        for a in inner:
            try:
                return _typed(a, text)
            except ValueError:
                continue
        raise ValueError(text)
    if origin in (list, tuple, Sequence) or kind in (list, tuple):
        args = [a for a in typing.get_args(kind) if a is not Ellipsis]
        parsed = _json_or_text(text)
        items = parsed if isinstance(parsed, list) else text.split(",")
        values = [_typed(args[0] if args else None, str(v).strip()) for v in items]
        return tuple(values) if (origin or kind) is tuple else values
    if kind is bool:
        if text.strip().lower() in _TRUE:
            return True
        if text.strip().lower() in _FALSE:
            return False
        raise ValueError(text)
    if kind is int:
        value = float(text)
        if value != round(value):
            raise ValueError(text)
        return int(text) if text.strip().lstrip("-+").isdigit() else int(value)
    if kind is float:
        return float(text)
    if kind is str:
        return text
    return _json_or_text(text)


__all__ = [
    "Choice",
    "DEFAULT",
    "FACTORY",
    "GENERIC_EVENT_FIELDS",
    "GENERIC_PHASES",
    "GENERIC_STAGE_FIELDS",
    "add_problem_arguments",
    "choose",
    "convert",
    "factory_kwargs",
    "levels_text",
    "parse_values",
    "plugins",
    "shown_defaults",
    "shown_flow_defaults",
]
