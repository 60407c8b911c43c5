"""Structure kept between evaluations: selections, index copies, row numbers of moves,
merged patterns, merge plans, constant matrices and their products' patterns.

A Newton loop evaluates the same residual many times with the same shapes,
slices, index arrays and paddings; only the values change.  The structural
work of an evaluation (the selection matrix of ``x[1:-1]`` or ``x[east]``, the
read-only copy of the index array ``east``, the row numbers of ``np.pad``, the
compositions of such selections) depends on nothing else, so seeds of one
size on the host, in one thread, share one :class:`Structure` that keeps it,
and a later evaluation finds it instead of rebuilding it.  (Not across
threads: evaluations running at the same time would interleave their stores,
one replacing or evicting an entry that another has used once and reads again,
and that evaluation's terms would no longer share one matrix, so its sums
would be rounded differently than with the cache off.)

Never stale, by construction.  Every entry is found under a key that
determines it exactly (a shape with normalised slices, the arguments of a data
movement), or under an index array's ``id`` and the length it reads (which
its negative entries count from), and then only after its stored copy was
compared with the array as it is now (an ``id`` outlives its array, and an
array can be written in place): a changed branch, index array or shape misses
and computes afresh.  docs/architecture.md lists every cache with its key.  The entries are immutable (read-only arrays, the
immutable :class:`sparsegrad._jacobian.CSR`).

Bounded and clearable.  The limit is :func:`structure_cache_limit`: by
default 128 MiB or twice the bytes of the largest Jacobian made so far,
whichever is more (the structure of an evaluation took up to 1.3 times its
Jacobian's bytes, measured on Bratu 3000x3000; a problem that outgrows a
fixed bound rebuilds its structure at every evaluation); fixed when set by
it or by ``SPARSEGRAD_STRUCTURE_CACHE_BYTES`` in the environment (``0``
keeps structure only within one evaluation).  The bytes of the arrays kept
are counted as they are stored, a bound from above (an entry evicted or
replaced stays counted, an array two entries share counts twice); when that
count passes the limit, the arrays actually held are counted, each once, and
only if they pass it too is every structure forgotten (an evaluation under
way keeps its own to its end, later ones start afresh).
:func:`structure_cache_info` reports the bytes held and the lookups that hit
or missed; :func:`clear_structure_cache` empties it.  Device seeds (CuPy) keep
theirs apart from the host's, on the device, under the same limit.

>>> import numpy as np
>>> from sparsegrad import forward
>>> clear_structure_cache()
>>> east = np.array([1, 2, 0])
>>> for _ in range(2):
...     J = (forward.seed(np.ones(3))[east] * 2).dvalue
>>> info = structure_cache_info()
>>> info.hits >= 1 and info.held_bytes > 0
True
"""
import collections
import os
import threading

from ._memory import _whole_bytes  # (one rule for byte counts)
from ._memory import follow_jacobian as follow_pool
from ._settings import environment_int

__all__ = ["Structure", "for_seed", "recall", "recall_or_note", "store", "looked_up",
           "follow_jacobian",
           "structure_cache_info", "structure_cache_limit", "clear_structure_cache",
           "StructureInfo"]

StructureInfo = collections.namedtuple("StructureInfo",
                                       "enabled held_bytes limit hits misses sizes")
StructureInfo.__doc__ = """State of the structure kept between evaluations.

enabled : seeds of one size share their structure (the limit is above zero)
held_bytes : bytes of the arrays the structures hold, each array counted once
limit : past this many bytes every structure is emptied
hits, misses : lookups that found an entry, and those that built one
sizes : the seed sizes that have a structure now
"""

_DEFAULT_BYTES = 128 * 2 ** 20
#: bytes of structure kept per byte of the largest Jacobian made
_BYTES_PER_JACOBIAN = 2
#: seed sizes that keep a structure at once in one thread (its least recently
#: seeded is dropped)
_MAX_SIZES = 8
#: structures kept at once over all threads (the least recently seeded is
#: dropped: a pool of many threads still keeps each one's, a finished thread's
#: go in time)
_MAX_STRUCTURES = 64


