"""Model variants (`docs/variants.md`) against an independent NumPy implementation,
the finite-context limit, finite differences, the entropy floor, the minimal
model's bit-identity, and the linear regime near the origin derived in
docs/variants.md."""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
from reference import sample_sequences

import gradflow as gf


EPS = 1e-5  # docs/variants.md's epsilon

# Each ingredient alone, then combinations.
MODELS = [
    gf.Model(heads=2),
    gf.Model(heads=3),
    gf.Model(value=True),
    gf.Model(residual=True),
    gf.Model(norm="rms"),
    gf.Model(norm="layer"),
    gf.Model(layers=2),
    gf.Model(value=True, residual=True),
    gf.Model(heads=2, value=True, residual=True),
    gf.Model(residual=True, norm="layer"),
    gf.Model(value=True, norm="rms"),
    gf.Model(layers=2, value=True, residual=True),
    gf.Model(layers=2, heads=2, norm="rms"),
    gf.Model(heads=2, layers=2, value=True, residual=True, norm="rms"),
    gf.Model(heads=2, layers=2, value=True, residual=True, norm="layer"),
]
# The default tier runs each ingredient alone and the full combination; the
# other combinations run in the slow tier (each variant compiles its own loss).
CORE = {
    "heads=2",
    "value",
    "residual",
    "norm=rms",
    "norm=layer",
    "layers=2",
    "heads=2+value+residual+norm=rms+layers=2",
}


def params_of(models):
    return [
        pytest.param(m, id=m.label, marks=() if m.label in CORE else pytest.mark.slow)
        for m in models
    ]


CHAINS = [
    gf.chains.random(5, seed=1, concentration=0.5),
    gf.chains.sticky(4, 0.5, 0.5, 0.05),
]


def random_variant(model, d, m, scale, seed):
    """Every entry N(0, scale^2); gain = 1 + N(0, scale^2) (so that it is not
    trivially 1), bias N(0, scale^2)."""
    rng = np.random.default_rng(seed)
    lh = (model.layers, model.heads)

    def normal(*shape):
        return jnp.asarray(scale * rng.standard_normal(shape))

    return gf.VariantParams(
        W0=normal(m, d),
        W1=normal(d, m),
        WQ=normal(*lh, m, m),
        WK=normal(*lh, m, m),
        WV=normal(*lh, m, m) if model.value else None,
        gain=1 + normal(m) if model.norm else None,
        bias=normal(m) if model.norm == "layer" else None,
        model=model,
    )


# --------------------------------------------------------------------------
# An independent NumPy implementation of `docs/variants.md` (loops over layers,
# heads and positions; no shared code with gradflow).


def _np(p):
    out = {
        n: None if getattr(p, n) is None else np.asarray(getattr(p, n))
        for n in ("W0", "W1", "WQ", "WK", "WV", "gain", "bias")
    }
    return out


def _softmax_rows(S):
    S = S - S.max(axis=1, keepdims=True)
    e = np.exp(S)
    return e / e.sum(axis=1, keepdims=True)


def _np_norm(X, model, w):
    if model.norm is None:
        return X
    if model.norm == "rms":
        return w["gain"][:, None] * X / np.sqrt(np.mean(X**2, axis=0) + EPS)
    mu = X.mean(axis=0)
    var = ((X - mu) ** 2).mean(axis=0)
    return w["gain"][:, None] * (X - mu) / np.sqrt(var + EPS) + w["bias"][:, None]


def np_population(p, P, pi):
    """(loss, attention (L, H, d, d)) of `docs/variants.md`."""
    model, w = p.model, _np(p)
    X = w["W0"]
    attn = np.zeros((model.layers, model.heads, X.shape[1], X.shape[1]))
    for layer in range(model.layers):
        Y = np.zeros_like(X)
        for h in range(model.heads):
            S = (w["WQ"][layer, h] @ X).T @ (w["WK"][layer, h] @ X)
            A = _softmax_rows(S + np.log(pi)[None, :])
            attn[layer, h] = A
            V = w["WV"][layer, h] @ X if model.value else X
            Y = Y + V @ A.T
        X = X + Y if model.residual else Y
    Z = w["W1"] @ _np_norm(X, model, w)
    zmax = Z.max(axis=0)
    lse = zmax + np.log(np.exp(Z - zmax).sum(axis=0))
    loss = float(np.sum(pi * (lse - np.einsum("iy,yi->i", P, Z))))
    return loss, attn


