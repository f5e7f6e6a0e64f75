"""The cases of the per-channel casts (plain, fused with a gather and quantised input,
transposed), the three fused SwiGLU casts, and the host-side FP4 unpack."""

import torch

from .cases_quant import make_input
from .common import (COL, E4M3, LAYOUT_NAMES, PACKED, ROW, align, bits32, diff,
                     ref_sf_logical, report)
from .ref_cast import cast, gather_rows, unpack_e2m1
from .ref_swiglu import (swiglu_act, swiglu_backward, swiglu_forward_per_channel,
                         swiglu_forward_per_token)

def cases_per_channel(tgt, shapes, dev, gen):
    """per_channel_cast (reference torch.cast(x, 'e4m3', (128, 1))),
    per_channel_cast_fused (torch.per_channel_cast_fused: gather, then cast with
    x_block_size (1, 128)), per_channel_cast_and_transpose (torch.cast(x, 'e4m3',
    (bm, 1)) transposed)."""
    for (r, c) in shapes:
        t = align(r, 128)
        for round_sf in (False, True):
            for dtype in (torch.bfloat16, torch.float32):
                x = make_input("randn", t, c, dtype, dev, gen)
                want, sf, _ = cast(x, E4M3, 128, 1, round_sf)
                got, got_sf = tgt.per_channel_cast("plain", x, 128, round_sf)
                report("per_channel_cast", f"{str(dtype)[6:]} 128x1{' round' if round_sf else ''}",
                       f"{t}x{c}", [diff("out", got, want), diff("sf", got_sf, bits32(sf))])
            for bm in (32, 128):
                x = make_input("wide" if bm == 32 else "randn", t, c, torch.bfloat16, dev, gen)
                want, sf, _ = cast(x, E4M3, bm, 1, round_sf)
                got, got_sf = tgt.per_channel_cast("transpose", x, bm, round_sf)
                report("per_channel_cast_and_transpose", f"bf16 {bm}x1{' round' if round_sf else ''}",
                       f"{t}x{c}", [diff("out", got, want.t().contiguous()), diff("sf", got_sf, bits32(sf))])
            # fused: gather of random rows (-1 = zero row), float or e4m3 + 1x128 scales input
            n = align(r, 16)
            pos = torch.randint(-1, t, (n,), generator=gen, device=dev, dtype=torch.int32)
            x = make_input("randn", t, c, torch.bfloat16, dev, gen)
            want, sf, _ = cast(gather_rows(x, pos), E4M3, 128, 1, round_sf)
            got, got_sf = tgt.per_channel_cast("fused", x, 128, round_sf, pos=pos)
            report("per_channel_cast_fused", f"bf16 pos_to_token{' round' if round_sf else ''}",
                   f"{n}<-{t}x{c}", [diff("out", got, want), diff("sf", got_sf, bits32(sf))])
            if c % 128 == 0:
                q, q_sf, _ = cast(x, E4M3, 1, 128, False)
                for p in (None, pos):
                    src_q = q if p is None else gather_rows(q, p)
                    src_sf = q_sf if p is None else gather_rows(q_sf, p)
                    want, sf, _ = cast(src_q.view(torch.float8_e4m3fn), E4M3, 128, 1, round_sf,
                                       x_sf=src_sf, x_block=(1, 128))
                    got, got_sf = tgt.per_channel_cast("fused", q, 128, round_sf, x_sf=q_sf, pos=p)
                    rows = t if p is None else n
                    report("per_channel_cast_fused",
                           f"e4m3+sf{' pos_to_token' if p is not None else ''}{' round' if round_sf else ''}",
                           f"{rows}x{c}", [diff("out", got, want), diff("sf", got_sf, bits32(sf))])


