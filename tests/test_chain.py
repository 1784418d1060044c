import numpy as np
import pytest

import gradflow as gf


def test_pi_is_stationary_and_exact():
    for seed in range(5):
        chain = gf.chains.random(12, seed=seed, concentration=0.5)
        P, pi = np.asarray(chain.P), np.asarray(chain.pi)
        assert np.all(pi > 0)
        assert abs(pi.sum() - 1) < 1e-14
        assert np.max(np.abs(pi @ P - pi)) < 1e-14


def test_pi_two_state_closed_form():
    a, b = 0.3, 0.05
    chain = gf.MarkovChain([[1 - a, a], [b, 1 - b]])
    np.testing.assert_allclose(chain.pi, [b / (a + b), a / (a + b)], rtol=1e-15)


def test_sticky_matches_spec():
    d, top, rho, delta = 6, 0.5, 0.5, 0.05
    chain = gf.chains.sticky(d, top, rho, delta)
    rest = (1 - top) / (d - 1) * (1 + delta * np.linspace(1, -1, d - 1))
    pi = np.concatenate([[top], rest])
    pi = pi / pi.sum()
    np.testing.assert_allclose(chain.pi, pi, rtol=1e-13)
    P = (1 - rho) * np.outer(np.ones(d), pi) + rho * np.eye(d)
    np.testing.assert_allclose(chain.P, P, rtol=1e-15)
    # delta = 0: the rare tokens are exactly symmetric
    sym = gf.chains.sticky(d, top, rho, 0.0)
    assert np.ptp(np.asarray(sym.pi)[1:]) == 0


def test_zipf_and_random_families():
    z = gf.chains.zipf(8, exponent=1.0)
    ranks = np.arange(1, 9)
    np.testing.assert_allclose(z.pi, (1 / ranks) / np.sum(1 / ranks), rtol=1e-13)
    r1 = gf.chains.random(8, seed=3)
    r2 = gf.chains.random(8, seed=3)
    r3 = gf.chains.random(8, seed=4)
    np.testing.assert_array_equal(r1.P, r2.P)
    assert not np.allclose(r1.P, r3.P)
    assert np.all(np.asarray(r1.P) > 0)


def test_entropies():
    chain = gf.chains.sticky(5, 0.4, 0.3, 0.1)
    pi, P = np.asarray(chain.pi), np.asarray(chain.P)
    assert float(chain.unigram_entropy) == pytest.approx(
        -np.sum(pi * np.log(pi)), rel=1e-14
    )
    cond = -np.sum(pi[:, None] * P * np.log(P))
    assert float(chain.conditional_entropy) == pytest.approx(cond, rel=1e-14)
    assert float(chain.conditional_entropy) <= float(chain.unigram_entropy) <= np.log(5)


def test_tokens():
    chain = gf.MarkovChain([[0.5, 0.5], [0.2, 0.8]], tokens=["a", "b"])
    assert chain.tokens == ("a", "b") and chain.label(1) == "b"
    assert gf.MarkovChain([[0.5, 0.5], [0.2, 0.8]]).label(1) == "1"
    with pytest.raises(ValueError, match="got 3 token labels for a chain of d = 2"):
        gf.MarkovChain([[0.5, 0.5], [0.2, 0.8]], tokens=["a", "b", "c"])


def test_rows_renormalised_within_tolerance():
    P = np.array([[0.5, 0.5 + 1e-10], [0.2, 0.8]])
    chain = gf.MarkovChain(P)
    np.testing.assert_allclose(np.asarray(chain.P).sum(axis=1), 1.0, atol=1e-15)


