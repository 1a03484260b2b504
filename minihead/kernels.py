"""Fused kernels for the CuPy backend, each beside the NumPy expression it replaces (its twin).

On a GPU every array expression is a kernel launch of its own (~5-10 us of Python and driver time), and at
this project's sizes most kernels finish faster than they launch: a LayerNorm written as eight expressions
costs eight launches for microseconds of arithmetic. So on the CuPy backend the hottest element-wise chains
run as one kernel each, written here in CUDA C through CuPy's own facilities (``RawModule``,
``ElementwiseKernel``); the readable NumPy code in :mod:`minihead.layers` and :mod:`minihead.optim` stays the
reference, runs on the NumPy backend, and the GPU test module (``tests/test_cupy.py``) checks each kernel
against it on the same inputs. Nothing here runs on the NumPy backend: :func:`active` is False there.

- softmax over the last axis, forward and backward: one warp per row, the row's max and sum by warp shuffles;
- LayerNorm forward (y and the cache: x - mean, xhat, rstd) and backward (dx; dg, db stay matrix products);
- label-smoothed cross-entropy: max, exp, sums and the target's logit in one pass per row; its backward in one;
- Adam over one flat buffer of every parameter (one launch instead of ~12 per parameter array);
- the dropout mask drawn ON the device from the host generator's PCG64 stream: each thread jumps the
  128-bit LCG ahead to its first draw (``state_j = a^j state + c (a^j - 1) / (a - 1)``, O(log j) products)
  and the host generator is advanced by the same number of draws, so the mask is bit for bit the one
  :func:`minihead.layers.dropout_mask` draws on the host, and a seed gives the same numbers on both backends.

``MINIHEAD_FUSED=0`` (or :data:`FUSED` = False) turns the kernels off, so the same code runs the NumPy
expressions on CuPy arrays: the benchmark times both side by side.
"""
import contextlib
import functools
import math
import os

from . import backend
from .backend import xp

FUSED = os.environ.get("MINIHEAD_FUSED", "1").strip() != "0"
WARP_ROWS = 8          # rows per block of 256 threads (one warp a row)
PCG64_MULT = (2549297995355413924 << 64) + 4865540595714422341   # numpy's PCG64 multiplier (PCG_DEFAULT_MULTIPLIER_128)
U64, U128 = (1 << 64) - 1, (1 << 128) - 1
DRAWS_PER_THREAD = 16  # consecutive 64-bit draws a dropout thread makes after its jump ahead


def active():
    """True when the fused kernels replace the NumPy expressions: the CuPy backend with :data:`FUSED` on."""
    return FUSED and backend.name == "cupy"


@contextlib.contextmanager
def switched(on):
    """Set :data:`FUSED` to ``on`` for a while (the benchmark times both; the GPU tests compare both)."""
    global FUSED
    old, FUSED = FUSED, on
    try:
        yield
    finally:
        FUSED = old


