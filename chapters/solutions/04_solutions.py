"""Solutions to the exercises of chapter 4 (hard-concrete gates). Run from the repository root:

    python chapters/solutions/04_solutions.py               # every exercise
    python chapters/solutions/04_solutions.py exercise_2    # one of them

Gates and the useless-heads toy of minihead/toy.py only; every exercise ends with asserts that check its result.
"""
import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))   # the repository root

from minihead import backend
from minihead.backend import xp
from minihead.gates import HardConcrete
from minihead.gradcheck import numerical_grad, rel_error
from minihead.toy import prune_useless_heads

F64 = backend.FLOAT_CHECK


def exercise_1():
    """Re-derive the expected L0 for another gate (beta = 2/3, the stretch (-0.2, 1.2)): g = 0 iff
    s <= -gamma / (zeta - gamma), and P(s <= x) = sigmoid(beta logit(x) - log_alpha), so
    P(g != 0) = sigmoid(log_alpha - beta log(-gamma / zeta)). Check it against penalty_forward and against the
    fraction of 200 000 samples with g > 0 (within 5 standard errors), and penalty_backward with gradcheck."""
    hc = HardConcrete(beta=2 / 3, gamma=-0.2, zeta=1.2)
    gen = backend.rng(4)
    n = 200_000
    for la in (-3.0, -1.0, 0.0, 1.5):
        x = -hc.gamma / (hc.zeta - hc.gamma)                         # the s below which the gate is clipped to 0
        by_hand = 1.0 - 1.0 / (1.0 + math.exp(-(hc.beta * math.log(x / (1 - x)) - la)))
        p = float(hc.penalty_forward(xp.asarray(la, dtype=F64))[0])
        g, _ = hc.sample_forward(xp.full((n,), la, dtype=F64), hc.draw_u(gen, (n,), dtype=F64))
        frac = float(xp.mean(g > 0))
        se = math.sqrt(p * (1 - p) / n)
        print(f"log_alpha {la:+.1f}: by hand {by_hand:.4f}, penalty_forward {p:.4f}, Monte Carlo {frac:.4f} +- {se:.4f}")
        assert abs(by_hand - p) < 1e-12 and abs(frac - p) < 5 * se
    la = backend.to_device(gen.normal(size=5) * 2, F64)              # (5,)
    R = backend.to_device(gen.normal(size=5), F64)                   # (5,) upstream gradient dL/dp
    p, cache = hc.penalty_forward(la)
    err = rel_error(hc.penalty_backward(R, cache), numerical_grad(lambda: float((hc.penalty_forward(la)[0] * R).sum()), la))
    print(f"penalty_backward vs central differences: {err:.1e}")
    assert err < 1e-8, err


def exercise_2():
    """The paper's binary readout with an asymmetric stretch (gamma = -0.3, zeta = 1.05): the threshold where
    P(g = 1) = P(g = 0) moves away from 0. Check that the two point masses are equal at binary_threshold(), and
    that binary_gate switches from 0 to 1 exactly there."""
    hc = HardConcrete(gamma=-0.3, zeta=1.05)
    t = hc.binary_threshold()
    p0, p1 = hc.mass_at_0_and_1(xp.asarray(t, dtype=F64))
    print(f"threshold {t:+.4f}: P(g = 0) = {float(p0):.6f}, P(g = 1) = {float(p1):.6f}")
    assert abs(t) > 0.1 and abs(float(p0) - float(p1)) < 1e-12
    g = hc.binary_gate(xp.asarray([t - 1e-6, t, t + 1e-6], dtype=F64))
    assert g.tolist() == [0.0, 1.0, 1.0], g
    assert abs(HardConcrete().binary_threshold()) < 1e-12            # symmetric defaults: the threshold is 0


def exercise_3():
    """The distribution sums to one: the density of the continuous part integrated over (0, 1) (trapezoid rule
    on a fine grid in s, where the integrand is smooth) plus the point masses P(g = 0) and P(g = 1) is 1, for the
    official temperature 0.33 and Louizos' 2/3, at several log_alpha."""
    for beta in (0.33, 2 / 3):
        hc = HardConcrete(beta=beta)
        # integrate in the pre-stretch variable s, x = s (zeta - gamma) + gamma, over the s that map into (0, 1)
        s_lo, s_hi = -hc.gamma / (hc.zeta - hc.gamma), (1 - hc.gamma) / (hc.zeta - hc.gamma)
        s = xp.linspace(s_lo, s_hi, 200_001, dtype=F64)[1:-1]
        x = s * (hc.zeta - hc.gamma) + hc.gamma
        for la in (-2.0, 0.0, 1.0, 3.0):
            q = hc.density(x, xp.asarray(la, dtype=F64)) * (hc.zeta - hc.gamma)   # density in s
            inner = float(((q[1:] + q[:-1]) / 2 * xp.diff(s)).sum())
            p0, p1 = hc.mass_at_0_and_1(xp.asarray(la, dtype=F64))
            total = inner + float(p0) + float(p1)
            print(f"beta {beta:.2f}, log_alpha {la:+.1f}: inside {inner:.5f} + P0 {float(p0):.5f} + P1 {float(p1):.5f}"
                  f" = {total:.5f}")
            assert abs(total - 1) < 1e-4, total


def exercise_4():
    """The lambda of the useless-heads toy: with lambda = 0 no gate closes; at the chapter's 0.05 exactly the four
    noise heads (2-5) close; at a large lambda (20) even the two heads the target reads close, the penalty
    outweighing the error. Every read-out uses the paper's binary gate."""
    hc = HardConcrete()
    kept = {}
    for lam in (0.0, 0.05, 20.0):
        _, log_alpha, _, losses = prune_useless_heads(0, lam=lam)
        kept[lam] = [int(v) for v in backend.to_host(hc.binary_gate(log_alpha))]
        print(f"lambda {lam:5.2f}: heads kept {kept[lam]}, final loss {losses[-1]:.3f}")
    assert kept[0.0] == [1] * 6
    assert kept[0.05] == [1, 1, 0, 0, 0, 0]
    assert kept[20.0] == [0] * 6


if __name__ == "__main__":
    from run_exercises import main   # beside this file: the runner every solution file shares
    main(globals(), sys.argv[1:])
