"""The descriptor exchange (``iris.heap.transport.fds``) that shm and cuda-vmm share, on its own: two
ranks in one process (threads) or a peer in a process of its own that is killed. No GPU, no heap."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from iris.heap import HeapError
from iris.heap.transport import fds

SIZE = 1 << 16

#: A peer in a process of its own, sockets only (no torch, so it starts in milliseconds): it
#: listens, says its name, connects to rank 0's listener (argv[1], hex), says so, and waits to be killed.
_PEER = r"""
import socket, sys, time
listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
listener.bind(b"\0iris-heap-test-peer-%d" % id(listener))
listener.listen(2)
print(listener.getsockname().hex(), flush=True)
conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
conn.connect(bytes.fromhex(sys.argv[1]))
print("connected", flush=True)
time.sleep(60)
"""


def _open_descriptors() -> set[str]:
    """What this process's descriptors point at, by number (the listing's own descriptor left out)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return found


def _region(size: int = SIZE) -> int:
    fd = os.memfd_create("iris-heap-test", os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    return fd


def _exchange(fd, listener, names, rank, sizes, cleanup):
    return fds.exchange(fd, listener, names, rank, sizes, cleanup, what="test regions", one="test region")


def _both_ranks(sizes_seen=((SIZE, SIZE), (SIZE, SIZE))):
    """Run the exchange as ranks 0 and 1 (threads); each rank's ``(st_size of what it received, error)``."""
    listeners = [fds.listen(2), fds.listen(2)]
    names = [listener.getsockname() for listener in listeners]
    results: list = [None, None]

    def rank(r):
        fd = _region(SIZE * (r + 1))
        try:
            with listeners[r], contextlib.ExitStack() as cleanup:
                got = _exchange(fd, listeners[r], names, r, list(sizes_seen[r]), cleanup)
                results[r] = (os.fstat(got[1 - r]).st_size, None)
        except HeapError as e:
            results[r] = (None, e)
        finally:
            os.close(fd)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(fds.EXCHANGE_TIMEOUT + 5)
    return results


def test_each_rank_gets_its_peers_descriptor_and_nothing_stays_open():
    before = _open_descriptors()
    results = _both_ranks(((SIZE, 2 * SIZE), (SIZE, 2 * SIZE)))
    assert results == [(2 * SIZE, None), (SIZE, None)], "each rank holds the other's region, by the size it sent"
    assert _open_descriptors() == before, "sockets and received descriptors close with the exchange's cleanup"


def test_a_peer_that_sends_another_size_than_it_announced_is_refused():
    results = _both_ranks(((SIZE, 3 * SIZE), (SIZE, 2 * SIZE)))
    _, error = results[0]
    assert "rank 0: rank 1's socket sent something other than its 196608-byte test region" in str(error)


def _killed_peer_run(mid_exchange: bool):
    """Rank 0's exchange with a peer process that is SIGKILLed before it (``mid_exchange=False``) or
    while rank 0 waits for its descriptor: what rank 0 raised, in how many seconds, and whether
    rank 0 was left with any descriptor it did not have before."""
    before = _open_descriptors()
    fd = _region()
    listener = fds.listen(2)
    peer = subprocess.Popen(
        [sys.executable, "-c", _PEER, listener.getsockname().hex()], stdout=subprocess.PIPE, text=True
    )
    try:
        name = bytes.fromhex(peer.stdout.readline().strip())
        assert peer.stdout.readline().strip() == "connected"
        if mid_exchange:
            threading.Timer(0.3, peer.send_signal, (signal.SIGKILL,)).start()
        else:
            peer.send_signal(signal.SIGKILL)
            peer.wait()
        start = time.monotonic()
        with pytest.raises(HeapError) as info, listener, contextlib.ExitStack() as cleanup:
            _exchange(fd, listener, [listener.getsockname(), name], 0, [SIZE, SIZE], cleanup)
        seconds = time.monotonic() - start
    finally:
        peer.kill()
        peer.wait()
        peer.stdout.close()
        os.close(fd)
    return str(info.value), seconds, _open_descriptors() - before


@pytest.mark.parametrize("mid_exchange", [False, True], ids=["before-the-exchange", "while-rank-0-waits"])
def test_a_peer_killed_during_the_exchange_is_a_clear_error_at_once_and_leaks_nothing(mid_exchange):
    message, seconds, leaked = _killed_peer_run(mid_exchange)
    if mid_exchange:
        assert "rank 0 did not get rank 1's heap" in message
    else:
        assert "rank 0 could not connect to rank 1's socket" in message
    assert "exited or was killed during iris.heap.init" in message
    assert seconds < min(5.0, fds.EXCHANGE_TIMEOUT), f"took {seconds:.2f} s: a dead peer must end the wait at once"
    assert not leaked, f"left open: {sorted(leaked)}"


def test_a_stuck_peer_is_a_clear_error_after_the_exchange_timeout(monkeypatch):
    monkeypatch.setattr(fds, "EXCHANGE_TIMEOUT", 0.5)
    before = _open_descriptors()
    fd = _region()
    peer = fds.listen(2)  # listens, but never serves nor connects
    start = time.monotonic()
    try:
        with pytest.raises(HeapError) as info, peer, fds.listen(2) as listener, contextlib.ExitStack() as cleanup:
            _exchange(fd, listener, [listener.getsockname(), peer.getsockname()], 0, [SIZE, SIZE], cleanup)
    finally:
        os.close(fd)
    assert 0.5 <= time.monotonic() - start < 3.0
    assert "rank 0 gave up exchanging test regions after 0.5 s, still waiting for heaps from ranks [1]" in str(
        info.value
    )
    assert _open_descriptors() == before


def test_a_socket_held_by_another_user_is_refused(monkeypatch):
    monkeypatch.setattr(fds, "_peer_uid", lambda sock: os.getuid() + 1)
    before = _open_descriptors()
    fd = _region()
    try:
        with pytest.raises(HeapError) as info, fds.listen(2) as peer, fds.listen(2) as listener:
            with contextlib.ExitStack() as cleanup:
                _exchange(fd, listener, [listener.getsockname(), peer.getsockname()], 0, [SIZE, SIZE], cleanup)
    finally:
        os.close(fd)
    assert "rank 0: rank 1's socket is held by another user; not taking its heap" in str(info.value)
    assert _open_descriptors() == before


def test_a_connection_from_another_user_is_not_served(monkeypatch):
    """Rank 1 connects from a process that (by SO_PEERCRED, here simulated) belongs to another user:
    rank 0 closes that connection without sending its descriptor, and rank 1 gets nothing."""
    real = fds._peer_uid
    # A connected socket's peer is a named listener; an accepted one's is the connecting socket, unnamed.
    monkeypatch.setattr(fds, "_peer_uid", lambda sock: real(sock) if sock.getpeername() else os.getuid() + 1)
    results = _both_ranks()
    for rank, (got, error) in enumerate(results):
        assert got is None, f"rank {rank} was served a descriptor"
        assert f"rank {rank} did not get rank {1 - rank}'s heap" in str(error)
