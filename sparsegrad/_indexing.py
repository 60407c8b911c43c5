"""Reading from and writing into forward values by index.

Every read is a row gather of the Jacobian: the same key is applied to the
array of row numbers ``arange(size).reshape(shape)``, so numpy's own indexing
rules (negative entries, masks, ``None``, ``Ellipsis``, broadcasting of index
arrays) decide which rows are taken.

Writes are recorded lazily in an :class:`Assembly`: the value is written at
once, and the Jacobian keeps, for every row, which written piece owns it and
which row of that piece it is.  A loop of many small writes therefore costs
time proportional to what is written, not to the size of the target, and the
final Jacobian is assembled by one gather when it is needed.

>>> import numpy as np
>>> from sparsegrad import forward
>>> x = forward.seed(np.arange(3.0))
>>> F = np.zeros(3, like=x)
>>> F[1:] = x[:2] * 2
>>> F.dvalue.toarray()
array([[0., 0., 0.],
       [2., 0., 0.],
       [0., 2., 0.]])
"""
import math
import numbers

import numpy as np

from . import _jacobian as jac
from . import _structure

INDEX_DTYPE = np.int64

__all__ = ["row_index", "slice_key", "only_slices", "Assembly"]

#: up to this many pieces are gathered one by one; more are stacked and gathered once
_FEW_PIECES = 8

#: an assembly of fewer runs of consecutive rows of its pieces than this is
#: stacked from them (slice writes: one merge, as a concatenation)
_MAX_RUNS = 64


def row_index(shape, xp=np):
    """``arange(size).reshape(shape)``: the Jacobian row of every element (a read-only view).

    ``xp``: the array module the row numbers are made with (a device's, for
    index arrays that live there).
    """
    return jac._arange(math.prod(shape), xp).reshape(shape)


def slice_key(shape, key):
    """A hashable form of an indexing key, for sharing gathers (None: do not share).

    Slices and ints give their normal form; a 1-d integer index array gives its
    ``id``, under which a gather is reused only for the same live, unchanged
    array (see :func:`sparsegrad._value._rows_read`; a device's row numbers
    are compared).

    >>> slice_key((5,), slice(1, -1)), slice_key((2, 3), (0, slice(None, None, 2)))
    (((5,), (1, 4, 1)), ((2, 3), 0, (0, 3, 2)))
    """
    if only_slices(key, len(shape)):  # (the common reads first)
        parts = key if type(key) is tuple else (key,)
        return (shape,) + tuple([k.indices(n) for k, n in zip(parts, shape)])
    if getattr(key, "ndim", 0) == 1 and key.dtype.kind in "iu" and len(shape) == 1:
        return ("array", shape, id(key))  # (host or device arrays)
    parts = key if isinstance(key, tuple) else (key,)
    if len(parts) > len(shape):
        return None
    normal = [shape]
    for part, size in zip(parts, shape):
        if isinstance(part, slice):
            normal.append(part.indices(size))
        elif isinstance(part, numbers.Integral) and not isinstance(part, bool):
            normal.append(int(part) % size if -size <= part < size else None)
        else:
            return None
    return None if None in normal else tuple(normal)


def only_slices(key, ndim):
    """Whether ``key`` reads an array of ``ndim > 0`` dimensions by slices alone:
    a slice, or a tuple of at most ``ndim`` slices (``u[1:-1]``, ``U[1:-1, 2:]``).

    >>> only_slices(slice(1, None), 1), only_slices((slice(None), 0), 2)
    (True, False)
    """
    return ndim > 0 and (type(key) is slice or (
        type(key) is tuple and len(key) <= ndim and all(type(k) is slice for k in key)))


def _as_slice(rows, n):
    """``rows`` as a slice when they are consecutive row numbers (a slice write:
    a view of the row numbers ``0 .. n - 1``; one row), for assignments without
    an index."""
    if type(rows) is np.ndarray and rows.ndim == 1 and (rows.size == 1 or (
            rows.size and rows.base is jac._arange(n) and rows.strides == (rows.itemsize,))):
        start = int(rows[0])
        return slice(start, start + rows.size)
    return rows


def broadcast_rows(shape, target_shape):
    """Row numbers of a value of ``shape`` broadcast to ``target_shape`` as numpy's
    assignment does (leading axes of length 1 beyond the target's are dropped)."""
    rows = row_index(shape)
    while rows.ndim > len(target_shape) and rows.shape[0] == 1:
        rows = rows[0]
    return np.broadcast_to(rows, target_shape)