class Structure:
    """The structural caches of seeds of one size.

    Attributes
    ----------
    selections : dict
        Selection matrices gathered from the identity, by the key of their
        rows (see :func:`sparsegrad._jacobian.take_rows`).
    index_rows : dict
        ``(weak reference to an index array, its read-only int64 copy, the row
        numbers it reads)`` by ``("index", id, length of the axis read)`` (the
        last two one array unless the index has negative entries, which count
        from that length; see :func:`sparsegrad._value._rows_read`),
        the largest row of those by ``("max", id(rows))`` and their runs of
        consecutive numbers by ``("runs", id(rows))`` (see
        :func:`sparsegrad._jacobian.keep_runs`), each entry holding ``rows``.
    moves : dict
        Row numbers of data movements (``np.pad``, ``np.roll``...), by their
        arguments and operand shapes (see :func:`sparsegrad._functions._move`).
    patterns : dict
        Merged patterns of sparsity mode, ``(the terms' matrices by block, the
        merged CSR)`` by the matrices' ids and the row layout (see
        :func:`sparsegrad._jacobian._merged`).
    plans : dict
        Merge plans of value mode under the same keys: ``(None, None)`` for a
        pattern merged once, ``(the terms' matrices by block, (indptr, indices,
        codes))`` from its second merge on (see
        :func:`sparsegrad._jacobian._merge_by_plan`).
    matrices : dict
        ``(a scipy matrix's CSR, copies of its arrays or None for a canonical
        CSR)`` by its format, shape and the arrays' addresses (``(None, None)``
        for a matrix met once): the constant matrices of products ``A @ x``
        (see :func:`sparsegrad._functions._constant_matrix`), compared with
        the matrix on every read.
    products : dict
        Patterns of products of a constant matrix and a Jacobian's matrix,
        ``(the arrays naming both patterns, (indptr, indices))`` by their ids
        (``(None, None)`` for a product made once; see
        :func:`sparsegrad._jacobian._kept_product`).
    shared : bool
        Kept between evaluations (False: one seed's own, as on devices).
    """

    __slots__ = ("selections", "index_rows", "moves", "patterns", "plans", "matrices",
                 "products", "shared", "nbytes")

    def __init__(self, shared):
        self.selections = {}
        self.index_rows = {}
        self.moves = {}
        self.patterns = {}
        self.plans = {}
        self.matrices = {}
        self.products = {}
        self.shared = shared
        self.nbytes = 0

    def keep(self, *arrays):
        """Count the bytes of ``arrays`` (None skipped), just stored in a cache."""
        if self.shared:
            self.nbytes += sum(a.nbytes for a in arrays if a is not None)
            if _held() > _state["limit"]:  # (this structure's count among them)
                # (the running count only bounds what is held: count exactly,
                # rarely, before forgetting everything)
                if _held(exactly=True) > _state["limit"]:
                    _drop_all()

    def has_room(self, nbytes):
        """Whether ``nbytes`` more can be kept without passing the limit (the
        running count first, an upper bound of what is held, then if need be
        the exact count)."""
        limit = _state["limit"] - nbytes
        return self.shared and (_held() <= limit or _held(exactly=True) <= limit)

    def held_exactly(self):
        """The bytes of the arrays this structure holds, each array once.

        Walks the entries (``(stored rows, CSR)`` pairs in ``selections`` and in
        the ``gathers`` of every matrix reached, the tuples of ``index_rows``,
        the row numbers in ``moves``, the matrices of ``patterns``, ``plans``
        and ``matrices``, the arrays of ``plans`` and ``products``); sets the
        running count to it.
        """
        seen, total = set(), 0
        matrices, arrays = [], []
        for stored, matrix in list(self.selections.values()):
            arrays.append(stored)
            matrices.append(matrix)
        for entry in list(self.index_rows.values()):
            arrays.extend(part for part in entry if getattr(part, "ndim", 0))
        for rows, _ in list(self.moves.values()):
            arrays.extend(rows if isinstance(rows, list) else [rows])
        for pieces, merged in list(self.patterns.values()):
            matrices.append(merged)
            matrices.extend(M for _, _, block in pieces for M in block if M is not None)
        for pieces, plan in list(self.plans.values()):
            if plan is not None:
                matrices.extend(M for _, _, block in pieces for M in block if M is not None)
                arrays.extend(plan[:2])
                arrays.extend(plan[2])
        for matrix, copies in list(self.matrices.values()):
            if matrix is not None:
                matrices.append(matrix)
            arrays.extend(copies or ())
        for held, kept in list(self.products.values()):
            if kept is not None:
                arrays.extend(held + kept)
        while matrices:
            matrix = matrices.pop()
            if id(matrix) in seen:
                continue
            seen.add(id(matrix))
            arrays.extend(matrix.arrays())
            for stored, gathered in list(matrix.gathers.values()):
                arrays.append(stored)
                matrices.append(gathered)
        for array in arrays:
            if array is not None and id(array) not in seen:
                seen.add(id(array))
                total += array.nbytes
        self.nbytes = total
        return total