@pytest.mark.parametrize(
    "P, error, match",
    [
        ([[0.5, np.nan], [0.5, 0.5]], ValueError, r"non-finite entry: P\[0, 1\] = nan"),
        ([[0.5, np.inf], [0.5, 0.5]], ValueError, r"non-finite entry: P\[0, 1\] = inf"),
        ([[1.2, -0.2], [0.5, 0.5]], ValueError, r"negative entry: P\[0, 1\] = -0.2"),
        (
            [[0.5, 0.4], [0.5, 0.5]],
            ValueError,
            r"row 0 of transition matrix P sums to 0.9",
        ),
        (
            [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]],
            ValueError,
            r"must be square, got shape \(2, 3\)",
        ),
        ([[1.0]], ValueError, r"need at least d = 2 tokens, got d = 1"),
        ([0.5, 0.5], ValueError, r"must be 2-dimensional, got shape \(2,\)"),
        (
            np.ones((2, 2, 2)) / 2,
            ValueError,
            r"must be 2-dimensional, got shape \(2, 2, 2\)",
        ),
        (np.zeros((0, 0)), ValueError, r"is empty \(shape \(0, 0\)\)"),
        (
            [["a", "b"], ["c", "d"]],
            TypeError,
            r"must hold real numbers, got an array of dtype <U1",
        ),
        (np.array([[0.5, 0.5], [0.5, None]], dtype=object), TypeError, "dtype object"),
        ([[0.5, 0.5j], [0.5, 0.5]], TypeError, "must be real"),
        ([[0.5, 0.5], [0.5]], ValueError, "could not be read as an array"),
        (
            [[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.5, 0.5]],
            ValueError,
            r"reducible .* 2 communicating classes: \{0\}; \{1, 2\}",
        ),
        ([[0.0, 1.0], [1.0, 0.0]], ValueError, "periodic with period 2"),
        (
            [[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0]],
            ValueError,
            "periodic with period 4",
        ),
    ],
)
def test_invalid_chains(P, error, match):
    with pytest.raises(error, match=match):
        gf.MarkovChain(P)


def test_aperiodic_with_cycles_of_coprime_length():
    # cycles of length 2 and 3 through token 0: gcd 1, aperiodic
    P = np.zeros((4, 4))
    P[0, 1] = P[0, 2] = 0.5
    P[1, 0] = 1
    P[2, 3] = 1
    P[3, 0] = 1
    chain = gf.MarkovChain(P)
    assert np.max(np.abs(np.asarray(chain.pi) @ P - np.asarray(chain.pi))) < 1e-15


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: gf.chains.sticky(1), "d must be at least 2, got d = 1"),
        (
            lambda: gf.chains.sticky(6, top_mass=1.5),
            r"top_mass must lie in \(0, 1\), got top_mass = 1.5",
        ),
        (
            lambda: gf.chains.sticky(6, rho=1.0),
            r"rho must lie in \[0, 1\), got rho = 1.0",
        ),
        (
            lambda: gf.chains.sticky(6, delta=1.0),
            r"delta must lie in \(-1, 1\), got delta = 1.0",
        ),
        (
            lambda: gf.chains.zipf(4, exponent=-1),
            "exponent must be finite and >= 0, got -1.0",
        ),
        (
            lambda: gf.chains.random(4, concentration=0),
            "concentration must be > 0, got 0.0",
        ),
    ],
)
def test_invalid_family_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_known_pi_is_checked():
    P = np.array([[0.9, 0.1], [0.5, 0.5]])
    with pytest.raises(ValueError, match="pi is not the stationary distribution"):
        gf.MarkovChain(P, pi=[0.5, 0.5])
    chain = gf.MarkovChain(P, pi=[5 / 6, 1 / 6])
    np.testing.assert_allclose(chain.pi, gf.MarkovChain(P).pi, rtol=1e-14)


