"""What of the GPU kernels can be checked without a GPU: the PCG64 jump ahead that lets the device draw the
host generator's dropout stream, the CUDA source of that kernel compiled for the CPU, and the flat-buffer helpers.
The kernels themselves are checked against their NumPy twins on a GPU by tests/test_cupy.py."""
import shutil
import subprocess

import numpy as np
import pytest

from minihead import backend, kernels, layers


def test_kernels_are_off_on_the_numpy_backend():
    """kernels.active() is False on NumPy whatever FUSED says, so the layers run their NumPy expressions."""
    old = kernels.FUSED
    try:
        kernels.FUSED = True
        assert backend.name == "numpy" and not kernels.active()
    finally:
        kernels.FUSED = old


@pytest.mark.parametrize("delta", [0, 1, 2, 5, 64, 1000, 123457])
def test_pcg64_jump_is_delta_draws(delta):
    """state_{j + delta} = A state_j + C (mod 2^128) with (A, C) = pcg64_jump(delta, inc): the state numpy's
    PCG64 reaches after delta raw draws, and pcg64_advance leaves the generator where random_raw(delta) does
    (so the next draws agree)."""
    g, ref = backend.rng(9), backend.rng(9)
    g.random(2), ref.random(2)
    st = g.bit_generator.state["state"]
    A, C = kernels.pcg64_jump(delta, st["inc"])
    ref.bit_generator.random_raw(delta)
    assert (A * st["state"] + C) % 2 ** 128 == ref.bit_generator.state["state"]["state"]
    kernels.pcg64_advance(g, delta)
    assert g.bit_generator.state == ref.bit_generator.state
    assert np.array_equal(g.random(3), ref.random(3))


_HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#define __device__
#define __forceinline__ inline
#define __global__
struct dim3_ { long long x; };
static dim3_ blockIdx, blockDim, threadIdx;
static unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
SOURCE
int main(int argc, char** argv) {
    long long n = atoll(argv[1]); unsigned thr = (unsigned)atoi(argv[2]);
    unsigned long long v[6];
    for (int i = 0; i < 6; ++i) v[i] = strtoull(argv[3 + i], 0, 10);
    long long n_raw = (n + 3) / 4; int per = PER; long long n_threads = (n_raw + per - 1) / per;
    float* mask = (float*)malloc(sizeof(float) * n);
    blockDim.x = 256;
    for (long long t = 0; t < n_threads; ++t) {          // every CUDA thread, one after another
        blockIdx.x = t / 256; threadIdx.x = t % 256;
        dropout_pcg64<float>(mask, n, n_raw, per, v[0], v[1], v[2], v[3], v[4], v[5], thr, 1.0f);
    }
    for (long long e = 0; e < n; ++e) putchar(mask[e] != 0.0f ? '1' : '0');
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the CUDA source for the CPU")
def test_dropout_kernel_source_draws_the_host_mask(tmp_path):
    """The CUDA source of the device dropout (128-bit LCG in 64-bit halves, jump ahead, XSL-RR output, four
    16-bit lanes a draw), compiled for the CPU with shims for the CUDA keywords and run thread by thread, keeps
    exactly the elements layers.dropout_mask keeps on the host (n not a multiple of 4 nor of a thread's draws)."""
    src = _HARNESS.replace("SOURCE", kernels._PCG_SRC).replace("PER", str(kernels.DRAWS_PER_THREAD))
    (tmp_path / "k.cpp").write_text(src)
    r = subprocess.run(["g++", "-O1", "-o", str(tmp_path / "k"), str(tmp_path / "k.cpp")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    n, p = 2021, 0.1
    g = backend.rng(4)
    g.random(5)
    st = g.bit_generator.state["state"]
    s, inc, m, lo = st["state"], st["inc"], kernels.PCG64_MULT, kernels.U64
    thr = round(p * 2 ** layers.DROP_BITS)
    args = [str(a) for a in (n, thr, s >> 64, s & lo, inc >> 64, inc & lo, m >> 64, m & lo)]
    kept = subprocess.run([str(tmp_path / "k")] + args, capture_output=True, text=True, check=True).stdout
    host = layers.dropout_mask((n,), p, g, "float32")
    assert kept == "".join("1" if x != 0 else "0" for x in host)
    assert 0.85 < kept.count("1") / n < 0.95


def test_flatten_and_views_round_trip():
    """flatten lays the arrays end to end in the order of ``names``; flat_views cuts the same pieces back out
    as views (writing through a view writes the buffer)."""
    arrays = {"b": np.arange(6.0).reshape(2, 3), "a": np.arange(4.0) + 10}
    flat = kernels.flatten(arrays, ["a", "b"])
    assert flat.tolist() == [10, 11, 12, 13, 0, 1, 2, 3, 4, 5]
    views = kernels.flat_views(flat, {"a": (4,), "b": (2, 3)})
    assert np.array_equal(views["b"], arrays["b"]) and np.array_equal(views["a"], arrays["a"])
    views["b"][1, 2] = -1
    assert flat[-1] == -1