_ROWS_SRC = r"""
#define FULL 0xffffffffu
template<typename T> __device__ __forceinline__ T wsum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}
template<typename T> __device__ __forceinline__ T wmax(T v) {
    for (int o = 16; o > 0; o >>= 1) { T u = __shfl_xor_sync(FULL, v, o); v = u > v ? u : v; }
    return v;
}
#define ROW_AND_LANE long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; \
                     int lane = threadIdx.x & 31; if (row >= rows) return;

// p = exp(s - max) / sum exp(s - max) over rows of K, in place (layers.softmax_forward)
template<typename T>
__global__ void softmax_rows(T* s, long long rows, int K) {
    ROW_AND_LANE
    T* r = s + row * K;
    T m = r[0];
    for (int j = lane; j < K; j += 32) m = r[j] > m ? r[j] : m;
    m = wmax(m);
    T z = 0;
    for (int j = lane; j < K; j += 32) { T e = exp(r[j] - m); r[j] = e; z += e; }
    z = wsum(z);
    for (int j = lane; j < K; j += 32) r[j] = r[j] / z;
}

// ds = p (dp - sum_k dp_k p_k)  (layers.softmax_backward)
template<typename T>
__global__ void softmax_rows_backward(const T* dp, const T* p, T* ds, long long rows, int K) {
    ROW_AND_LANE
    long long o = row * K;
    T a = 0;
    for (int j = lane; j < K; j += 32) a += dp[o + j] * p[o + j];
    a = wsum(a);
    for (int j = lane; j < K; j += 32) ds[o + j] = (dp[o + j] - a) * p[o + j];
}

// y = g (x - mean) rstd + b, rstd = 1 / sqrt(var + eps); also x - mean, xhat, rstd  (layers.layernorm_forward)
template<typename T>
__global__ void layernorm_rows(const T* x, const T* g, const T* b, T* y, T* xc, T* xhat, T* rstd,
                               long long rows, int d, T inv_d, T eps) {
    ROW_AND_LANE
    long long o = row * d;
    T s = 0;
    for (int j = lane; j < d; j += 32) s += x[o + j];
    T mu = wsum(s) * inv_d;
    T v = 0;
    for (int j = lane; j < d; j += 32) { T c = x[o + j] - mu; xc[o + j] = c; v += c * c; }
    T rs = T(1) / sqrt(wsum(v) * inv_d + eps);
    if (lane == 0) rstd[row] = rs;
    for (int j = lane; j < d; j += 32) { T h = xc[o + j] * rs; xhat[o + j] = h; y[o + j] = h * g[j] + b[j]; }
}

// dx = rstd dxhat - xhat (rstd mean(dxhat xhat)) - rstd mean(dxhat), dxhat = g dy; dx may be dy
// (layers.layernorm_backward)
template<typename T>
__global__ void layernorm_rows_backward(const T* dy, const T* xhat, const T* rstd, const T* g, T* dx,
                                        long long rows, int d, T inv_d) {
    ROW_AND_LANE
    long long o = row * d;
    T a = 0, c = 0;
    for (int j = lane; j < d; j += 32) { T dh = dy[o + j] * g[j]; a += dh; c += dh * xhat[o + j]; }
    T rs = rstd[row];
    T m1 = wsum(a) * (rs * inv_d), m2 = wsum(c) * (rs * inv_d);
    for (int j = lane; j < d; j += 32) { T dh = dy[o + j] * g[j]; dx[o + j] = dh * rs - xhat[o + j] * m2 - m1; }
}

// one pass of the cross-entropy per row: z = logits - max becomes exp z in place; sum exp z, mean z and
// z at the target come out  (layers.xent_forward)
template<typename T>
__global__ void xent_rows(T* z, const long long* tgt, T* se, T* zmean, T* zt, long long rows, int V, T inv_v) {
    ROW_AND_LANE
    T* r = z + row * V;
    long long t = tgt[row];
    T m = r[0];
    for (int j = lane; j < V; j += 32) m = r[j] > m ? r[j] : m;
    m = wmax(m);
    T s1 = 0, s2 = 0, at = 0;
    for (int j = lane; j < V; j += 32) {
        T zz = r[j] - m;
        s1 += zz;
        if (j == t) at = zz;
        T e = exp(zz);
        r[j] = e;
        s2 += e;
    }
    s1 = wsum(s1); s2 = wsum(s2); at = wsum(at);
    if (lane == 0) { se[row] = s2; zmean[row] = s1 * inv_v; zt[row] = at; }
}
"""

