"""osprey._C's kernels (scatter_add_rows, dot_pairs, dot_pairs_grad) against numpy references, and
their shape / index errors."""
import numpy as np
import pytest

from osprey import _C


def pairs_reference(z):
    iu = np.triu_indices(z.shape[1], 1)
    return np.einsum("bik,bjk->bij", z, z)[:, iu[0], iu[1]]


@pytest.mark.parametrize("d", [16, 5])  # 16: the unrolled path; 5: any width
def test_dot_pairs_and_grad_equal_the_reference(d):
    rng = np.random.default_rng(d)
    z = rng.standard_normal((7, 6, d)).astype(np.float32)
    out = np.empty((7, 15), dtype=np.float32)
    _C.dot_pairs(z, out)
    np.testing.assert_allclose(out, pairs_reference(z), rtol=1e-5, atol=1e-5)
    g = rng.standard_normal((7, 15)).astype(np.float32)
    dg = np.zeros((7, 6, 6), dtype=np.float32)
    iu = np.triu_indices(6, 1)
    dg[:, iu[0], iu[1]] = g
    ref = np.matmul(dg + dg.transpose(0, 2, 1), z)
    dz = np.full_like(z, np.nan)  # overwritten, not accumulated
    _C.dot_pairs_grad(z, g, dz)
    np.testing.assert_allclose(dz, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="pairs"):
        _C.dot_pairs(z, np.empty((7, 14), dtype=np.float32))


def test_scatter_add_rows_sums_per_index_and_refuses_bad_indices():
    rng = np.random.default_rng(1)
    index = rng.integers(0, 5, 40)
    src = rng.standard_normal((40, 3)).astype(np.float32)
    out = np.zeros((5, 3), dtype=np.float32)
    _C.scatter_add_rows(index, src, out)
    ref = np.zeros((5, 3), dtype=np.float32)
    np.add.at(ref, index, src)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"index\[1\] = 5 is outside \[0, 5\)"):
        _C.scatter_add_rows(np.array([0, 5]), src[:2], out)
    with pytest.raises(ValueError, match="src is"):
        _C.scatter_add_rows(index, src[:3], out)
