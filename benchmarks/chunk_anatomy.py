"""Where the solve's compiled chunk is large: its XLA program counted by the
part of the code that asks for each operation.

The chunk is `_advance` (`gradflow/_loop/loop.py`): one Diffrax loop of
Rosenbrock-W steps with the stage watch and the saves. This script runs a
solve with XLA dumping the chunk's module before and after its optimisation
passes (`XLA_FLAGS=--xla_dump_to=...`) and JAX writing every frame of the
Python stack into each operation's metadata
(`jax_include_full_tracebacks_in_locations`: metadata only, the same
program), and counts:

- the HLO instructions before optimisation (what JAX hands to XLA);
- after optimisation, the *kernels*: every instruction of the entry, the
  while loops' bodies and conditions and the conditionals' branches that
  does work (a fusion, a dot, a custom call (LAPACK), a copy, a sort, ...;
  not parameters, constants, tuples, bitcasts or the control-flow
  instructions themselves), and the instructions fused into them. Each
  kernel is LLVM code that XLA optimises and generates, the larger part of
  the compile (docs/performance.md, "Where the chunk's compile goes"). A
  fusion is attributed by the majority of the instructions fused into it.

Each instruction's part is read from its call stack: the innermost frame in
the solver, the watch, the loop, Diffrax's loop or controller, mapped by
`PARTS` (and the lines of the Rosenbrock-W `step` by what is written on
them); frames of the vector field, the loss and the observables below it
mark it "in the loss".

    PYTHONPATH=. python benchmarks/chunk_anatomy.py            # gradflow run's chunk
    PYTHONPATH=. python benchmarks/chunk_anatomy.py --problem small --sites 20
    PYTHONPATH=. python benchmarks/chunk_anatomy.py --time --repeats 3 --baseline DIR
        # the chunk's tracing, lowering and compiling seconds (JAX's own
        # events), each in a fresh process, alternating with the checkout in
        # DIR (e.g. `git archive` of an older commit, unpacked)

Counts do not depend on the machine's load; seconds do (printed beside
them). `PYTHONPATH=.` from the repository root: this checkout's gradflow
(the path is printed).
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]

# The default `gradflow run` (the paper's model on sticky(6, 0.5, 0.5, 0.05),
# width 8, stages on: 224 parameters), and a solve of the tests' size
# (sticky(3), width 2: 20 parameters).
PROBLEMS = ("default", "small")

# The chunk's program: `jit(_advance)` in JAX's events, `jit__advance` in
# XLA's dumps.
CHUNK = "_advance"


def _load() -> str:
    a, b, c = os.getloadavg()
    return f"load {a:.2f} {b:.2f} {c:.2f}"


# -- the solve -----------------------------------------------------------


def solve(problem: str) -> None:
    """`problem`'s solve through the library (`jax.jit` of the chunk). The
    default is `gradflow run`'s: its problem, saves and stages, and Equinox's
    run-time checks as NaN (`EQX_ON_ERROR=nan`, which the command line sets
    for its compilation cache; `gradflow/cli.py`)."""
    import gradflow as gf

    if problem == "default":
        chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
        ts = gf.default_save_times(5000.0, 798)
        saveat = gf.SaveAt(ts)
        gf.integrate(chain, 1e-3, width=8, saveat=saveat, run=gf.Run(progress=False))
    else:
        chain = gf.chains.sticky(3, 0.5, 0.5, 0.05)
        gf.integrate(chain, 1e-2, width=2, t1=50.0, run=gf.Run(progress=False))


class CompileTimes:
    """Seconds JAX reports per program (`jax.monitoring`): tracing, lowering
    to StableHLO and XLA's compile, of every program whose name contains
    `name`."""

    EVENTS = {
        "/jax/core/compile/jaxpr_trace_duration": "trace_s",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
        "/jax/core/compile/backend_compile_duration": "compile_s",
    }

    def __init__(self, name: str):
        import jax

        self.name = name
        self.seconds = collections.Counter()
        self.programs = collections.Counter()
        jax.monitoring.register_event_duration_secs_listener(self._on)

    def _on(self, event, duration, fun_name="?", **_):
        if event in self.EVENTS and self.name in fun_name:
            self.seconds[self.EVENTS[event]] += duration
            if event.endswith("backend_compile_duration"):
                self.programs[fun_name] += 1


# -- XLA's text ----------------------------------------------------------------------


_SKIP = {
    "parameter",
    "constant",
    "get-tuple-element",
    "tuple",
    "bitcast",
    "while",
    "conditional",
    "call",
    "after-all",
    "partition-id",
    "replica-id",
    "opt-barrier",
}


class Module:
    """One HLO module's text: its computations, their instructions, and the
    call stacks of the instructions."""

    def __init__(self, text: str):
        self.files, self.funcs, self.locs, self.frames = {}, {}, {}, {}
        self.comps: dict[str, list[dict]] = {}
        self.entry = None
        section = None
        comp = None
        for line in text.split("\n"):
            s = line.strip()
            if s in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
                section = s
                continue
            m = re.match(r"^(ENTRY )?%([\w.\-]+) .*\{$", line)
            if m and not line.startswith(" "):
                comp = m[2]
                self.comps[comp] = []
                if m[1]:
                    self.entry = comp
                section = None
                continue
            if line.startswith("}"):
                comp = None
                continue
            if comp is not None and s.startswith(("%", "ROOT %")):
                self.comps[comp].append(self._instruction(s))
                continue
            m = re.match(r"^(\d+) (.*)$", s)
            if section and m:
                self._table(section, int(m[1]), m[2])

    def _table(self, section, i, rest):
        if section == "FileNames":
            self.files[i] = rest.strip('"')
        elif section == "FunctionNames":
            self.funcs[i] = rest.strip('"')
        else:
            d = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", rest)}
            if section == "FileLocations":
                self.locs[i] = (
                    self.files[d["file_name_id"]],
                    self.funcs[d["function_name_id"]],
                    d["line"],
                )
            else:  # (a parent is written one above its index; 0: none)
                self.frames[i] = (d["file_location_id"], d.get("parent_frame_id", 0))

    @staticmethod
    def _instruction(s: str) -> dict:
        s = s.removeprefix("ROOT ")
        name = s[1 : s.index(" ")]
        rhs = s[s.index(" = ") + 3 :]
        m = re.match(r"^(\(.*?\)|[\w\[\]{},:\d]+) ([\w\-]+)\(", rhs)
        opcode = m[2] if m else "?"
        frame = re.search(r"stack_frame_id=(\d+)", s)
        calls = re.findall(
            r"(calls|to_apply|body|condition|true_computation|false_computation)"
            r"=%([\w.\-]+)",
            s,
        )
        branches = re.search(r"branch_computations=\{([^}]*)\}", s)
        if branches:
            calls += [("branch", b.strip().lstrip("%")) for b in branches[1].split(",")]
        return {
            "name": name,
            "op": opcode,
            "frame": int(frame[1]) if frame else 0,
            "calls": calls,
        }

    def stack(self, frame: int) -> list[tuple[str, str, int]]:
        """Innermost first: `(file, function, line)`."""
        out = []
        while frame and len(out) < 200:
            loc, parent = self.frames[frame]
            out.append(self.locs[loc])
            frame = parent - 1 if parent else 0
        return out

    def control_computations(self) -> set[str]:
        """The entry and what its control flow runs (while bodies and
        conditions, conditional branches, called computations), not the
        fused computations or the reducers of reductions, sorts and
        scatters."""
        seen = {self.entry}
        todo = [self.entry]
        while todo:
            for ins in self.comps[todo.pop()]:
                for kind, target in ins["calls"]:
                    control = kind in (
                        "body",
                        "condition",
                        "branch",
                        "true_computation",
                        "false_computation",
                    ) or (kind == "to_apply" and ins["op"] == "call")
                    if control and target not in seen and target in self.comps:
                        seen.add(target)
                        todo.append(target)
        return seen


# -- parts of the code ------------------------------------------------------------

# Files of the vector field, the loss and the observables: frames there are
# "in the loss" of the part that called them.
_LOSS_FILES = (
    "gradflow/markov/",
    "gradflow/_problem/",
    "gradflow/_flow/",
    "observe.py",
)

# (file, function or None, part): the innermost frame that matches one of
# them names the instruction's part (`None`: its caller's). Lines of
# `AbstractRosenbrockW.step` are given by the text on them (see `_step_lines`).
PARTS = [
    ("equinox/internal/_nextafter.py", None, "Diffrax: t1 - 100 ulp"),
    ("gradflow/solvers/base.py", "_decompose", "solver: refresh (decompose)"),
    ("gradflow/solvers/base.py", "_decompose_adaptive", "solver: refresh (decompose)"),
    ("gradflow/solvers/base.py", "_subspace_iterate", "solver: refresh (decompose)"),
    ("gradflow/solvers/base.py", "_ritz", "solver: refresh (decompose)"),
    ("gradflow/solvers/base.py", "_next_refresh", "solver: refresh rule"),
    ("gradflow/_event/watch.py", "_locate", "watch: bisection"),
    ("gradflow/_event/watch.py", "_record", "watch: record"),
    ("gradflow/_event/watch.py", "_trace", "watch: motion saves"),
    ("gradflow/_event/watch.py", "_values", None),  # (its caller's part)
    ("gradflow/_event/watch.py", None, "watch: other"),
    ("gradflow/_loop/loop.py", "save", "saves: observables"),
    ("gradflow/_loop/loop.py", None, "loop: chunk and merge"),
    ("gradflow/_loop/resume.py", None, "Diffrax: controller"),
    ("diffrax/_step_size_controller/", None, "Diffrax: controller"),
    ("diffrax/_integrate.py", "save", "Diffrax: saves"),
    ("diffrax/_integrate.py", None, "Diffrax: loop"),
    ("diffrax/_solution.py", None, "Diffrax: loop"),
    ("diffrax/_adjoint.py", None, "Diffrax: loop"),
]

# The lines of the two `step` functions by what is written on them (a
# statement's continuation lines too), and the part of their other lines.
_STEP_TEXT = {
    "solver": (
        [
            ("f0 = cond_per_member(", "solver: f(y0) after a jump"),
            ("fi = f(t0", "solver: stages 2-s, f"),
            ("jax.jvp(", "solver: f(y1) and J u (jvp)"),
        ],
        "solver: stage algebra",
    ),
    "watch": (
        [("after = self._values(", "watch: conditions at the step's end")],
        "watch: other",
    ),
}


def _step_lines() -> dict[tuple[str, int], str]:
    """`(solver or watch, line) -> part` of the lines of the Rosenbrock-W
    solver's and the watch's `step`."""
    from gradflow import solvers

    base = Path(solvers.AbstractRosenbrockW.step.__code__.co_filename)
    paths = {"solver": base, "watch": base.parents[1] / "_event" / "watch.py"}
    out = {}
    for which, path in paths.items():
        rules, default = _STEP_TEXT[which]
        for line, part in _lines_of_step(path.read_text(), rules, default).items():
            out[which, line] = part
    return out


def _lines_of_step(text: str, rules, default: str) -> dict[int, str]:
    lines = text.split("\n")
    start = next(i for i, t in enumerate(lines) if t.lstrip().startswith("def step("))
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith("    def ")),
        len(lines),
    )
    out = {}
    for key, part in rules:
        at = text.find(key, sum(len(t) + 1 for t in lines[:start]))
        if at < 0:
            continue
        first = text.count("\n", 0, at)
        depth = len(lines[first]) - len(lines[first].lstrip())
        last = first + 1
        # a statement continues while its lines are indented deeper
        while last < end and (
            not lines[last].strip()
            or len(lines[last]) - len(lines[last].lstrip()) > depth
            or lines[last].strip().startswith(")")
        ):
            last += 1
        for i in range(first, last):
            out[i + 1] = part
    return {i + 1: out.get(i + 1, default) for i in range(start, end)}


def part_of(stack, step_lines) -> tuple[str, bool]:
    """`(part, in the loss)` of an instruction's stack (innermost first)."""
    return _part_site(stack, step_lines)[:2]


