"""``python -m asv_benchmarks.hessian_peers`` at a 4x4 grid, so that it cannot rot.

CasADi and asdex are benchmark-only: without them the sparsegrad columns are
still measured and the missing tools are reported as skipped; with them their
Hessians must agree with sparsegrad's.
"""
import os
import sys

import numpy as np
import pytest
import scipy.sparse as sp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:   # asv_benchmarks is not installed; pytest may start elsewhere
    sys.path.insert(0, ROOT)

from asv_benchmarks import hessian_peers  # noqa: E402

PEER_NAMES = {name for name, _ in hessian_peers.PEERS.values()}


def _run(argv):
    lines = []
    (row,) = hessian_peers.main(argv, out=lines.append)
    return row, "\n".join(lines)


def test_peers_absent_are_skipped(monkeypatch):
    for module in ("casadi", "jax", "asdex"):
        monkeypatch.setitem(sys.modules, module, None)   # import raises ImportError
    row, text = _run(["--size", "4", "--quick"])
    assert row["n"] == 4 and row["nnz"] == 100
    assert set(row["ratios"]) == {"sparsegrad", "trace=False"}
    assert all(np.isfinite(r) and r > 0 for r in row["ratios"].values())
    assert row["energy"] > 0
    assert set(row["skipped"]) == PEER_NAMES
    for name in PEER_NAMES:
        assert "%s skipped: not importable" % name in text
    assert "sparsegrad" in text.splitlines()[1]


def test_installed_peers_agree_with_sparsegrad():
    row, text = _run(["--size", "4", "--quick"])
    for name in PEER_NAMES:
        assert (name in row["ratios"]) != (name in row["skipped"])
        if name in row["ratios"]:
            assert row["notes"][name].endswith("same pattern")
            assert row["setup"][name] >= 0


def test_unknown_peer_is_refused():
    with pytest.raises(SystemExit):
        hessian_peers.main(["--size", "4", "--peers", "nosuchtool"], out=lambda line: None)


def test_check_refuses_wrong_hessians():
    import sparsegrad
    energy, x0 = hessian_peers._problems.ENERGIES["minsurf"].setup(4)
    value, grad, H = sparsegrad.value_grad_and_hessian(energy)(x0)
    assert hessian_peers.check((value, grad, H.copy()), (value, grad, H)) == "same pattern"
    off = H.copy()
    off.data[0] *= 1 + 1e-8
    with pytest.raises(AssertionError, match="relative errors"):
        hessian_peers.check((value, grad, off), (value, grad, H))
    # a stored zero at two nodes far apart: a pattern entry the values cannot show
    coo = H.tocoo()
    wider = sp.coo_matrix((np.r_[coo.data, 0.0], (np.r_[coo.row, 0], np.r_[coo.col, 15])),
                          shape=H.shape).tocsr()
    assert wider.nnz == H.nnz + 1
    assert hessian_peers.check((value, grad, wider), (value, grad, H)) == "pattern +1 entries"
    with pytest.raises(AssertionError, match="pattern lacks 1 "):
        hessian_peers.check((value, grad, H), (value, grad, wider))
