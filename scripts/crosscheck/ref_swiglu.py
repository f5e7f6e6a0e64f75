"""The PyTorch reference of TileKernels' tile_kernels/torch/swiglu.py followed by cast.py's
casts: the three fused SwiGLU casts (spec 6.9-6.11)."""

import torch

from .common import E4M3
from .ref_cast import cast

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
