"""Per-heap state of the collectives: the sync block (flags, descriptions, epochs) and staging.

Everything lives in the heap's reserved space (``heap.reserve``), never among the user's
allocations. The sync block is reserved first, from memory that was never handed out, so it is
zero on every rank without a barrier: a rank may call its first collective while a peer is still
allocating its tensors.
"""

from __future__ import annotations

import collections
import contextlib
import weakref

import torch

import iris.heap
from iris.heap.log import get_logger

from . import protocol
from .errors import CollectiveError

_log = get_logger("ccl")

__all__ = ["Workspace", "existing_workspace", "workspace_bytes", "workspace_of"]

# A workspace lives exactly as long as its heap object: the heap holds it (its error translator),
# it holds the heap weakly, ``_workspaces`` is keyed weakly and ``_last`` lets go when the heap is
# collected. Its views (sync block, staging) keep the heap's memory mapped until then, closed or
# not: a CUDA graph that captured collectives and is replayed after ``close()`` still writes the
# sync block (its kernels find the heap closed and record HeapClosedError), and memory unmapped
# under it could by then be another heap's.
_workspaces: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_last: list = [lambda: None, None]  # (a weak reference to the heap last looked up, its workspace)
SYNC = "iris.ccl.sync"
STAGING = "iris.ccl.staging"
#: The staging roles of the collectives: "in" (an input off the heap, which peers read from its
#: copy) and "out" (all_reduce's rs_ag: the reduced chunks peers gather).
_ROLES = ("in", "out")


#: Bytes of a push slot: the most a rank's input to all_reduce's ``one_shot_push`` variant holds.
#: The slots (reserved at its first call) are two sets (by epoch parity) of one slot per rank.
PUSH_BYTES = 32 * 1024


def _flags(world_size: int) -> int:
    """The flag lanes of a world: the power of two >= the world size (the kernels' lanes)."""
    return 1 << max(0, world_size - 1).bit_length()


def _sync_words(world_size: int) -> int:
    return (3 + 2 * protocol.DESC_SLOTS) * _flags(world_size) + 4


