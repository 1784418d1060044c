"""jaxtyping shape annotations are checked at test time.

tests/conftest.py installs jaxtyping's import hook on the gradflow package with
beartype restricted to array annotations (tests/_shapecheck.py), so every
annotated function checks its arguments' shapes when called from the tests.
These tests fail if the hook is not installed."""

import jax.numpy as jnp
import jaxtyping
import pytest

import gradflow as gf


def test_a_wrong_shape_raises_the_jaxtyping_error():
    # A must be (d, d). A (3, 4) matrix with a (3,) pi would silently give a
    # number without the check (the sum over keys hides the extra column).
    A = jnp.full((3, 4), 0.25)
    pi = jnp.full((3,), 1 / 3)
    with pytest.raises(jaxtyping.TypeCheckError, match="attention_entropy"):
        gf.markov.attention_entropy(A, pi)


def test_inconsistent_named_dimensions_raise_the_jaxtyping_error():
    # d is bound by A (3, 3); a pi of length 4 contradicts it.
    A = jnp.full((3, 3), 1 / 3)
    with pytest.raises(jaxtyping.TypeCheckError, match="attention_entropy"):
        gf.markov.attention_entropy(A, jnp.full((4,), 0.25))


def test_right_shapes_pass_the_check():
    A = jnp.full((3, 3), 1 / 3)
    pi = jnp.full((3,), 1 / 3)
    assert jnp.allclose(gf.markov.attention_entropy(A, pi), jnp.log(3.0))
