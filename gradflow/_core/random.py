"""Gaussian initial draws that compile once per size bucket, not per shape.

`jax.random.normal(key, shape)` compiles once for every shape it is asked
for: a test session or a sweep over widths and vocabularies paid about half a
second to a second and a half for each new `(m, d)`. With JAX's partitionable
Threefry (the default: `jax_threefry_partitionable`), entry `i` of a flat
draw depends on the key and on `i` alone, so the first `n` entries of a longer
draw are the draw of length `n`. [`scaled_normal`][] therefore draws a flat
vector whose length is the next power of two (at least 64), keeps the first
`prod(shape)` entries and reshapes them on the host: the same numbers, bit for
bit, as `scale * jax.random.normal(key, shape, dtype)`
(`tests/test_model.py::test_init_params_draws_are_jax_random_normal`), with
one compilation per power of two.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np


_MIN_DRAW = 64


@functools.partial(jax.jit, static_argnums=(1, 2))
def _flat_normal(key, size: int, dtype):
    return jax.random.normal(key, (size,), dtype=dtype)


def scaled_normal(key, shape: tuple[int, ...], scale: float, dtype) -> jax.Array:
    """`scale * jax.random.normal(key, shape, dtype=dtype)`, bit for bit, with
    one compilation per power-of-two size instead of one per shape."""
    partitionable = jax.config.jax_threefry_partitionable  # pyright: ignore[reportAttributeAccessIssue]
    # The direct draw where there is no prefix property, and under a trace
    # (`jax.eval_shape` of a problem's `init`, as the result reader and the
    # sweep do for the parameters' structure), where the host cannot slice the
    # flat draw: the same draw (compiled, equal up to rounding).
    traced = isinstance(key, jax.core.Tracer)  # pyright: ignore[reportAttributeAccessIssue]
    if not partitionable or traced:
        return scale * jax.random.normal(key, shape, dtype=dtype)
    n = math.prod(shape)
    size = max(_MIN_DRAW, 1 << max(n - 1, 0).bit_length())
    flat = np.asarray(_flat_normal(key, size, jnp.dtype(dtype)))[:n]
    # device_put: jnp.asarray of a host array compiles once per shape
    return jax.device_put(flat.reshape(shape) * np.asarray(scale, dtype=flat.dtype))


# `jax.random.key(seed)` and `tuple(jax.random.split(key, n))` run eagerly
# compile (or load) two tiny programs each (the seed staged, then seeded; the
# keys split, then unstacked); jitted whole, one each. Integer arithmetic
# only: the same keys, bit for bit.
new_key = jax.jit(jax.random.key)


@functools.partial(jax.jit, static_argnums=1)
def split_key(key, num: int) -> tuple:
    """`tuple(jax.random.split(key, num))` as one program."""
    return tuple(jax.random.split(key, num))


__all__ = ["new_key", "scaled_normal", "split_key"]
