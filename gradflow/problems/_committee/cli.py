"""The soft committee machine on the command line (`--problem committee`):
Saad and Solla's isotropic teacher, or a teacher read from a `.npy` file. A
problem's command-line plugin (`docs/extending.md`, "On the command
line")."""

from pathlib import Path

from ..._core.files import read_array


NAME = "committee"
TITLE = "the soft committee machine (Saad and Solla 1995)"

# fmt: off
OPTIONS = {
    "--students": dict(type=int, grid=True, min=1, default=3, help="students K"),
    "--teachers": dict(type=int, grid=True, min=1, default=3, help="teachers M"),
    "--inputs": dict(type=int, grid=True, min=1, default=None, shown="2 x teachers",
                     help="N"),
    "--teacher-norm": dict(type=float, grid=True, above=0.0, default=1.0,
                           help="the norm of every (orthogonal) teacher vector"),
    "--teacher": dict(metavar="FILE.npy", type=Path, default=None,
                      shown="none, built from --teachers, --inputs, --teacher-norm",
                      help="the teacher's (M, N) weights"),
    "--problem-seed": dict(type=int, grid=True, default=None,
                           shown="none, the first unit vectors",
                           help="seed of a random orthogonal teacher"),
}
# fmt: on

# The specialisation drop (init 1e-3) ends near t = 180.
FLOW_DEFAULTS = {"init_scale": 1e-3, "t1": 300.0}
SGD_DEFAULTS = {"init_scale": 1e-3, "t1": 300.0, "lr": 0.03, "batch_size": 256}


def build(options):
    """`(problem, description)` of the options."""
    import gradflow as gf

    if options.teacher is not None:
        for flag in ("--teachers", "--inputs", "--teacher-norm", "--problem-seed"):
            if flag[2:].replace("-", "_") in options.given:
                raise ValueError(
                    f"{flag} does not apply with --teacher (the teacher sets it)"
                )
        V = read_array("--teacher", options.teacher)
        problem = gf.problems.Committee(V, students=options.students)
        return problem, f"{problem}, teacher from {options.teacher}"
    inputs = 2 * options.teachers if options.inputs is None else options.inputs
    if inputs < options.teachers:
        raise ValueError(
            f"--inputs must be >= --teachers ({options.teachers}), got {inputs}"
        )
    problem = gf.problems.Committee.isotropic(
        options.teachers,
        inputs,
        options.students,
        norm=options.teacher_norm,
        seed=options.problem_seed,
    )
    how = "first unit vectors" if options.problem_seed is None else "random"
    return problem, (
        f"{problem}, orthogonal teacher of norm {options.teacher_norm:g} ({how})"
    )
