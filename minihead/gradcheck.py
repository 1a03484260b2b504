"""Numerical gradients by central differences, the oracle of every hand-written backward pass.

    d f / d x_i  ~=  (f(x + eps e_i) - f(x - eps e_i)) / (2 eps)          (element-wise, small arrays)
    <grad f(x), v>  ~=  (f(x + eps v) - f(x - eps v)) / (2 eps)           (random directions, large arrays)

The error of the central difference is O(eps^2) in exact arithmetic; in float64 eps = 1e-6 keeps the
round-off error (~1e-16 / eps) and the truncation error (~eps^2) both near 1e-10 relative.
"""
from .backend import to_device, xp


def rel_error(a, b, floor=1e-8):
    """max |a - b| / max(max |a| + max |b|, floor): one scale-free number per tensor.

    The floor keeps gradients that are exactly zero in theory (and ~1e-18 in practice) from
    producing a meaningless ratio of two round-off errors."""
    a, b = xp.asarray(a, dtype="float64"), xp.asarray(b, dtype="float64")
    scale = float(xp.abs(a).max() + xp.abs(b).max()) if a.size else 0.0
    return float(xp.abs(a - b).max()) / max(scale, floor) if a.size else 0.0


def numerical_grad(f, x, eps=1e-6):
    """Element-wise central differences of the scalar ``f()`` with respect to the array ``x``.

    ``x`` is perturbed in place and restored, so ``f`` should read it (a closure over x)."""
    grad = xp.zeros(x.shape, dtype="float64")
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        old = float(flat[i])
        flat[i] = old + eps
        fp = float(f())
        flat[i] = old - eps
        fm = float(f())
        flat[i] = old
        gflat[i] = (fp - fm) / (2 * eps)
    return grad


def directional_grads(f, xs, grads, gen, n_dirs=3, eps=1e-6):
    """Vector-Jacobian checks for large arrays: for random unit directions v over all of ``xs``,

    returns a list of pairs (numerical (f(x + eps v) - f(x - eps v)) / 2 eps, analytic sum_k <g_k, v_k>).
    ``xs`` and ``grads`` are lists of arrays (perturbed in place and restored); ``gen`` a host Generator."""
    pairs = []
    for _ in range(n_dirs):
        vs = [to_device(gen.standard_normal(x.shape), "float64") for x in xs]
        norm = sum(float((v * v).sum()) for v in vs) ** 0.5
        vs = [v / norm for v in vs]
        for x, v in zip(xs, vs):
            x += eps * v
        fp = float(f())
        for x, v in zip(xs, vs):
            x -= 2 * eps * v
        fm = float(f())
        for x, v in zip(xs, vs):
            x += eps * v
        analytic = sum(float((g * v).sum()) for g, v in zip(grads, vs))
        pairs.append(((fp - fm) / (2 * eps), analytic))
    return pairs
