"""What a checkpoint of `train_sgd` holds: the fingerprint of the call (its
settings, inputs and a process-independent description of the optimizer) and
the training loop's state, written and read back."""

import dataclasses
import functools
import re
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._checkpoint import digest, pack_tree, unpack_tree
from ._model import param_arrays
from .text._bigram import TokenStream


@dataclasses.dataclass
class LoopState:
    """What the SGD loop carries from one chunk of steps to the next (on the
    host, between compiled calls), and what a checkpoint holds.

    **Fields:** `done` (steps taken), `saved` (the iterates at the save steps
    reached so far, the initial point first), `train` (the mean mini-batch loss
    of each save interval), `total` and `count` (summed mini-batch loss and
    number of the steps since the last save), `params` and `opt_state` (now).
    """

    done: int
    saved: list[Any]
    train: list[float]
    total: float
    count: int
    params: Any
    opt_state: Any


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


def fingerprint(settings, *, optimizer, opt, params0, source, chain, steps):
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
        "chain.P": chain.P,
        "chain.pi": chain.pi,
        "save steps": steps,
        **{f"params0.{n}": v for n, v in param_arrays(params0).items()},
    }
    if isinstance(source, TokenStream):
        inputs["text ids"] = source.ids
    return settings, inputs


def checkpoint_state(state: LoopState, key, end):
    """The loop's `state` as `(meta, arrays)` for `Checkpointer.write`. `end` is
    `None` while running, else `(ok, message)`. Everything the next steps
    depend on is here; the data do not need to be, since step `k` draws with
    `fold_in(key, k)` from a key made from `seed`."""
    meta = {
        "done": int(state.done),
        "num_saved": len(state.saved),
        "count": int(state.count),
        "finished": end is not None,
        "ok": True if end is None else bool(end[0]),
        "message": "" if end is None else end[1],
    }
    stacked = jax.tree.map(lambda *xs: np.stack(xs), *state.saved)
    arrays = {
        **pack_tree("params", state.params),
        **pack_tree("opt_state", state.opt_state),
        **pack_tree("saved", stacked),
        "train_loss": np.asarray(state.train, dtype=np.float64),
        "partial_sum": np.asarray(state.total, dtype=np.float64),
        "key_data": np.asarray(jax.random.key_data(key)),
    }
    return meta, arrays


def restore_state(ckpt, steps, params0, opt_state, key) -> tuple[LoopState, Any]:
    """The loop's state read back from `ckpt` (see `checkpoint_state`), checked
    for consistency; a `ValueError` naming the file if it is not. Returns
    `(state, end)`, `end` as in `checkpoint_state`."""
    meta, arrays = ckpt.state
    try:
        done, num_saved, count = meta["done"], meta["num_saved"], meta["count"]
        if not all(isinstance(x, int) for x in (done, num_saved, count)):
            raise ValueError("non-integer step counts")
        if not 1 <= num_saved <= steps.size:
            raise ValueError(f"{num_saved} saves for a grid of {steps.size}")
        last = int(steps[num_saved - 1])
        if meta["finished"]:
            if done < last:
                raise ValueError(f"a finished run at step {done} < {last}")
        elif num_saved == steps.size or not (
            last <= done < steps[num_saved] and done - last == count
        ):
            raise ValueError(
                f"step {done} with {count} steps since the save at step {last}"
            )
        if not np.array_equal(arrays["key_data"], jax.random.key_data(key)):
            raise ValueError("its random key is not the one this call derives")
        train = [float(x) for x in arrays["train_loss"]]
        if len(train) != num_saved:
            raise ValueError(f"{len(train)} train losses for {num_saved} saves")
        like = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((num_saved, *x.shape), x.dtype), params0
        )
        stacked = unpack_tree("saved", arrays, like)
        saved = [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(num_saved)]
        params = jax.tree.map(jnp.asarray, unpack_tree("params", arrays, params0))
        opt_state = jax.tree.map(
            jnp.asarray, unpack_tree("opt_state", arrays, opt_state)
        )
        total = float(arrays["partial_sum"])
        end = (bool(meta["ok"]), str(meta["message"])) if meta["finished"] else None
    except (KeyError, TypeError, ValueError) as e:
        what = f"missing {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(
            f"checkpoint '{ckpt.path}' is inconsistent ({what}); delete it to start "
            "afresh"
        ) from None
    return LoopState(done, saved, train, total, count, params, opt_state), end


__all__ = [
    "LoopState",
    "checkpoint_state",
    "describe_optimizer",
    "fingerprint",
    "optimizer_repr",
    "restore_state",
]
