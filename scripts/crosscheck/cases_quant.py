"""The cases of the plain quantisation casts: per_token_cast, cast_back /
per_token_cast_back, E5M6, per_block_cast and per_block_cast_lossless, with the test inputs
they share.  Each cases_* function runs one group (driver.GROUPS) against a target."""

import torch

from .common import (COL, E2M1, E4M3, E5M6_MAX, LAYOUT_NAMES, PACKED, ROW, SfLayout,
                     ceil_div, diff, f32_from_bits, ref_sf_logical, report)
from .ref_cast import cast, cast_back, decode_sf, dequantize, per_block_cast_lossless
from .ref_e5m6 import cast_back_from_e5m6, cast_to_e5m6

# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------

def make_input(kind, rows, cols, dtype, dev, gen):
    """Test matrices: 'randn'; 'wide' (randn times 2^e, e per row in [-100, 100], like
    TileKernels' generate_rand_float); 'edge' (zero rows, huge and tiny rows, exact ties
    of the e4m3/e2m1 grids); 'nan' (randn with NaN elements)."""
    x = torch.randn(rows, cols, generator=gen, device=dev)
    if kind == "wide":
        e = torch.randint(-100, 101, (rows, 1), generator=gen, device=dev).float()
        x = x * torch.exp2(e)
    elif kind == "edge":
        x[0::5] = 0.0
        x[1::5] *= 1e30 if dtype == torch.float32 else 1e36
        x[2::5] *= 1e-30
        x[3::5] = torch.round(x[3::5] * 8) / 8     # many exact grid points and ties
        x[:, 0] = -0.0
    elif kind == "nan":
        x[torch.rand(rows, cols, generator=gen, device=dev) < 0.01] = float("nan")
    return x.to(dtype)


# ---------------------------------------------------------------------------
# the cases
# ---------------------------------------------------------------------------

def run_per_token_cast(tgt, x, fmt, npc, round_sf, layout, label, stride_note=""):
    """per_token_cast(x, fmt, npc) (TileKernels: quant.per_token_cast; reference
    torch.cast(x, fmt, (1, npc))), then cast_back of libtk's own output to bf16 and f32
    (reference torch.cast_back)."""
    r, c = x.shape
    npc_v = c if npc == "H" else npc
    want_out, want_sf, want_ue = cast(x, fmt, 1, npc_v, round_sf)
    got_out, got_sf = tgt.per_token_cast(x, fmt, npc_v, round_sf, layout)
    cfg = f"{fmt[0]} {str(x.dtype)[6:]} npc={npc} {LAYOUT_NAMES[layout]}{' round' if round_sf else ''} {label}{stride_note}"
    report("per_token_cast", cfg, f"{r}x{c}",
           [diff("out", got_out.view(torch.int8) if fmt is E2M1 else got_out, want_out),
            diff("sf", got_sf, ref_sf_logical(want_sf, want_ue, layout))])


def run_cast_back(tgt, data, sf, ue, fmt, rows, cols, bm, bk, layout, label):
    """cast_back / per_token_cast_back (TileKernels: quant.cast_back; reference
    torch.cast_back) of given data and scales, to bf16 and f32."""
    sfl = SfLayout(rows, cols, bm, bk, layout)
    buf = sfl.encode(sf, ue, data.device)
    for out_dtype in (torch.bfloat16, torch.float32):
        want = cast_back(data, decode_sf(ue) if layout == PACKED else sf, bm, bk, out_dtype)
        got = tgt.cast_back(data, buf, layout, rows, cols, bm, bk, out_dtype)
        cfg = f"{fmt}->{str(out_dtype)[6:]} {bm}x{bk} {LAYOUT_NAMES[layout]} {label}"
        report("cast_back" if bm != 1 else "per_token_cast_back", cfg, f"{rows}x{cols}",
               [diff("out", got, want)])


def random_scales(nbm, nbk, dev, gen, power_of_two):
    """f32 scales 2^[-20, 10] (times a random mantissa unless power_of_two), and bytes."""
    e = torch.randint(-20, 11, (nbm, nbk), generator=gen, device=dev)
    sf = f32_from_bits((e + 127) << 23)
    if not power_of_two:
        sf = sf * (1 + torch.rand(nbm, nbk, generator=gen, device=dev))
    return sf, (e + 127).int()


