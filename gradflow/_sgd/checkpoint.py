"""What a checkpoint of `train_sgd` is checked against: the fingerprint of
the call (its settings, inputs and a process-independent description of the
optimizer). The state itself is written whole (`train.py`)."""

import functools
import re
import types

import jax
import numpy as np

from .._loop.checkpoint import digest, pack_tree


# Entries recorded by `describe_optimizer` at most (a closure could hold a
# large structure; the fingerprint needs the hyperparameters, not everything).
_MAX_DESCRIBED = 400


def describe_optimizer(obj, path: str = "", out=None, seen=None, depth: int = 0):
    """What an Optax transformation is made of, as `{path: value}`: the names of
    its functions and the numbers, strings and small arrays their closures hold
    (learning rates, momenta, a schedule's parameters), found by walking the
    closures. Unlike `repr(optimizer)`, which holds memory addresses, this is
    the same in every process, so a checkpoint can compare it."""
    out = {} if out is None else out
    seen = set() if seen is None else seen
    if depth > 16 or len(out) >= _MAX_DESCRIBED:
        return out
    if obj is None or isinstance(obj, (bool, int, float, str)):
        out[path] = obj
        return out
    if isinstance(obj, (type, np.dtype)):  # a class or a dtype: its name
        out[path] = str(obj)
        return out
    if isinstance(obj, (np.ndarray, np.generic, jax.Array)):
        a = np.asarray(obj)
        out[path] = a.tolist() if a.size <= 16 else f"sha256:{digest(a)}"
        return out
    if id(obj) in seen:
        return out
    seen.add(id(obj))
    join = (lambda name: f"{path}.{name}") if path else (lambda name: name)
    if isinstance(obj, functools.partial):
        obj = (obj.func, obj.args, obj.keywords)
    if isinstance(obj, types.MethodType):
        out[f"{path}()"] = obj.__qualname__
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        out[f"{path}()"] = obj.__qualname__
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            describe_optimizer(value, join(name), out, seen, depth + 1)
        for i, value in enumerate(obj.__defaults__ or ()):
            describe_optimizer(value, join(f"default{i}"), out, seen, depth + 1)
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a NamedTuple
        for name in obj._fields:  # pyright: ignore[reportAttributeAccessIssue]
            describe_optimizer(getattr(obj, name), join(name), out, seen, depth + 1)
    elif isinstance(obj, (tuple, list)):
        for i, value in enumerate(obj):
            describe_optimizer(value, f"{path}[{i}]", out, seen, depth + 1)
    elif isinstance(obj, dict):
        for key in sorted(obj, key=str):
            describe_optimizer(obj[key], f"{path}[{key!r}]", out, seen, depth + 1)
    else:
        out[path] = type(obj).__qualname__
    return out


def optimizer_repr(optimizer) -> str:
    """`repr(optimizer)` without memory addresses (which differ between
    processes), at most 200 characters: `settings["optimizer"]`."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(optimizer))[:200]


def fingerprint(settings, *, optimizer, opt, params0, problem_arrays, steps):
    """The `(settings, inputs)` a checkpoint of this call must match: `optimizer`
    is the one given (`None` for the default), `opt` the one used."""
    settings = dict(settings)
    if optimizer is not None:
        # `settings["optimizer"]` names only the outer function of most Optax
        # optimizers (`chain`): compare what the optimizer is made of and the
        # structure of its state as well.
        described = describe_optimizer(optimizer)
        settings.update({f"optimizer {k}": v for k, v in described.items()})
        state = jax.eval_shape(opt.init, params0)
        settings["optimizer state"] = str(jax.tree.structure(state))
        for key, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
            name = f"optimizer state{jax.tree_util.keystr(key)}"
            settings[name] = f"{np.dtype(leaf.dtype).name}{list(leaf.shape)}"
    inputs = {
        **problem_arrays,
        "save_steps": steps,
        **pack_tree("params0", params0),
    }
    return settings, inputs


__all__ = ["describe_optimizer", "fingerprint", "optimizer_repr"]
