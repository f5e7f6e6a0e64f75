"""The PyTorch cross-check of libtk's quantisation kernels (run it as scripts/crosscheck.py).

  common.py       constants of tk.h, bit helpers, SF buffer layouts, comparison and report
  ref_cast.py     torch reference of TileKernels' cast.py (cast, cast_back, FP4), lossless
  ref_e5m6.py     torch reference of cast_e5m6.py
  ref_swiglu.py   torch reference of swiglu.py and the fused SwiGLU casts
  libtk.py        ctypes binding of libtk (tk.h): the GPU and --dry-run target
  cref.py         the C references of tests/ref: the --self-test target
  cases_quant.py  per_token_cast, cast_back, E5M6, per_block_cast, lossless cases
  cases_modes.py  requantisation and the SF-only / precomputed-SF modes
  cases_fused.py  per-channel, SwiGLU and unpack cases
  driver.py       the command line and the case groups
"""
