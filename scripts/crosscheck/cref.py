"""The project's C references (tests/ref/*.c) as a target for --self-test: built with gcc into
a shared library, called through ctypes on host tensors with the same methods as LibTk, so
that the torch reference is checked against them without a GPU."""

import ctypes
import os
import subprocess

import torch

from .common import (E4M3, ERRORS, ROW, TK_E2M1, TK_E4M3, TORCH_TO_TK, SfLayout, bits32,
                     ceil_div)

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
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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

    def per_token_quant(self, q, rows, cols, npc, fmt, round_sf, layout, precomputed, out, sf):
        """ref_per_token_quant over a RefQuantInput; None for an absent buffer."""
        self.ok("ref_per_token_quant", self.lib.ref_per_token_quant(
            ctypes.byref(q), ctypes.c_int64(rows), ctypes.c_int64(cols), npc,
            TK_E4M3 if fmt is E4M3 else TK_E2M1, ctypes.c_bool(round_sf), layout,
            ctypes.c_void_p(addr(precomputed)), ctypes.c_void_p(addr(out)),
            ctypes.c_void_p(addr(sf))))

    def per_token_cast_quantized(self, data, sf_buf, in_layout, x_block, fmt, npc, round_sf,
                                 layout):
        fp4_in = data.dtype == torch.int8
        r, c = data.shape[0], data.shape[1] * (2 if fp4_in else 1)
        out = torch.full((r, c if fmt is E4M3 else c // 2), 0x55, dtype=torch.uint8)
        sfl = SfLayout(r, c, 1, npc, layout)
        buf = sfl.alloc("cpu")
        q = RefQuantInput(data.data_ptr(), TK_E2M1 if fp4_in else TK_E4M3, data.stride(0),
                          sf_buf.data_ptr(), in_layout, *x_block)
        self.per_token_quant(q, r, c, npc, fmt, round_sf, layout, None, out, buf)
        return out, sfl.logical(buf)

    def per_token_cast_sf_only(self, x, fmt, npc, round_sf, layout):
        r, c = x.shape
        sfl = SfLayout(r, c, 1, npc, layout)
        buf = sfl.alloc("cpu")
        q = RefQuantInput(x.data_ptr(), TORCH_TO_TK[x.dtype], x.stride(0), None, 0, 0, 0)
        self.per_token_quant(q, r, c, npc, fmt, round_sf, layout, None, None, buf)
        return sfl.logical(buf)

    def per_token_cast_precomputed(self, x, fmt, npc, sf):
        r, c = x.shape
        out = torch.full((r, c if fmt is E4M3 else c // 2), 0x55, dtype=torch.uint8)
        q = RefQuantInput(x.data_ptr(), TORCH_TO_TK[x.dtype], x.stride(0), None, 0, 0, 0)
        self.per_token_quant(q, r, c, npc, fmt, False, ROW, sf.contiguous(), out, None)
        return out

    def per_block_quant(self, x, fmt, bm, bk, round_sf, layout, out, sf, precomputed):
        """ref_per_block_cast; None for an absent buffer."""
        r, c = x.shape
        self.ok("ref_per_block_cast", self.lib.ref_per_block_cast(
            ctypes.c_void_p(x.data_ptr()), TORCH_TO_TK[x.dtype], ctypes.c_int64(r), ctypes.c_int64(c),
            ctypes.c_int64(x.stride(0)), TK_E4M3 if fmt is E4M3 else TK_E2M1, bm, bk,
            ctypes.c_bool(round_sf), layout, ctypes.c_void_p(addr(out)), ctypes.c_void_p(addr(sf)),
            ctypes.c_void_p(addr(precomputed))))

    def per_block_cast_sf_only(self, x, fmt, bm, bk, round_sf, layout):
        sfl = SfLayout(x.shape[0], x.shape[1], bm, bk, layout)
        buf = sfl.alloc("cpu")
        self.per_block_quant(x, fmt, bm, bk, round_sf, layout, None, buf, None)
        return sfl.logical(buf)

    def per_block_cast_precomputed(self, x, fmt, bm, bk, sf):
        r, c = x.shape
        out = torch.full((r, c if fmt is E4M3 else c // 2), 0x55, dtype=torch.uint8)
        self.per_block_quant(x, fmt, bm, bk, False, ROW, out, None, sf.contiguous())
        return out

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
