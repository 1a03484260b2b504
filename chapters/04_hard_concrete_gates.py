# %% [markdown]
# # Chapter 4: Hard-concrete gates: switching heads off with an L0 penalty
#
# Voita et al. (2019, sec. 6) prune attention heads by multiplying the output of every head by a scalar gate
# $g_h \in [0, 1]$ *before* the heads are concatenated and projected by $W^O$:
#
# $$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}_h\big(g_h \cdot \mathrm{head}_h\big)\, W^O .$$
#
# They want most gates to be **exactly zero**, so that the head can be deleted, and they want to learn which ones
# by gradient descent. Both wishes pull in different directions: the number of non-zero gates
# $\|g\|_0 = \sum_h \mathbb{1}[g_h \neq 0]$ is a step function with zero gradient almost everywhere.
# The trick, from Louizos, Welling & Kingma (2018, *Learning Sparse Neural Networks through $L_0$
# Regularization*), is to make every gate a random variable whose distribution has real probability mass at 0 and
# at 1 and a smooth density in between, the **hard concrete** distribution. Then the *expected* $L_0$ norm is a
# smooth function of the gate parameters, and samples of the gate can be back-propagated through.
#
# This chapter builds the gate from `minihead/gates.py`, draws its distribution, derives the penalty, checks every
# hand-written gradient live, and ends with a toy model in which the gates of useless heads close.

# %%
import os
import sys
sys.path.insert(0, os.path.abspath(".."))   # run from chapters/
QUICK = os.environ.get("MINIHEAD_QUICK", "0") == "1"

# %%
import math
import matplotlib.pyplot as plt

from minihead import backend
from minihead.backend import xp
from minihead.gates import (HardConcrete, LOG_ALPHA_OPEN, init_log_alpha, l0_total, l0_total_backward)

F64 = backend.FLOAT_CHECK          # all checks in this chapter run in float64
N_MC = 20_000 if QUICK else 200_000  # Monte Carlo samples per log_alpha
host = backend.to_host              # arrays go to the host only for plotting
hc = HardConcrete()                 # beta = 0.33, gamma = -0.1, zeta = 1.1 (the official code)
hc

# %% [markdown]
# ## 1. The gate
#
# Each gate has one parameter, $\log\alpha$. A training-time gate is drawn with noise $u \sim U(0, 1)$
# (Louizos et al., eq. 9):
#
# $$
# s = \sigma\!\left(\frac{\log u - \log(1-u) + \log\alpha}{\beta}\right), \qquad
# \bar s = s\,(\zeta - \gamma) + \gamma, \qquad
# g = \min\big(1, \max(0, \bar s)\big).
# $$
#
# * $s$ is a **binary concrete** (Gumbel-softmax with two classes) variable: $\log u - \log(1-u)$ is logistic noise,
#   $\log\alpha$ shifts it, the temperature $\beta$ sharpens it towards 0 or 1.
# * The **stretch** to $(\gamma, \zeta) = (-0.1, 1.1)$ pushes a slice of the distribution below 0 and above 1.
# * The **clip** folds those slices onto exactly 0 and exactly 1: point masses.
#
# The official code uses $\beta = 0.33$; Louizos et al. used $\beta = 2/3$. The noise is drawn by the caller
# (`draw_u`, from a seeded host generator), so every sample is reproducible.
#
# At test time the noise is dropped, and there are two readouts. **The paper's** (sec. 6.1, `binary_gate`): a gate
# is 1 where $P(g = 1) \ge P(g = 0)$ and 0 otherwise, so a head is either kept whole or pruned. **The official
# code's** (Louizos eq. 13, `test_gate`): the continuous $g = \mathrm{clip}\big(\sigma(\log\alpha)(\zeta-\gamma)+\gamma,\,0,\,1\big)$,
# which can leave a head scaled by a value between 0 and 1. Under either a head is pruned when its gate is 0; the
# pruning chapters count kept heads with the binary readout and report BLEU under both.