def np_finite_context_nll(p, seq):
    """-log p(x_{s+1} | x_1..x_s): every layer causal at every position."""
    model, w = p.model, _np(p)
    ctx, target = seq[:-1], seq[-1]
    X = w["W0"][:, ctx]
    s = len(ctx)
    for layer in range(model.layers):
        Y = np.zeros_like(X)
        for h in range(model.heads):
            V = w["WV"][layer, h] @ X if model.value else X
            for j in range(s):
                q = w["WQ"][layer, h] @ X[:, j]
                scores = q @ (w["WK"][layer, h] @ X[:, : j + 1])
                a = np.exp(scores - scores.max())
                a /= a.sum()
                Y[:, j] += V[:, : j + 1] @ a
        X = X + Y if model.residual else Y
    z = w["W1"] @ _np_norm(X[:, -1:], model, w)[:, 0]
    zmax = z.max()
    return float(zmax + np.log(np.exp(z - zmax).sum()) - z[target])


# --------------------------------------------------------------------------
# Compiled once per model and shape, shared by the tests that evaluate them on
# the same shapes (each compilation is most of such a test's time).

population_loss = jax.jit(gf.population_loss)
finite_context_loss = jax.jit(gf.finite_context_loss)
population_grad = jax.jit(jax.grad(gf.population_loss))
sample_loss = jax.jit(lambda problem, p, seqs: problem.sample_loss(p, seqs))


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("model", params_of(MODELS))
def test_closed_form_matches_independent_numpy(model, chain):
    for seed in range(2):
        p = random_variant(model, chain.d, 3, 0.6, seed)
        loss = float(population_loss(p, chain))
        ref, ref_attn = np_population(p, np.asarray(chain.P), np.asarray(chain.pi))
        assert loss == pytest.approx(ref, rel=1e-10)
        A = np.asarray(jax.jit(gf.attention)(p, chain))
        assert A.shape == (model.layers, model.heads, chain.d, chain.d)
        np.testing.assert_allclose(A, ref_attn, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(
            jax.jit(gf.markov.attention_summary)(p, chain),
            ref_attn[-1].mean(axis=0),
            rtol=1e-10,
        )


@pytest.mark.parametrize("model", params_of(MODELS))
def test_finite_context_matches_independent_numpy(model):
    chain = CHAINS[0]
    p = random_variant(model, chain.d, 3, 0.6, 7)
    seqs = sample_sequences(np.asarray(chain.P), np.asarray(chain.pi), 6, 9, seed=3)
    ref = np.mean([np_finite_context_nll(p, s) for s in seqs])
    loss = finite_context_loss
    assert float(loss(p, jnp.asarray(seqs))) == pytest.approx(ref, rel=1e-10)
    # a batch shape is kept, one sequence works alone
    logits = jax.eval_shape(
        gf.markov.finite_context_logits, p, jnp.asarray(seqs[:, :-1]).reshape(2, 3, -1)
    )
    assert logits.shape == (2, 3, chain.d)
    one = float(loss(p, jnp.asarray(seqs[0])))
    assert one == pytest.approx(np_finite_context_nll(p, seqs[0]), rel=1e-10)


def _finite_minus_limit(p, chain, contexts):
    """Monte-Carlo over contexts of E[-log p(x_{s+1} | context)] minus the closed
    form, with two exact ingredients that remove noise but no bias: the
    target's expectation is taken exactly (row P[x_s]), and the closed form's
    per-query loss l(x_s) is subtracted (E[l(x_s)] = L, as x_s ~ pi)."""
    logits = jax.jit(gf.markov.finite_context_logits)(p, jnp.asarray(contexts))
    logp = np.asarray(jax.nn.log_softmax(logits, axis=-1))
    P = np.asarray(chain.P)
    Z = np.asarray(jax.jit(gf.markov.population_logits)(p, chain))
    zmax = Z.max(axis=0)
    per_query = zmax + np.log(np.exp(Z - zmax).sum(axis=0)) - np.sum(P.T * Z, axis=0)
    last = contexts[:, -1]
    diff = -np.sum(P[last] * logp, axis=1) - per_query[last]
    return float(np.mean(diff)), float(np.std(diff) / np.sqrt(diff.size))


@pytest.mark.parametrize(
    "model, contexts, num",
    [
        (gf.Model(heads=2, value=True, residual=True), (16, 64, 256), 10_000),
        pytest.param(
            gf.Model(norm="layer", residual=True),
            (16, 64, 256),
            10_000,
            marks=pytest.mark.slow,
        ),
        pytest.param(
            gf.Model(heads=2, layers=2, value=True, residual=True, norm="rms"),
            (16, 64, 192),
            3000,
            marks=pytest.mark.slow,
        ),
    ],
    ids=["heads=2+value+residual", "residual+norm=layer", "full"],
)
def test_closed_form_is_limit_of_finite_context(model, contexts, num):
    """The finite-context loss approaches the closed form as the context grows
    (random parameters of size 1, where the finite-context bias is large)."""
    chain = gf.chains.random(4, seed=5, concentration=1.0)
    p = random_variant(model, 4, 3, 1.0, 9)
    P, pi = np.asarray(chain.P), np.asarray(chain.pi)
    errors, noise = [], []
    for context in contexts:
        seqs = sample_sequences(P, pi, num=num, length=context, seed=context)
        err, se = _finite_minus_limit(p, chain, seqs)
        errors.append(abs(err))
        noise.append(se)
    # Measured (fixed seeds): |error| 0.36, 0.066, 0.023 (standard errors 0.008,
    # 0.004, 0.002) for the first model; the bias falls roughly like 1/context.
    assert errors[0] > errors[1] > errors[2], (errors, noise)
    assert errors[2] < errors[0] / 4, (errors, noise)


@pytest.mark.parametrize("model", params_of(MODELS))
def test_gradient_matches_central_differences(model):
    chain = CHAINS[0]
    p = random_variant(model, chain.d, 3, 0.6, 11)
    # compiled (one program per model instead of one per operation and shape)
    grad = population_grad(p, chain)
    flat, unravel = jax.flatten_util.ravel_pytree(p)
    gflat, _ = jax.flatten_util.ravel_pytree(grad)
    h = 1e-6
    rng = np.random.default_rng(0)

    def loss(x):  # the loss compiled for test_closed_form_matches_independent_numpy
        return population_loss(unravel(x), chain)

    for k in rng.choice(flat.size, size=10, replace=False):
        e = np.zeros(flat.size)
        e[k] = h
        fd = (loss(flat + e) - loss(flat - e)) / (2 * h)
        assert abs(float(fd) - float(gflat[k])) < 1e-7


@pytest.mark.parametrize("model", params_of(MODELS))
def test_loss_above_conditional_entropy(model):
    # width 3: the loss compiled for test_closed_form_matches_independent_numpy
    # (the same models, chains and width) is reused
    for chain in CHAINS:
        floor = float(chain.conditional_entropy)
        for scale in (0.3, 1.0, 3.0):
            for seed in range(3):
                value = float(
                    population_loss(
                        random_variant(model, chain.d, 3, scale, seed), chain
                    )
                )
                assert np.isfinite(value) and value >= floor


def test_minimal_model_is_todays_params_bit_for_bit():
    chain = CHAINS[0]
    p = gf.init_params(chain.d, 4, 0.6, seed=2, model=gf.Model())
    q = gf.init_params(chain.d, 4, 0.6, seed=2)
    assert type(p) is gf.Params and type(q) is gf.Params
    assert all(
        np.array_equal(a, b) for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(q))
    )

    # today's formula (`docs/model.md`), written out: the Params path is exactly it
    @jax.jit
    def today(params, chain):
        E = params.W0
        S = (params.WQ @ E).T @ (params.WK @ E)
        A = jax.nn.softmax(S + jnp.log(chain.pi), axis=-1)
        Z = params.W1 @ (E @ A.T)
        per_query = jax.nn.logsumexp(Z, axis=0) - jnp.sum(chain.P.T * Z, axis=0)
        return jnp.dot(chain.pi, per_query)

    assert np.array_equal(jax.jit(gf.population_loss)(p, chain), today(p, chain))
    # the variant code with the minimal model's shapes gives the same loss
    v = gf.VariantParams(
        p.W0, p.W1, p.WQ[None, None], p.WK[None, None], model=gf.Model()
    )
    assert float(gf.population_loss(v, chain)) == pytest.approx(
        float(gf.population_loss(p, chain)), rel=1e-14
    )
    np.testing.assert_allclose(gf.attention(v, chain)[0, 0], gf.attention(p, chain))