def _part_site(stack, step_lines) -> tuple[str, bool, str]:
    in_loss = False
    for path, func, line in stack:
        if any(k in path for k in _LOSS_FILES):
            in_loss = True
            continue
        site = f"{_short(path)}:{line} {func}"
        for which, file in (("solver", "solvers/base.py"), ("watch", "watch.py")):
            if path.endswith(file) and func.endswith(".step"):
                return step_lines.get((which, line), "?"), in_loss, site
        names = func.split(".")
        part = next(
            (
                part
                for file, name, part in PARTS
                if file in path and (name is None or any(name in n for n in names))
            ),
            "",
        )
        if part:
            return part, in_loss, site
    inner = stack[0] if stack else None
    if inner is None:  # copies XLA inserted, and fusions of those only
        return "XLA's own (no source)", in_loss, "-"
    return "other", in_loss, f"{_short(inner[0])}:{inner[2]} {inner[1]}"


def _short(path: str) -> str:
    path = path.split("site-packages/")[-1]
    return path[path.index("/gradflow/") + 1 :] if "/gradflow/" in path else path


def census(module: Module, step_lines, *, kernels: bool, sites=None, fused=False):
    """Instructions (or, with `kernels`, the kernels; with `fused` too, the
    instructions inside them) per `(part, in the loss)`; `sites`: a `Counter`
    to count them by their innermost frame outside the loss too."""
    count = collections.Counter()

    def add(frame, weight=1):
        part, loss, site = _part_site(module.stack(frame), step_lines)
        count[part, loss] += weight
        if sites is not None:
            sites[part, site] += weight

    if not kernels:
        for comp in module.comps.values():
            for ins in comp:
                if ins["op"] not in ("parameter", "tuple", "get-tuple-element"):
                    add(ins["frame"])
        return count
    for name in module.control_computations():
        for ins in module.comps[name]:
            if ins["op"] not in _SKIP:
                frame, size = _kernel(module, ins, step_lines)
                add(frame, size if fused else 1)
    return count