# %%
gen = backend.rng(0)
log_alpha = xp.asarray([-3.0, -1.0, 0.0, 1.0, 3.0], dtype=F64)   # (5,)
u = hc.draw_u(gen, (4, 5), dtype=F64)                               # (4, 5): 4 draws for each of 5 gates
g, _ = hc.sample_forward(log_alpha, u)                              # (4, 5)
print("samples (rows = draws):\n", host(g).round(3))
print("test-time gates, continuous (official code):", host(hc.test_gate(log_alpha)).round(3))
print("test-time gates, binary (the paper's):       ", host(hc.binary_gate(log_alpha)).round(3))

# %% [markdown]
# Many samples are exactly 0 or exactly 1; the rest lie in between. Note the continuous test-time gate at
# $\log\alpha = 0$: $\mathrm{clip}(0.5 \cdot 1.2 - 0.1) = 0.5$, a head at half strength; the binary gate there is 1
# (at $\log\alpha = 0$ the two point masses are equal, and ties open).
#
# ## 2. What the distribution looks like
#
# Below, histograms of samples for several $\log\alpha$. The continuous part has the density of a stretched binary
# concrete (Maddison et al. 2017, eq. 21, with $\alpha = e^{\log\alpha}$ and $x = \bar s$):
#
# $$
# q(x) = \frac{1}{\zeta-\gamma}\;
# \frac{\beta\,\alpha\, s^{-\beta-1}(1-s)^{-\beta-1}}{\big(\alpha s^{-\beta} + (1-s)^{-\beta}\big)^2},
# \qquad s = \frac{x-\gamma}{\zeta-\gamma},\quad 0 < x < 1,
# $$
#
# drawn as a line (`HardConcrete.density`); the point masses at 0 and 1 are drawn as bars whose *height is the
# probability* (read them on the right-hand axis).

# %%
las = [-2.0, 0.0, 2.0]
x = xp.linspace(1e-4, 1 - 1e-4, 500, dtype=F64)                     # (500,)
fig, axes = plt.subplots(1, len(las), figsize=(13, 3.2), sharey=True)
for ax, la in zip(axes, las):
    g, _ = hc.sample_forward(xp.full((N_MC,), la, dtype=F64), hc.draw_u(gen, (N_MC,), dtype=F64))  # (N_MC,)
    inner = host(g[(g > 0) & (g < 1)])
    ax.hist(inner, bins=50, range=(0, 1), weights=[50.0 / N_MC] * len(inner), alpha=0.5,
            label="samples in (0, 1)")
    ax.plot(host(x), host(hc.density(x, la)), "k", lw=1.5, label="density q(x)")
    p0, p1 = hc.mass_at_0_and_1(xp.asarray(la))
    ax2 = ax.twinx()
    ax2.bar([0.0, 1.0], [float(p0), float(p1)], width=0.04, color="C3", alpha=0.8, label="P(g=0), P(g=1)")
    ax2.set_ylim(0, 1)
    ax.set_title(f"log_alpha = {la}:  P(g=0)={float(p0):.2f}, P(g=1)={float(p1):.2f}")
    ax.set_xlabel("g")
