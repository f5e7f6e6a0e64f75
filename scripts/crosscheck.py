#!/usr/bin/env python3
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
import ctypes
import os
import subprocess
import sys

import torch

# ---------------------------------------------------------------------------
# constants of tk.h and the spec
# ---------------------------------------------------------------------------

TK_I8, TK_U8, TK_I16, TK_U16, TK_I32, TK_U32, TK_I64 = 2, 3, 4, 5, 6, 7, 8
TK_F16, TK_BF16, TK_F32, TK_E4M3, TK_E2M1 = 10, 11, 12, 14, 16
ROW, COL, PACKED = 0, 1, 2                      # tk_sf_layout
LAYOUT_NAMES = {ROW: "row", COL: "col", PACKED: "packed"}
TORCH_TO_TK = {
    torch.int8: TK_I8, torch.uint8: TK_U8, torch.int16: TK_I16, torch.int32: TK_I32,
    torch.int64: TK_I64, torch.float16: TK_F16, torch.bfloat16: TK_BF16,
    torch.float32: TK_F32, torch.float8_e4m3fn: TK_E4M3,
}
E4M3 = ("e4m3", 448.0, 1e-4)                    # (name, QMAX, CLAMP_MIN), spec 4.1
E2M1 = ("e2m1", 6.0, 6.0 * 2.0 ** -126)
E5M6_MAX = 65024.0


def ceil_div(a, b):
    return (a + b - 1) // b


def align(a, b):
    return ceil_div(a, b) * b


# ---------------------------------------------------------------------------
# the PyTorch reference (device agnostic)
# ---------------------------------------------------------------------------

def bits32(x):
    return x.contiguous().view(torch.int32)


def f32_from_bits(b):
    return b.to(torch.int32).view(torch.float32)


def sf_and_inv(amax, fmt, round_sf, clamp_min=None):
    """Scale and multiplier of a block: cast.py::cast step 3 (get_sf_and_inv, spec 4.1).

    Returns (sf, inv, ue8m0): sf the f32 dequantisation scale, inv the quantisation
    multiplier, ue8m0 the biased exponent byte (meaningful with round_sf)."""
    _, qmax, cmin = fmt
    a = torch.clamp(amax, min=cmin if clamp_min is None else clamp_min)
    # tensor / tensor: torch divides a CUDA tensor by a scalar through its reciprocal
    q = torch.full_like(a, qmax)
    sf = a / q
    if round_sf:
        sf = f32_from_bits((bits32(sf) + 0x007FFFFF) & 0x7F800000)
        inv = torch.ones_like(sf) / sf
    else:
        inv = q / a
    return sf, inv, (bits32(sf) >> 23) & 0xFF