#: makes each recall and store one step: a cache can be reached from two threads
#: (a matrix's gathers, forward values handed to another thread), and an
#: eviction racing another (both deleting the same least recent key, or one
#: reading the order while the other changes it) would raise KeyError or
#: RuntimeError in the middle of an evaluation
_cache_lock = threading.Lock()


def recall(cache, key):
    """``cache[key]`` or None, made the most recently used entry.

    Caches evict their least recently used entry (:func:`store`), not all at
    once: the entries an evaluation uses stay for the rest of it, so that two
    reads of one key always share one matrix, however full the cache was with
    entries of earlier evaluations (and the sums, hence the rounding, of an
    evaluation do not depend on them).
    """
    with _cache_lock:
        entry = cache.pop(key, None)
        if entry is not None:
            cache[key] = entry
    return entry


def store(cache, key, entry, capacity):
    """``cache[key] = entry``, evicting the least recently used entries past ``capacity``."""
    with _cache_lock:
        cache.pop(key, None)
        cache[key] = entry
        while len(cache) > capacity:
            del cache[next(iter(cache))]


def recall_or_note(cache, key, capacity):
    """``cache[key]`` as :func:`recall` (the lookup counted), or None at the
    key's first lookup, which notes it: an entry ``(None, None)`` that holds
    nothing.  For structure worth keeping only when it comes back (a merge
    plan, a product's pattern): the caller stores it in place of the note at
    the second lookup (an ``id`` in a key reused meanwhile only makes that
    happen a lookup early).
    """
    entry = recall(cache, key)
    looked_up(entry is not None)
    if entry is None:
        store(cache, key, (None, None), capacity)
    return entry


def looked_up(found):
    """Count one lookup of a structural cache (``found``: it hit)."""
    _state["hits" if found else "misses"] += 1


_lock = threading.Lock()
# (thread, seed size) -> Structure, least recent first
_structures = collections.OrderedDict()
_state = {"limit": environment_int("SPARSEGRAD_STRUCTURE_CACHE_BYTES", _DEFAULT_BYTES, 0,
                                   "bytes"),
          "hits": 0, "misses": 0, "clears": 0,
          # (whether the limit follows the Jacobians made, and the largest's bytes)
          "following": "SPARSEGRAD_STRUCTURE_CACHE_BYTES" not in os.environ, "largest": 0}


def follow_jacobian(nbytes):
    """Note a Jacobian of ``nbytes`` just made: while the limit follows the
    problem, it is at least :data:`_BYTES_PER_JACOBIAN` times the largest (and
    so is the memory pool's, :func:`sparsegrad._memory.follow_jacobian`)."""
    follow_pool(nbytes)
    if _state["following"] and nbytes > _state["largest"]:
        _state["largest"] = nbytes
        _state["limit"] = max(_DEFAULT_BYTES, _BYTES_PER_JACOBIAN * nbytes)