class EagerRows:
    """The Jacobian algebra an :class:`Assembly` builds with: the eager way's
    (``sparsegrad._jacobian``).  The recorded evaluation's compiler gives its
    own, of the same methods, so that one assembly serves both engines."""

    @staticmethod
    def seed(J):
        return J.seed

    @staticmethod
    def n_rows(J):
        return J.n_rows

    @staticmethod
    def is_zero(J):
        return J.is_zero

    @staticmethod
    def check(pieces):
        jac.common_seed(pieces)

    @staticmethod
    def zero(seed, n):
        return jac.zero(seed, n)

    @staticmethod
    def add(jacobians):
        return jac.add(jacobians)

    @staticmethod
    def vstack(jacobians):
        return jac.vstack(jacobians)

    @staticmethod
    def stacked(seed, blocks):
        return jac.Jacobian.stacked(seed, blocks)

    @staticmethod
    def take_rows(J, rows):
        """Rows ``rows`` of ``J`` (-1: an empty row), their matrices of their own."""
        return jac.take_rows(J, rows)

    @staticmethod
    def slice_rows(J, read):
        """Rows ``read`` (a slice of step 1) of ``J``, named as a basic read's."""
        return jac.take_rows(J, jac._arange(J.n_rows)[read], slice_key((J.n_rows,), read),
                             may_be_empty=False)

    @staticmethod
    def kept_rows(seed, J, key, rows):
        """``take_rows(J, rows)`` by row numbers that the seed's structure keeps
        under ``key``: when equal to the kept ones, the kept array itself, under
        whose ``id`` the gathered selections are cached too (see
        :meth:`Assembly._piece_rows`)."""
        structure = seed.structure
        known = _structure.recall(structure.moves, key)
        found = known is not None and jac._same_rows(known[0], rows)
        _structure.looked_up(found)
        if found:
            rows = known[0]
        else:
            rows = jac._readonly(rows)
            _structure.store(structure.moves, key, (rows, None), jac.MAX_MOVES)
            structure.keep(rows)
        return jac.take_rows(J, rows, ("array", (J.n_rows,), id(rows)))