_PCG_SRC = r"""
typedef unsigned long long u64;
struct u128 { u64 hi, lo; };
__device__ __forceinline__ u128 mul128(u128 a, u128 b) {      // a b mod 2^128
    u128 r; r.lo = a.lo * b.lo; r.hi = __umul64hi(a.lo, b.lo) + a.hi * b.lo + a.lo * b.hi; return r;
}
__device__ __forceinline__ u128 add128(u128 a, u128 b) {      // a + b mod 2^128
    u128 r; r.lo = a.lo + b.lo; r.hi = a.hi + b.hi + (r.lo < a.lo ? 1ull : 0ull); return r;
}
// the inverted-dropout multiplier of layers.dropout_mask: element e takes the 16 bits (e % 4) of the
// generator's 64-bit draw e / 4 (little-endian), kept when they are >= thr; draw j is PCG64's (XSL-RR output
// of the state after j + 1 LCG steps from the host generator's state)
template<typename T>
__global__ void dropout_pcg64(T* mask, long long n, long long n_raw, int per_thread,
                              u64 s_hi, u64 s_lo, u64 inc_hi, u64 inc_lo, u64 m_hi, u64 m_lo,
                              unsigned thr, T scale) {
    long long j0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * per_thread;
    if (j0 >= n_raw) return;
    u128 M = {m_hi, m_lo}, inc = {inc_hi, inc_lo}, s = {s_hi, s_lo}, one = {0ull, 1ull};
    u128 A = one, C = {0ull, 0ull}, a = M, c = inc;             // jump ahead j0 steps: s = A s + C
    for (long long k = j0; k; k >>= 1) {
        if (k & 1) { A = mul128(A, a); C = add128(mul128(C, a), c); }
        c = mul128(add128(a, one), c);
        a = mul128(a, a);
    }
    s = add128(mul128(A, s), C);
    long long j1 = j0 + per_thread < n_raw ? j0 + per_thread : n_raw;
    for (long long j = j0; j < j1; ++j) {
        s = add128(mul128(s, M), inc);
        u64 x = s.hi ^ s.lo;
        unsigned r = (unsigned)(s.hi >> 58);
        u64 out = (x >> r) | (x << ((64u - r) & 63u));
        for (int q = 0; q < 4; ++q) {
            long long e = 4 * j + q;
            if (e < n) mask[e] = ((unsigned)((out >> (16 * q)) & 0xffffull)) >= thr ? scale : T(0);
        }
    }
}
"""


def _ctype(dtype):
    name = xp.dtype(dtype).name
    if name not in ("float32", "float64"):
        raise TypeError(f"fused kernels take float32 or float64 arrays, not {name}")
    return "float" if name == "float32" else "double"


@functools.lru_cache(maxsize=None)
def _module(src_name):
    """The compiled CUDA module (NVRTC, once per process; CuPy caches the binary on disk)."""
    src = {"rows": _ROWS_SRC, "pcg": _PCG_SRC}[src_name]
    names = {"rows": ("softmax_rows", "softmax_rows_backward", "layernorm_rows", "layernorm_rows_backward",
                      "xent_rows"),
             "pcg": ("dropout_pcg64",)}[src_name]
    exprs = [f"{n}<{t}>" for n in names for t in ("float", "double")]
    return xp.RawModule(code=src, options=("-std=c++14",), name_expressions=exprs)


def _fn(src_name, name, dtype):
    return _module(src_name).get_function(f"{name}<{_ctype(dtype)}>")