axes[0].set_ylabel("density")
axes[0].legend(loc="upper center", fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The histogram follows the density line, which is the first check that the sampler and the formula agree
# (the tests do this quantitatively). With $\beta = 0.33$ the density is U-shaped: the gate spends most of its time
# near 0 or 1, and the point masses hold a large share. A larger temperature (Louizos' $2/3$) makes the middle
# fatter:

# %%
hc_louizos = HardConcrete(beta=2 / 3)
for name, h in [("beta=0.33", hc), ("beta=2/3 ", hc_louizos)]:
    p0, p1 = h.mass_at_0_and_1(xp.asarray(0.0))
    print(f"{name}  log_alpha=0:  P(g=0)={float(p0):.3f}  P(0<g<1)={1 - float(p0) - float(p1):.3f}  P(g=1)={float(p1):.3f}")

# %% [markdown]
# ### Mass at 0 and 1 as $\log\alpha$ moves
#
# Write $Q(x) = P(s \le x)$ for the CDF of the binary concrete. It has a closed form:
# $s \le x \iff \log u - \log(1-u) \le \beta\,\mathrm{logit}(x) - \log\alpha$, and the logistic noise has CDF $\sigma$, so
#
# $$Q(x) = \sigma\big(\beta\,\mathrm{logit}(x) - \log\alpha\big).$$
#
# The gate is 0 when $\bar s \le 0$, i.e. $s \le \frac{-\gamma}{\zeta-\gamma}$, and
# $\mathrm{logit}\!\left(\frac{-\gamma}{\zeta-\gamma}\right) = \log\frac{-\gamma}{\zeta}$; it is 1 when
# $s \ge \frac{1-\gamma}{\zeta-\gamma}$, with $\mathrm{logit} = \log\frac{1-\gamma}{\zeta-1}$. Hence
#
# $$
# P(g=0) = \sigma\!\left(\beta\log\frac{-\gamma}{\zeta} - \log\alpha\right), \qquad
# P(g=1) = \sigma\!\left(\log\alpha - \beta\log\frac{1-\gamma}{\zeta-1}\right).
# $$
#
# Only samples in the open interval $(0, 1)$ carry a gradient back to $\log\alpha$ (the clip has zero derivative
# where it clips). The green curve is therefore the fraction of training steps in which the data loss can move
# the gate at all.

# %%
grid = xp.linspace(-8, 8, 321, dtype=F64)                          # (321,)
p0, p1 = hc.mass_at_0_and_1(grid)                                  # (321,), (321,)
plt.figure(figsize=(7, 3.5))
plt.plot(host(grid), host(p0), label="P(g = 0)")
plt.plot(host(grid), host(p1), label="P(g = 1)")
plt.plot(host(grid), host(1 - p0 - p1), label="P(0 < g < 1): gradient flows")
plt.plot(host(grid), host(hc.test_gate(grid)), "k--", label="test-time gate, continuous (official code)")
plt.plot(host(grid), host(hc.binary_gate(grid)), "k:", label="test-time gate, binary (the paper's)")
for t in (math.log(-hc.gamma / hc.zeta), math.log((1 - hc.gamma) / (hc.zeta - 1))):
    plt.axvline(t, color="grey", lw=0.6)
plt.axvline(LOG_ALPHA_OPEN, color="C3", lw=0.8, ls=":", label=f"init log_alpha = {LOG_ALPHA_OPEN}")
plt.xlabel("log_alpha")
plt.legend(fontsize=8)
plt.title("hard concrete, beta = 0.33")
plt.tight_layout()
plt.show()
la_open = xp.asarray(LOG_ALPHA_OPEN)
print("at the init log_alpha = 3:  P(g=1) = %.3f, test gate = %.1f" % (float(hc.mass_at_0_and_1(la_open)[1]),
                                                                     float(hc.test_gate(la_open))))

# %% [markdown]
# The grey lines are the continuous readout's thresholds: the head is pruned for
# $\log\alpha \le \log(-\gamma/\zeta) = -2.40$ and fully on for $\log\alpha \ge \log\frac{1-\gamma}{\zeta-1} = +2.40$;
# between them it is scaled. The binary readout switches at once where the curves P(g = 0) and P(g = 1) cross. We start pruning from
# $\log\alpha = 3$ (`LOG_ALPHA_OPEN`), where every head is fully on at test time and 90% of the training samples
# are exactly 1. (The official code initialises $\log\alpha$ with TensorFlow's default Glorot-uniform, i.e. close
# to 0, where the test-time gate is 0.5.)
#
# ## 3. The expected-$L_0$ penalty
#
# The quantity we would like to penalise is the number of open heads, $\sum_h \mathbb{1}[g_h \ne 0]$. Its expectation
# under the gate distribution is
#
# $$
# \mathbb{E}\Big[\sum_h \mathbb{1}[g_h \ne 0]\Big] = \sum_h \big(1 - P(g_h = 0)\big)
# = \sum_h \sigma\!\left(\log\alpha_h - \beta\log\frac{-\gamma}{\zeta}\right),
# $$
#
# using $1 - \sigma(z) = \sigma(-z)$ (Louizos eq. 12). It is smooth in $\log\alpha$, with derivative
# $p_h(1-p_h)$. Voita et al. (eq. 5-6) train
#
# $$ L = L_{\text{xent}} + \lambda\, L_C, \qquad L_C = \sum_{\text{layers } l}\ \sum_{\text{heads } h} P(g_{lh} \neq 0).$$
#
# The official code instead averages the per-layer sums over the gated layers, so its $\lambda$ is about
# $n_{\text{layers}}$ times the paper's. `l0_total(penalties, reduction)` offers both: `"sum"` (paper, default) and
# `"layer_mean"` (code).
#
# Below, the formula against the fraction of samples with $g > 0$; the error bars are 5 binomial standard errors.

# %%
check_las = [-4.0, -2.0, -1.0, 0.0, 1.0, 2.0, 4.0]
mc_ok = []
p_formula, p_mc, p_se = [], [], []
for la in check_las:
    g, _ = hc.sample_forward(xp.full((N_MC,), la, dtype=F64), hc.draw_u(gen, (N_MC,), dtype=F64))  # (N_MC,)
    p, _ = hc.penalty_forward(xp.asarray(la, dtype=F64))
    frac = float(xp.mean(g > 0))
    se = math.sqrt(float(p) * (1 - float(p)) / N_MC)
    p_formula.append(float(p))
    p_mc.append(frac)
    p_se.append(se)
    mc_ok.append(abs(frac - float(p)) < 5 * se + 1e-6)
    print(f"log_alpha={la:+.1f}   P(g!=0) formula {float(p):.4f}   Monte Carlo {frac:.4f} +- {se:.4f}")
plt.figure(figsize=(5, 3))
plt.plot(host(grid), host(hc.penalty_forward(grid)[0]), label="sigmoid(log_alpha - beta log(-gamma/zeta))")
plt.errorbar(check_las, p_mc, yerr=[5 * s for s in p_se], fmt="o", ms=4, label="fraction of samples g > 0")
plt.xlabel("log_alpha")
plt.ylabel("P(g != 0)")
plt.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %%
layers = [init_log_alpha(8, dtype=F64) for _ in range(6)]           # 6 layers x (8,) all open
ps = [hc.penalty_forward(la)[0] for la in layers]
for red in ("sum", "layer_mean"):
    total, _ = l0_total(ps, red)
    print(f"{red:>10}:  L_C = {float(total):.2f}   (48 heads, each P(g != 0) = {float(ps[0][0]):.3f})")

# %% [markdown]
# ## 4. Backward passes, checked live
#
# All gradients in `minihead/gates.py` are written by hand. By the chain rule, with $z = (\log u - \log(1-u) + \log\alpha)/\beta$:
#
# $$
# \frac{\partial g}{\partial \log\alpha} = \mathbb{1}[0 < \bar s < 1]\;(\zeta-\gamma)\; s(1-s)\;\frac{1}{\beta},
# \qquad
# \frac{\partial P(g \ne 0)}{\partial \log\alpha} = p(1-p),
# \qquad
# \frac{\partial L_C}{\partial p_{lh}} = \begin{cases} 1 & \text{sum} \\ 1/L & \text{layer\_mean.}\end{cases}
# $$
#
# When $u$ has more axes than $\log\alpha$ (one noise draw per example, say), the gradient is summed over the extra
# axes. We check each backward against central differences,
# $\frac{f(x + \epsilon e_i) - f(x - \epsilon e_i)}{2\epsilon}$, in float64, on random upstream gradients.
# `rel_error(a, b)` is $\max|a-b| / (\max|a| + \max|b|)$. The tests (`tests/test_gates.py`) do the same and also
# compare with autograd.

# %%
from minihead.gradcheck import numerical_grad, rel_error   # numerical_grad(f, x): f() reads x, perturbed in place

r = backend.rng(1)
checks = {}

# (a) sample, interior points (0 < s_bar < 1 everywhere)
la = xp.asarray([-1.5, -0.7, 0.0, 0.3, 1.1, 2.0], dtype=F64)
u = xp.asarray([0.75, 0.6, 0.45, 0.5, 0.3, 0.2], dtype=F64)
dg = backend.to_device(r.standard_normal(6), dtype=F64)
_, cache = hc.sample_forward(la, u)
assert bool(xp.all((cache[1] > 0) & (cache[1] < 1)))
checks["sample, interior"] = rel_error(hc.sample_backward(dg, cache),
                                       numerical_grad(lambda: xp.sum(dg * hc.sample_forward(la, u)[0]), la))

# (b) sample, clipped points: the gradient must be exactly zero
la_c = xp.asarray([-8.0, -5.0, 5.0, 8.0], dtype=F64)
u_c = xp.asarray([0.5, 0.3, 0.7, 0.5], dtype=F64)
g_c, cache_c = hc.sample_forward(la_c, u_c)
clipped_grad = hc.sample_backward(xp.ones(4, dtype=F64), cache_c)
print("clipped samples:", host(g_c), " their gradient:", host(clipped_grad))

# (c) sample with noise (B, H) broadcast against log_alpha (H,)
la_b = backend.to_device(r.uniform(-2, 2, size=6), dtype=F64)
u_b = hc.draw_u(r, (5, 6), dtype=F64)
dg_b = backend.to_device(r.standard_normal((5, 6)), dtype=F64)
_, cache_b = hc.sample_forward(la_b, u_b)
checks["sample, broadcast (B, H)"] = rel_error(
    hc.sample_backward(dg_b, cache_b),
    numerical_grad(lambda: xp.sum(dg_b * hc.sample_forward(la_b, u_b)[0]), la_b))

# (d) penalty
la_p = xp.asarray([-3.0, -0.5, 0.0, 0.8, 3.0], dtype=F64)
dp = backend.to_device(r.standard_normal(5), dtype=F64)
_, cache_p = hc.penalty_forward(la_p)
checks["penalty"] = rel_error(hc.penalty_backward(dp, cache_p),
                              numerical_grad(lambda: xp.sum(dp * hc.penalty_forward(la_p)[0]), la_p))

# (e) l0_total chained to log_alpha, both reductions, 3 layers with uneven head counts
las3 = [backend.to_device(r.uniform(-3, 3, size=n), dtype=F64) for n in (4, 4, 2)]
for red in ("sum", "layer_mean"):
    pcs = [hc.penalty_forward(x) for x in las3]
    _, tcache = l0_total([p for p, _ in pcs], red)
    dlas = [hc.penalty_backward(d, c) for d, (_, c) in zip(l0_total_backward(1.0, tcache), pcs)]
    f = lambda: l0_total([hc.penalty_forward(x)[0] for x in las3], red)[0]
    for i in range(3):
        checks[f"l0_total {red}, layer {i}"] = rel_error(dlas[i], numerical_grad(f, las3[i]))

for k, v in checks.items():
    print(f"{k:28s} relative error {v:.1e}")

# %% [markdown]
# Relative errors of $10^{-8}$ and below are what central differences can resolve in float64: the
# hand-written backward passes agree with the numbers. The clipped samples get a gradient of exactly zero, which is
# the price of the clip: at the initial $\log\alpha = 3$, 90% of the samples are clipped at 1 and tell $\log\alpha$
# nothing. Only the penalty's gradient $p(1-p)$ is always there, and at $\log\alpha = 3$ it is small (0.02).
#
# ## 5. Toy experiment: gates close on useless heads
#
# Six toy "heads" have fixed outputs $O_h \in \mathbb{R}^{N \times 4}$; a linear read-out $W_h$ turns each into a scalar
# contribution $c_h = O_h W_h$, and the model predicts $\hat y = \sum_h g_h c_h$. The target reads heads 0 and 1 only;
# heads 2-5 are noise of scales 0.5, 1, 2 and 3. As in the paper, pruning starts from a converged model: $W$ is the
# least-squares fit with every gate on, and $\log\alpha = 3$ (all open). We then train $\log\alpha$ (lr 0.1) and
# fine-tune $W$ (lr 0.01) with the project's Adam (`minihead.optim.Adam`, the Transformer's betas 0.9 / 0.98) on
#
# $$L = \frac1N \sum_n (\hat y_n - y_n)^2 + \lambda \sum_h P(g_h \ne 0), \qquad \lambda = 0.05,$$
#
# one gate sample $u \in (0,1)^6$ per step shared by the batch, as in the official code. The loop is
# `prune_useless_heads` in `minihead/toy.py` (the toy of `tests/test_gates.py` too); the next cell prints it.

# %%
import inspect

from minihead.toy import prune_useless_heads as prune_toy   # one copy, shared with tests/test_gates.py

print(inspect.getsource(prune_toy))


def plot_traj(traj, title, ax):
    for hh in range(len(traj[0])):
        ax.plot([row[hh] for row in traj], color="C0" if hh < 2 else "C3", alpha=0.9,
                label=("needed head" if hh == 0 else "useless head" if hh == 2 else None))
    ax.axhline(math.log(-hc.gamma / hc.zeta), color="grey", lw=0.6)
    ax.axhline(math.log((1 - hc.gamma) / (hc.zeta - 1)), color="grey", lw=0.6)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("log_alpha")


g_final, la_final, traj, losses = prune_toy(0)
print("test-time gates:", host(g_final).round(3))
fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
plot_traj(traj, "lambda = 0.05, Adam lr 0.1 (log_alpha), 0.01 (W)", axes[0])
axes[0].legend(fontsize=8)
axes[1].plot(losses)
axes[1].set_title("loss + lambda L_C (one noisy sample per step)", fontsize=9)
axes[1].set_xlabel("step")
plt.tight_layout()
plt.show()

# %% [markdown]
# The useless heads' $\log\alpha$ fall steadily through the pruning threshold (lower grey line, $-2.40$) and their
# test-time gates are exactly 0; the needed heads climb above $+2.40$ and stay fully on. The spikes in the loss are
# steps in which a needed head's sampled gate came out 0: costly, and exactly the signal that pushes its
# $\log\alpha$ up. Does it hold for other seeds?

# %%
seeds = range(3) if QUICK else range(10)
results = {s: host(prune_toy(s)[0]) for s in seeds}
for s, gs in results.items():
    print(f"seed {s}: test-time gates {gs.round(2)}")
toy_ok = all((gs[2:] == 0).all() and (gs[:2] == 1).all() for gs in results.values())
print("useless closed and needed open in every seed:", toy_ok)

# %% [markdown]
# ### Why users report gates that "never close"
#
# Two things explain it. Adam moves each parameter by about `lr` per step, whatever the size of
# the gradient, and a gate only counts as pruned after $\log\alpha$ has travelled from the open start ($+3$) to below
# $-2.40$, a distance of 5.4. At `lr = 0.1` that takes about 50 steps; at `lr = 0.01` about 490; at the $10^{-4}$
# typical for fine-tuning a Transformer, tens of thousands. Plain SGD is worse: at $\log\alpha = 3$ the penalty's
# gradient is $\lambda p(1-p) \approx 0.001$, and the data gradient is zero in 90% of the steps (the sample is clipped
# at 1). Second, without the penalty the data loss gives a useless gate no reason to close: with the read-out
# frozen at its least-squares fit, every head lowers the training loss a little, so its gradient, when there is one,
# points *up*. Here the penalty is the only force that closes a gate (but see the caveat below).

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.2), sharey=True)
g_slow, la_slow, traj_slow, _ = prune_toy(0, lr=0.01)
plot_traj(traj_slow, "lambda = 0.05, lr = 0.01: heading down, not yet pruned", axes[0])
g_free, _, traj_free, _ = prune_toy(0, lam=0.0, lr_w=0.0)
plot_traj(traj_free, "lambda = 0, read-out frozen: useless gates drift up, none closes", axes[1])
plt.tight_layout()
plt.show()
print("lr = 0.01, 300 steps, test-time gates:", host(g_slow).round(2))
print("lambda = 0, W frozen, test-time gates:", host(g_free).round(2))