class Assembly:
    """A Jacobian under construction by index writes.

    ``pieces[k]`` is a Jacobian; row ``r`` of the assembled Jacobian is row
    ``position[r]`` of ``pieces[owner[r]]``, or a zero row when ``owner[r] == -1``.
    While every write is a slice taken from consecutive rows of its piece
    (``F[1:-1] = ...; F[0] = ...``), the rows are kept as runs instead, a few
    ``(start, stop, piece, first row of the piece)`` in order, and ``owner``
    and ``position`` are made from them only when a write or a read needs
    them: writes then cost no pass over the rows.

    ``rows``: the Jacobian algebra of the pieces (:class:`EagerRows`, or the
    recorded evaluation's compiler's, which assembles as this one does).
    """

    __slots__ = ("seed", "pieces", "n_rows", "rows", "_runs", "_owner", "_position")

    def __init__(self, base, rows=EagerRows):
        self.rows = rows
        self.seed = rows.seed(base)
        self.pieces = [base]
        self.n_rows = rows.n_rows(base)
        self._runs = [(0, self.n_rows, 0, 0)]
        self._owner = self._position = None

    @property
    def owner(self):
        self._to_arrays()
        return self._owner

    @property
    def position(self):
        self._to_arrays()
        return self._position

    def _to_arrays(self):
        """``owner`` and ``position`` from the runs, once (later writes go to them)."""
        if self._runs is None:
            return
        owner = np.empty(self.n_rows, dtype=INDEX_DTYPE)
        position = np.empty(self.n_rows, dtype=INDEX_DTYPE)
        for start, stop, k, first in self._runs:
            owner[start:stop] = k
            position[start:stop] = np.arange(first, first + stop - start)
        self._owner, self._position, self._runs = owner, position, None

    def _paint(self, start, stop, k, first):
        """Rows ``start .. stop - 1`` now from rows ``first ..`` of piece ``k``."""
        runs = []
        for a, b, j, f in self._runs:
            if b <= start or a >= stop:
                runs.append((a, b, j, f))
                continue
            if a < start:
                runs.append((a, start, j, f))
            if b > stop:
                runs.append((stop, b, j, f + (stop - a)))
        runs.append((start, stop, k, first))
        runs.sort()
        self._runs = runs

    def write(self, rows, piece, piece_rows):
        """Rows ``rows`` now come from rows ``piece_rows`` of ``piece`` (``None``: zero)."""
        rows = _as_slice(rows, self.n_rows)
        zero = piece is None or self.rows.is_zero(piece)
        if not zero:
            self.rows.check([self.pieces[0], piece])
        if self._runs is not None and type(rows) is slice:
            source = None if zero else _as_slice(piece_rows, self.rows.n_rows(piece))
            if zero or type(source) is slice:
                self._paint(rows.start, rows.stop, -1 if zero else len(self.pieces),
                            0 if zero else source.start)
                if not zero:
                    self.pieces.append(piece)
                if len(self._runs) > _MAX_RUNS:
                    self._to_arrays()
                return
        if zero:
            self.owner[rows] = -1
            return
        self.owner[rows] = len(self.pieces)
        self.position[rows] = piece_rows
        self.pieces.append(piece)

    def take_rows(self, rows):
        """The assembled Jacobian's rows ``rows``, touching only the pieces they use."""
        rows = np.asarray(rows, dtype=INDEX_DTYPE).reshape(-1)
        return self._assembled(self.owner[rows], self.position[rows])

    def _assembled(self, owner, position):
        """The Jacobian whose row ``r`` is row ``position[r]`` of piece ``owner[r]``."""
        if len(owner) > 1:
            # runs of rows taken from consecutive rows of one piece (slice
            # writes): few of them are stacked as blocks, merged in one pass
            breaks = np.flatnonzero((owner[1:] != owner[:-1])
                                    | (position[1:] != position[:-1] + 1)) + 1
            if len(breaks) < _MAX_RUNS:
                starts = [0] + breaks.tolist()
                ends = starts[1:] + [len(owner)]
                return self._stacked([(a, b, int(owner[a]), int(position[a]))
                                      for a, b in zip(starts, ends)])
        # pieces owning at least one row, in O(rows) (owner -1 means a zero row)
        used = np.flatnonzero(np.bincount(owner + 1, minlength=len(self.pieces) + 1)[1:])
        if len(used) == 0:
            return self.rows.zero(self.seed, len(owner))
        if len(used) <= _FEW_PIECES:
            # gather each piece's terms into place and add them: the terms are
            # merged once, when the result is needed, without stacking copies
            return self.rows.add([self._piece_rows(k, np.where(owner == k, position, -1))
                                  for k in used])
        stacked = self.rows.vstack([self.pieces[k] for k in used])
        offsets = np.zeros(used[-1] + 1, dtype=INDEX_DTYPE)
        offsets[used] = np.cumsum([0] + [self.rows.n_rows(self.pieces[k]) for k in used[:-1]])
        global_rows = np.where(owner >= 0, offsets[np.maximum(owner, 0)] + position, -1)
        return self.rows.take_rows(stacked, global_rows)

    def _stacked(self, runs):
        """The assembled Jacobian as blocks, one per run ``(start, stop, piece,
        first row of the piece)``: a piece's consecutive rows (read by a slice,
        whose gathers the structure keeps as a basic read's), or zero rows."""
        algebra, blocks = self.rows, []
        for a, b, k, first in runs:
            piece = self.pieces[k] if k >= 0 else None
            if piece is None or algebra.is_zero(piece):
                blocks.append(algebra.zero(self.seed, b - a))
                continue
            if first == 0 and b - a == algebra.n_rows(piece):
                blocks.append(piece)
                continue
            blocks.append(algebra.slice_rows(piece, slice(first, first + b - a)))
        if not blocks:
            return algebra.zero(self.seed, self.n_rows)
        return blocks[0] if len(blocks) == 1 else algebra.stacked(self.seed, blocks)

    def _piece_rows(self, k, rows):
        """``take_rows`` of piece ``k`` (rows ``-1`` where it owns none), its row
        numbers kept in the seed's structure.

        A residual assembled by writes (``F[1:-1] = ...; F[0] = ...``) writes
        the same way at every evaluation: the row numbers found equal to the
        kept ones are the kept array itself, under which the piece's gathered
        selections are cached too, so that the final merge meets the same
        matrices and goes by a merge plan.
        """
        piece = self.pieces[k]
        # (the same key for assemblies of one layout: one entry each, whose rows
        # are compared, all of them, at every evaluation: the key only finds
        # the entry, the rows found are always equal to this assembly's own)
        key = ("assembly", len(rows), k, len(self.pieces), self.rows.n_rows(piece))
        return self.rows.kept_rows(self.seed, piece, key, rows)

    def materialize(self):
        if self._runs is not None:
            return self._stacked(self._runs)
        return self._assembled(self.owner, self.position)