# --------------------------------------------------------------------------
# The linear regime at the origin (docs/variants.md, "Near the origin").


def theory_rate(model, chain, m):
    """The escape rate sigma of docs/variants.md: the top eigenvalue of -Hess L
    at the origin (gain 1, bias 0), from the closed formula."""
    P, pi = np.asarray(chain.P), np.asarray(chain.pi)
    d = chain.d
    G = (np.ones((d, d)) / d - P.T) * pi[None, :]  # dL/dZ at Z = 0
    c = pi - 1 / d
    b = (np.eye(d) if model.residual else 0) + (
        0 if model.value else model.heads * np.outer(pi, np.ones(d))
    )
    B = np.linalg.matrix_power(b, model.layers) if np.ndim(b) else np.zeros((d, d))
    M = -G @ B.T
    if model.norm is None:
        return np.linalg.svd(M, compute_uv=False)[0]
    if model.norm == "rms":
        return np.linalg.svd(M, compute_uv=False)[0] / np.sqrt(EPS)
    assert m >= 2
    return np.sqrt(np.linalg.eigvalsh(M @ M.T / EPS + np.outer(c, c))[-1])


@pytest.mark.parametrize("model", [gf.Model(), *params_of(MODELS)])
def test_linear_regime_rate_at_origin(model):
    chain = gf.chains.random(4, seed=3, concentration=0.7)
    m = 3
    p0 = (
        random_variant(model, chain.d, m, 0.0, 0)
        if not model.minimal
        else gf.Params(
            jnp.zeros((m, 4)), jnp.zeros((4, m)), jnp.zeros((m, m)), jnp.zeros((m, m))
        )
    )
    flat, unravel = jax.flatten_util.ravel_pytree(p0)

    def loss(x):
        return gf.population_loss(unravel(x), chain)

    # jitted (op by op, the Hessian's graph takes much longer to run), the
    # gradient and the Hessian in one program: one compilation per variant
    grad, hess = jax.jit(lambda x: (jax.grad(loss)(x), jax.hessian(loss)(x)))(flat)
    assert np.abs(np.asarray(grad)).max() < 1e-15  # a critical point
    rate = np.linalg.eigvalsh(-np.asarray(hess))[-1]
    expected = theory_rate(model, chain, m)
    if model.value and not model.residual and model.norm != "layer":
        # no linear regime: the Hessian vanishes, the origin is a higher-order saddle
        assert expected == 0 and abs(rate) < 1e-12
    else:
        assert rate == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    "model, degree",
    [
        (gf.Model(value=True), 3),
        (gf.Model(value=True, heads=2, norm="rms"), 3),
        (gf.Model(value=True, layers=2), 4),
    ],
    ids=lambda x: getattr(x, "label", str(x)),
)
def test_value_origin_is_higher_order_saddle(model, degree):
    """With a value matrix and no residual the leading term of L - log d is a
    product of `degree` small matrices, so the gradient scales like
    scale^(degree - 1) and the escape time like scale^(2 - degree)."""
    chain = gf.chains.random(4, seed=3, concentration=0.7)
    p = random_variant(model, 4, 3, 1.0, 5)

    def scaled(lam):  # the small matrices scaled, a gain kept at 1
        small = {n: lam * getattr(p, n) for n in ("W0", "W1", "WQ", "WK", "WV")}
        gain = jnp.ones_like(p.gain) if model.norm else None
        return gf.VariantParams(**small, gain=gain, model=model)

    g = population_grad
    norms = []
    for lam in (1e-4, 2e-4):
        flat, _ = jax.flatten_util.ravel_pytree(g(scaled(lam), chain))
        norms.append(float(jnp.linalg.norm(flat)))
    assert norms[1] / norms[0] == pytest.approx(2.0 ** (degree - 1), rel=1e-3)