def routing(tokens, topk, dev, gen, align_rows=16):
    """A MoE mapping: about 3/4 of the (t, k) slots are local, placed in random order,
    with -1 padding rows; returns (pos_to_token_topk (N,), token_topk_to_pos (T, K))."""
    slots = torch.randperm(tokens * topk, generator=gen, device=dev)[: tokens * topk * 3 // 4]
    n = align(slots.numel() + 5, align_rows)
    p2t = torch.full((n,), -1, dtype=torch.int32, device=dev)
    where = torch.randperm(n, generator=gen, device=dev)[: slots.numel()]
    p2t[where] = slots.int()
    t2p = torch.full((tokens * topk,), -1, dtype=torch.int32, device=dev)
    t2p[slots] = where.int()
    return p2t, t2p.view(tokens, topk)


def cases_swiglu(tgt, shapes, dev, gen):
    """swiglu_forward_and_per_token_cast (reference torch.swiglu_forward then torch.cast
    (1, npc)), swiglu_backward_and_per_token_cast (torch.swiglu_backward then
    torch.cast), swiglu_forward_and_per_channel_cast_and_transpose (torch.cast of the
    bf16 activation, (bm, 1)).  Bit-exact: torch.exp on CUDA is CUDA's expf, which the
    kernels use (spec 2.1)."""
    for (r, c) in shapes:
        half = align(c // 2, 128)
        tokens, topk = max(r // 4, 1), 6
        p2t, _ = routing(tokens, topk, dev, gen)
        n = p2t.numel()
        weights = torch.randn(tokens, topk, generator=gen, device=dev)
        p2e = torch.where(p2t >= 0, 0, -1).int()
        configs = [(128, ROW, True, None, False, False), (128, PACKED, True, 10.0, True, True),
                   (128, COL, False, 0.5, True, False), ("I", ROW, True, None, True, True),
                   ("I", ROW, False, 0.5, False, False)]
        for dtype in (torch.bfloat16, torch.float32):
            for npc, layout, round_sf, clamp, with_w, with_mask in configs:
                x = make_input("randn", n, 2 * half, dtype, dev, gen) * 3
                npc_v = half if npc == "I" else npc
                pw = (p2t, weights) if with_w else (None, None)
                counts0 = torch.tensor([5, 6, 7], dtype=torch.int64, device=dev) if clamp else None
                want, sf, ue, cnt = swiglu_forward_per_token(x, npc_v, round_sf, clamp, *pw)
                got, got_sf, got_cnt = tgt.swiglu_forward(x, npc_v, round_sf, layout, clamp, *pw,
                                                          p2e if with_mask else None, counts0, None)
                keep = (p2e >= 0) if with_mask else torch.ones(n, dtype=torch.bool, device=dev)
                if with_mask:
                    cnt = [int(v) for v in swiglu_act(x[keep, :half].float(), x[keep, half:].float(), clamp)[1]]
                problems = [diff("out", got[keep], want[keep]),
                            diff("sf", got_sf[keep], ref_sf_logical(sf, ue, layout)[keep])]
                if clamp is not None:
                    problems.append(diff("clamped_count", got_cnt,
                                         torch.tensor([5 + cnt[0], 6 + cnt[1], 7 + cnt[2]])))
                cfg = (f"{str(dtype)[6:]} npc={npc} {LAYOUT_NAMES[layout]}{' round' if round_sf else ''}"
                       f" c={clamp}{' w' if with_w else ''}{' mask' if with_mask else ''}")
                report("swiglu_forward_and_per_token_cast", cfg, f"{n}x{2 * half}", problems)
        # sf_clamp_min
        x = make_input("randn", n, 2 * half, torch.bfloat16, dev, gen) * 1e-3
        want, sf, ue, _ = swiglu_forward_per_token(x, 128, True, None, None, None, clamp_min=0.05)
        got, got_sf, _ = tgt.swiglu_forward(x, 128, True, ROW, None, None, None, None, None, 0.05)
        report("swiglu_forward_and_per_token_cast", "bf16 npc=128 row round sf_clamp_min=0.05",
               f"{n}x{2 * half}", [diff("out", got, want), diff("sf", got_sf, bits32(sf))])
        # backward
        for npc, round_sf, clamp in ((128, False, None), (32, True, 10.0), (128, True, 0.5)):
            p2t, t2p = routing(tokens, topk, dev, gen, npc)
            n = p2t.numel()
            xin = make_input("randn", n, 2 * half, torch.bfloat16, dev, gen) * 2
            xq, xsf, _ = cast(xin, E4M3, 1, npc, round_sf)
            grad_out = make_input("randn", n, half, torch.bfloat16, dev, gen)
            weight = torch.rand(tokens, topk, generator=gen, device=dev)
            want = swiglu_backward(xq.view(torch.float8_e4m3fn), xsf, grad_out, weight, p2t, t2p,
                                   npc, round_sf, clamp)
            got = tgt.swiglu_backward(xq, xsf, grad_out, weight, p2t, t2p, npc, round_sf, clamp)
            report("swiglu_backward_and_per_token_cast",
                   f"npc={npc}{' round' if round_sf else ''} c={clamp}", f"{n}x{2 * half}",
                   [diff("out", got[0], want[0]), diff("x_grad_fp8", got[1], want[1]),
                    diff("x_grad_sf", got[2], bits32(want[2])), diff("x_grad", got[3], want[3]),
                    diff("weight_grad", got[4], want[4], tol=1e-4)])
        # per-channel, transposed
        t = align(r, 128)
        for npt, round_sf, transpose, clamp in ((128, True, True, None), (32, False, True, 10.0),
                                                (128, False, False, 0.5), (32, True, False, None)):
            x = make_input("randn", t, 2 * half, torch.bfloat16, dev, gen) * 3
            want, sf = swiglu_forward_per_channel(x, npt, round_sf, transpose, clamp)
            got, got_sf = tgt.swiglu_per_channel(x, npt, round_sf, transpose, clamp)
            report("swiglu_forward_and_per_channel_cast_and_transpose",
                   f"{npt}x1{' round' if round_sf else ''}{' T' if transpose else ''} c={clamp}",
                   f"{t}x{2 * half}", [diff("out", got, want), diff("sf", got_sf, bits32(sf))])


def cases_unpack(tgt, shapes, dev, gen):
    """unpack_from_e2m1fn_x2 (TileKernels: quant.common) of all 256 bytes (host memory)."""
    data = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.int8)
    for out_dtype in (torch.float32, torch.bfloat16):
        want = unpack_e2m1(data.view(1, 256)).reshape(-1).to(out_dtype)
        report("unpack_from_e2m1fn_x2", f"->{str(out_dtype)[6:]} all bytes", "256",
               [diff("out", tgt.unpack_e2m1(data, out_dtype), want)], host=True)
