import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest


# Shape annotations are checked in the tests: jaxtyping's import hook wraps every
# gradflow function with beartype restricted to array annotations
# (tests/_shapecheck.py). It must be installed before gradflow is imported.
jaxtyping.install_import_hook("gradflow", "_shapecheck.shapes_only")

import gradflow as gf  # noqa: E402, F401  (turns on float64)


jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")


def tree_allclose(x, y, *, rtol=1e-5, atol=1e-8):
    """Whether two pytrees have the same structure and close leaves."""
    xs, xdef = jax.tree.flatten(x)
    ys, ydef = jax.tree.flatten(y)
    if xdef != ydef:
        return False
    return all(
        np.shape(a) == np.shape(b) and np.allclose(a, b, rtol=rtol, atol=atol)
        for a, b in zip(xs, ys)
    )


@pytest.fixture
def getkey():
    """Fresh PRNG keys, deterministic per test."""
    counter = [0]

    def _getkey():
        counter[0] += 1
        return jax.random.key(counter[0])

    return _getkey


@pytest.fixture(autouse=True)
def _equinox_error_mode():
    """`gradflow.cli.main` (called in-process by the CLI tests) switches
    Equinox's run-time checks to NaN for the persistent compilation cache;
    every test starts and ends with the mode it had."""
    import equinox._errors

    mode = equinox._errors.EQX_ON_ERROR
    yield
    equinox._errors.EQX_ON_ERROR = mode


def random_params(d, m, scale, seed):
    keys = jax.random.split(jax.random.key(seed), 4)
    shapes = [(m, d), (d, m), (m, m), (m, m)]
    return gf.Params(*(scale * jax.random.normal(k, s) for k, s in zip(keys, shapes)))


__all__ = ["jnp", "random_params", "tree_allclose"]