# --------------------------------------------------------------------------
# Construction, validation, bookkeeping.


def test_model_validation_and_hash():
    assert gf.Model() == gf.Model(1, 1, False, False, None)
    assert gf.Model().minimal and not gf.Model(heads=2).minimal
    assert hash(gf.Model(heads=2)) == hash(gf.Model(heads=2))
    assert len({gf.Model(), gf.Model(), gf.Model(value=True)}) == 2
    full = gf.Model(heads=2, layers=2, value=True, residual=True, norm="rms")
    assert gf.Model(**full.as_dict()) == full
    assert full.label == "heads=2+value+residual+norm=rms+layers=2"
    with pytest.raises(ValueError, match="Model heads must be >= 1, got heads = 0"):
        gf.Model(heads=0)
    with pytest.raises(
        TypeError, match="Model heads must be an integer, got heads = 2.0"
    ):
        gf.Model(heads=2.0)
    with pytest.raises(
        ValueError, match="Model layers must be between 1 and 2, got layers = 3"
    ):
        gf.Model(layers=3)
    with pytest.raises(
        TypeError, match="Model value must be True or False, got value = 1"
    ):
        gf.Model(value=1)
    with pytest.raises(
        ValueError,
        match="Model norm must be one of None, 'rms', 'layer', got norm = 'batch'",
    ):
        gf.Model(norm="batch")
    with pytest.raises(
        TypeError, match="model must be a gradflow.Model, got model = 'rms'"
    ):
        gf.init_params(4, 3, 0.1, model="rms")