# %% [markdown]
# How many of the useless gates close, over the seeds, for three read-out learning rates with and without the
# penalty? The last row is a caveat worth knowing: when the read-out $W$ is trained with a large learning rate,
# Adam's noise makes the useless heads' contributions *harmful*, and then the data loss closes some of them on its
# own. The penalty is what closes all of them, reliably, whatever the read-out does.

# %%
closed = {}
for lr_w in (0.0, 0.01, 0.1):
    for lam in (0.0, 0.05):
        runs = [host(prune_toy(s, lam=lam, lr_w=lr_w)[0]) for s in seeds]
        closed[lr_w, lam] = (sum(int((gs[2:] == 0).sum()) for gs in runs), sum(bool((gs[:2] == 1).all()) for gs in runs))
print("read-out lr   useless closed (lambda=0)   useless closed (lambda=0.05)   needed all open (lambda=0.05)")
for lr_w in (0.0, 0.01, 0.1):
    print(f"{lr_w:>10}   {closed[lr_w, 0.0][0]:>10}/{4 * len(seeds)}   {closed[lr_w, 0.05][0]:>22}/{4 * len(seeds)}"
          f"   {closed[lr_w, 0.05][1]:>20}/{len(seeds)}")

# %% [markdown]
# ## 6. Findings
#
# The cells below assert what this chapter showed; if any fails, the text above is wrong.

