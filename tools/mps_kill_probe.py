"""Does a CUDA process's death cost another process on the same GPU its context, with no memory shared?

Run it on a GPU machine, once as it is and once with an MPS server running (``nvidia-cuda-mps-control
-d``; set ``MPS=1`` so the output says so): ``python3 tools/mps_kill_probe.py``. Per case, two fresh
processes share nothing but the GPU (no IPC, no Iris): the victim runs ``torch.cuda._sleep`` (a spin
kernel that touches no memory), or a queue of copies between its own tensors, or nothing; the
parent SIGKILLs it; the bystander was either running its own spin kernel through the kill, or idle
and launching 1 s after. Prints the bystander's outcome, whether its context still works, and
whether a fresh process gets the GPU. It is the evidence behind docs/architecture.md, section
"A dead peer".
"""
import multiprocessing as mp
import os, signal, sys, time


def victim(kind, ready):
    import torch
    x = torch.empty(1 << 28, device="cuda")  # 1 GiB of its own
    torch.cuda.synchronize()
    if kind == "spin":
        torch.cuda._sleep(int(2e10))  # ~10 s
    elif kind == "copy":
        y = torch.empty_like(x)
        for _ in range(4000):
            y.copy_(x)
    ready.send(True)
    time.sleep(60)


def bystander(mode, go, result):
    import torch
    try:
        a = torch.ones(1 << 20, device="cuda")
        torch.cuda.synchronize()
        go.send("ready")
        go.recv()  # the victim's work runs
        if mode == "busy":
            torch.cuda._sleep(int(6e9))  # ~3 s, resident through the kill
        go.send("started")
        go.recv()  # victim killed
        if mode == "busy":
            torch.cuda.synchronize()
        else:
            time.sleep(1.0)
        b = (a * 2).sum().item()  # a new launch and a copy back
        result.send(f"ok ({b:.0f})")
    except Exception as e:
        result.send(f"{type(e).__name__}: {str(e).splitlines()[0][:150]}")
    try:
        torch.ones(1, device="cuda").item()
        result.send("context usable after")
    except Exception as e:
        result.send(f"context lost after: {str(e).splitlines()[0][:100]}")


def case(vkind, bmode):
    ctx = mp.get_context("spawn")
    vr, vw = ctx.Pipe(False)
    gp, gc = ctx.Pipe()
    rr, rw = ctx.Pipe(False)
    b = ctx.Process(target=bystander, args=(bmode, gc, rw)); b.start()
    assert gp.recv() == "ready"
    v = ctx.Process(target=victim, args=(vkind, vw)); v.start()
    vr.recv()
    gp.send("start"); assert gp.recv() == "started"
    time.sleep(0.5)  # victim's work resident (spin) or queued and running (copy)
    os.kill(v.pid, signal.SIGKILL); v.join()
    t = time.time()
    gp.send("killed")
    out = [rr.recv(), rr.recv()]
    b.join(30)
    # a fresh process afterwards
    f = ctx.Process(target=_fresh, args=(rw,)); f.start(); out.append(rr.recv()); f.join(30)
    print(f"victim {vkind:5s} killed, bystander {bmode:4s}: " + " | ".join(out) + f"  ({time.time() - t:.2f} s)", flush=True)


def _fresh(result):
    import torch
    try:
        torch.ones(1, device="cuda").item(); result.send("fresh process ok")
    except Exception as e:
        result.send(f"fresh process: {type(e).__name__}: {str(e).splitlines()[0][:100]}")


if __name__ == "__main__":
    print("MPS" if os.environ.get("MPS") else "no MPS", flush=True)
    for vkind in ("idle", "spin", "copy"):
        for bmode in ("busy", "idle"):
            case(vkind, bmode)