def test_variant_params_shapes_and_indexing():
    model = gf.Model(heads=2, layers=2, value=True, norm="layer")
    p = gf.init_params(5, 3, 0.01, seed=1, model=model)
    assert (p.WQ.shape, p.WV.shape, p.gain.shape, p.bias.shape) == (
        (2, 2, 3, 3),
        (2, 2, 3, 3),
        (3,),
        (3,),
    )
    assert np.all(p.gain == 1) and np.all(p.bias == 0)
    assert (
        p.num_parameters
        == sum(x.size for x in jax.tree.leaves(p))
        == 2 * 15 + 3 * 4 * 9 + 6
    )
    batch = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), p)
    assert (batch.d, batch.m) == (5, 3)
    assert np.array_equal(batch[1].W0, 2 * p.W0) and batch[1].model == model
    with pytest.raises(ValueError, match=r"VariantParams.WQ has shape \(1, 2, 3, 3\)"):
        gf.VariantParams(
            p.W0, p.W1, p.WQ[:1], p.WK, p.WV, gain=p.gain, bias=p.bias, model=model
        )
    with pytest.raises(ValueError, match="VariantParams.WV is required"):
        gf.VariantParams(
            p.W0, p.W1, p.WQ, p.WK, None, gain=p.gain, bias=p.bias, model=model
        )
    with pytest.raises(ValueError, match="VariantParams.bias must be None"):
        gf.VariantParams(
            p.W0,
            p.W1,
            p.WQ,
            p.WK,
            p.WV,
            gain=p.gain,
            bias=p.bias,
            model=gf.Model(heads=2, layers=2, value=True, norm="rms"),
        )


def test_integrate_model_argument_checks():
    chain = gf.chains.random(4, seed=0)
    p = gf.init_params(4, 3, 0.01, model=gf.Model(value=True))
    with pytest.raises(ValueError, match="model = Model.*but params are for Model"):
        gf.integrate(chain, params=p, model=gf.Model(heads=2))
    with pytest.raises(
        ValueError, match=r"params.W0 must be 2-dimensional \(one point, no time axis\)"
    ):
        gf.integrate(chain, params=jax.tree.map(lambda x: x[None], p))


def _half_drop_time(traj, chain):
    """First time the loss is halfway from log d down to H(pi) (interpolated)."""
    level = 0.5 * (np.log(chain.d) + float(chain.unigram_entropy))
    loss, ts = np.asarray(traj.loss), np.asarray(traj.ts)
    k = int(np.flatnonzero(loss < level)[0])
    w = (loss[k - 1] - level) / (loss[k - 1] - loss[k])
    return ts[k - 1] + w * (ts[k] - ts[k - 1])


