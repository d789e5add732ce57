"""Plans: a call repeated with the same arguments launches what the first one did, without its checks.

The key of a call (``call_key``) holds everything its checks and launches depended on: the
collective, its ``Config`` and scalars (op, src), the current device and, per tensor, its address,
shape, strides, dtype, device and whether it is on the heap. Calls with the same key pass the same
checks and launch the same kernels with the same arguments (addresses included), so a plan skips
straight to its steps, after the checks that may change between calls (the heap is open, no
device error is pending, the collectives are not broken: ``Workspace.check_ready``) and one more:
the staging buffers it copies through are still the workspace's (``Plan.buffers``; they change
only when a larger call grows one, or at ``reset()``). Every rank's staging grows at the same
calls, whichever of them ran from a plan, so ranks keep describing the same offsets.
"""

from __future__ import annotations

import weakref

import torch

from . import _internals, _launch
from .arguments import flat
from .config import DEFAULT, Config
from .workspace import Workspace, existing_workspace, workspace_of

__all__ = ["MAX_PLANS", "PLANNED_CONFIGS", "Plan", "call_key", "replay", "replay_recent"]

#: Plans kept per heap (the oldest is dropped first).
MAX_PLANS = 256
#: The configuration types whose calls are planned: the collectives' ``Config``, and those of the
#: layers above that add theirs (each a frozen, hashable dataclass with a ``blocking`` field).
PLANNED_CONFIGS: set[type] = {Config}


class Plan:
    """The launches and staging copies of one call, kept to run again for the next call with the same key.

    Steps, in the call's order: on GPUs a launch is a ``_launch.Bound``'s parts (addresses fixed); on CPU
    ranks the kernel with the call's tensors filled in again (``_slotted``), so the same plans run
    under the interpreter; a copy is between a (flat) tensor of the call and a staging view.
    """

    __slots__ = ("name", "gpu", "steps", "device", "buffers", "launches", "last")

    def __init__(self, name: str, gpu: bool):
        self.name, self.gpu = name, gpu
        self.steps: list | None = []
        self.device = _internals.current_device() if gpu else -1
        self.buffers: dict[str, torch.Tensor] = {}  # staging role -> the whole buffer the steps use
        self.launches = 0
        self.last: tuple | None = None  # weak references to the tensors of the last replay by key

    def add_launch(self, kernel, grid, args, constexprs, warps, tensors) -> None:
        """Record a launch just made (``steps`` becomes None when it cannot be repeated as is)."""
        if self.steps is None:
            return
        if self.gpu:
            bound = _launch.bind(kernel, grid, args, constexprs, warps) if _launch.DIRECT_LAUNCH else None
            step = None if bound is None else ("launch", bound.run, *bound.grid, bound.tail)
        else:
            step = _slotted(kernel, grid, args, constexprs, warps, tensors)
        if step is None:
            self.steps = None
        else:
            self.steps.append(step)
            self.launches += 1

    def add_copy(self, dst: torch.Tensor, src: torch.Tensor, tensors) -> None:
        if self.steps is not None:
            ends = (_slot(dst, tensors), _slot(src, tensors))
            self.steps = None if None in ends else [*self.steps, ("copy", *ends)]

    def valid(self, workspace: Workspace) -> bool:
        for role, buf in self.buffers.items():  # a loop, not all(...): this runs on every planned call
            if workspace.staging_buffer(role) is not buf:
                return False
        return True

    def run(self, tensors: tuple) -> None:
        stream = _launch.stream(self.device) if self.gpu else None
        for step in self.steps:
            what = step[0]
            if what == "launch":  # a _launch.Bound's call, without its frame: run(gx, gy, gz, stream, *tail)
                step[1](step[2], step[3], step[4], stream, *step[5])
            elif what == "copy":
                _filled(step[1], tensors).copy_(_filled(step[2], tensors))
            else:  # "cpu": a launch under the interpreter
                _, kernel, grid, args, constexprs, warps = step
                kernel[grid](*[_filled(a, tensors) for a in args], num_warps=warps, **constexprs)


def _slot(a, tensors):
    """``a`` itself, or ``("slot", index, dtype)`` when it is the flat memory of the call's tensor
    ``index`` (as ``arguments.flat`` / ``words`` give it); None when it views a tensor of the call otherwise."""
    if not isinstance(a, torch.Tensor):
        return a
    for i, t in enumerate(tensors):
        if t.data_ptr() == a.data_ptr():
            if a.dim() != 1 or a.numel() * a.element_size() != t.numel() * t.element_size():
                return None
            return ("slot", i, a.dtype)
    return a


def _filled(a, tensors):
    return flat(tensors[a[1]]).view(a[2]) if type(a) is tuple else a


def _slotted(kernel, grid, args, constexprs, warps, tensors):
    """A CPU launch step: each argument that views one of the call's tensors becomes a slot
    (``_slot``); other tensors (context, sync block, staging) are the heap's own."""
    filled = tuple(_slot(a, tensors) for a in args)
    if any(f is None for f in filled):
        return None
    return ("cpu", kernel, grid, filled, constexprs, warps)