def for_seed(size, device="cpu"):
    """The :class:`Structure` of a new seed of ``size`` columns on ``device`` (a
    backend's name).

    Seeds share one per device, size and thread while the limit is above zero
    (see the module's notes on threads); any seed with a zero limit gets its own.
    On an H200 the device's share took shallow water 200x200 from 42 to 29 ms and
    Bratu 1000x1000 from 10 to 4 ms (docs/gpu.md).
    """
    if _state["limit"] == 0:
        return Structure(shared=False)
    # (what a structure's entries depend on beyond their own keys: the seed's
    # size (the columns of every selection), its device (where the arrays
    # live) and the thread (see the module's notes).  Seeds of one size share
    # it whatever their dtype, shape or mode: selections hold no values, and
    # the entries that hold values or depend on the mode say so in their keys
    # or are made and read in one mode only)
    thread = threading.get_ident()
    key = (thread, size, device)
    with _lock:
        structure = _structures.get(key)
        if structure is None:
            structure = _structures[key] = Structure(shared=True)
            mine = [k for k in _structures if k[0] == thread]  # (least recent first)
            if len(mine) > _MAX_SIZES:
                _structures.pop(mine[0]).shared = False
            if len(_structures) > _MAX_STRUCTURES:
                _structures.popitem(last=False)[1].shared = False
        else:
            _structures.move_to_end(key)
        return structure


def _held(exactly=False):
    structures = list(_structures.values())
    if exactly:
        return sum(structure.held_exactly() for structure in structures)
    return sum(structure.nbytes for structure in structures)


def _drop_all():
    """Forget every structure.  Never emptied in place: an evaluation under way
    keeps its seeds' structure intact to its end (its reads of one key keep
    sharing one matrix), later seeds start afresh."""
    with _lock:
        for structure in _structures.values():
            structure.shared = False  # (no longer counted)
        _structures.clear()


def structure_cache_info():
    """The state of the structure kept between evaluations, as a :data:`StructureInfo`.

    Examples
    --------
    >>> info = structure_cache_info()
    >>> info.held_bytes <= info.limit or not info.enabled
    True
    """
    with _lock:
        held = _held(exactly=True)
        sizes = tuple(dict.fromkeys(size for _, size, _ in _structures))
    return StructureInfo(_state["limit"] > 0, held, _state["limit"], _state["hits"],
                         _state["misses"], sizes)


def structure_cache_limit(nbytes=None):
    """The most bytes of structure kept between evaluations; with ``nbytes``, set it first.

    By default the limit follows the problem: 128 MiB or twice the bytes of
    the largest Jacobian made, whichever is more.  ``nbytes`` fixes it (a
    cap: a limit below the bytes held empties the cache; ``0`` keeps
    structure only within one evaluation, each later seed its own);
    ``"auto"`` makes it follow the problem again, from 128 MiB.

    Examples
    --------
    >>> previous = structure_cache_limit()
    >>> structure_cache_limit(0)
    0
    >>> structure_cache_limit(previous) == previous
    True
    """
    if isinstance(nbytes, str) and nbytes == "auto":
        _state.update(following=True, largest=0)
        nbytes = _DEFAULT_BYTES
    elif nbytes is not None:
        _state["following"] = False
    if nbytes is not None:
        nbytes = _whole_bytes(nbytes, "structure_cache_limit")
        if nbytes < 0:
            raise ValueError("structure_cache_limit: nbytes must be >= 0, got %d" % nbytes)
        _state["limit"] = nbytes
        if _held(exactly=True) > nbytes:
            _drop_all()
    return _state["limit"]


def clear_structure_cache():
    """Forget every structure kept between evaluations (recorded programs
    included) and reset the lookup counts.

    Values seeded before keep their structure (an evaluation under way is not
    disturbed); later seeds start afresh.

    Examples
    --------
    >>> clear_structure_cache()
    >>> structure_cache_info().held_bytes
    0
    """
    _drop_all()
    _state["hits"] = _state["misses"] = 0
    _state["clears"] += 1  # (recorded programs are forgotten too: sparsegrad._trace)