def _reference_verdict(A: np.ndarray) -> str:
    """Irreducible and aperiodic from powers of the adjacency matrix (small d):
    every token reaches every other in under d steps, and the period is the gcd
    of the lengths n <= 3d of the cycles through token 0."""
    d = A.shape[0]
    reach = np.linalg.matrix_power(np.eye(d, dtype=np.int64) + A, d - 1) > 0
    if not reach.all():
        return "reducible"
    power, period = np.eye(d, dtype=np.int64), 0
    for n in range(1, 3 * d + 1):
        power = np.minimum(power @ A, 1)
        if power[0, 0]:
            period = np.gcd(period, n)
    return "ok" if period == 1 else f"period {period}"


def test_irreducible_and_aperiodic_as_matrix_powers_say():
    # the breadth-first checks give the verdict of matrix powers on random
    # sparse graphs (with and without self-loops)
    rng = np.random.default_rng(0)
    verdicts = set()
    for _ in range(120):
        d = int(rng.integers(2, 8))
        A = (rng.random((d, d)) < rng.uniform(0.15, 0.5)).astype(np.int64)
        if rng.random() < 0.5:
            np.fill_diagonal(A, 0)
        A[A.sum(axis=1) == 0, 0] = 1
        P = A / A.sum(axis=1, keepdims=True)
        expected = _reference_verdict(A)
        verdicts.add(expected.split()[0])
        if expected == "ok":
            gf.MarkovChain(P)
        else:
            with pytest.raises(ValueError, match=expected):
                gf.MarkovChain(P)
    assert verdicts == {"ok", "reducible", "period"}


def test_checks_of_a_chain_larger_than_one_block():
    # d = 3000: P is checked 1398 rows at a time (2^22 entries), so each
    # check runs over three blocks; the verdicts and messages are the same
    d = 3000
    rows = np.arange(d)
    P = np.zeros((d, d))
    P[rows, (rows + 1) % d] = P[rows, (rows + 3) % d] = 0.5  # walks of even length
    with pytest.raises(ValueError, match="periodic with period 2"):
        gf.MarkovChain(P)
    half = d // 2
    P = np.zeros((d, d))
    P[rows, rows] = 0.5
    P[rows, (rows + 1) % half + (rows >= half) * half] = 0.5  # two cycles
    with pytest.raises(ValueError, match=r"2 communicating classes: \{0, 1, 2, "):
        gf.MarkovChain(P)
    P = np.full((d, d), 1.0 / d)
    P[2500, 7], P[2999, 1] = np.nan, np.inf
    with pytest.raises(ValueError, match=r"P\[2500, 7\] = nan \(2 non-finite"):
        gf.MarkovChain(P)
    P[2500, 7], P[2999, 1], P[1400, 2] = 1.0 / d, 1.0 / d, -1e-3
    with pytest.raises(ValueError, match=r"P\[1400, 2\] = -0.001 \(1 negative"):
        gf.MarkovChain(P)
    P[1400, 2] = 1.0 / d
    P[2999, 0] += 1e-6
    with pytest.raises(ValueError, match="row 2999 of transition matrix P sums to"):
        gf.MarkovChain(P)


def test_chain_from_a_sparse_matrix():
    # a SciPy sparse matrix (bigram counts are mostly zeros) gives the chain of
    # its dense form, and the chain keeps its own copy of P
    sparse = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(1)
    counts = sparse.random(40, 40, density=0.1, random_state=rng) + sparse.eye(40)
    counts = sparse.csr_matrix(counts + sparse.eye(40, k=1) + sparse.eye(40, k=-39))
    P = counts.multiply(1.0 / counts.sum(axis=1)).tocsr()
    dense = gf.MarkovChain(P.toarray())
    chain = gf.MarkovChain(P)
    np.testing.assert_array_equal(chain.P, dense.P)
    np.testing.assert_array_equal(chain.pi, dense.pi)
    with pytest.raises(ValueError, match="row 0 of transition matrix P sums to"):
        gf.MarkovChain(counts)
    owned = P.toarray()
    chain = gf.MarkovChain(owned)
    owned[0, 0] += 1.0
    assert float(chain.P[0, 0]) == float(P[0, 0])
