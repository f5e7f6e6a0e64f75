"""The ctypes binding of libtk (runtime/include/tk.h): a mirror of tk_tensor and one method
per operation, called with torch tensors' data_ptr() (CUDA tensors on the GPU, host tensors
in --dry-run).  Outputs start as sentinels (0x55 bytes, NaN, 0xA5 SF buffers)."""

import ctypes

import torch

from .common import (E4M3, ERRORS, TK_E2M1, TK_E4M3, TK_I8, TORCH_TO_TK, SfLayout, bits32,
                     ceil_div)

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

    def quant_out(self, rows, cols, fmt):
        """An e4m3 (rows, cols) or packed e2m1 (rows, cols / 2) output of 0x55 bytes."""
        return torch.full((rows, cols if fmt is E4M3 else cols // 2), 0x55, dtype=torch.uint8,
                          device=self.device)

    def per_token_cast_quantized(self, data, sf_buf, in_layout, x_block, fmt, npc, round_sf,
                                 layout):
        """tk_per_token_cast_quantized: data e4m3 (uint8 codes) or packed e2m1 (int8) with
        its input scales in sf_buf (in_layout, x_block blocks)."""
        fp4_in = data.dtype == torch.int8
        r, c = data.shape[0], data.shape[1] * (2 if fp4_in else 1)
        out = self.quant_out(r, c, fmt)
        sfl = SfLayout(r, c, 1, npc, layout)
        buf = sfl.alloc(self.device)
        xd = tk_tensor(data, TK_I8 if fp4_in else TK_E4M3)
        o = tk_tensor(out, TK_E4M3 if fmt is E4M3 else TK_I8)
        self.call("tk_per_token_cast_quantized", ptr(xd),
                  ptr(self.sf_desc(r, c, *x_block, in_layout, sf_buf)), *x_block, npc,
                  ctypes.c_bool(round_sf), layout, ptr(o),
                  ptr(self.sf_desc(r, c, 1, npc, layout, buf)))
        return out, sfl.logical(buf)

    def per_token_cast_sf_only(self, x, fmt, npc, round_sf, layout):
        r, c = x.shape
        sfl = SfLayout(r, c, 1, npc, layout)
        buf = sfl.alloc(self.device)
        self.call("tk_per_token_cast_with_sf_only", ptr(tk_tensor(x)),
                  TK_E4M3 if fmt is E4M3 else TK_E2M1, npc, ctypes.c_bool(round_sf), layout,
                  ptr(self.sf_desc(r, c, 1, npc, layout, buf)))
        return sfl.logical(buf)

    def per_token_cast_precomputed(self, x, fmt, npc, sf):
        """tk_per_token_cast_with_precomputed_sf: sf f32 (R, ceil(C / npc)) row-major."""
        r, c = x.shape
        out = self.quant_out(r, c, fmt)
        self.call("tk_per_token_cast_with_precomputed_sf", ptr(tk_tensor(x)), npc,
                  ptr(tk_tensor(sf)), ptr(tk_tensor(out, TK_E4M3 if fmt is E4M3 else TK_I8)))
        return out

    def per_block_cast_sf_only(self, x, fmt, bm, bk, round_sf, layout):
        r, c = x.shape
        sfl = SfLayout(r, c, bm, bk, layout)
        buf = sfl.alloc(self.device)
        self.call("tk_per_block_cast_with_sf_only", ptr(tk_tensor(x)),
                  TK_E4M3 if fmt is E4M3 else TK_E2M1, bm, bk, ctypes.c_bool(round_sf), layout,
                  ptr(self.sf_desc(r, c, bm, bk, layout, buf)))
        return sfl.logical(buf)

    def per_block_cast_precomputed(self, x, fmt, bm, bk, sf):
        """tk_per_block_cast_with_precomputed_sf: sf f32 (nbm, nbk) row-major."""
        r, c = x.shape
        out = self.quant_out(r, c, fmt)
        self.call("tk_per_block_cast_with_precomputed_sf", ptr(tk_tensor(x)),
                  TK_E4M3 if fmt is E4M3 else TK_E2M1, bm, bk, ptr(tk_tensor(sf)),
                  ptr(tk_tensor(out, TK_E4M3 if fmt is E4M3 else TK_I8)))
        return out

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