def cases_per_token(tgt, shapes, dev, gen):
    for (r, c) in shapes:
        for fmt in (E4M3, E2M1):
            for dtype in (torch.bfloat16, torch.float32):
                for npc in ((16, 32, 64, 128, "H") if fmt is E2M1 or dtype == torch.bfloat16 else (32, 128, "H")):
                    if npc == "H" and c > 8192:
                        continue
                    for layout, round_sf in ((ROW, False), (ROW, True), (COL, True), (PACKED, True)):
                        x = make_input("randn", r, c, dtype, dev, gen)
                        run_per_token_cast(tgt, x, fmt, npc, round_sf, layout, "randn")
            # edge values, wide exponents, NaN, and a row-strided input
            for kind in ("edge", "wide", "nan"):
                for dtype in (torch.bfloat16, torch.float32):
                    x = make_input(kind, r, c, dtype, dev, gen)
                    run_per_token_cast(tgt, x, fmt, 128, True, PACKED, kind)
                    run_per_token_cast(tgt, x, fmt, 32, False, ROW, kind)
            wide = make_input("randn", r, c + 64, torch.bfloat16, dev, gen)
            run_per_token_cast(tgt, wide[:, :c], fmt, 128, True, ROW, "randn", " stride=H+64")


def cases_cast_back(tgt, shapes, dev, gen):
    for (r, c) in shapes:
        # e4m3: every code (NaN included) with random scales, every block the API lists
        data = torch.randint(0, 256, (r, c), generator=gen, device=dev, dtype=torch.int32).to(torch.uint8)
        e4 = data.view(torch.float8_e4m3fn)
        blocks = [(1, 32), (1, 64), (1, 128), (128, 128), (128, 1), (32, 32)]
        for bm, bk in blocks:
            for layout in (ROW, COL, PACKED):
                if layout == PACKED and (bm, bk) not in ((1, 32), (1, 64), (1, 128), (128, 128)):
                    continue
                sf, ue = random_scales(ceil_div(r, bm), ceil_div(c, bk), dev, gen, layout == PACKED)
                run_cast_back(tgt, e4, sf, ue, "e4m3", r, c, bm, bk, layout, "all codes")
        # e2m1: every nibble, npc 16..128 and H, f32 and packed scales, also 2-D blocks
        packed = torch.randint(-128, 128, (r, c // 2), generator=gen, device=dev, dtype=torch.int32).to(torch.int8)
        for bm, bk in [(1, 16), (1, 32), (1, 64), (1, 128), (1, c), (32, 32), (128, 128)]:
            if bk == c and c > 8192:
                continue
            for layout in (ROW, COL, PACKED):
                sf, ue = random_scales(ceil_div(r, bm), ceil_div(c, bk), dev, gen, layout == PACKED)
                run_cast_back(tgt, packed, sf, ue, "e2m1", r, c, bm, bk, layout, "all codes")
        # the round trip of TileKernels' test: cast_back of per_token_cast's own output
        x = make_input("randn", r, c, torch.bfloat16, dev, gen)
        for fmt in (E4M3, E2M1):
            out, sf, ue = cast(x, fmt, 1, 128, True)
            d = out.view(torch.float8_e4m3fn) if fmt is E4M3 else out
            run_cast_back(tgt, d, sf, ue, fmt[0], r, c, 1, 128, PACKED, "round trip")


def cases_e5m6(tgt, shapes, dev, gen):
    """per_token_cast(x, 'e5m6', H) (reference torch.cast_to_e5m6) and cast_back(...,
    x_special_fmt='e5m6') (reference torch.cast_back_from_e5m6)."""
    special = [2.0 ** -20, 2.0 ** -14 * 63 / 64, 2.0 ** -14]
    for (r, c) in shapes:
        if c > 16384:
            continue
        inputs = [("randn", make_input("randn", r, c, torch.bfloat16, dev, gen)),
                  ("randn", make_input("randn", r, c, torch.float32, dev, gen)),
                  ("wide", make_input("wide", r, c, torch.float32, dev, gen)),
                  ("edge", make_input("edge", r, c, torch.float32, dev, gen))]
        for s in special:
            x = torch.full((r, c), s, device=dev)
            x[:, -1] = E5M6_MAX
            inputs.append((f"special {s:.3g}", x))
        for label, x in inputs:
            for layout, round_sf in ((ROW, True), (ROW, False), (COL, True), (PACKED, True)):
                want, sf, ue = cast_to_e5m6(x, round_sf)
                got, got_sf = tgt.per_token_cast_e5m6(x, round_sf, layout)
                cfg = f"{str(x.dtype)[6:]} {LAYOUT_NAMES[layout]}{' round' if round_sf else ''} {label}"
                report("per_token_cast_e5m6", cfg, f"{r}x{c}",
                       [diff("out", got, want), diff("sf", got_sf, ref_sf_logical(sf, ue, layout))])
                sfl = SfLayout(r, c, 1, c, layout)
                buf = sfl.encode(sf, ue, dev)
                for out_dtype in (torch.bfloat16, torch.float32):
                    w = cast_back_from_e5m6(want, sf, out_dtype)
                    g = tgt.cast_back_e5m6(want, buf, layout, r, c, out_dtype)
                    report("cast_back_e5m6", f"->{str(out_dtype)[6:]} {LAYOUT_NAMES[layout]} {label}",
                           f"{r}x{c}", [diff("out", g, w)])


def cases_per_block(tgt, shapes, dev, gen):
    """per_block_cast (reference torch.cast(x, fmt, (bm, bk)))."""
    for (r, c) in shapes:
        for fmt in (E4M3, E2M1):
            for bm, bk in ((128, 128), (32, 32), (32, 128), (128, 32)):
                for dtype in (torch.bfloat16, torch.float32):
                    for layout, round_sf in ((ROW, False), (ROW, True), (COL, True), (PACKED, True)):
                        x = make_input("randn" if layout != COL else "wide", r, c, dtype, dev, gen)
                        want, sf, ue = cast(x, fmt, bm, bk, round_sf)
                        got, got_sf = tgt.per_block_cast(x, fmt, bm, bk, round_sf, layout)
                        cfg = f"{fmt[0]} {str(dtype)[6:]} {bm}x{bk} {LAYOUT_NAMES[layout]}{' round' if round_sf else ''}"
                        report("per_block_cast", cfg, f"{r}x{c}",
                               [diff("out", got.view(torch.int8) if fmt is E2M1 else got, want),
                                diff("sf", got_sf, ref_sf_logical(sf, ue, layout))])


def cases_lossless(tgt, shapes, dev, gen):
    """per_block_cast_lossless: FP4 made as TileKernels' test makes it (torch.cast(x,
    'e2m1', (1, 32), round_sf) of wide-range data with a 2^9 dynamic range); exact vs
    the spec 6.5 semantics, and TileKernels' check: both dequantisations equal."""
    for (r, c) in shapes:
        x = make_input("wide", r, c, torch.float32, dev, gen)
        floor = x.abs().max() / 2 ** 9             # clamp_abs_ratio: whole tensor
        x = torch.sign(x) * torch.maximum(x.abs(), floor)
        for in_layout in (ROW, PACKED):
            data, sf_in, ue_in = cast(x, E2M1, 1, 32, True)
            sf_in_l = decode_sf(ue_in) if in_layout == PACKED else sf_in
            buf = SfLayout(r, c, 1, 32, in_layout).encode(sf_in, ue_in, dev)
            for out_block in ((1, 128), (32, 32), (128, 128)):
                for layout in (ROW, PACKED):
                    want, sf, ue = per_block_cast_lossless(data, sf_in_l, (1, 32), out_block)
                    got, got_sf = tgt.per_block_cast_lossless(data, buf, in_layout, (1, 32), out_block, layout)
                    deq_in = dequantize(data, sf_in_l, 1, 32)
                    got_sf_f = f32_from_bits(got_sf << 23) if layout == PACKED else f32_from_bits(got_sf)
                    deq_out = dequantize(got.view(torch.float8_e4m3fn), got_sf_f, *out_block)
                    cfg = f"e2m1 1x32 {LAYOUT_NAMES[in_layout]} -> e4m3 {out_block[0]}x{out_block[1]} {LAYOUT_NAMES[layout]}"
                    report("per_block_cast_lossless", cfg, f"{r}x{c}",
                           [diff("out", got, want), diff("sf", got_sf, ref_sf_logical(sf, ue, layout)),
                            diff("dequantised", deq_out, deq_in)])
