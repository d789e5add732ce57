"""How ranks agree on a collective before anyone touches a peer, and what happens when they do not.

Each launch of a collective's kernel goes through the same steps on the device (the kernels'
``_enter`` / ``_leave``, in both backends):

1. **Healthy?** A rank whose context already holds an error (an earlier collective failed, a
   wait timed out) does not arrive: it touches no peer and tells every rank it gave up (its
   ``abandon`` flag), so they stop at once rather than at their deadline.
2. **Publish.** Program 0 raises ``entry[rank]`` to the epoch in every rank and writes this
   rank's *description* of the call (below) into every rank's ``desc[rank]``, in one vector of
   release exchanges. Each description word carries the epoch's low bits (its *tag*), so a peer
   tells a word of this call from an older one without any ordering between the words and the
   flag. An exchange that returns a negative flag finds a peer's mark: that peer gave up waiting
   for this rank (step 3), so this rank stops and reports ``CollectiveAbandonedError`` naming it.
3. **Wait, bounded by the clock.** Every program polls every rank's entry flag, abandon flag and
   description words in one vector of atomics until every flag is up and every word carries the
   epoch's tag, a peer gave up, or ``heap.wait_timeout`` passed on the device clock. At the
   deadline it marks each missing rank's flag with ``-epoch`` by a CAS from the value it saw: the
   late rank's exchange (step 2) then finds the mark. The CAS and the exchange hit the same
   word, so exactly one of them is first: either the late rank learns it was given up on, or the
   waiter sees it arrive and goes on. A rank that gave up touches no peer's memory afterwards and
   raises ``CollectiveTimeoutError`` naming the missing rank.
4. **Agree.** Every program compares every rank's description (from its last poll) with its own. On any difference
   nobody touches a peer (each rank sees the same set of descriptions, so each finds one), and
   every rank raises ``CollectiveMismatchError`` naming the field and both values.
5. **Work**, then **exit**: the last program raises ``exit[rank]`` everywhere and waits for every
   rank's (bounded as in step 3), so no rank returns while a peer may still touch its buffers.
   A rank in error skips the exit and raises its ``abandon`` flag everywhere.

The flags' atomics run at gpu scope when every rank shares one device (``Workspace.scope``), else
at sys scope. Everything a wait polls (flags and descriptions) is read with atomics, whose result
Triton shares among a program's threads (Triton 3.6's PTX for a lane held by several threads: the
one thread that runs the ``atom`` stores its result to shared memory, and after a barrier every
thread holding that lane reads it there): a per-thread load of a word that a peer may be writing
can give the warps of one program different values, and so different branches around a barrier,
which hangs a multi-program launch. Publishing the
description in the flag's own exchange and reading it in the flag's own poll saves the separate
stores, the fence before the flag and the loads after it (the iris-ccl CHANGELOG, "The description
travels with the entry flag", has what that saved). What
no atomic can read, the device clock and this rank's health word, comes through the mem layer's
``elapsed_ns`` and ``healthy``: every thread reads its own and one reduction over a tensor with
at least one element per thread gives every thread the same answer from shared memory, so at the
very deadline the warps of a program still leave the wait at the same poll. That reduction
crosses the warps through shared memory, so a compiled wait reads the clock only every
``polls_per_clock()`` polls (the mem layer's, as its own ``wait`` does: a branch on the poll count,
which every thread shares): a peer that arrives is seen one poll later, not one poll and one
reduction; the deadline and this rank's errors are seen at most that many polls late
(microseconds against a bound in seconds). CPU ranks read it every poll (a poll there is Python;
the clock costs nothing beside it).

Every failure is reported without a host synchronization (the heap's error record) and leaves
the rank poisoned until ``iris.ccl.reset()`` has run on every rank. Validation that can fail on
the host happens before a kernel is launched, so a rejected call publishes nothing.

What the protocol cannot do: a rank that arrives within the instant of a peer's deadline may see
every entry flag raised before the peer's give-up reaches it; it then moves the call's own data
(its tensors and the peers' tensors of this same call, never any other allocation) and fails at
the exit. After any error, the contents of the tensors of the failed call are undefined on every
rank; the tensors of no other call are touched.

The description is five values: ``CODE`` packs the kind of call, its variant, the op, the
dtype, which tensors are on the heap, the source rank and the input's memory layout (the order of
its dims in memory: 0 for row-major, so a channels_last tensor on one rank and a contiguous one on
another differ); ``NUMEL`` is the element count of the input; ``OFF_A`` / ``OFF_B`` are the heap
offsets of the buffers that peers read or write (the user's heap tensors or the collective's
staging), -1 where there is none; ``SHAPE`` is 0 for a collective. Kinds of call built on this
protocol by a layer above (``iris.ops``' fused operations) are registered with ``register_kind``,
which says what their fields hold instead (tiles in the source field, programs in the layout
field, K and N in ``SHAPE``). They travel as ``DESC_SLOTS`` int64 words (CODE split into its low
30 bits and the rest), each ``payload << TAG_BITS | epoch % 2**TAG_BITS``; a rank is never more
than one call ahead of a peer, so a word two epochs old has another tag. A rank that arrived in
the instant of a peer's deadline may have raised its flag before its words landed; the peer then
compares words without this epoch's tag and reports a mismatch, never a silent agreement. A
collective's launch shape (block size, programs, warps, backend) is not part of it: each rank's
tiling is its own business, and ranks that pick different ones still move the same bytes.
"""

