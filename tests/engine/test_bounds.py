"""The scale of the filter's error bound (score_tolerance): sum_f |a_f| max_j |b_jf|, or by
Cauchy-Schwarz ||a|| max_j ||b_j|| where smaller. max_row_norm against exact sums, across its
chunks; the bound against BLAS float32 scores, with items parallel to the users (where
Cauchy-Schwarz is an equality); and how much it narrows the bands on normal factors."""

import math

import numpy as np
import pytest

from gpu_model import _defined
from gpureco.engine import _scores


def exact_max_norm(X):
    finite = np.isfinite(X).all(axis=1)
    return math.sqrt(max((math.fsum(float(x) ** 2 for x in row) for row in X[finite].astype(np.float64)),
                         default=0.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_row_norm_across_chunks_leaves_out_non_finite_rows(monkeypatch, rng, dtype):
    monkeypatch.setattr(_scores, "_CHUNK_BYTES", 1000)  # a few rows a chunk
    X = rng.standard_normal((203, 7)).astype(dtype)
    X[-1] = 50  # the largest row, in the last (short) chunk
    assert abs(_scores.max_row_norm(X) - exact_max_norm(X)) <= 1e-14 * exact_max_norm(X)
    X[-1, 3] = np.nan  # left out now: the next largest decides
    X[5, 0] = np.inf
    want = exact_max_norm(X)
    assert want < 50 and abs(_scores.max_row_norm(X) - want) <= 1e-14 * want
    assert _scores.max_row_norm(np.full((4, 3), np.nan, dtype=dtype)) == 0.0
    assert _scores.max_row_norm(np.zeros((0, 3), dtype=dtype)) == 0.0
    assert _scores.max_row_norm(np.full((2, 2), 1e300)) == np.inf  # overflowed: a bound that bounds nothing


def test_the_norm_bound_holds_for_blas_where_cauchy_schwarz_is_an_equality(rng):
    """Items that are users' factors scaled (a . b = ||a|| ||b||), the largest of them too: BLAS's
    float32 scores within the bound (before its doubling) of the defined ones."""
    A = rng.standard_normal((30, 64)).astype(np.float32)
    B = np.concatenate([rng.standard_normal((500, 64)), A * 3.0, -A * 2.5]).astype(np.float32)
    bias = rng.standard_normal(B.shape[0]) * 5
    item_abs_max, bias_abs_max = _scores.magnitudes(B, bias)
    norm = _scores.max_row_norm(B)
    bound = _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32, item_norm_max=norm) / 2
    plain = _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32) / 2
    assert (bound < plain).all()  # the norms decide here
    fast = (A @ B.T + bias.astype(np.float32)).astype(np.float64)
    users, items = np.repeat(np.arange(A.shape[0]), B.shape[0]), np.tile(np.arange(B.shape[0]), A.shape[0])
    defined = _defined(users, items, A, B, A.shape[1], bias).reshape(fast.shape)
    assert (np.abs(fast - defined) <= bound[:, None]).all()
    top = np.argmax(np.linalg.norm(A.astype(np.float64), axis=1))  # its item 3 a scores ||a|| max ||b_j||
    aligned = np.abs(A[top].astype(np.float64) @ B.astype(np.float64).T).max()
    np.testing.assert_allclose(aligned, np.linalg.norm(A[top].astype(np.float64)) * norm, rtol=1e-6)


def test_the_norm_bound_narrows_the_bands_on_normal_factors(rng):
    """128 normal factors, 100,000 items: each factor's largest |b| is about 4.4, the largest
    norm about 13.5, so the bound's scale falls by about 3."""
    A = rng.standard_normal((50, 128)).astype(np.float32)
    B = rng.standard_normal((100_000, 128)).astype(np.float32)
    item_abs_max, bias_abs_max = _scores.magnitudes(B, np.zeros(0))
    plain = _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32)
    tight = _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32, item_norm_max=_scores.max_row_norm(B))
    assert 2.5 < np.median(plain / tight) < 4.0


@pytest.mark.parametrize("tiny", ["users", "items"])
def test_the_norm_bound_holds_where_the_squares_underflow(rng, tiny):
    """Factors of 1e-200 on one side and 1e100 on the other: the products (about 1e-100) are
    normal numbers, but the squares of the small factors underflow to zero, so a computed norm
    of that side is 0. The bound must still hold (each norm is allowed sqrt(F * tiny) for
    them), and computing it raises no floating-point warning."""
    small, large = rng.standard_normal((20, 16)) * 1e-200, rng.standard_normal((300, 16)) * 1e100
    A, B = (small, large) if tiny == "users" else (large[:20], np.concatenate([small, small * 3]))
    with np.errstate(all="raise"):
        item_abs_max, bias_abs_max = _scores.magnitudes(B, np.zeros(0))
        bound = _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float64,
                                        item_norm_max=_scores.max_row_norm(B)) / 2
    fast = A @ B.T
    users, items = np.repeat(np.arange(A.shape[0]), B.shape[0]), np.tile(np.arange(B.shape[0]), A.shape[0])
    defined = _defined(users, items, A, B, A.shape[1], None).reshape(fast.shape)
    assert np.abs(defined).max() > 1e-120  # normal scores: the error is relative, far above the absolute term
    assert (np.abs(fast - defined) <= bound[:, None]).all()


def test_too_many_factors_for_the_bound_is_an_error():
    """gamma_n = n u / (1 - n u) holds only for n u < 1: beyond it (2^21 factors for TF32 tiles,
    whose correction sums 2F terms at u = 2^-22; 2^24 - 2 for float32) there is no bound, and a
    clear error says so, where a negative gamma would have placed items without proof."""
    assert _scores._gamma(2**22, 2.0**-22) == math.inf and _scores._gamma(2**23, 2.0**-22) == math.inf
    assert 0 < _scores._gamma(2**22 - 1, 2.0**-22) < math.inf
    for n_factors, allowed in ((2**21 - 8, True), (2**21, False)):
        rows = np.ones((1, n_factors), dtype=np.float32)
        magnitudes = np.ones(n_factors)
        assert np.isfinite(_scores.score_tolerance(rows, magnitudes, 0.0, np.float32)).all()  # FP32: fine
        if allowed:
            assert np.isfinite(_scores.score_tolerance(rows, magnitudes, 0.0, np.float32, tf32=True)).all()
        else:
            with pytest.raises(ValueError, match=r"'A' and 'B' have 2097152 factors: too many .* TF32 .*tf32=False"):
                _scores.score_tolerance(rows, magnitudes, 0.0, np.float32, tf32=True)

