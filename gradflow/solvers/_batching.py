"""A `lax.cond` whose expensive branch, under `jax.vmap`, costs only the
members that take it.

Under `vmap` a `lax.cond` with a batched predicate becomes a `select`: both
branches are computed for every member. For the Rosenbrock-W solver that means
a Jacobian refresh (tens of Jacobian-vector products and a decomposition) for
every member at every step of a sweep, although each member refreshes only
every few steps. `cond_per_member` has a batching rule that runs the cheap
branch for all members and then the expensive one for the members whose
predicate holds, one after the other in a loop whose length is their number.
Unbatched it is exactly `lax.cond`, so a single solve is unchanged bit for bit.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap


def _member(x, batched: bool, j):
    return x[j] if batched else x


def cond_per_member(pred, true_fn: Callable, false_fn: Callable, operands):
    """`jax.lax.cond(pred, true_fn, false_fn, *operands)`, with a batching rule
    that computes `true_fn` only for the members whose `pred` is true.

    `true_fn` and `false_fn` take the operands (a tuple) and must not close over
    traced values: everything that varies per member goes into `operands`.
    """

    @custom_vmap
    def run(pred, operands):
        return jax.lax.cond(pred, true_fn, false_fn, *operands)

    @run.def_vmap
    def rule(axis_size, in_batched, pred, operands):
        pred_batched, operands_batched = in_batched
        axes = (jax.tree.map(lambda b: 0 if b else None, operands_batched),)
        if not pred_batched:
            out = jax.vmap(
                lambda ops: jax.lax.cond(pred, true_fn, false_fn, *ops), in_axes=axes
            )(operands)
            return out, jax.tree.map(lambda _: True, out)
        out = jax.vmap(lambda ops: false_fn(*ops), in_axes=axes)(operands)
        (chosen,) = jnp.nonzero(pred, size=axis_size, fill_value=0)

        def one(i, out):
            j = chosen[i]
            ops = jax.tree.map(
                lambda x, b: _member(x, b, j), operands, operands_batched
            )
            new = true_fn(*ops)
            return jax.tree.map(lambda o, n: o.at[j].set(n), out, new)

        count = jnp.sum(pred.astype(jnp.int32))
        out = jax.lax.fori_loop(0, count, one, out)
        return out, jax.tree.map(lambda _: True, out)

    return run(pred, operands)