# %%
# The expected-L0 formula P(g != 0) = sigmoid(log_alpha - beta log(-gamma/zeta)) matches Monte Carlo.
assert all(mc_ok), list(zip(check_las, p_formula, p_mc))
# Hand-written backward passes agree with central differences; clipped samples pass exactly zero gradient.
assert all(v < 1e-6 for v in checks.values()), checks
assert bool(xp.all(clipped_grad == 0)) and set(host(g_c).tolist()) == {0.0, 1.0}
# The test-time gate: 0.5 at log_alpha = 0, fully on at the init, off far below.
assert abs(float(hc.test_gate(xp.asarray(0.0))) - 0.5) < 1e-12 and float(hc.test_gate(xp.asarray(LOG_ALPHA_OPEN))) == 1.0
# The paper's binary readout: 1 exactly where P(g = 1) > P(g = 0) on the grid (off the tie itself), else 0.
off_tie = xp.abs(grid - hc.binary_threshold()) > 1e-9                 # (321,)
assert bool(xp.all((hc.binary_gate(grid) == (p1 > p0))[off_tie])), "binary gate != [P(g=1) > P(g=0)]"
# Toy pruning: the 4 useless heads are closed (gate exactly 0), the 2 needed ones open (exactly 1), in every seed.
assert toy_ok, results
# At lr = 0.01 the same 300 steps have not yet closed them (the "gates never close" symptom).
assert bool(xp.all(g_slow[2:] > 0)) and bool(xp.all(la_slow[2:] < 0))
# Without the penalty and with the read-out frozen no gate closes; with it, all useless ones do, for every read-out lr.
assert bool(xp.all(g_free > 0)) and closed[0.0, 0.0][0] == 0
assert all(closed[lr_w, 0.05] == (4 * len(seeds), len(seeds)) for lr_w in (0.0, 0.01, 0.1)), closed
print("all findings hold")