def block_amax(v, bm, bk):
    """|max| of every (bm, bk) block of v (R, C) f32 over its valid elements (cast.py
    step 2: padding excluded); NaN elements are ignored (fmaxf)."""
    r, c = v.shape
    a = torch.where(torch.isnan(v), torch.zeros_like(v), v.abs())
    a = torch.nn.functional.pad(a, (0, align(c, bk) - c, 0, align(r, bm) - r), value=-1.0)
    a = a.view(align(r, bm) // bm, bm, align(c, bk) // bk, bk)
    return a.amax(dim=(1, 3))


def expand_blocks(s, bm, bk, r, c):
    """Per-element view of a per-block tensor (repeat_interleave and crop, as cast.py)."""
    return s.repeat_interleave(bm, dim=0).repeat_interleave(bk, dim=1)[:r, :c]


def to_e4m3(q):
    """Saturating e4m3 cast: clamp to +-448 then torch's float8_e4m3fn conversion (cast.py
    step 5); NaN becomes 0x7F of either sign (spec 2.2)."""
    codes = torch.clamp(q, -448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.where(torch.isnan(q), torch.full_like(codes, 0x7F), codes)


def e2m1_codes(q):
    """RNE to the e2m1 grid, saturating at 6, sign kept (convert_to_e2m1_bits, spec 2.2),
    written as thresholds: ties go to the even code.  NaN gives +6 (0x7)."""
    m = q.abs()
    code = ((m > 0.25).int() + (m >= 0.75).int() + (m > 1.25).int() + (m >= 1.75).int()
            + (m > 2.5).int() + (m >= 3.5).int() + (m > 5.0).int())
    sign = ((bits32(q) >> 28) & 0x8)
    code = torch.where(torch.isnan(q), torch.full_like(code, 7), code | sign)
    return code.to(torch.uint8)


def pack_e2m1(q):
    """Element 2j in the low nibble of byte j (spec 3.2); int8 (R, C/2)."""
    c = e2m1_codes(q)
    return (c[:, 0::2] | (c[:, 1::2] << 4)).view(torch.int8)


E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def unpack_e2m1(data):
    """unpack_from_e2m1fn_x2: int8 (R, C/2) -> f32 (R, C)."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=data.device)
    b = data.view(torch.uint8).long()
    out = torch.stack([table[b & 0xF], table[b >> 4]], dim=-1)
    return out.reshape(data.shape[0], data.shape[1] * 2)


def decode_sf(sf):
    """transform_sf: f32 scales as they are; UE8M0 bytes -> 2^(b-127) (b << 23)."""
    if sf.dtype == torch.float32:
        return sf
    return f32_from_bits(sf.long() << 23)


def dequantize(data, sf, bm, bk):
    """The real value f32(data) * s of quantised data (cast.py::cast_back before the
    output cast); data e4m3 (R, C) or packed e2m1 int8 (R, C/2); sf logical blocks."""
    v = unpack_e2m1(data) if data.dtype == torch.int8 else data.float()
    return v * expand_blocks(decode_sf(sf), bm, bk, v.shape[0], v.shape[1])


def cast(x, fmt, bm, bk, round_sf, x_sf=None, x_block=None, precomputed=None, clamp_min=None):
    """cast.py::cast: the block cast of a float matrix, or of quantised data with its
    input scales x_sf in x_block blocks (the real value (data * s_in), then * inv).

    Returns (out, sf, ue8m0): e4m3 codes (uint8) or packed e2m1 (int8), and the logical
    (nbm, nbk) scales (f32 and exponent bytes)."""
    v = dequantize(x, x_sf, *x_block) if x_sf is not None else x.float()
    r, c = v.shape
    if precomputed is None:
        sf, inv, ue8m0 = sf_and_inv(block_amax(v, bm, bk), fmt, round_sf, clamp_min)
    else:
        sf, ue8m0 = precomputed, None
        inv = torch.ones_like(sf) / sf            # sf.reciprocal(): IEEE 1 / sf
    q = v * expand_blocks(inv, bm, bk, r, c)
    out = to_e4m3(q) if fmt is E4M3 else pack_e2m1(q)
    return out, sf, ue8m0


def cast_back(data, sf, bm, bk, out_dtype):
    """cast.py::cast_back: to_dtype(f32(data) * s)."""
    return dequantize(data, sf, bm, bk).to(out_dtype)


def f16_rz_bits(v):
    """CUDA __float2half_rz as int32 bit patterns: torch's RNE float16 conversion, one
    step back toward zero where it rounded up; finite overflow gives 0x7BFF (spec 2.2)."""
    h = v.to(torch.float16)
    hb = h.view(torch.int16).int() & 0xFFFF
    up = h.float().abs() > v.abs()
    hb = torch.where(up, hb - 1, hb)              # the magnitude bits are monotone
    return hb


def e5m6_codes(v):
    """The 12-bit code of spec 3.4 (cast_e5m6.py::_cast_to_e5m6 before packing)."""
    code = f16_rz_bits(v) >> 4
    rem = bits32(v) & 0x1FFFF
    return torch.where((code & 1) + rem > 0x10000, code + 1, code) & 0xFFF


def pack_e5m6(codes):
    """Eight codes -> three little-endian u32 words (spec 3.4); uint8 (R, 3C/2)."""
    r, c = codes.shape
    h = codes.long().view(r, c // 8, 8)
    w0 = (h[..., 0] << 20) | (h[..., 1] << 8) | (h[..., 2] >> 4)
    w1 = ((h[..., 2] & 0xF) << 28) | (h[..., 3] << 16) | (h[..., 4] << 4) | (h[..., 5] >> 8)
    w2 = ((h[..., 5] & 0xFF) << 24) | (h[..., 6] << 12) | h[..., 7]
    words = torch.stack([w0, w1, w2], dim=-1)
    b = torch.stack([(words >> s) & 0xFF for s in (0, 8, 16, 24)], dim=-1)
    return b.to(torch.uint8).reshape(r, c // 8 * 12)


def unpack_e5m6(data):
    """cast_e5m6.py::_cast_back_from_e5m6: uint8 (R, 3C/2) -> f32 (R, C)."""
    r = data.shape[0]
    b = data.long().view(r, -1, 3, 4)
    w = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)
    w0, w1, w2 = w[..., 0], w[..., 1], w[..., 2]
    p = torch.stack([(w0 >> 16), (w0 >> 4), (w0 << 8) | (w1 >> 24), (w1 >> 12), w1,
                     (w1 << 12) | (w2 >> 20), (w2 >> 8), (w2 << 4)], dim=-1) & 0xFFF0
    h = ((p ^ 0x8000) - 0x8000).to(torch.int16).view(torch.float16)
    return h.float().reshape(r, -1)


def cast_to_e5m6(x, round_sf):
    """cast_e5m6.py::cast_to_e5m6 with num_per_channels = H: (packed, sf, ue8m0)."""
    v = x.float()
    a = torch.where(torch.isnan(v), torch.zeros_like(v), v.abs()).amax(dim=1, keepdim=True)
    a = torch.clamp(a, min=1e-4)
    q = torch.full_like(a, E5M6_MAX)
    sf = a / q
    if round_sf:
        e = ((bits32(sf) - 1) >> 23) + 1 - 127
        inv = f32_from_bits((127 - e) << 23)
        sf = f32_from_bits((127 + e) << 23)
    else:
        inv = q / a
    return pack_e5m6(e5m6_codes(v * inv)), sf, (bits32(sf) >> 23) & 0xFF


def cast_back_from_e5m6(data, sf, out_dtype):
    """cast_e5m6.py::cast_back_from_e5m6 with blocks (1, H)."""
    return (unpack_e5m6(data) * decode_sf(sf)).to(out_dtype)


def per_block_cast_lossless(data, sf_in, in_block, out_block):
    """per_block_cast_lossless (spec 6.5; TileKernels has no torch function: its test
    checks that both dequantisations agree, which run_lossless checks too).
    Returns (out e4m3 codes, out sf f32, out exponent bytes)."""
    r, c = data.shape[0], data.shape[1] * 2
    ibm, ibk = in_block
    obm, obk = out_block
    e_in = (bits32(decode_sf(sf_in)) >> 23) & 0xFF             # (nbm_in, nbk_in)
    nbm_o, nbk_o = ceil_div(r, obm), ceil_div(c, obk)
    fm, fk = obm // ibm, obk // ibk
    e_pad = torch.nn.functional.pad(e_in, (0, nbk_o * fk - e_in.shape[1],
                                           0, nbm_o * fm - e_in.shape[0]), value=-1)
    e_out = torch.clamp(e_pad.view(nbm_o, fm, nbk_o, fk).amax(dim=(1, 3)) - 6, min=0)
    shift = expand_blocks(e_in, ibm, ibk, r, c) - expand_blocks(e_out, obm, obk, r, c)
    q = unpack_e2m1(data) * f32_from_bits((shift + 127) << 23)
    return to_e4m3(q), f32_from_bits(e_out << 23), e_out


def gather_rows(x, pos, fill=0):
    """per_channel_cast_fused.py's gather: rows pos[r], zeros for pos < 0 (libtk also
    for pos >= T, docs/kernels.md)."""
    valid = (pos >= 0) & (pos < x.shape[0])
    g = x[torch.where(valid, pos, 0).long()]
    return torch.where(valid.unsqueeze(1), g, torch.zeros_like(g))


def swiglu_act(l, u, clamp):
    """swiglu.py::swiglu_forward's activation in f32: ((l / (1 + exp(-l))) * u) after the
    optional clamp; returns (act, counts of l > c, u > c, u < -c)."""
    counts = [0, 0, 0]
    if clamp is not None:
        counts = [int((l > clamp).sum()), int((u > clamp).sum()), int((u < -clamp).sum())]
        l = torch.clamp(l, max=clamp)
        u = torch.clamp(u, min=-clamp, max=clamp)
    return l / (1.0 + torch.exp(-l)) * u, counts


def row_weights(p2t, weights, rows):
    """Row weight topk_weights.flat[pos_to_token_topk[r]], 0 for a negative index."""
    flat = weights.reshape(-1)
    ok = p2t >= 0
    return torch.where(ok, flat[torch.where(ok, p2t, 0).long()], torch.zeros(rows, device=flat.device))


def swiglu_forward_per_token(x, npc, round_sf, clamp, p2t, weights, clamp_min=None):
    """swiglu_forward_and_per_token_cast's reference: swiglu.py::swiglu_forward then
    cast.py::cast(..., (1, npc)).  Returns (out, sf, ue8m0, counts)."""
    half = x.shape[1] // 2
    v = x.float()
    act, counts = swiglu_act(v[:, :half], v[:, half:], clamp)
    if p2t is not None:
        act = act * row_weights(p2t, weights, x.shape[0]).unsqueeze(1)
    out, sf, ue8m0 = cast(act, E4M3, 1, npc, round_sf, clamp_min=clamp_min)
    return out, sf, ue8m0, counts


def fma_f32(a, b, c):
    """f32 fma(a, b, c) with one rounding: a*b exact in f64, the sum in f64 with its exact
    error (TwoSum), then round-to-odd so the final f64 -> f32 rounding is correct."""
    p = a.double() * b.double()
    c = c.double() if torch.is_tensor(c) else torch.full_like(p, c)
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    odd = (s.view(torch.int64) & 1) == 1
    toward = torch.where(err > 0, torch.full_like(s, float("inf")), torch.full_like(s, -float("inf")))
    s = torch.where((err != 0) & ~odd, torch.nextafter(s, toward), s)
    return s.float()


def swiglu_backward(x, x_sf, grad_out, weight, p2t, t2p, npc, round_sf, clamp):
    """swiglu.py::swiglu_backward (explicit FMA for 1 + x(1-s)) followed by the per-token
    cast of the f32 gradients.  Returns (out bf16, x_grad_fp8, x_grad_sf, x_grad bf16,
    weight_grad)."""
    rows, half = x.shape[0], x.shape[1] // 2
    v = x.float() * x_sf.repeat_interleave(npc, dim=1)
    xv, yv = v[:, :half].clone(), v[:, half:].clone()
    cx = cyu = cyl = torch.zeros_like(xv, dtype=torch.bool)
    if clamp is not None:
        cx, cyu, cyl = xv > clamp, yv > clamp, yv < -clamp
        xv[cx] = clamp
        yv[cyu] = clamp
        yv[cyl] = -clamp
    d = 1.0 + torch.exp(-xv)
    s = torch.ones_like(xv) / d
    w = row_weights(p2t, weight, rows).unsqueeze(1)
    g = grad_out.float()
    gws = g * w * s
    gx = gws * yv * fma_f32(xv, 1.0 - s, 1.0)
    gy = gws * xv
    gx[cx] = 0.0
    gy[cyu | cyl] = 0.0
    act = xv / d * yv
    grad = torch.cat([gx, gy], dim=1)
    q, q_sf, _ = cast(grad, E4M3, 1, npc, round_sf)
    dots = (g.double() * act.double()).sum(dim=1).float()
    ok = t2p >= 0
    wg = torch.where(ok, dots[torch.where(ok, t2p, 0).long()], torch.zeros_like(weight))
    return (act * w).to(torch.bfloat16), q, q_sf, grad.to(torch.bfloat16), wg


def swiglu_forward_per_channel(x, npt, round_sf, transpose, clamp):
    """swiglu_forward_and_per_channel_cast_and_transpose's reference:
    cast(swiglu_forward(x, c).bfloat16(), 'e4m3', (npt, 1)), transposed; the clamp in
    bf16 (the clamp value rounded to bf16 first, spec 6.11)."""
    half = x.shape[1] // 2
    if clamp is not None:
        clamp = float(torch.tensor(clamp).to(torch.bfloat16).float())
    act, _ = swiglu_act(x[:, :half].float(), x[:, half:].float(), clamp)
    out, sf, _ = cast(act.to(torch.bfloat16), E4M3, npt, 1, round_sf)
    return (out.t().contiguous() if transpose else out), sf


# ---------------------------------------------------------------------------
# scale-factor buffers (spec 3.5), independent of tk_sf_desc
# ---------------------------------------------------------------------------

class SfLayout:
    """Dtype, logical shape, strides and bytes of the SF buffer of a (rows, cols) matrix
    in (bm, bk) blocks (spec 3.5)."""

    def __init__(self, rows, cols, bm, bk, layout):
        self.layout = layout
        self.nbm, self.nbk = ceil_div(rows, bm), ceil_div(cols, bk)
        if layout == ROW:
            self.dtype, self.shape, self.strides = torch.float32, (self.nbm, self.nbk), (self.nbk, 1)
            self.bytes = 4 * self.nbm * self.nbk
        else:
            words = self.nbk if layout == COL else ceil_div(self.nbk, 4)
            self.dtype = torch.float32 if layout == COL else torch.int32
            self.shape, self.strides = (self.nbm, words), (1, align(self.nbm, 4))
            self.bytes = 4 * words * align(self.nbm, 4)

    def alloc(self, device):
        """A buffer of the right size filled with 0xA5, so unwritten entries show."""
        return torch.full((max(self.bytes, 16),), 0xA5, dtype=torch.uint8, device=device)

    def view(self, buf):
        """The strided tensor over the buffer, as TileKernels returns it."""
        return buf.view(self.dtype).as_strided(self.shape, self.strides)

    def logical(self, buf):
        """(nbm, nbk) int32: the f32 bits of each block's scale, or its exponent byte."""
        v = self.view(buf)
        t = torch.empty(v.shape, dtype=v.dtype, device=v.device).copy_(v).view(-1)
        if self.layout != PACKED:
            return t.view(torch.int32).view(self.nbm, self.nbk)
        return t.view(torch.uint8).view(self.nbm, -1)[:, :self.nbk].int()

    def encode(self, sf, ue8m0, device):
        """A buffer holding the logical scales in this layout (for inputs)."""
        buf = torch.zeros(max(self.bytes, 16), dtype=torch.uint8, device=device)
        if self.layout == PACKED:
            nw = self.shape[1]
            b = torch.nn.functional.pad(ue8m0.to(torch.uint8), (0, nw * 4 - self.nbk))
            words = torch.empty((self.nbm, nw * 4), dtype=torch.uint8, device=device).copy_(b)
            self.view(buf).copy_(words.view(torch.int32))
        else:
            self.view(buf).copy_(sf)
        return buf


def ref_sf_logical(sf, ue8m0, layout):
    return ue8m0.int() if layout == PACKED else bits32(sf)


# ---------------------------------------------------------------------------
# comparison and reporting
# ---------------------------------------------------------------------------

FAILURES = []
DRY_RUN = False   # --dry-run: only libtk's argument checks count
ERRORS = []       # calls the target rejected since the last report (their outputs stay sentinels)


def diff(name, got, want, tol=None):
    """Mismatching elements of got vs want: bit patterns (NaN equals NaN for floats), or
    |got - want| <= tol * (1 + |want|) with tol.  Returns '' or a description."""
    want = want.to(got.device)
    if got.shape != want.shape:
        return f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if tol is not None:
        bad = ~((got.double() - want.double()).abs() <= tol * (1 + want.double().abs()))
    elif got.is_floating_point():
        ibits = {2: torch.int16, 4: torch.int32, 8: torch.int64, 1: torch.uint8}[got.element_size()]
        bad = got.view(ibits) != want.view(ibits)
        bad &= ~(torch.isnan(got.float()) & torch.isnan(want.float()))
    else:
        bad = got != want
    n = int(bad.sum())
    if n == 0:
        return ""
    idx = bad.nonzero()[:4].tolist()
    show = []
    for i in idx:
        g, w = got[tuple(i)].cpu(), want[tuple(i)].cpu()
        if got.dtype == torch.uint8 or got.dtype == torch.int8:
            show.append(f"{tuple(i)}: {int(g) & 0xFF:#04x} want {int(w) & 0xFF:#04x}")
        elif got.dtype == torch.int32:
            show.append(f"{tuple(i)}: {int(g) & 0xFFFFFFFF:#010x} want {int(w) & 0xFFFFFFFF:#010x}")
        else:
            show.append(f"{tuple(i)}: {float(g)!r} want {float(w)!r}")
    return f"{name}: {n} of {bad.numel()} differ ({'; '.join(show)})"


def report(func, config, shape, problems, host=False):
    """Prints the case's line; host: the target computed on the host, so the outputs are
    compared in --dry-run too."""
    dry = DRY_RUN and not host
    problems = ERRORS + ([] if dry else [p for p in problems if p])
    ERRORS.clear()
    ok = "accepted" if dry else "match"
    status = ok if not problems else "MISMATCH " + " | ".join(problems)
    print(f"{func:<44} {config:<44} {shape:<12} {status}", flush=True)
    if problems:
        FAILURES.append(func)


# ---------------------------------------------------------------------------
# targets: libtk on the GPU, or the C references on the CPU (--self-test)
# ---------------------------------------------------------------------------

class TkTensor(ctypes.Structure):
    """Mirror of tk_tensor (tk.h): pointer, dtype enum, rank, shape[6], strides[6]."""
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.c_int64 * 6), ("strides", ctypes.c_int64 * 6)]