def call_key(heap, name: str, config, scalars: tuple, tensors: tuple):
    """What a call's plan depends on (``Plan``); None for a call that is never planned (a
    blocking config, launch hooks installed, the JIT path forced, or arguments the full path
    must reject). Every planned call builds one, so it avoids what costs the host most here
    (``torch.device.type``, a list per call)."""
    cfg = DEFAULT if config is None else config
    if type(cfg) not in PLANNED_CONFIGS or cfg.blocking:
        return None
    try:
        # The first tensor's device stands for the heap's (the key holds every tensor's device,
        # and a call whose tensors are not on the heap's device is rejected, so never planned).
        gpu = tensors[0].is_cuda if tensors else heap.device.type == "cuda"
        if gpu:
            if not (_launch.DIRECT_LAUNCH and _launch.hooks_idle()):
                return None
            device = _internals.current_device()
        else:
            device = -1
        if len(tensors) == 1:  # most collectives: the same key without building a list
            t = tensors[0]
            return (name, cfg, scalars, device, (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device,
                                                 heap.is_symmetric(t)))  # fmt: skip
        parts = [(t.data_ptr(), t.shape, t.stride(), t.dtype, t.device, heap.is_symmetric(t)) for t in tensors]
    except (AttributeError, TypeError):  # not tensors: the full path says what is wrong
        return None
    return (name, cfg, scalars, device, *parts)


def replay(heap, key, tensors: tuple) -> bool:
    """Launch the plan recorded for ``key``, if there is one (False: the call takes the full path).

    The second call in a row launched this way on the same tensor objects is remembered for the
    next (``replay_recent``). Only the second: a loop that makes new views for every call (``x[:n]``,
    ``x.view(-1)``) never finds a remembered call, so it pays nothing to remember one.
    """
    if key is None:
        return False
    workspace = workspace_of(heap)
    try:
        plan = workspace.plans.get(key)
    except TypeError:  # an unhashable scalar (op, src): the full path rejects it
        return False
    if plan is None or not plan.valid(workspace):
        return False
    _run(workspace, plan, tensors)
    last = plan.last
    if last is not None and _same_objects(last, tensors):
        if len(workspace.recent) >= MAX_PLANS:
            workspace.recent.clear()
        # key: name, config, scalars, device, then per tensor what call_key read of it
        workspace.recent[(*key[:3], *map(id, tensors))] = _Recent(heap, plan, last, key[4:])
    else:
        plan.last = (weakref.ref(tensors[0]),) if len(tensors) == 1 else tuple(map(weakref.ref, tensors))
    return True


def _same_objects(refs: tuple, tensors: tuple) -> bool:
    if len(refs) != len(tensors):
        return False
    if len(tensors) == 1:
        return refs[0]() is tensors[0]
    return all(r() is t for r, t in zip(refs, tensors))


class _Recent:
    """A call that ran from its plan, as ``replay_recent`` checks the next one: the tensors
    themselves (weakly), what the plan's key read of each, and the heap's ``generation`` at which
    their ``is_symmetric`` held."""

    __slots__ = ("plan", "refs", "props", "symmetric", "generation")

    def __init__(self, heap, plan: Plan, refs: tuple, parts: tuple):
        self.plan = plan
        self.refs = refs
        # parts: call_key's (address, shape, strides, dtype, device, on the heap) per tensor, read in this call
        self.props = tuple(p[:4] for p in parts)
        self.symmetric = tuple(p[5] for p in parts)
        self.generation = heap.generation


def replay_recent(heap, name: str, config, scalars: tuple, tensors: tuple) -> bool:
    """``replay`` for the common case of a loop, with less host time: the same collective, config
    and scalars on the very same tensor objects as the calls before, which ran from their plan
    (False: look the plan up by key, or take the full path). ``heap``: an open heap
    (``arguments.check_heap``'s).

    The tensors are the same objects (a weak reference, so a new tensor at a reused ``id`` is not
    taken for an old one) with the same address, shape, strides and dtype: the key's device
    follows from the address (one address space for the host and every device). Whether each is
    on the heap is asked again only when the heap's blocks changed since (``heap.generation``).
    The other conditions are the key's: the heap is open, the same device is current, no launch
    hook is installed; then ``replay``'s (the staging buffers are the plan's, the collectives are
    ready). It runs on every call of a loop, so it is written out flat: a single tensor without
    a loop, the checks inline.
    """
    try:
        workspace = existing_workspace(heap)
        if workspace is None:
            return False
        if config is None:
            config = DEFAULT
        if len(tensors) == 1:
            t = tensors[0]
            recent = workspace.recent.get((name, config, scalars, id(t)))
            if recent is None:
                return False
            ptr, shape, stride, dtype = recent.props[0]
            if (recent.refs[0]() is not t or t.data_ptr() != ptr or t.shape != shape or t.stride() != stride
                    or t.dtype is not dtype):  # fmt: skip
                return False
        else:
            recent = workspace.recent.get((name, config, scalars, *map(id, tensors)))
            if recent is None:
                return False
            for t, ref, (ptr, shape, stride, dtype) in zip(tensors, recent.refs, recent.props):
                if (ref() is not t or t.data_ptr() != ptr or t.shape != shape or t.stride() != stride
                        or t.dtype is not dtype):  # fmt: skip
                    return False
    except (AttributeError, TypeError):  # unhashable scalars, not tensors: the full path says what is wrong
        return False
    if recent.generation != heap.generation:
        if tuple(heap.is_symmetric(t) for t in tensors) != recent.symmetric:
            return False
        recent.generation = heap.generation
    plan = recent.plan
    if plan.gpu and not (_launch.DIRECT_LAUNCH and plan.device == _internals.current_device() and _launch.hooks_idle()):
        return False
    if plan.buffers and not plan.valid(workspace):
        return False
    _run(workspace, plan, tensors)
    return True


def _run(workspace: Workspace, plan: Plan, tensors: tuple) -> None:
    """``plan``'s launches, once the collectives are ready, counted as launched (``Workspace.launching``
    written out: it runs on every call of a loop)."""
    workspace.check_ready(plan.name)
    workspace.record(plan.name, plan.launches)
    try:
        plan.run(tensors)
    except BaseException as e:
        workspace.launch_failed(plan.name, e)