def _launch_rows(fn, rows, *args):
    """One warp per row: blocks of 32 WARP_ROWS threads."""
    threads = 32 * WARP_ROWS
    fn(((rows + WARP_ROWS - 1) // WARP_ROWS,), (threads,), args)


def _contiguous(a):
    return a if a.flags.c_contiguous else xp.ascontiguousarray(a)


# --------------------------------------------------------------------------- softmax
def softmax_forward(s, bias=None, inplace=False):
    """Twin of :func:`minihead.layers.softmax_forward`: p = softmax(s + bias) over the last axis."""
    p = s if inplace else s.copy()
    if bias is not None:
        p += bias                                            # (..., K) one broadcast kernel
    p = _contiguous(p)
    K = p.shape[-1]
    rows = p.size // K
    _launch_rows(_fn("rows", "softmax_rows", p.dtype), rows, p, xp.int64(rows), xp.int32(K))
    return p, p


def softmax_backward(dp, p):
    """Twin of :func:`minihead.layers.softmax_backward`: ds = p (dp - sum_k dp_k p_k)."""
    dp, p = _contiguous(dp), _contiguous(p)
    ds = xp.empty_like(p)
    K = p.shape[-1]
    rows = p.size // K
    _launch_rows(_fn("rows", "softmax_rows_backward", p.dtype), rows, dp, p, ds, xp.int64(rows), xp.int32(K))
    return ds


# --------------------------------------------------------------------------- layer norm
def layernorm_forward(x, g, b, eps):
    """Twin of :func:`minihead.layers.layernorm_forward`: (y, (xc, xhat, rstd, g))."""
    x = _contiguous(x)
    d = x.shape[-1]
    rows = x.size // d
    y, xc, xhat = xp.empty_like(x), xp.empty_like(x), xp.empty_like(x)
    rstd = xp.empty(x.shape[:-1] + (1,), dtype=x.dtype)      # (..., 1)
    t = x.dtype.type
    _launch_rows(_fn("rows", "layernorm_rows", x.dtype), rows, x, _contiguous(g), _contiguous(b), y, xc, xhat,
                 rstd, xp.int64(rows), xp.int32(d), t(1.0 / d), t(eps))
    return y, (xc, xhat, rstd, g)


def layernorm_backward(dy, cache, inplace=False):
    """Twin of :func:`minihead.layers.layernorm_backward`: (dx, dg, db)."""
    xc, xhat, rstd, g = cache
    d = xhat.shape[-1]
    dy = _contiguous(dy)
    dy2 = dy.reshape(-1, d)                                  # (N, d)
    dg = (dy2 * xhat.reshape(-1, d)).sum(0)                  # (d,) sum dy xhat (einsum costs ~0.4 ms of Python)
    db = dy2.sum(0)                                          # (d,)
    dx = dy if inplace else xp.empty_like(dy)
    rows = dy.size // d
    _launch_rows(_fn("rows", "layernorm_rows_backward", dy.dtype), rows, dy, xhat, rstd, _contiguous(g), dx,
                 xp.int64(rows), xp.int32(d), dy.dtype.type(1.0 / d))
    return dx, dg, db


# --------------------------------------------------------------------------- cross-entropy
def xent_forward(logits, targets, mask, smoothing=0.0, inplace=False, n_norm=None):
    """Twin of :func:`minihead.layers.xent_forward`: (loss, nll_sum, cache), the cache holding exp z."""
    N, V = logits.shape
    z = logits if inplace else logits.copy()
    z = _contiguous(z)
    tgt = _contiguous(targets.astype("int64", copy=False))
    se, z_mean, z_t = (xp.empty(N, dtype=z.dtype) for _ in range(3))
    _launch_rows(_fn("rows", "xent_rows", z.dtype), N, z, tgt, se, z_mean, z_t, xp.int64(N), xp.int32(V),
                 z.dtype.type(1.0 / V))
    lse = xp.log(se)                                         # (N,)
    w = mask.astype(z.dtype)                                 # (N,)
    n_real = xp.maximum(w.sum(), 1.0) if n_norm is None else n_norm
    nll = lse - z_t                                          # (N,) -log p_ny
    per_tok = (1.0 - smoothing) * nll + smoothing * (lse - z_mean)  # (N,)
    loss = (per_tok * w).sum() / n_real
    return loss, (nll * w).sum(), (z, se, tgt, w, n_real, smoothing)


@functools.lru_cache(maxsize=None)
def _xent_backward_kernel():
    return xp.ElementwiseKernel(
        "raw T wn_se, raw T wn, raw int64 tgt, T c_uniform, T c_onehot, int64 V", "T d",
        "long long n = i / V; T r = d * wn_se[n] - wn[n] * c_uniform;"
        " if (i - n * V == tgt[n]) r -= wn[n] * c_onehot; d = r;",
        "minihead_xent_backward")


def xent_backward(cache, inplace=False):
    """Twin of :func:`minihead.layers.xent_backward`: dlogits_n = m_n (softmax_n - q_n) / sum m."""
    e, se, targets, w, n_real, smoothing = cache
    N, V = e.shape
    wn = w / n_real                                          # (N,)
    d = e if inplace else e.copy()
    t = d.dtype.type
    _xent_backward_kernel()(wn / se, wn, targets, t(smoothing / V), t(1.0 - smoothing), V, d)
    return d


# --------------------------------------------------------------------------- Adam on one flat buffer
@functools.lru_cache(maxsize=None)
def _adam_kernel():
    # the order of optim.Adam.step's NumPy expressions: m = b1 (m - g) + g, v = b2 (v - g^2) + g^2,
    # p -= (m / (sqrt(v / c2) + eps)) (lr / c1)
    return xp.ElementwiseKernel(
        "T g, T b1, T b2, T inv_c2, T eps, T lr_c1", "T p, T m, T v",
        "T mm = (m - g) * b1 + g; m = mm; T t = g * g; T vv = (v - t) * b2 + t; v = vv;"
        " p -= (mm / (sqrt(vv * inv_c2) + eps)) * lr_c1;",
        "minihead_adam")


def flat_views(flat, shapes):
    """Views of consecutive pieces of the 1-d array ``flat`` with the given shapes (a dict name -> shape)."""
    out, o = {}, 0
    for k, shape in shapes.items():
        n = math.prod(shape)
        out[k] = flat[o:o + n].reshape(shape)
        o += n
    return out


def flatten(arrays, names):
    """The arrays ``arrays[k]`` for k in ``names`` in one new 1-d array (one concatenation kernel)."""
    return xp.concatenate([arrays[k].reshape(-1) for k in names])


def adam_update(flat_p, flat_m, flat_v, flat_g, b1, b2, c1, c2, eps, lr):
    """Twin of the loop body of :meth:`minihead.optim.Adam.step`, over one flat buffer in one launch."""
    t = flat_p.dtype.type
    _adam_kernel()(flat_g, t(b1), t(b2), t(1.0 / c2), t(eps), t(lr / c1), flat_p, flat_m, flat_v)


def global_norm(grads):
    """sqrt(sum_k ||g_k||^2) of a dict of gradients: one concatenation, one dot product, one host read."""
    flat = xp.concatenate([g.reshape(-1) for g in grads.values()])
    return math.sqrt(float(xp.vdot(flat, flat)))


# --------------------------------------------------------------------------- dropout on the device
def pcg64_jump(delta, inc):
    """(A, C) with state_{j + delta} = A state_j + C mod 2^128 for PCG64's LCG (multiplier PCG64_MULT,
    increment ``inc``): Brown's O(log delta) jump ahead (F. Brown, 'Random number generation with
    arbitrary strides', 1994), as the kernel computes it per thread."""
    A, C, a, c = 1, 0, PCG64_MULT, inc
    while delta:
        if delta & 1:
            A, C = (A * a) & U128, (C * a + c) & U128
        c = ((a + 1) * c) & U128
        a = (a * a) & U128
        delta >>= 1
    return A, C


def pcg64_advance(gen, n_raw):
    """Advance the host generator as ``gen.bit_generator.random_raw(n_raw)`` would (its 32-bit buffer
    untouched, as random_raw leaves it)."""
    st = gen.bit_generator.state
    s, inc = st["state"]["state"], st["state"]["inc"]
    A, C = pcg64_jump(n_raw, inc)
    gen.bit_generator.state = {**st, "state": {"state": (A * s + C) & U128, "inc": inc}}


def dropout_mask(shape, p, rng, dtype, bits):
    """Twin of :func:`minihead.layers.dropout_mask`, drawn on the device from ``rng``'s PCG64 stream."""
    st = rng.bit_generator.state
    if st["bit_generator"] != "PCG64":
        raise TypeError(f"device dropout follows PCG64's stream, not {st['bit_generator']}")
    n = math.prod(shape)
    n_raw = (n + 3) // 4
    thr = round(p * 2 ** bits)
    s, inc = st["state"]["state"], st["state"]["inc"]
    mask = xp.empty(n, dtype=dtype)
    t = mask.dtype.type
    u = xp.uint64
    n_threads = (n_raw + DRAWS_PER_THREAD - 1) // DRAWS_PER_THREAD
    if n_threads:
        _fn("pcg", "dropout_pcg64", mask.dtype)(
            ((n_threads + 255) // 256,), (256,),
            (mask, xp.int64(n), xp.int64(n_raw), xp.int32(DRAWS_PER_THREAD), u(s >> 64), u(s & U64),
             u(inc >> 64), u(inc & U64), u(PCG64_MULT >> 64), u(PCG64_MULT & U64), xp.uint32(thr),
             t(1.0) * t(1.0 / (1.0 - thr / 2 ** bits))))
    pcg64_advance(rng, n_raw)
    return mask.reshape(shape)
