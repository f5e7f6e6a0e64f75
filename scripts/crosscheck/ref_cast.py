"""The PyTorch reference of TileKernels' tile_kernels/torch/cast.py (cast, cast_back, the FP4
and e4m3 encoders), written anew from it and the spec (sections 2.2, 3.2, 4.1-4.3, 6.1, 6.5),
plus per_block_cast_lossless and per_channel_cast_fused's row gather.  Device agnostic."""

import torch

from .common import E4M3, align, bits32, ceil_div, f32_from_bits

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


def cast_quantized(data, sf_in, x_block, fmt, npc, round_sf):
    """per_token_cast of quantised input (spec 6.1 (b)): data e4m3 (R, C) or packed e2m1
    int8 (R, C/2) with logical input scales sf_in in x_block blocks.  The |max| is taken
    of the real value f32(data) * s_in; the data is quantised with the kernel's
    association f32(data) * (s_in * inv), which the spec prescribes (cast.py computes
    (f32(data) * s_in) * inv: equal when both scales are powers of two and nothing
    overflows; a group of all-zero data whose s_in * inv overflows to inf gives NaN codes
    here, 0 there).  Returns (out, sf, ue8m0) as cast does."""
    v = unpack_e2m1(data) if data.dtype == torch.int8 else data.float()
    r, c = v.shape
    s_in = expand_blocks(decode_sf(sf_in), *x_block, r, c)
    sf, inv, ue8m0 = sf_and_inv(block_amax(v * s_in, 1, npc), fmt, round_sf)
    q = v * (s_in * expand_blocks(inv, 1, npc, r, c))
    out = to_e4m3(q) if fmt is E4M3 else pack_e2m1(q)
    return out, sf, ue8m0


def cast_back(data, sf, bm, bk, out_dtype):
    """cast.py::cast_back: to_dtype(f32(data) * s)."""
    return dequantize(data, sf, bm, bk).to(out_dtype)


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
