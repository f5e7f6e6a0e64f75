"""The PyTorch reference of TileKernels' tile_kernels/torch/cast_e5m6.py: the 12-bit E5M6
format (spec 3.4), its one-scale-per-token cast and its cast back (spec 6.2, 6.3)."""

import torch

from .common import E5M6_MAX, bits32, f32_from_bits
from .ref_cast import decode_sf

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