# %% [markdown]
# ## Exercises
#
# Each solution is a function of `chapters/solutions/04_solutions.py`, runnable from the repository root
# (`python chapters/solutions/04_solutions.py exercise_K`) and checked by `tests/test_solutions.py`; it
# ends with asserts on its result.
#
# 1. **Re-derive the gate's expected L0.** For $\beta = 2/3$ and the stretch $(-0.2, 1.2)$, derive $P(g \ne 0)$ from the binary-concrete CDF, compare it with `penalty_forward` and a Monte Carlo estimate, and check `penalty_backward` with gradcheck.
#    - *Hint:* $g = 0$ iff $s \le -\gamma/(\zeta - \gamma)$, and $P(s \le x) = \sigma(\beta\,\mathrm{logit}(x) - \log\alpha)$.
#    - Solution: `solutions/04_solutions.py`, `exercise_1`.
# 2. **The binary readout with an asymmetric stretch.** For $\gamma = -0.3$, $\zeta = 1.05$, check that $P(g=0) = P(g=1)$ at `binary_threshold()` and that `binary_gate` switches there.
#    - *Hint:* `mass_at_0_and_1` gives both point masses; the threshold is 0 only for a symmetric stretch.
#    - Solution: `solutions/04_solutions.py`, `exercise_2`.
# 3. **The distribution sums to one.** Integrate `HardConcrete.density` over $(0, 1)$ and add the two point masses, for $\beta = 0.33$ and $2/3$.
#    - *Hint:* Integrate in the pre-stretch variable $s$ (multiply the density by $\zeta - \gamma$): the integrand is smooth there.
#    - Solution: `solutions/04_solutions.py`, `exercise_3`.
# 4. **How large must lambda be?** Run `toy.prune_useless_heads` at $\lambda = 0$, the chapter's value and a very large one, and read which heads the binary gate keeps.
#    - *Hint:* At $\lambda = 0$ nothing closes; at a very large $\lambda$ even the heads the target reads close.
#    - Solution: `solutions/04_solutions.py`, `exercise_4`.