@pytest.mark.slow
@pytest.mark.parametrize(
    "model", [gf.Model(), gf.Model(value=True)], ids=["minimal", "value"]
)
def test_escape_law_from_the_origin(model):
    """docs/variants.md: the minimal model escapes in a time log(1/scale)/sigma
    (halving the scale adds log 2 / sigma); with a value matrix the leading term
    is cubic, the flow is homogeneous of degree 2 near 0, and the escape time
    is proportional to 1/scale (halving the scale doubles it)."""
    chain = gf.chains.random(3, seed=3, concentration=0.7)
    base = gf.init_params(3, 2, 1.0, seed=4, model=model)
    if model.minimal:
        scales, t1 = (2e-3, 1e-3), 4e3
        ts = np.linspace(0, t1, 4001)
    else:
        scales, t1 = (2e-3, 1e-3, 5e-4), 1e6
        ts = np.concatenate([[0.0], np.geomspace(1.0, t1, 4000)])
    times = []
    for scale in scales:
        p = jax.tree.map(lambda x, s=scale: s * x, base)
        traj = gf.integrate(
            chain,
            params=p,
            t1=t1,
            saveat=gf.SaveAt(ts, stages=False),
            run=gf.Run(progress=False),
            solver=gf.Solver(rtol=1e-8),
        )
        times.append(_half_drop_time(traj, chain))
    if model.minimal:
        sigma = theory_rate(model, chain, 2)
        assert times[1] - times[0] == pytest.approx(np.log(2) / sigma, rel=0.02)
    else:
        # t*(s) = a / s + b (b: the drop itself, independent of s): each halving
        # of s adds twice the previous increment (a log law would add the same)
        ratio = (times[2] - times[1]) / (times[1] - times[0])
        assert ratio == pytest.approx(2.0, rel=0.02), times


@pytest.mark.slow
def test_two_head_value_residual_flow_learns_past_unigram():
    """Default settings (measured: about 200 s on a loaded 2-core machine)."""
    chain = gf.chains.random(6, seed=1)
    model = gf.Model(heads=2, value=True, residual=True)
    traj = gf.integrate(
        chain,
        params=gf.init_params(6, 8, 1e-3, seed=0, model=model),
        run=gf.Run(progress=False),
    )
    assert traj.ok, traj.message
    assert traj.settings.model == model.as_dict()
    assert traj.loss[-1] < float(chain.unigram_entropy) - 0.1
    assert traj.loss.min() >= float(chain.conditional_entropy) - 1e-12


def test_save_and_load_rebuild_variant_params(tmp_path):
    model = gf.Model(heads=2, value=True, norm="layer")
    p = gf.init_params(4, 3, 0.1, seed=2, model=model)
    params = jax.tree.map(lambda x: np.stack([np.asarray(x), 2 * np.asarray(x)]), p)
    traj = gf.Trajectory(
        ts=np.array([0.0, 1.0]),
        loss=np.array([1.4, 1.3]),
        grad_norm=np.array([0.1, 0.05]),
        params=params,
        problem=gf.problems.MarkovAttention(
            gf.chains.random(4, seed=0), width=3, model=model
        ),
        settings=gf.FlowSettings(t1=1.0),
        stats=gf.FlowStats(num_steps=1),
    )
    back = gf.load(traj.save(tmp_path / "v.npz"))
    assert type(back.params) is gf.VariantParams and back.params.model == model
    for name in ("W0", "W1", "WQ", "WK", "WV", "gain", "bias"):
        assert np.array_equal(getattr(back.params, name), getattr(params, name))
    assert back.final_params.WV.shape == (1, 2, 3, 3)


# --------------------------------------------------------------------------
# Downstream of the flow: SGD, compare, theory, the command line.

SGD_CHAIN = gf.chains.sticky(3, 0.6, 0.5, 0.05)
SGD_KW = dict(
    width=2,
    context=8,
    sgd=gf.SGD(lr=0.1, batch_size=16),
    t1=0.5,
)


@pytest.mark.parametrize("model", params_of(MODELS))
def test_sgd_batch_loss_is_the_finite_context_loss(model):
    """The training objective (counts for one layer, the causal forward for
    two) equals gf.finite_context_loss on the same sequences."""
    # the chain, sequences and parameters of
    # test_finite_context_matches_independent_numpy: its compiled
    # finite_context_loss is reused
    chain = CHAINS[0]
    seqs = sample_sequences(np.asarray(chain.P), np.asarray(chain.pi), 6, 9, seed=3)
    p = random_variant(model, chain.d, 3, 0.6, 7)
    # the loss SGD trains on (on its int32 batches): the problem's sample_loss
    problem = gf.problems.MarkovAttention(chain, width=3, model=model)
    a = float(sample_loss(problem, p, jnp.asarray(seqs, jnp.int32)))
    b = float(finite_context_loss(p, jnp.asarray(seqs)))
    assert a == pytest.approx(b, rel=1e-12, abs=1e-14)