def _reserved(nbytes: int) -> int:
    return -(-max(nbytes, 1) // iris.heap.ALIGNMENT) * iris.heap.ALIGNMENT  # what heap.reserve takes


def workspace_bytes(world_size: int, largest_input: int = 0, *, push_slots: bool = True) -> int:
    """The most heap the collectives reserve on each rank of a ``world_size``-rank heap, beside the
    caller's tensors (``heap.reserve``; size a heap with it, as with ``iris.heap.tracing.buffer_bytes``).

    The sync block, reserved at a heap's first collective, and, when some collective's input is not
    on the heap, the staging it goes through: ``largest_input`` is the bytes of the largest such
    input per rank (0: every input is a heap tensor, nothing is staged). The bound holds for any
    sequence of calls: a staging buffer grows by doubling and an outgrown one stays reserved (a
    CUDA graph may still copy through it) until ``iris.ccl.reset``, so a role holds less than four
    times its largest input; a program whose first staged call is its largest needs one time. Two
    roles: every staged input, and all_reduce's ``rs_ag`` variant's reduced chunks. ``push_slots``:
    all_reduce's ``one_shot_push`` variant runs (its slots: 2 x W x ``PUSH_BYTES``, reserved at its
    first call; ``"auto"`` runs it for small inputs (``iris.ccl.tuning``), so leave it True
    unless every all_reduce is larger than ``PUSH_BYTES`` or names another variant).

    >>> heap = iris.heap.init(tensor_bytes + iris.ccl.workspace_bytes(world_size, 1 << 20))
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"workspace_bytes: world_size must be a positive int, got {world_size!r}")
    if isinstance(largest_input, bool) or not isinstance(largest_input, int) or largest_input < 0:
        raise ValueError(f"workspace_bytes: largest_input must be a non-negative int (bytes), got {largest_input!r}")
    total = _reserved(_sync_words(world_size) * 8)
    if largest_input:
        # A role's buffers: each at least twice the one before it, the last at most twice the
        # largest input less 2 (it doubled a buffer smaller than that input) or that input itself.
        size, role = max(2 * largest_input - 2, largest_input), 0
        while True:
            role += _reserved(size)
            if size == 1:
                break
            size = (size + 1) // 2
        total += len(_ROLES) * role
    if push_slots:
        total += _reserved(2 * world_size * PUSH_BYTES)
    return total


class Workspace:
    """The collectives' state on one heap.

    ``sync`` (int64, reserved as ``iris.ccl.sync``) holds FLAGS-strided arrays, FLAGS a power of
    two >= W (the kernels' lanes):

    - ``entry[r]`` / ``exit[r]``: the last epoch at which rank r arrived at / finished a
      collective, written by rank r into every rank's copy; a negative value ``-e`` is the mark
      of this rank giving up on rank r at epoch e (``iris.ccl.protocol``).
    - ``abandon[r]``: the epoch at which rank r gave up (0: never, since the last reset).
    - ``desc[(epoch % 2) * DESC_SLOTS * FLAGS + k * FLAGS + r]``: word k of rank r's description
      of its call at an epoch of that parity, tagged with the epoch's low bits
      (``iris.ccl.protocol``; two sets: after a barrier, which has no exit, a rank may publish the
      next call while a peer still compares this one's).
    - ``state`` (this rank's kernels only): ``[0]`` the programs of the running launch that
      have finished, ``[1]`` the epoch of the last collective this rank completed. On the
      device, so launches replayed from a CUDA graph count as new collectives.

    Staging buffers (reserved as ``iris.ccl.staging.<role>.<n>``) grow by doubling (to the exact
    size when the heap cannot hold double). An outgrown buffer stays reserved: a CUDA graph
    captured earlier may still copy through it. ``reset()`` gives every staging buffer back, so
    ranks whose staging diverged (a call with mismatched sizes) are symmetric again.
    """

    def __init__(self, heap):
        self._heap = weakref.ref(heap)
        w = heap.world_size
        self.flags = _flags(w)
        #: The memory scope of the protocol's atomics: "gpu" when every rank runs on this one device
        #: (its L2 is where they all meet), else "sys" (peers over NVLink or PCIe). A sys-scope
        #: release or acquire costs several times a gpu-scope one on an H200 (graph replay of a 1 KiB
        #: all_reduce at 4 ranks: 7.2-7.7 us at gpu scope, 9.9 at sys; the iris-ccl CHANGELOG,
        #: "Shorter protocol on the device").
        self.scope = "gpu" if heap.device.type == "cuda" and heap.ranks_per_device == w else "sys"
        f = self.flags
        words = _sync_words(w)
        self.sync = heap.reserve(SYNC, words * 8).view(torch.int64)
        self._sync_offset = heap.offset(self.sync)  # for naming flags after close() too
        self.entry, self.exit, self.abandon = self.sync[:f], self.sync[f : 2 * f], self.sync[2 * f : 3 * f]
        self.desc = self.sync[3 * f : (3 + 2 * protocol.DESC_SLOTS) * f]
        self.state = self.sync[(3 + 2 * protocol.DESC_SLOTS) * f :]
        self.launched = 0
        self.history: collections.deque = collections.deque(maxlen=64)  # (last host epoch, launches, collective)
        self.broken: str | None = None  # set when a host failure interrupted a launch
        self._staging: dict[str, torch.Tensor] = {}
        self._push: torch.Tensor | None = None  # the push slots (push_slots), once reserved
        #: Whether a call on the push slots has been launched since they were reserved: its entry
        #: compared every rank's slots' offset, so later calls may store into them before theirs.
        self.push_verified = False
        self.plans: dict = {}  # call key -> the launches it made (iris.ccl.plans.Plan)
        self.recent: dict = {}  # calls on the same tensor objects as a planned one (iris.ccl.plans.replay_recent)
        self._names: list[str] = []
        self.flag_rows: dict[str, tuple[int, int]] = {}  # name -> heap offsets [start, end) (name_flags)
        heap.add_error_translator(self._translate)  # the heap holds this workspace; it holds the heap weakly
        untouched = heap.reservations()[SYNC].untouched
        _log.debug("collectives' sync block reserved: %d bytes, %d flag lanes%s", words * 8, f,
                   "" if untouched else ", reused memory: a barrier before any signal")  # fmt: skip
        if not untouched:
            heap.barrier()  # reused memory was zeroed here only: every rank's zeros land before any signal

    @property
    def heap(self):
        """The heap this workspace belongs to (alive while anything can reach the workspace)."""
        return self._heap()

    def check_ready(self, name: str) -> None:
        """Raise what stops any collective on this heap before it publishes anything: an error an
        earlier (asynchronous) collective recorded (read without a sync), or an error raised before
        that ``reset()`` has not cleared."""
        heap = self._heap()
        heap.check_device_errors()
        if self.broken is not None:
            raise CollectiveError(
                f"{name} on rank {heap.rank}: the collectives of this heap are in an unknown state after "
                f"{self.broken}; call iris.ccl.reset() on every rank first",
                collective=name,
                rank=heap.rank,
            )

    def record(self, name: str, launches: int = 1) -> None:
        """Count ``launches`` launches of collective ``name`` (host epochs, for naming device errors)."""
        self.launched += launches
        self.history.append((self.launched, launches, name))  # one per call: epochs launched - launches + 1 .. launched

    @contextlib.contextmanager
    def launching(self, name: str, launches: int = 1):
        """Around the launches of one call of ``name`` (a call's, or a plan's): they are counted
        (``record``), and a failure inside them leaves the collectives broken until ``reset()``:
        programs may have published this rank's entry before it (CPU ranks run them one after
        another), so the epochs can no longer be trusted. The one failure path of every launch.

        A device failure while peers' processes have ended (a peer killed under MPS takes the GPU's
        other processes' CUDA contexts with it) is raised as ``iris.heap.PeerLostError``, naming
        them, from the failure itself."""
        self.record(name, launches)
        try:
            yield
        except BaseException as e:
            self.launch_failed(name, e)

    def launch_failed(self, name: str, e: BaseException):
        """``launching``'s failure path, for a caller that counts its launches itself (``record``)
        and calls this from its ``except`` (a plan's replay: no generator around every launch):
        marks the collectives broken and raises ``PeerLostError`` from ``e``, or ``e`` itself."""
        self.mark_broken(f"a failure inside {name}'s launch ({type(e).__name__}: {e})")
        heap = self._heap()
        lost = heap.explain_failure(f"{name}'s launch", e) if heap is not None else None
        if lost is not None:
            raise lost from e
        raise e

    def keep_plan(self, key, plan, limit: int = 256) -> None:
        """Keep ``plan`` for calls with ``key``; beyond ``limit`` plans the oldest is dropped."""
        self.plans.pop(key, None)
        while len(self.plans) >= limit:
            del self.plans[next(iter(self.plans))]
            _log.debug("plan limit %d reached: the oldest plan dropped", limit)
        self.plans[key] = plan
        _log.debug("%s: plan recorded (%d steps; %d plans kept)", plan.name, len(plan.steps), len(self.plans))

    def name_of(self, epoch: int) -> str:
        """The collective launched at ``epoch`` (as this host counted; CUDA graph replays are not)."""
        for last, launches, name in reversed(self.history):
            if last - launches < epoch <= last or epoch < 0:
                return name
        return "a collective"

    def completed(self) -> int:
        """The epoch of the last collective this rank's device completed (a host sync: for tests)."""
        return int(self.state[1].item())

    def _translate(self, heap, error):
        exc = protocol.translate_error(heap, error, self)
        if exc is not None and self.broken is None:  # every error of the collectives poisons them until reset()
            self.mark_broken(f"an earlier error ({type(exc).__name__}: {str(exc).split('. ')[0]})")
        return exc

    def mark_broken(self, reason: str) -> None:
        """No collective runs on this heap until ``reset()``: ``reason`` says why (in their errors)."""
        self.broken = reason
        _log.error("collectives unusable until iris.ccl.reset() on every rank: %s", reason)

    def staging(self, role: str, like: torch.Tensor) -> torch.Tensor:
        """A reserved buffer shaped like ``like`` for ``role`` ("in", "out", or a layer above's
        own), grown on demand."""
        return self.staging_bytes(role, like.numel() * like.element_size()).view(like.dtype).view(like.shape)

    def staging_bytes(self, role: str, nbytes: int) -> torch.Tensor:
        """The first ``nbytes`` of ``role``'s reserved buffer (uint8), grown on demand: by doubling
        (to the exact size when the heap cannot hold double). Every rank grows it at the same calls,
        so its heap offset is the same on every rank."""
        buf = self._staging.get(role)
        if buf is None or buf.numel() < nbytes:
            size = max(nbytes, 1)
            if buf is not None and 2 * buf.numel() > nbytes:
                size = 2 * buf.numel()
            try:
                grown = self._reserve(role, size)
            except iris.heap.HeapExhaustedError:
                if size == nbytes:
                    raise
                _log.warning("staging %r: the heap cannot hold %d bytes; reserving exactly %d", role, size, nbytes)
                grown = self._reserve(role, nbytes)  # every rank fails alike: the heaps are symmetric
            _log.debug("staging %r grown to %d bytes", role, grown.numel())
            buf = self._staging[role] = grown
        return buf[:nbytes]

    def push_slots(self, dtype: torch.dtype) -> tuple[torch.Tensor, int]:
        """``(slots, slot)``: the push slots of all_reduce's ``one_shot_push`` variant viewed as
        ``dtype`` (2 x W slots of ``slot`` elements, ``PUSH_BYTES`` each), reserved at the first
        call (a fixed size, the same on every rank) and given back by ``reset()``."""
        if self._push is None:
            self._push = self._reserve("push", 2 * self.heap.world_size * PUSH_BYTES)
            self.push_verified = False
        return self._push.view(dtype), PUSH_BYTES // dtype.itemsize

    def staging_buffer(self, role: str) -> torch.Tensor | None:
        """The whole buffer ``staging(role, ...)`` views now (None before the first)."""
        return self._staging.get(role)

    def _reserve(self, role: str, nbytes: int) -> torch.Tensor:
        name = f"{STAGING}.{role}.{len(self._names)}"
        t = self.heap.reserve(name, nbytes)
        self._names.append(name)
        return t

    def flag_owner(self, offset: int) -> tuple[str, int] | None:
        """Which flag (``"entry"``/``"exit"``/``"abandon"``, or a hand-off row's name given to
        ``name_flags``; rank) sits at heap ``offset``, if any."""
        index = (offset - self._sync_offset) // 8
        if 0 <= index < 3 * self.flags:
            return ("entry", "exit", "abandon")[index // self.flags], index % self.flags
        for name, (start, end) in self.flag_rows.items():
            if start <= offset < end:
                return name, (offset - start) // 8 % self.flags
        return None

    def name_flags(self, name: str, rows: torch.Tensor) -> None:
        """Say that ``rows`` (a view of this workspace's staging) holds FLAGS-wide rows of hand-off flags (``signal`` /
        ``wait_flags`` of the device protocol) called ``name``, so that a timeout on one of them
        names it (``flag_owner``)."""
        start = rows.data_ptr() - self.heap.base
        self.flag_rows[name] = (start, start + rows.numel() * rows.element_size())

    def reset(self) -> None:
        """Forget every epoch and give the staging back (``iris.ccl.reset`` runs it on every rank)."""
        self.sync.zero_()
        for name in self._names:
            self.heap.unreserve(name)
        self._names.clear()
        self._staging.clear()
        self._push, self.push_verified = None, False
        self.flag_rows.clear()
        self.plans.clear()
        self.recent.clear()
        self.launched = 0
        self.history.clear()
        self.broken = None


def workspace_of(heap) -> Workspace:
    ws = existing_workspace(heap)
    if ws is None:
        ws = _workspaces[heap] = Workspace(heap)
        _last[:] = [weakref.ref(heap, _forget), ws]
    return ws


def existing_workspace(heap) -> Workspace | None:
    """``heap``'s workspace if it has one; ``TypeError`` for what cannot be a heap."""
    ref, ws = _last
    if ref() is heap and heap is not None:  # the heap of the call before, as in nearly every call (no weak-key lookup)
        return ws
    ws = _workspaces.get(heap)
    if ws is not None:
        _last[:] = [weakref.ref(heap, _forget), ws]
    return ws


def _forget(ref) -> None:
    """The heap last looked up was collected: let go of its workspace."""
    if _last[0] is ref:
        _last[:] = [lambda: None, None]
