"""The cases of per_token_cast's other input and output modes: requantisation of e4m3 or
packed FP4 data with its block scales (group requant), and the SF-only and precomputed-SF
modes of per_token_cast and per_block_cast (group sf_modes).  Added after the first H200
run; TileKernels' test_per_token_cast.py exercises the same modes."""

import torch

from .cases_quant import make_input
from .common import (COL, E2M1, E4M3, LAYOUT_NAMES, PACKED, ROW, SfLayout, diff,
                     ref_sf_logical, report)
from .ref_cast import cast, cast_quantized, decode_sf


def cases_requant(tgt, shapes, dev, gen):
    """per_token_cast of a QuantTensor (tk_per_token_cast_quantized; reference
    torch.cast(x, fmt, (1, npc)) with x_block_size, in the kernel's association, spec
    6.1 (b)).  The input is made as TileKernels' test makes it: torch.cast of bf16 randn
    to e4m3 or e2m1 in 128x128 or 32x32 blocks, its scales in every layout, plus f32
    scales that are not powers of two (where the association matters)."""
    outputs = ((16, COL, True), (32, ROW, True), (64, ROW, False), (128, PACKED, True),
               (128, ROW, False))
    for (r, c) in shapes:
        if c % 64 != 0:
            continue
        for in_fmt in (E4M3, E2M1):
            for x_block in ((128, 128), (32, 32)):
                for in_layout, in_round in ((ROW, True), (COL, True), (PACKED, True), (ROW, False)):
                    kind = "wide" if in_layout == COL else "randn"
                    x = make_input(kind, r, c, torch.bfloat16, dev, gen)
                    data, sf_in, ue_in = cast(x, in_fmt, *x_block, in_round)
                    if in_fmt is E4M3:
                        data = data.view(torch.float8_e4m3fn)
                    buf = SfLayout(r, c, *x_block, in_layout).encode(sf_in, ue_in, dev)
                    sf_in_l = decode_sf(ue_in) if in_layout == PACKED else sf_in
                    for fmt in (E4M3, E2M1):
                        for npc, layout, round_sf in outputs:
                            want, sf, ue = cast_quantized(data, sf_in_l, x_block, fmt, npc,
                                                          round_sf)
                            got, got_sf = tgt.per_token_cast_quantized(
                                data.view(torch.uint8) if in_fmt is E4M3 else data, buf, in_layout,
                                x_block, fmt, npc, round_sf, layout)
                            cfg = (f"{in_fmt[0]} {x_block[0]}x{x_block[1]} "
                                   f"{LAYOUT_NAMES[in_layout]}{' round' if in_round else ''} "
                                   f"-> {fmt[0]} npc={npc} "
                                   f"{LAYOUT_NAMES[layout]}{' round' if round_sf else ''}")
                            report("per_token_cast_quantized", cfg, f"{r}x{c}",
                                   [diff("out", got.view(torch.int8) if fmt is E2M1 else got, want),
                                    diff("sf", got_sf, ref_sf_logical(sf, ue, layout))])


LAYOUTS = ((ROW, False), (ROW, True), (COL, True), (PACKED, True))   # (layout, round_sf)


def precomputed_scales(x, fmt, bm, bk, dev, gen):
    """The scales for the precomputed-SF mode: the cast's own (TileKernels' test passes
    per_token_cast's out_sf back), and the same times a random factor in [0.75, 1.25)
    (any f32 scale, inv = 1 / sf)."""
    _, sf, _ = cast(x, fmt, bm, bk, False)
    jitter = 0.75 + 0.5 * torch.rand(sf.shape, generator=gen, device=dev)
    return [("own", sf.contiguous()), ("jittered", (sf * jitter).contiguous())]


def cases_sf_modes(tgt, shapes, dev, gen):
    """per_token_cast_with_sf_only / per_block_cast_with_sf_only (reference: the scales of
    torch.cast, spec 6.1: equal to the full cast's) and ..._with_precomputed_sf (reference
    torch.cast(x, ..., sf=sf): inv = 1 / sf, IEEE)."""
    for (r, c) in shapes:
        for fmt in (E4M3, E2M1):
            for dtype in (torch.bfloat16, torch.float32):
                for npc in (16, 32, 64, 128):
                    for layout, round_sf in LAYOUTS:
                        x = make_input("wide" if layout == COL else "randn", r, c, dtype, dev, gen)
                        _, sf, ue = cast(x, fmt, 1, npc, round_sf)
                        got_sf = tgt.per_token_cast_sf_only(x, fmt, npc, round_sf, layout)
                        cfg = (f"{fmt[0]} {str(dtype)[6:]} npc={npc} {LAYOUT_NAMES[layout]}"
                               f"{' round' if round_sf else ''}")
                        report("per_token_cast_with_sf_only", cfg, f"{r}x{c}",
                               [diff("sf", got_sf, ref_sf_logical(sf, ue, layout))])
                    x = make_input("randn", r, c, dtype, dev, gen)
                    for label, sf in precomputed_scales(x, fmt, 1, npc, dev, gen):
                        want, _, _ = cast(x, fmt, 1, npc, False, precomputed=sf)
                        got = tgt.per_token_cast_precomputed(x, fmt, npc, sf)
                        report("per_token_cast_with_precomputed_sf",
                               f"{fmt[0]} {str(dtype)[6:]} npc={npc} {label}", f"{r}x{c}",
                               [diff("out", got.view(torch.int8) if fmt is E2M1 else got, want)])
            if c % 64 != 0:
                continue
            for bm, bk in ((128, 128), (32, 32), (32, 128)):
                for layout, round_sf in LAYOUTS:
                    kind = "wide" if layout == COL else "randn"
                    x = make_input(kind, r, c, torch.bfloat16, dev, gen)
                    _, sf, ue = cast(x, fmt, bm, bk, round_sf)
                    got_sf = tgt.per_block_cast_sf_only(x, fmt, bm, bk, round_sf, layout)
                    cfg = f"{fmt[0]} bf16 {bm}x{bk} {LAYOUT_NAMES[layout]}{' round' if round_sf else ''}"
                    report("per_block_cast_with_sf_only", cfg, f"{r}x{c}",
                           [diff("sf", got_sf, ref_sf_logical(sf, ue, layout))])
                x = make_input("randn", r, c, torch.float32, dev, gen)
                for label, sf in precomputed_scales(x, fmt, bm, bk, dev, gen):
                    want, _, _ = cast(x, fmt, bm, bk, False, precomputed=sf)
                    got = tgt.per_block_cast_precomputed(x, fmt, bm, bk, sf)
                    report("per_block_cast_with_precomputed_sf", f"{fmt[0]} f32 {bm}x{bk} {label}",
                           f"{r}x{c}",
                           [diff("out", got.view(torch.int8) if fmt is E2M1 else got, want)])