from __future__ import annotations

import functools

import torch

import iris.heap
from iris.heap import context as abi

from .errors import CollectiveAbandonedError, CollectiveMismatchError, CollectiveTimeoutError

__all__ = ["KINDS", "VARIANTS", "REDUCE_OPS", "OPS", "DESC_WORDS", "DESC_SLOTS", "DESC_ARGS", "UNSPECIALIZED",
           "TAG_BITS", "KindFields", "describe", "decode", "register_kind", "register_variant", "translate_error",
           "typed", "unspecialized"]  # fmt: skip

DESC_WORDS = 5
#: A kernel's arguments that carry the description (``begin``'s code, numel, off_a, off_b, shape):
#: they vary per call, so the kernels never specialize on them (``protocol_triton.kernel``).
DESC_ARGS = ("CODE", "NUMEL", "OFF_A", "OFF_B", "SHAPE")
#: The arguments no launched kernel is specialized on, where it has them (``unspecialized``): the
#: description's, and the rank indices: ``first_rank``, which only feeds a modulo over the world
#: size, ``src_rank`` (a broadcast's root), and ``chunk_index`` / ``piece_index``, the rank's chunk that a kernel multiplies by the
#: chunk's length itself (an offset passed as ``rank * chunk`` is a multiple of 16 on some ranks
#: and not on others). Specialized (Triton does on 1 and on multiples of 16), they made the ranks
#: of one world compile up to three variants of the same launch (rank 0, rank 1, the others).
#: And ``staged`` (``call.Staging``): whether a small call copies a tensor off the heap in inside
#: the kernel is a branch at the kernel's start, not a variant of its own.
UNSPECIALIZED = DESC_ARGS + ("first_rank", "chunk_index", "piece_index", "src_rank", "staged", "verified")
#: The words a description is published as: CODE's low 30 bits and its high bits, NUMEL, OFF_A,
#: OFF_B, SHAPE, each shifted up by TAG_BITS to carry the epoch's low bits (every payload fits in 55 bits).
DESC_SLOTS = 6
TAG_BITS = 8
#: The largest payload a description word carries (NUMEL, an offset, SHAPE).
MAX_PAYLOAD = (1 << 55) - 1


def typed(fn):
    """``fn``, its description arguments (``DESC_ARGS``) annotated ``"i64"``, which Triton and
    Gluon read as the parameter's type. Unannotated, an int is typed by its value (i32 below
    2**31), so a CODE with a memory layout other than row-major, or a high source rank, made every
    kernel compile a second time, with an i64 CODE; the kernels widen the words to int64 anyway."""
    names = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    for name in DESC_ARGS:
        if name in names:
            fn.__annotations__.setdefault(name, "i64")
    return fn


def unspecialized(fn) -> list[str]:
    """The parameters of kernel ``fn`` that are in ``UNSPECIALIZED`` (its ``do_not_specialize``)."""
    names = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    return [n for n in UNSPECIALIZED if n in names]


FIELDS = ("code", "numel", "offset a", "offset b", "shape")

KINDS = {"all_reduce": 1, "all_gather": 2, "reduce_scatter": 3, "all_to_all": 4, "broadcast": 5, "barrier": 6}
_KIND_BITS = 4  # CODE's collective field: at most 15 kinds


class KindFields:
    """What a kind registered by a layer above holds where a collective's description holds its
    source rank, memory layout, element count and SHAPE word: a name and a reader for each
    (``read(value)``: what the error shows), used in mismatch errors."""

    def __init__(self, src=("src", int), layout=("memory layout", int), numel=("element count", int),
                 shape=("shape", int)):  # fmt: skip
        self.src, self.layout, self.numel, self.shape = src, layout, numel, shape


_FIELDS_OF: dict[int, KindFields] = {}  # kind code -> what its fields hold (registered kinds)


