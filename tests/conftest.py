"""Test-session settings. One BLAS thread for the whole suite, set before NumPy is first imported:
float32 matrix products are summed in an order that depends on the thread split, and the suite trains
models whose outcomes it checks, so the numbers are pinned to one split on every machine."""
import os
import sys

if "numpy" not in sys.modules:
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