def test_train_sgd_variant_settings_save_load_and_checkpoint(tmp_path):
    model = gf.Model(heads=2, residual=True)
    ckpt = tmp_path / "run.ckpt.npz"
    checkpointed = gf.Run(progress=False, checkpoint=ckpt)
    run = gf.train_sgd(
        SGD_CHAIN, init_scale=0.1, model=model, run=checkpointed, **SGD_KW
    )
    assert run.ok and type(run.params) is gf.VariantParams
    assert run.params.model == model and run.problem.model == model
    # the saved iterates are scored with the variant's population loss
    for i in (0, len(run) - 1):
        assert run.loss[i] == pytest.approx(
            float(gf.population_loss(run.params[i], SGD_CHAIN)), rel=1e-12
        )
    assert run.loss[-1] < run.loss[0]
    back = gf.load_sgd(run.save(tmp_path / "run.npz"))
    assert back.params.model == model
    for name in ("W0", "W1", "WQ", "WK"):
        assert np.array_equal(getattr(back.params, name), getattr(run.params, name))
    # the model is part of the checkpoint's fingerprint: refused before compiling
    with pytest.raises(
        ValueError,
        match=r"different call: problem model\.residual = true there, false here; "
        r"problem model\.value = false there, true here",
    ):
        gf.train_sgd(
            SGD_CHAIN,
            init_scale=0.1,
            model=gf.Model(heads=2, value=True),
            run=checkpointed,
            **SGD_KW,
        )
    # the same call returns the finished run bit for bit
    again = gf.train_sgd(
        SGD_CHAIN, init_scale=0.1, model=model, run=checkpointed, **SGD_KW
    )
    assert np.array_equal(again.params.WQ, run.params.WQ)
    with pytest.raises(ValueError, match="model = Model.*but params are for Model"):
        gf.train_sgd(
            SGD_CHAIN,
            run.params[0],
            model=gf.Model(),
            run=gf.Run(progress=False),
            **SGD_KW,
        )


def test_compare_variant_uses_every_parameter():
    model = gf.Model(value=True, norm="rms")
    p = gf.init_params(3, 2, 0.1, seed=1, model=model)
    ts = np.array([0.0, 1.0, 2.0])

    def fake(params, loss, model=model):
        return gf.Trajectory(
            ts=ts,
            loss=np.asarray(loss),
            grad_norm=np.ones(3),
            params=params,
            problem=gf.problems.MarkovAttention(SGD_CHAIN, width=2, model=model),
            settings=gf.FlowSettings(),
            stats=gf.FlowStats(),
        )

    stack = jax.tree.map(lambda x: np.stack([np.asarray(x)] * 3), p)
    moved = eqx_tree_at_gain(stack, 0.5)
    flow, sgd = fake(stack, [1.1, 1.0, 0.9]), fake(moved, [1.1, 1.0, 0.95])
    cmp = gf.compare(flow, sgd)
    # only gain differs (by 0.5 in each of m = 2 entries)
    norm = np.sqrt(sum(np.sum(np.asarray(v[0]) ** 2) for v in jax.tree.leaves(stack)))
    np.testing.assert_allclose(cmp.param_distance, np.sqrt(2 * 0.25) / norm, rtol=1e-12)
    minimal = fake(
        jax.tree.map(
            lambda x: np.stack([np.asarray(x)] * 3), gf.init_params(3, 2, 0.1)
        ),
        [1.1, 1.0, 0.9],
        model=gf.Model(),
    )
    with pytest.raises(
        ValueError, match="the flow and the SGD run have parameters of different"
    ):
        gf.compare(flow, minimal)


def eqx_tree_at_gain(params, delta):
    import equinox as eqx

    return eqx.tree_at(lambda q: q.gain, params, params.gain + delta)