def register_kind(name: str, code: int, fields: KindFields | None = None) -> None:
    """Make ``name`` a kind of call on this protocol, numbered ``code`` (7-15: 1-6 are the
    collectives'). The number is fixed by the registering layer, so every rank agrees on it
    whatever the order of imports; registering the same name and number again changes nothing."""
    if KINDS.get(name, code) != code or any(n != name and c == code for n, c in KINDS.items()):
        raise ValueError(f"cannot register kind {name!r} as {code}: the protocol's kinds are {KINDS}")
    if not len(KINDS) < code < 1 << _KIND_BITS and name not in KINDS:
        raise ValueError(f"a registered kind's number must be in 7..{(1 << _KIND_BITS) - 1}, got {code}")
    KINDS[name] = code
    if fields is not None:
        _FIELDS_OF[code] = fields
    describe.cache_clear()


def register_variant(name: str, code: int) -> None:
    """Make ``name`` a variant a description can name, numbered ``code`` (16 at most; 1-5 are the
    collectives'), as ``register_kind`` does for kinds."""
    if VARIANTS.get(name, code) != code or any(n != name and c == code for n, c in VARIANTS.items()):
        raise ValueError(f"cannot register variant {name!r} as {code}: the protocol's variants are {VARIANTS}")
    if not 0 < code < 16:
        raise ValueError(f"a variant's number must be in 1..15, got {code}")
    VARIANTS[name] = code
    describe.cache_clear()
#: Algorithm variants (all_gather's push and pull are picked by where ``out`` lives).
VARIANTS = {"": 0, "one_shot": 1, "two_shot": 2, "rs_ag": 3, "push": 4, "pull": 5, "one_shot_push": 7}
#: The reductions' codes, defined once: the kernels' ``OP`` constexpr (both backends import them)
#: and the op field of a description.
REDUCE_OPS = {"sum": 0, "max": 1, "min": 2, "avg": 3}
OPS = {**REDUCE_OPS, "": 15}  # "": a collective without an op
#: Every dtype a description can name: the heap's, numbered by their place in ``iris.heap.DTYPES``
#: (a dtype the heap cannot hold describes as 0 and is rejected before any launch).
DTYPES = iris.heap.DTYPES
_DTYPE_ID = {d: i + 1 for i, d in enumerate(DTYPES)}

# CODE's bit fields: (name, shift, width)
_BITS = (("collective", 0, 4), ("variant", 4, 4), ("op", 8, 4), ("dtype", 12, 8), ("on heap", 20, 4), ("src", 24, 20),
         ("memory layout", 44, 16))  # fmt: skip


@functools.lru_cache(maxsize=4096)
def describe(
    kind: str, *, variant: str = "", op: str = "", dtype=None, on_heap=(), src: int = -1, layout: int = 0
) -> int:
    """The CODE word of a call (see the module docstring); ``layout``: the input's memory order
    (``iris.ccl.arguments.layout``, 0 for row-major). A registered kind may put other values in
    ``src`` (20 bits, -1..2**20-2) and ``layout`` (16 bits): its ``KindFields`` says what."""
    heap_bits = sum(1 << i for i, on in enumerate(on_heap) if on)
    values = (KINDS[kind], VARIANTS[variant], OPS[op], _DTYPE_ID.get(dtype, 0), heap_bits, src + 1, layout)
    code = 0
    for (_, shift, width), value in zip(_BITS, values):
        code |= (value & ((1 << width) - 1)) << shift
    return code


def decode(code: int) -> dict[str, object]:
    """The fields of a CODE word, readable (a registered kind's own fields by their own names)."""
    raw = {name: (code >> shift) & ((1 << width) - 1) for name, shift, width in _BITS}
    inverse = lambda table, v: next((k for k, x in table.items() if x == v), f"#{v}")  # noqa: E731
    fields = {
        "collective": inverse(KINDS, raw["collective"]),
        "variant": inverse(VARIANTS, raw["variant"]) or "-",
        "op": inverse(OPS, raw["op"]) or "-",
        "dtype": DTYPES[raw["dtype"] - 1] if 0 < raw["dtype"] <= len(DTYPES) else "-",
        "on heap": raw["on heap"],
    }
    own = _FIELDS_OF.get(raw["collective"])
    if own is None:
        fields["src"] = raw["src"] - 1
        layout = raw["memory layout"]
        fields["memory layout"] = "row-major" if layout == 0 else f"dims permuted (#{layout})"
    else:
        (src_name, read_src), (layout_name, read_layout) = own.src, own.layout
        fields[src_name] = read_src(raw["src"] - 1)
        fields[layout_name] = read_layout(raw["memory layout"])
    return fields


