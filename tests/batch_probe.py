"""The identity, recording the batch sizes `jax.vmap` gives it: a test passes
a value through it inside a function that gradflow vmaps (a problem's
`observe`, a field's Jacobian-vector product) to see how the calls were
batched."""

import jax


def batch_probe(sizes: list[int]):
    """`x -> x`, appending each batch's size to `sizes` when vmapped."""

    @jax.custom_batching.custom_vmap
    def probe(x):
        return x

    @probe.def_vmap
    def _rule(axis_size, in_batched, x):
        sizes.append(axis_size)
        return x, in_batched[0]

    return probe