def _kernel(module: Module, ins: dict, step_lines) -> tuple[int, int]:
    """A kernel's frame and size: a fusion's are those of the majority part of
    the instructions fused into it, and their number."""
    if ins["op"] != "fusion":
        return ins["frame"], 1
    inside = [
        i
        for i in module.comps[dict(ins["calls"])["calls"]]
        if i["op"] not in ("parameter", "constant")
    ]
    votes = collections.Counter()
    first = {}
    for i in inside:
        if i["frame"]:
            key = part_of(module.stack(i["frame"]), step_lines)
            votes[key] += 1
            first.setdefault(key, i["frame"])
    frame = first[votes.most_common(1)[0][0]] if votes else ins["frame"]
    return frame, max(len(inside), 1)


# -- one measurement ------------------------------------------------------------------


def anatomy(problem: str) -> dict:
    _checks(problem)
    dump = tempfile.mkdtemp(prefix="chunk_anatomy_")
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_dump_to={dump} --xla_dump_hlo_as_text"
        + f" --xla_dump_hlo_module_re={CHUNK}"
    )
    import jax

    # every frame of the Python stack in the program's metadata (not only
    # the innermost one of the user's code): the program is the same
    jax.config.update("jax_include_full_tracebacks_in_locations", True)
    times = CompileTimes(CHUNK)
    solve(problem)
    if sum(times.programs.values()) != 1:
        raise RuntimeError(f"expected one chunk compiled, got {dict(times.programs)}")
    files = sorted(Path(dump).glob(f"*{CHUNK}*"))
    pre, post = (
        Module(next(p for p in files if p.name.endswith(end)).read_text())
        for end in ("before_optimizations.txt", "after_optimizations.txt")
    )
    step_lines = _step_lines()
    ops = census(pre, step_lines, kernels=False)
    sites = collections.Counter()
    kern = census(post, step_lines, kernels=True, sites=sites)
    size = census(post, step_lines, kernels=True, fused=True)
    shutil.rmtree(dump)
    import gradflow

    return {
        "problem": problem,
        "gradflow": gradflow.__file__,
        "hlo_before": sum(ops.values()),
        "kernels": sum(kern.values()),
        "fused": sum(size.values()),
        "dots_before": sum(i["op"] == "dot" for c in pre.comps.values() for i in c),
        "seconds": dict(times.seconds),
        "load": _load(),
        "sites": [[p, s, n] for (p, s), n in sites.most_common()],
        "parts": sorted(
            (
                [
                    part,
                    loss,
                    ops.get((part, loss), 0),
                    kern.get((part, loss), 0),
                    size.get((part, loss), 0),
                ]
                for part, loss in set(ops) | set(kern)
            ),
            key=lambda r: (-r[3], -r[2]),
        ),
    }