def _field_difference(field: int, mine: int, theirs: int, kind: int) -> tuple[str, object, object]:
    """(name, this rank's value, the peer's value) of the first difference in a description of a
    call of ``kind`` (a code of ``KINDS``: what its fields hold)."""
    if field == 0:
        a, b = decode(mine), decode(theirs)
        # A collective of no elements is described by its name alone (it launches the barrier):
        # against the same collective with elements, what differs is the element count.
        empty = [d["dtype"] == "-" and d["collective"] != "barrier" and kind not in _FIELDS_OF for d in (a, b)]
        if a["collective"] == b["collective"] and empty[0] != empty[1]:
            return "element count", *(0 if e else "at least 1" for e in empty)
        for name in a:
            if a[name] != b.get(name):
                if name == "on heap":
                    return "tensors on the heap", _heap_bits(a[name]), _heap_bits(b[name])
                return name, a[name], b.get(name)
        return "code", mine, theirs
    own = _FIELDS_OF.get(kind)
    if field == 1:
        name, read = own.numel if own is not None else ("element count", int)
        return name, read(mine), read(theirs)
    if field == 4:
        name, read = own.shape if own is not None else ("shape", int)
        return name, read(mine), read(theirs)
    name = "heap offset of the buffer peers access" + (" (first)" if field == 2 else " (second)")
    return name, _hex(mine), _hex(theirs)


def _heap_bits(bits: int) -> str:
    names = [n for i, n in enumerate(("first tensor", "second tensor")) if bits >> i & 1]
    return " and ".join(names) if names else "none"


def _hex(offset: int) -> str:
    return "none" if offset < 0 else f"{offset:#x}"


def translate_error(heap, error, workspace) -> Exception | None:
    """The collectives' exception for a device error of theirs (``heap.add_error_translator``).

    ``workspace``: the heap's ``Workspace``, whose ``name_of(epoch)`` gives the collective that ran
    at an epoch (as far as the host knows) and ``flag_owner(offset)`` the flag at a heap offset.
    """
    name_of_epoch = workspace.name_of
    rank = heap.rank
    after = "Call iris.ccl.reset() on every rank before the next collective."
    if error.code == abi.ERROR_COLLECTIVE_TIMEOUT:
        name = name_of_epoch(error.value)
        owner = workspace.flag_owner(error.detail) if error.detail else None
        what = "entry" if owner is None or owner[0] == "abandon" else owner[0]
        doing = {"entry": "reach it", "exit": "finish it"}.get(what, f"hand over its {what} in it")
        return CollectiveTimeoutError(
            f"{name} timed out on rank {rank}: rank {error.peer} did not {doing} within "
            f"{heap.wait_timeout:g} s (waited {error.aux / 1e9:.3g} s by the device clock; collective #{error.value} "
            f"on this heap). Rank {error.peer} crashed, is stuck, or called a different collective; this rank "
            f"touched no peer's memory after giving up. {after} heap.wait_timeout sets the bound.",
            collective=name, missing_rank=error.peer, rank=rank, offset=error.detail, value=error.value,
        )  # fmt: skip
    if error.code == abi.ERROR_COLLECTIVE_ABANDONED:
        name = name_of_epoch(error.value)
        if error.peer == rank:  # its own flag: an earlier collective here failed and no reset() followed
            return CollectiveAbandonedError(
                f"{name} on rank {rank} did not run: an earlier collective on this rank failed (this rank gave "
                f"up on it and told its peers), and iris.ccl.reset() has not run since. {after}",
                collective=name, abandoned_by=rank, missing_rank=-1, rank=rank, offset=error.detail, value=error.value,
            )  # fmt: skip
        if error.aux >= 0:  # this rank still waited for a rank when a peer's give-up reached it
            head = (f"{name} timed out on rank {rank}: rank {error.aux} did not reach it, and rank {error.peer} "
                    f"gave up on it first, so this rank stopped at once")  # fmt: skip
        else:  # it had seen every rank arrive (or it came late itself)
            head = f"{name} on rank {rank} was abandoned: rank {error.peer} gave up on it before this rank got through"
        return CollectiveAbandonedError(
            f"{head}, without touching peers' memory (collective #{error.value} on this heap). Rank "
            f"{error.peer} raises the cause. {after}",
            collective=name, abandoned_by=error.peer, missing_rank=error.aux, rank=rank, offset=error.detail,
            value=error.value,
        )  # fmt: skip
    if error.code == abi.ERROR_COLLECTIVE_MISMATCH:
        name = decode(error.value)["collective"] if error.detail == 0 else name_of_epoch(-1)
        field, mine, theirs = _field_difference(error.detail, error.value, error.aux, KINDS.get(str(name), 0))
        return CollectiveMismatchError(
            f"ranks called different collectives: {field} is {mine} on rank {rank} but {theirs} on rank "
            f"{error.peer} (this rank called {name}). No rank touched a peer's memory. Every rank must call "
            f"the same collectives in the same order with matching arguments. {after}",
            collective=str(name), field=field, values={rank: mine, error.peer: theirs}, rank=rank,
        )  # fmt: skip
    return None