def tk_tensor(t, dtype=None, shape=None, strides=None):
    """A tk_tensor for a torch tensor (or a raw buffer with explicit dtype/shape/strides)."""
    d = TkTensor()
    d.data = t.data_ptr()
    d.dtype = dtype if dtype is not None else TORCH_TO_TK[t.dtype]
    shape = tuple(shape if shape is not None else t.shape)
    strides = tuple(strides if strides is not None else t.stride())
    d.rank = len(shape)
    for i, (n, s) in enumerate(zip(shape, strides)):
        d.shape[i], d.strides[i] = n, s
    return d


def ptr(desc):
    return None if desc is None else ctypes.byref(desc)


def fptr(value):
    return None if value is None else ctypes.byref(ctypes.c_float(value))


class LibTk:
    """Calls libtk with device pointers of CUDA tensors (stream NULL).  dry_run: host
    tensors on a machine without a GPU, where every call must get through libtk's
    argument checks to TK_ERROR_NO_DEVICE (the outputs are not compared)."""

    def __init__(self, path, dry_run=False):
        self.lib = ctypes.CDLL(path)
        self.lib.tk_status_string.restype = ctypes.c_char_p
        self.lib.tk_last_error.restype = ctypes.c_char_p
        self.dry_run = dry_run
        self.device = "cpu" if dry_run else "cuda"

    def call(self, name, *args):
        if not self.dry_run:
            torch.cuda.synchronize()
        status = getattr(self.lib, name)(*args, None)
        if not self.dry_run:
            torch.cuda.synchronize()
        if status != 0 and not (self.dry_run and status == 3):   # TK_ERROR_NO_DEVICE
            ERRORS.append(f"{name}: {self.lib.tk_status_string(status).decode()}: "
                          f"{self.lib.tk_last_error().decode()}")

    def sf_desc(self, rows, cols, bm, bk, layout, buf):
        """tk_sf_desc's descriptor over buf; checks it against the spec's layout."""
        d, nbytes = TkTensor(), ctypes.c_size_t()
        st = self.lib.tk_sf_desc(ctypes.c_int64(rows), ctypes.c_int64(cols), bm, bk, layout,
                                 ctypes.byref(d), ctypes.byref(nbytes))
        want = SfLayout(rows, cols, bm, bk, layout)
        got = (tuple(d.shape[:d.rank]), tuple(d.strides[:d.rank]), nbytes.value)
        if st != 0 or got != (want.shape, want.strides, want.bytes):
            ERRORS.append(f"tk_sf_desc{(rows, cols, bm, bk, layout)} = {got}, spec "
                          f"{(want.shape, want.strides, want.bytes)}")
        d.data = buf.data_ptr()
        return d

    def per_token_cast(self, x, fmt, npc, round_sf, layout):
        r, c = x.shape
        out = torch.full((r, c if fmt is E4M3 else c // 2), 0x55, dtype=torch.uint8, device=self.device)
        sfl = SfLayout(r, c, 1, npc, layout)
        buf = sfl.alloc(self.device)
        o = tk_tensor(out, TK_E4M3 if fmt is E4M3 else TK_I8)
        self.call("tk_per_token_cast", ptr(tk_tensor(x)), npc, ctypes.c_bool(round_sf), layout,
                  ptr(o), ptr(self.sf_desc(r, c, 1, npc, layout, buf)))
        return out, sfl.logical(buf)

    def cast_back(self, data, sf_buf, layout, rows, cols, bm, bk, out_dtype):
        out = torch.full((rows, cols), float("nan"), dtype=out_dtype, device=self.device)
        d = tk_tensor(data, TK_I8 if data.dtype == torch.int8 else TK_E4M3)
        sf = self.sf_desc(rows, cols, bm, bk, layout, sf_buf)
        if bm == 1:
            self.call("tk_per_token_cast_back", ptr(d), ptr(sf), bk, ptr(tk_tensor(out)))
        else:
            self.call("tk_cast_back", ptr(d), ptr(sf), bm, bk, ptr(tk_tensor(out)))
        return out

    def per_token_cast_e5m6(self, x, round_sf, layout):
        r, c = x.shape
        out = torch.full((r, c * 3 // 2), 0x55, dtype=torch.uint8, device=self.device)
        sfl = SfLayout(r, c, 1, c, layout)
        buf = sfl.alloc(self.device)
        self.call("tk_per_token_cast_e5m6", ptr(tk_tensor(x)), ctypes.c_bool(round_sf), layout,
                  ptr(tk_tensor(out)), ptr(self.sf_desc(r, c, 1, c, layout, buf)))
        return out, sfl.logical(buf)

    def cast_back_e5m6(self, data, sf_buf, layout, rows, cols, out_dtype):
        out = torch.full((rows, cols), float("nan"), dtype=out_dtype, device=self.device)
        sf = self.sf_desc(rows, cols, 1, cols, layout, sf_buf)
        self.call("tk_cast_back_e5m6", ptr(tk_tensor(data)), ptr(sf), ptr(tk_tensor(out)))
        return out

    def per_block_cast(self, x, fmt, bm, bk, round_sf, layout):
        r, c = x.shape
        out = torch.full((r, c if fmt is E4M3 else c // 2), 0x55, dtype=torch.uint8, device=self.device)
        sfl = SfLayout(r, c, bm, bk, layout)
        buf = sfl.alloc(self.device)
        tkfmt = TK_E4M3 if fmt is E4M3 else TK_E2M1
        o = tk_tensor(out, TK_E4M3 if fmt is E4M3 else TK_I8)
        self.call("tk_per_block_cast", ptr(tk_tensor(x)), tkfmt, bm, bk, ctypes.c_bool(round_sf),
                  layout, ptr(o), ptr(self.sf_desc(r, c, bm, bk, layout, buf)))
        return out, sfl.logical(buf)

    def per_block_cast_lossless(self, data, sf_buf, in_layout, in_block, out_block, layout):
        r, c = data.shape[0], data.shape[1] * 2
        out = torch.full((r, c), 0x55, dtype=torch.uint8, device=self.device)
        sfl = SfLayout(r, c, *out_block, layout)
        buf = sfl.alloc(self.device)
        sf_in = self.sf_desc(r, c, *in_block, in_layout, sf_buf)
        self.call("tk_per_block_cast_lossless", ptr(tk_tensor(data, TK_I8)), ptr(sf_in),
                  *in_block, *out_block, layout, ptr(tk_tensor(out, TK_E4M3)),
                  ptr(self.sf_desc(r, c, *out_block, layout, buf)))
        return out, sfl.logical(buf)

    def per_channel_cast(self, kind, x, npt, round_sf, x_sf=None, pos=None):
        rows = pos.shape[0] if pos is not None else x.shape[0]
        h = x.shape[1]
        shape = (h, rows) if kind == "transpose" else (rows, h)
        out = torch.full(shape, 0x55, dtype=torch.uint8, device=self.device)
        sf = torch.full((ceil_div(rows, npt), h), float("nan"), device=self.device)
        xd = tk_tensor(x, TK_E4M3 if x.dtype == torch.uint8 else None)
        o, s = tk_tensor(out, TK_E4M3), tk_tensor(sf)
        if kind == "plain":
            self.call("tk_per_channel_cast", ptr(xd), npt, ctypes.c_bool(round_sf), ptr(o), ptr(s))
        elif kind == "transpose":
            self.call("tk_per_channel_cast_and_transpose", ptr(xd), npt, ctypes.c_bool(round_sf),
                      ptr(o), ptr(s))
        else:
            xs = tk_tensor(x_sf) if x_sf is not None else None
            pd = tk_tensor(pos) if pos is not None else None
            self.call("tk_per_channel_cast_fused", ptr(xd), ptr(xs), 128 if x_sf is not None else 0,
                      npt, ctypes.c_bool(round_sf), ptr(pd), ptr(o), ptr(s))
        return out, bits32(sf)

    def swiglu_forward(self, x, npc, round_sf, layout, clamp, p2t, weights, p2e, counts0, clamp_min):
        r, half = x.shape[0], x.shape[1] // 2
        out = torch.full((r, half), 0x55, dtype=torch.uint8, device=self.device)
        sfl = SfLayout(r, half, 1, npc, layout)
        buf = sfl.alloc(self.device)
        counts = counts0.clone().to(self.device) if counts0 is not None else None
        self.call("tk_swiglu_forward_and_per_token_cast", ptr(tk_tensor(x)), npc,
                  ptr(tk_tensor(p2t) if p2t is not None else None),
                  ptr(tk_tensor(weights) if weights is not None else None),
                  ptr(tk_tensor(p2e) if p2e is not None else None), ctypes.c_bool(round_sf), layout,
                  fptr(clamp), ptr(tk_tensor(counts) if counts is not None else None),
                  fptr(clamp_min), ptr(tk_tensor(out, TK_E4M3)),
                  ptr(self.sf_desc(r, half, 1, npc, layout, buf)))
        return out, sfl.logical(buf), counts

    def swiglu_backward(self, x, x_sf, grad_out, weight, p2t, t2p, npc, round_sf, clamp):
        n, h2 = x.shape
        out = torch.full((n, h2 // 2), float("nan"), dtype=torch.bfloat16, device=self.device)
        q = torch.full((n, h2), 0x55, dtype=torch.uint8, device=self.device)
        q_sf = torch.full((n, h2 // npc), float("nan"), device=self.device)
        xg = torch.full((n, h2), float("nan"), dtype=torch.bfloat16, device=self.device)
        wg = torch.full(weight.shape, float("nan"), device=self.device)
        self.call("tk_swiglu_backward_and_per_token_cast", ptr(tk_tensor(x, TK_E4M3)),
                  ptr(tk_tensor(x_sf)), ptr(tk_tensor(grad_out)), ptr(tk_tensor(weight)),
                  ptr(tk_tensor(p2t)), ptr(tk_tensor(t2p)), npc, ctypes.c_bool(round_sf),
                  fptr(clamp), ptr(tk_tensor(out)), ptr(tk_tensor(q, TK_E4M3)),
                  ptr(tk_tensor(q_sf)), ptr(tk_tensor(xg)), ptr(tk_tensor(wg)))
        return out, q, bits32(q_sf), xg, wg

    def unpack_e2m1(self, data, out_dtype):
        """tk_unpack_e2m1 (host memory)."""
        out = torch.full((data.numel() * 2,), float("nan"), dtype=out_dtype)
        st = self.lib.tk_unpack_e2m1(ctypes.c_void_p(data.data_ptr()), ctypes.c_int64(data.numel()),
                                     TORCH_TO_TK[out_dtype], ctypes.c_void_p(out.data_ptr()))
        if st != 0:
            ERRORS.append(f"tk_unpack_e2m1: status {st}")
        return out

    def swiglu_per_channel(self, x, npt, round_sf, transpose, clamp):
        t, half = x.shape[0], x.shape[1] // 2
        out = torch.full((half, t) if transpose else (t, half), 0x55, dtype=torch.uint8, device=self.device)
        sf = torch.full((t // npt, half), float("nan"), device=self.device)
        self.call("tk_swiglu_forward_and_per_channel_cast_and_transpose", ptr(tk_tensor(x)), npt,
                  ctypes.c_bool(round_sf), ctypes.c_bool(not transpose), fptr(clamp),
                  ptr(tk_tensor(out, TK_E4M3)), ptr(tk_tensor(sf)))
        return out, bits32(sf)


# ---- the C references (tests/ref), for --self-test ----

class RefQuantInput(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("row_stride", ctypes.c_int64),
                ("sf", ctypes.c_void_p), ("sf_layout", ctypes.c_int), ("block_m", ctypes.c_int),
                ("block_k", ctypes.c_int)]


class RefChannelInput(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("dtype", ctypes.c_int), ("rows", ctypes.c_int64),
                ("cols", ctypes.c_int64), ("row_stride", ctypes.c_int64), ("x_sf", ctypes.c_void_p),
                ("x_sf_strides", ctypes.c_int64 * 2)]


class RefExp(ctypes.Structure):
    _fields_ = [("fn", ctypes.c_void_p), ("context", ctypes.c_void_p)]


class RefExpArray(ctypes.Structure):
    _fields_ = [("values", ctypes.c_void_p), ("columns", ctypes.c_int64)]


class RefSwigluForward(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("dtype", ctypes.c_int), ("rows", ctypes.c_int64),
                ("half", ctypes.c_int64), ("num_per_channels", ctypes.c_int),
                ("round_sf", ctypes.c_bool), ("layout", ctypes.c_int),
                ("pos_to_token_topk", ctypes.c_void_p), ("topk_weights", ctypes.c_void_p),
                ("num_weights", ctypes.c_int64), ("pos_to_expert", ctypes.c_void_p),
                ("use_clamp", ctypes.c_bool), ("clamp", ctypes.c_float),
                ("use_sf_floor", ctypes.c_bool), ("sf_floor", ctypes.c_float), ("exp", RefExp)]


class RefSwigluBackward(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("x_sf", ctypes.c_void_p), ("grad_out", ctypes.c_void_p),
                ("weight", ctypes.c_void_p), ("pos_to_token_topk", ctypes.c_void_p),
                ("token_topk_to_pos", ctypes.c_void_p), ("rows", ctypes.c_int64),
                ("half", ctypes.c_int64), ("tokens", ctypes.c_int64), ("topk", ctypes.c_int64),
                ("num_per_channels", ctypes.c_int), ("round_sf", ctypes.c_bool),
                ("use_clamp", ctypes.c_bool), ("clamp", ctypes.c_float), ("exp", RefExp)]


REF_SOURCES = ["numerics", "parallel", "random", "cast", "fp4", "e5m6", "block_cast",
               "channel_cast", "swiglu"]


def build_ref_lib(path):
    """gcc tests/ref/{REF_SOURCES}.c into a shared library at path."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    srcs = [os.path.join(root, "tests", "ref", s + ".c") for s in REF_SOURCES]
    cmd = ["gcc", "-shared", "-fPIC", "-O2", "-std=c11", "-D_GNU_SOURCE",
           "-I" + os.path.join(root, "runtime", "include"), "-I" + os.path.join(root, "tests", "ref"),
           "-I" + os.path.join(root, "tests"), *srcs, "-o", path, "-lm", "-lpthread"]
    subprocess.run(cmd, check=True)


def addr(t):
    return None if t is None else t.data_ptr()


class CRef:
    """The same operations computed by the C references on host memory."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.ref_swiglu_exp_elements.restype = RefExp
        self.lib.ref_swiglu_exp_elements.argtypes = [ctypes.POINTER(RefExpArray)]
        self.device = "cpu"
        self.keep = []

    def ok(self, name, result):
        if not result:
            ERRORS.append(f"{name} rejected its arguments")

    def exp_provider(self, values):
        """ref_swiglu_exp_elements over torch's exp values (row-major, I columns)."""
        values = values.contiguous()
        arr = RefExpArray(values.data_ptr(), values.shape[1])
        self.keep[:] = [values, arr]
        return self.lib.ref_swiglu_exp_elements(ctypes.byref(arr))

    def per_token_cast(self, x, fmt, npc, round_sf, layout):
        r, c = x.shape
        out = torch.full((r, c if fmt is E4M3 else c // 2), 0x55, dtype=torch.uint8)
        sfl = SfLayout(r, c, 1, npc, layout)
        buf = sfl.alloc("cpu")
        q = RefQuantInput(x.data_ptr(), TORCH_TO_TK[x.dtype], x.stride(0), None, 0, 0, 0)
        self.ok("ref_per_token_quant", self.lib.ref_per_token_quant(
            ctypes.byref(q), ctypes.c_int64(r), ctypes.c_int64(c), npc,
            TK_E4M3 if fmt is E4M3 else TK_E2M1, ctypes.c_bool(round_sf), layout, None,
            ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(buf.data_ptr())))
        return out, sfl.logical(buf)

    def cast_back(self, data, sf_buf, layout, rows, cols, bm, bk, out_dtype):
        out = torch.full((rows, cols), float("nan"), dtype=out_dtype)
        fn = self.lib.ref_cast_back_e2m1 if data.dtype == torch.int8 else self.lib.ref_cast_back_e4m3
        self.ok("ref_cast_back", fn(ctypes.c_void_p(data.data_ptr()), ctypes.c_int64(rows),
                                    ctypes.c_int64(cols), ctypes.c_void_p(sf_buf.data_ptr()), layout,
                                    bm, bk, TORCH_TO_TK[out_dtype], ctypes.c_void_p(out.data_ptr())))
        return out

    def per_token_cast_e5m6(self, x, round_sf, layout):
        r, c = x.shape
        out = torch.full((r, c * 3 // 2), 0x55, dtype=torch.uint8)
        sfl = SfLayout(r, c, 1, c, layout)
        buf = sfl.alloc("cpu")
        self.ok("ref_per_token_cast_e5m6", self.lib.ref_per_token_cast_e5m6(
            ctypes.c_void_p(x.data_ptr()), TORCH_TO_TK[x.dtype], ctypes.c_int64(r), ctypes.c_int64(c),
            ctypes.c_int64(x.stride(0)), ctypes.c_bool(round_sf), layout,
            ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(buf.data_ptr())))
        return out, sfl.logical(buf)

    def cast_back_e5m6(self, data, sf_buf, layout, rows, cols, out_dtype):
        out = torch.full((rows, cols), float("nan"), dtype=out_dtype)
        self.ok("ref_cast_back_e5m6", self.lib.ref_cast_back_e5m6(
            ctypes.c_void_p(data.data_ptr()), ctypes.c_int64(rows), ctypes.c_int64(cols),
            ctypes.c_void_p(sf_buf.data_ptr()), layout, TORCH_TO_TK[out_dtype],
            ctypes.c_void_p(out.data_ptr())))
        return out

    def per_block_cast(self, x, fmt, bm, bk, round_sf, layout):
        r, c = x.shape
        out = torch.full((r, c if fmt is E4M3 else c // 2), 0x55, dtype=torch.uint8)
        sfl = SfLayout(r, c, bm, bk, layout)
        buf = sfl.alloc("cpu")
        self.ok("ref_per_block_cast", self.lib.ref_per_block_cast(
            ctypes.c_void_p(x.data_ptr()), TORCH_TO_TK[x.dtype], ctypes.c_int64(r), ctypes.c_int64(c),
            ctypes.c_int64(x.stride(0)), TK_E4M3 if fmt is E4M3 else TK_E2M1, bm, bk,
            ctypes.c_bool(round_sf), layout, ctypes.c_void_p(out.data_ptr()),
            ctypes.c_void_p(buf.data_ptr()), None))
        return out, sfl.logical(buf)

    def per_block_cast_lossless(self, data, sf_buf, in_layout, in_block, out_block, layout):
        r, c = data.shape[0], data.shape[1] * 2
        out = torch.full((r, c), 0x55, dtype=torch.uint8)
        sfl = SfLayout(r, c, *out_block, layout)
        buf = sfl.alloc("cpu")
        self.ok("ref_per_block_cast_lossless", self.lib.ref_per_block_cast_lossless(
            ctypes.c_void_p(data.data_ptr()), ctypes.c_int64(r), ctypes.c_int64(c),
            ctypes.c_void_p(sf_buf.data_ptr()), in_layout, *in_block, ctypes.c_void_p(out.data_ptr()),
            ctypes.c_void_p(buf.data_ptr()), layout, *out_block))
        return out, sfl.logical(buf)

    def per_channel_cast(self, kind, x, npt, round_sf, x_sf=None, pos=None):
        rows = pos.shape[0] if pos is not None else x.shape[0]
        h = x.shape[1]
        out = torch.full((h, rows) if kind == "transpose" else (rows, h), 0x55, dtype=torch.uint8)
        sf = torch.full((ceil_div(rows, npt), h), float("nan"))
        inp = RefChannelInput(x.data_ptr(), TK_E4M3 if x.dtype == torch.uint8 else TORCH_TO_TK[x.dtype],
                              x.shape[0], h, x.stride(0), addr(x_sf))
        if x_sf is not None:
            inp.x_sf_strides[0], inp.x_sf_strides[1] = x_sf.stride()
        self.ok("ref_per_channel_cast", self.lib.ref_per_channel_cast(
            ctypes.byref(inp), ctypes.c_void_p(addr(pos)), ctypes.c_int64(rows), npt,
            ctypes.c_bool(round_sf), ctypes.c_bool(kind == "transpose"),
            ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(sf.data_ptr())))
        return out, bits32(sf)

    def swiglu_forward(self, x, npc, round_sf, layout, clamp, p2t, weights, p2e, counts0, clamp_min):
        r, half = x.shape[0], x.shape[1] // 2
        out = torch.full((r, half), 0x55, dtype=torch.uint8)
        sfl = SfLayout(r, half, 1, npc, layout)
        buf = sfl.alloc("cpu")
        l = x[:, :half].float()
        if clamp is not None:
            l = torch.clamp(l, max=clamp)
        a = RefSwigluForward(x.data_ptr(), TORCH_TO_TK[x.dtype], r, half, npc, round_sf, layout,
                             addr(p2t), addr(weights), weights.numel() if weights is not None else 0,
                             addr(p2e), clamp is not None, clamp or 0.0, clamp_min is not None,
                             clamp_min or 0.0, self.exp_provider(torch.exp(-l)))
        counts = counts0.clone() if counts0 is not None else None
        self.ok("ref_swiglu_forward_per_token_cast", self.lib.ref_swiglu_forward_per_token_cast(
            ctypes.byref(a), ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(buf.data_ptr()),
            ctypes.c_void_p(addr(counts))))
        return out, sfl.logical(buf), counts

    def swiglu_backward(self, x, x_sf, grad_out, weight, p2t, t2p, npc, round_sf, clamp):
        n, h2 = x.shape
        half = h2 // 2
        xv = x[:, :half].view(torch.float8_e4m3fn).float() * x_sf[:, :half // npc].repeat_interleave(npc, 1)
        if clamp is not None:
            xv = torch.where(xv > clamp, torch.full_like(xv, clamp), xv)
        out = torch.full((n, half), float("nan"), dtype=torch.bfloat16)
        q = torch.full((n, h2), 0x55, dtype=torch.uint8)
        q_sf = torch.full((n, h2 // npc), float("nan"))
        xg = torch.full((n, h2), float("nan"), dtype=torch.bfloat16)
        wg = torch.full(weight.shape, float("nan"))
        a = RefSwigluBackward(x.data_ptr(), x_sf.data_ptr(), grad_out.data_ptr(), weight.data_ptr(),
                              p2t.data_ptr(), t2p.data_ptr(), n, half, weight.shape[0], weight.shape[1],
                              npc, round_sf, clamp is not None, clamp or 0.0,
                              self.exp_provider(torch.exp(-xv)))
        self.ok("ref_swiglu_backward_per_token_cast", self.lib.ref_swiglu_backward_per_token_cast(
            ctypes.byref(a), *[ctypes.c_void_p(t.data_ptr()) for t in (out, q, q_sf, xg, wg)]))
        return out, q, bits32(q_sf), xg, wg

    def unpack_e2m1(self, data, out_dtype):
        out = torch.full((data.numel() * 2,), float("nan"), dtype=out_dtype)
        self.ok("ref_unpack_e2m1", self.lib.ref_unpack_e2m1(
            ctypes.c_void_p(data.data_ptr()), ctypes.c_int64(data.numel()), TORCH_TO_TK[out_dtype],
            ctypes.c_void_p(out.data_ptr())))
        return out

    def swiglu_per_channel(self, x, npt, round_sf, transpose, clamp):
        t, half = x.shape[0], x.shape[1] // 2
        l = x[:, :half]
        if clamp is not None:
            l = torch.clamp(l, max=float(torch.tensor(clamp).to(torch.bfloat16)))
        out = torch.full((half, t) if transpose else (t, half), 0x55, dtype=torch.uint8)
        sf = torch.full((t // npt, half), float("nan"))
        self.ok("ref_swiglu_forward_per_channel_cast", self.lib.ref_swiglu_forward_per_channel_cast(
            ctypes.c_void_p(x.data_ptr()), ctypes.c_int64(t), ctypes.c_int64(half), npt,
            ctypes.c_bool(round_sf), ctypes.c_bool(transpose), ctypes.c_bool(clamp is not None),
            ctypes.c_float(clamp or 0.0), self.exp_provider(torch.exp(-l.float())),
            ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(sf.data_ptr())))
        return out, bits32(sf)


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


GROUPS = {
    "unpack": cases_unpack,
    "per_token": cases_per_token,
    "cast_back": cases_cast_back,
    "e5m6": cases_e5m6,
    "per_block": cases_per_block,
    "lossless": cases_lossless,
    "per_channel": cases_per_channel,
    "swiglu": cases_swiglu,
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
        global DRY_RUN
        DRY_RUN = True
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


if __name__ == "__main__":
    sys.exit(main())
