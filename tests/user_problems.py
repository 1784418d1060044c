"""A user's own problem, as the tests need one: a class of the test suite's,
not of gradflow's (the exported chunks' key refuses it, a sweep of it beside
the paper's model is of two classes), with a flow known exactly."""

import jax
import jax.numpy as jnp

import gradflow as gf


class Quadratic(gf.Problem):
    """1/2 |p - c|^2: the flow is p(t) = c + (p0 - c) e^{-t}, exactly."""

    c: jax.Array

    def loss(self, params):
        return 0.5 * jnp.sum((params - self.c) ** 2)

    def init(self, key, init_scale):
        return init_scale * jax.random.normal(key, self.c.shape, self.c.dtype)
