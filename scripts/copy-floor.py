#!/usr/bin/env python3
# copy-floor.py -- device-to-device copy rate against problem size, on the
# GPU machine (PyTorch), timed as tkbench times a row: the 60 MB L2
# emptied by reading a 256 MiB buffer before each copy, one CUDA event pair
# around each copy, the median of 30.  The 4 GiB rate is tkbench's copy
# ceiling; the smaller sizes show what a copy of a small problem's bytes
# reaches (docs/perf.md, Method 6).  Usage: python3 scripts/copy-floor.py
import torch

flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def median_copy_us(moved_bytes, iters=30):
    source = torch.empty(moved_bytes // 2, dtype=torch.uint8, device="cuda")
    destination = torch.empty_like(source)
    times = []
    for _ in range(iters):
        flush.sum(dtype=torch.int32)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        destination.copy_(source)
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    times.sort()
    return times[len(times) // 2]


for megabytes in (42, 88, 338, 4096):
    moved = megabytes * 1000 * 1000
    us = median_copy_us(moved)
    print(f"copy moving {moved / 1e6:8.1f} MB: median {us:8.2f} us, {moved / us / 1e3:7.1f} GB/s")
