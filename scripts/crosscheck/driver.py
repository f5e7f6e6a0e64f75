"""crosscheck.py -- libtk's quantisation kernels against an independent PyTorch reference.

Issue #4 asks for cross-checks against TileKernels' own reference outputs.  This script
re-implements, in PyTorch, the reference functions of TileKernels' `tile_kernels/torch/`
(`cast.py::cast` / `cast_back`, `cast_e5m6.py`, `per_channel_cast_fused.py`,
`swiglu.py`; snapshot 36d9e45, described in tilekernels-spec.md section 6), using torch's
own dtype conversions where TileKernels does (float8_e4m3fn, bfloat16, float16), and
compares libtk's outputs with them bit for bit (weight_grad of the SwiGLU backward to
the spec's rtol = atol = 1e-4).

Modes:

  GPU (the H200 machine; no compiler needed there):
      LD_LIBRARY_PATH=.gpu/lib:/usr/local/nvidia/lib64 \\
          python3 scripts/crosscheck.py --lib .gpu/lib/libtk.so [--quick] [--only NAME]
    Inputs are torch CUDA tensors; their data_ptr() goes to libtk through a ctypes
    mirror of tk_tensor.  libtk uses the current context, which torch has made the
    primary context of device 0, so the pointers are shared; stream NULL.

  --self-test (CPU, any machine with gcc and torch):
      python3 scripts/crosscheck.py --self-test [--ref-lib /tmp/libtkref.so]
    Runs the same cases with the torch reference on the CPU against the project's C
    references (tests/ref/*.c, built into a shared library in /tmp with gcc unless
    --ref-lib names one), so that a GPU mismatch points at the kernel, not at this
    script.  The C references take CUDA's expf values from a provider; here they get
    torch's, so the SwiGLU cases are exact too.

One line per case: function, config, shape, and "match" or the mismatch count with the
first few differences.  The exit status is 1 if any case mismatched or failed.

Deliberate points where the reference follows the spec rather than TileKernels' torch
code (both only matter for NaN input): a NaN element does not raise a block's |max|
(the kernels use fmaxf, spec 2.1), and NaN quantises to 0x7F (e4m3) / 0x7 (e2m1) of
either sign (spec 2.2).
"""

import argparse

import torch

from . import common
from .cases_modes import cases_requant, cases_sf_modes
from .cases_fused import cases_per_channel, cases_swiglu, cases_unpack
from .cases_quant import cases_cast_back, cases_e5m6, cases_lossless, cases_per_block, cases_per_token
from .common import ERRORS, FAILURES, report
from .cref import CRef, build_ref_lib
from .libtk import LibTk

GROUPS = {
    "unpack": cases_unpack,
    "per_token": cases_per_token,
    "cast_back": cases_cast_back,
    "e5m6": cases_e5m6,
    "per_block": cases_per_block,
    "lossless": cases_lossless,
    "per_channel": cases_per_channel,
    "swiglu": cases_swiglu,
    "requant": cases_requant,
    "sf_modes": cases_sf_modes,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="libtk.so (GPU mode)")
    ap.add_argument("--self-test", action="store_true",
                    help="CPU only: the torch reference against tests/ref (no GPU, no libtk)")
    ap.add_argument("--ref-lib", help="the C references as a shared library (default: build "
                    "tests/ref with gcc into /tmp/crosscheck-libtkref.so)")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: check that libtk (--lib) accepts every call's arguments")
    ap.add_argument("--quick", action="store_true", help="small shapes only")
    ap.add_argument("--shapes", help="comma-separated RxC list replacing the default shapes")
    ap.add_argument("--only", action="append", choices=sorted(GROUPS), help="run these groups only")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    if args.dry_run and not args.lib:
        ap.error("--dry-run needs --lib")
    if args.self_test:
        if not args.ref_lib:
            args.ref_lib = "/tmp/crosscheck-libtkref.so"
            build_ref_lib(args.ref_lib)
        tgt = CRef(args.ref_lib)
        shapes = [(7, 128), (33, 576), (130, 1536)] if args.quick else \
            [(1, 64), (7, 576), (130, 1536), (257, 7168)]
    elif args.dry_run:
        common.DRY_RUN = True
        tgt = LibTk(args.lib, dry_run=True)
        shapes = [(7, 128), (33, 576), (130, 1536)] if args.quick else \
            [(1, 64), (7, 576), (130, 1536), (4001, 7168), (64, 16384)]
    else:
        if not args.lib:
            ap.error("--lib is required without --self-test")
        if not torch.cuda.is_available():
            ap.error("no CUDA device for torch")
        torch.cuda.init()
        torch.zeros(1, device="cuda")              # makes the primary context current
        tgt = LibTk(args.lib)
        shapes = [(7, 128), (130, 576)] if args.quick else \
            [(1, 64), (7, 576), (130, 1536), (4001, 7168), (8001, 7168), (64, 16384)]
    if args.shapes:
        shapes = [tuple(int(n) for n in rc.split("x")) for rc in args.shapes.split(",")]
    gen = torch.Generator(device=tgt.device)
    gen.manual_seed(args.seed)
    torch.manual_seed(args.seed)
    for name, fn in GROUPS.items():
        if args.only and name not in args.only:
            continue
        try:
            fn(tgt, shapes, tgt.device, gen)
        except Exception as e:                     # ends this group, not the run
            ERRORS.append(f"{type(e).__name__}: {e}")
            report(name, "ERROR", "-", [])
    print(f"{'FAILED' if FAILURES else 'OK'}: {len(FAILURES)} mismatching case(s)")
    return 1 if FAILURES else 0