def test_theory_linearize_and_refine_a_variant():
    from gradflow import theory

    model = gf.Model(heads=2, value=True, residual=True, norm="layer")
    chain = gf.chains.random(3, seed=3, concentration=0.7)
    p = random_variant(model, 3, 2, 0.3, 1)
    flat = theory.flatten_params(p)
    back = theory.unflatten_params(flat, 2, 3, model)
    assert back.model == model
    assert np.array_equal(np.asarray(theory.flatten_params(back)), np.asarray(flat))
    lin = gf.linearize(chain, p)
    assert lin.method == "dense" and lin.gauge_rank == -1
    assert lin.blocks == ("W0", "W1", "WQ", "WK", "WV", "gain", "bias")
    np.testing.assert_allclose(lin.block_weights.sum(axis=1), 1.0, atol=1e-12)
    assert lin.modes.WV.shape == (p.num_parameters, 1, 2, 2, 2)
    top = gf.linearize(chain, p, method="lanczos", num_modes=2)
    assert top.eigenvalues[0] == pytest.approx(lin.eigenvalues[0], rel=1e-8)
    # at the origin: the Hessian's top rate is the sigma of docs/variants.md
    origin = theory.origin_point(model, 3, 2)
    assert gf.linearize(chain, origin).unstable_rate == pytest.approx(
        theory_rate(model, chain, 2), rel=1e-9
    )
    # refinement from near the origin finds the origin (a saddle)
    near = jax.tree.map(lambda x, y: x + 1e-4 * y, origin, p)
    point, converged = theory.refine_critical_point(chain, near)
    assert converged and type(point) is gf.VariantParams
    assert theory.classify(gf.linearize(chain, point), chain) == "saddle"
    with pytest.raises(ValueError, match="mode_focus_token is derived for the minimal"):
        theory.mode_focus_token(chain, p, lin)


@pytest.mark.slow
def test_theory_report_of_a_variant_flow():
    """The rows that hold for every model (docs/variants.md): the Hessian's
    escape rate at the origin and at each saddle against the measured slopes."""
    chain = gf.chains.sticky(3, 0.6, 0.5, 0.05)
    traj = gf.integrate(
        chain,
        1e-3,
        width=2,
        t1=300,
        model=gf.Model(heads=2),
        run=gf.Run(progress=False),
    )
    rows = {r["quantity"]: r for r in gf.theory_report(traj)}
    assert "origin escape rate" not in rows  # the minimal model's closed form
    origin = rows["origin escape rate (Hessian at the origin)"]
    assert origin["predicted"] == pytest.approx(
        theory_rate(gf.Model(heads=2), chain, 2), rel=1e-9
    )
    assert origin["rel_error"] < 0.02
    assert rows["unigram plateau loss"]["rel_error"] < 1e-8
    escapes = [r for q, r in rows.items() if q.endswith("escape rate") and "L=" in q]
    assert escapes and all(r["rel_error"] < 0.02 for r in escapes)


@pytest.mark.parametrize(
    "flags, match",
    [
        (["--heads", "0"], "--heads must be an integer >= 1, got '0'"),
        (["--heads", "two"], "--heads must be an integer >= 1, got 'two'"),
        (["--layers", "3"], "--layers must be an integer 1 or 2, got '3'"),
        (["--norm", "batch"], "--norm must be one of none, rms, layer, got 'batch'"),
    ],
)
@pytest.mark.parametrize("command", ["run", "sgd", "sweep"])
def test_cli_model_flags_bad_values(command, flags, match, capsys, tmp_path):
    from gradflow.cli import main

    out = ["--out", str(tmp_path / "out")] if command == "sweep" else []
    assert main([command, *flags, "--t1", "1", *out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err, err


def test_cli_model_flags_make_the_model(tmp_path):
    """The model flags reach the model trained: one step of `gradflow sgd`
    (the flags are shared with `run` and `sweep`: test_cli_run_full_combination
    runs them through `run`; without them the model is the paper's, see
    tests/test_text.py)."""
    from gradflow.cli import main

    out = tmp_path / "sgd"
    argv = "sgd --heads 2 --layers 2 --value --residual --norm rms --d 3 --width 2"
    argv += f" --context 2 --batch-size 2 --t1 0.2 --no-progress --out {out}"
    assert main(argv.split()) == 0
    run = gf.load_sgd(out / "sgd_run.npz")
    model = gf.Model(heads=2, layers=2, value=True, residual=True, norm="rms")
    assert run.problem.model == model and run.params.model == model


@pytest.mark.slow
def test_cli_run_full_combination(tmp_path):
    from gradflow.cli import main

    out = tmp_path / "run"
    argv = "run --heads 2 --layers 2 --value --residual --norm rms --d 3 --width 2"
    argv += f" --t1 20 --num-saves 40 --no-figures --no-progress --out {out}"
    assert main(argv.split()) == 0
    traj = gf.load(out / "trajectory.npz")
    model = gf.Model(heads=2, layers=2, value=True, residual=True, norm="rms")
    assert traj.params.model == model and traj.ok
