#!/usr/bin/env python3
"""crosscheck.py -- libtk's quantisation kernels against an independent PyTorch reference.

The entry point only: the code is the package scripts/crosscheck/ (its __init__.py lists the
modules); run with --help for the modes and options.  Python imports the package directory
crosscheck/ next to this file in preference to this file of the same name."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True      # no __pycache__ in the source tree (.gitignore lacks it)

from crosscheck.driver import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
