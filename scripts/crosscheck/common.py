"""Constants of tk.h and the spec, bit helpers, the scale-factor buffer layouts of spec 3.5,
and the comparison and one-line-per-case reporting every case uses."""

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


def bits32(x):
    return x.contiguous().view(torch.int32)


def f32_from_bits(b):
    return b.to(torch.int32).view(torch.float32)


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