def _checks(problem: str) -> None:
    if problem == "default":  # (read by Equinox when it is imported)
        os.environ.setdefault("EQX_ON_ERROR", "nan")


def compile_seconds(problem: str) -> dict:
    _checks(problem)
    times = CompileTimes(CHUNK)
    solve(problem)
    return {**times.seconds, "load": _load()}


def _fresh(checkout: Path, problem: str) -> dict:
    """`compile_seconds` in a fresh process importing `checkout`'s gradflow
    (this script's own copy runs it)."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out = subprocess.run(
        [sys.executable, __file__, "--problem", problem, "--one-time"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().split("\n")[-1])


def table(result: dict) -> str:
    sec = result["seconds"]
    rows = [
        f"gradflow from {result['gradflow']}",
        f"chunk of `{result['problem']}`: {result['hlo_before']:,} HLO instructions "
        f"before optimisation ({result['dots_before']} dots), {result['kernels']:,} "
        f"kernels after ({result['fused']:,} instructions in them); traced "
        f"{sec.get('trace_s', 0):.2f} s, lowered {sec.get('lower_s', 0):.2f} s, "
        f"compiled {sec.get('compile_s', 0):.2f} s ({result['load']}, taken under "
        "load, with the full tracebacks in its metadata)",
        "",
        "| part | in the loss | HLO before | kernels after | instructions in them |",
        "|---|---|---:|---:|---:|",
    ]
    for part, loss, ops, kern, size in result["parts"]:
        mark = "yes" if loss else ""
        rows.append(f"| {part} | {mark} | {ops:,} | {kern:,} | {size:,} |")
    return "\n".join(rows)


def timing(problem: str, repeats: int, baseline: str | None) -> None:
    """The chunk's seconds in fresh processes, this checkout and `baseline`
    in alternation."""
    checkouts = [("this", ROOT)]
    if baseline:
        checkouts.append(("baseline", Path(baseline).resolve()))
    for i in range(repeats):
        for label, path in checkouts if i % 2 == 0 else checkouts[::-1]:
            r = _fresh(path, problem)
            print(
                f"{label:8s} trace {r.get('trace_s', 0):5.2f} s  lower "
                f"{r.get('lower_s', 0):5.2f} s  compile {r.get('compile_s', 0):6.2f} s"
                f"  ({r['load']}, taken under load)",
                flush=True,
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problem", choices=PROBLEMS, default="default")
    p.add_argument("--json", help="also write the counts to this file")
    p.add_argument(
        "--sites", type=int, default=0, help="also the N lines with the most kernels"
    )
    p.add_argument("--time", action="store_true", help="compile seconds instead")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--baseline", help="another checkout, timed in alternation")
    p.add_argument("--one-time", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one_time:
        print(json.dumps(compile_seconds(a.problem)))
        return
    if a.time:
        timing(a.problem, a.repeats, a.baseline)
        return
    result = anatomy(a.problem)
    print(table(result))
    if a.sites:
        print("\n| part | innermost line outside the loss | kernels |\n|---|---|---:|")
        for part, site, n in result["sites"][: a.sites]:
            print(f"| {part} | `{site}` | {n} |")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
