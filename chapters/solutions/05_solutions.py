"""Solutions to the exercises of chapter 5 (pruning encoder heads). Run from the repository root:

    python chapters/solutions/05_solutions.py               # every exercise
    python chapters/solutions/05_solutions.py exercise_2    # one of them

A tiny model (float64, or the test suite's tiny settings on data_small/, untrained) and hand-made masks only:
no model is trained to convergence. Every exercise ends with asserts that check its result.
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repository root

from minihead import backend, model
from minihead import findings
from minihead import commands
from minihead import prune as P
from minihead.backend import xp
from minihead.data.vocab import make_batch
from minihead.gates import HardConcrete
from minihead.gradcheck import numerical_grad, rel_error

F64 = "float64"
# the tiny settings of tests/test_emergence.py: 16-wide model, 60 training pairs
TINY = dict(max_steps=5, eval_every=3, d_model=16, n_heads=2, d_ff=16, n_train=60, dev_bleu_sentences=4)


def exercise_1():
    """Two readouts of the same gates: the paper's binary gate keeps a head iff log_alpha >= 0 (P(g=1) >= P(g=0)),
    the official code's continuous gate iff log_alpha > log(-gamma / zeta) = -2.40. Find on a grid the heads on
    which deterministic_gates' two readouts disagree, and check that they are exactly those in (-2.40, 0), where
    the continuous readout keeps a head at a strength below 1/2."""
    hc = HardConcrete()
    grid = xp.linspace(-4, 4, 81, dtype=F64).reshape(9, 9)           # (L, H) of made-up log_alpha
    gates_b, kept_b = P.deterministic_gates({"enc": grid}, hc, "binary")
    gates_c, kept_c = P.deterministic_gates({"enc": grid}, hc, "continuous")
    lo = float(xp.log(xp.asarray(-hc.gamma / hc.zeta)))
    host = backend.to_host(grid)
    differ = kept_b["enc"] != kept_c["enc"]
    want = (host > lo) & (host < 0)
    print(f"the readouts disagree on {int(differ.sum())} of {grid.size} gates, log_alpha in "
          f"[{host[differ].min():+.1f}, {host[differ].max():+.1f}]; continuous gate there at most "
          f"{float(backend.to_host(gates_c['enc'])[differ].max()):.3f}")
    assert (differ == want).all() and abs(lo + 2.3979) < 1e-3
    assert not (kept_b["enc"] & ~kept_c["enc"]).any()                 # binary never keeps what continuous prunes
    assert float(backend.to_host(gates_c["enc"])[differ].max()) < 0.5


def exercise_2():
    """The pruning objective's gate gradient through the whole model: with the noise u fixed, dJ/dlog_alpha of
    gated_loss_and_grads (sample_backward of dCE/dg plus lambda times the penalty's derivative) against central
    differences of J = CE + lambda L_C on a tiny float64 model, for the encoder's gates and for all three types."""
    cfg = model.Config(vocab_size=20, n_enc_layers=2, n_dec_layers=2, n_heads=2, d_model=8, d_ff=16,
                       dropout=0.0, dtype=F64)
    theta = model.init_params(cfg, seed=0)
    batch = make_batch([[5, 6, 7, 8], [9, 10, 11]], [[12, 13, 14], [15, 16, 17, 18, 19]], [0, 1])
    hc, gen, lam = HardConcrete(), backend.rng(5), 0.3
    for kinds in (("enc",), model.GATE_KINDS):
        log_alpha = {k: backend.to_device(gen.normal(size=(cfg.n_layers(k), cfg.n_heads)), F64) for k in kinds}
        u = {k: hc.draw_u(gen, (cfg.n_layers(k), cfg.n_heads), dtype=F64) for k in kinds}

        def J():
            ce, l0, _, _ = P.gated_loss_and_grads(theta, cfg, batch, log_alpha, u, lam, hc=hc)
            return float(ce) + lam * float(l0)

        _, _, _, dla = P.gated_loss_and_grads(theta, cfg, batch, log_alpha, u, lam, hc=hc)
        for k in kinds:
            err = rel_error(dla[k], numerical_grad(J, log_alpha[k]))
            print(f"gated {'+'.join(kinds)}: dJ/dlog_alpha[{k}] vs central differences {err:.1e}")
            assert err < 1e-6, (kinds, k, err)


def exercise_3():
    """A lambda sweep in miniature: an untrained tiny model (the test suite's tiny settings on data_small/) pruned
    for 60 steps at lambda 0, 0.05 and 1 with its weights frozen (lr_params 0, so only the gates move). The number of
    encoder heads kept by the paper's readout cannot grow with lambda; lambda 0 keeps all six, lambda 1 none.
    (The real sweep, chapter 5's Figure 7, starts from the converged model: `python -m minihead reproduce --quick`.)"""
    from minihead.study import prepare
    _, _, corpus, cfg, _ = prepare("quick", str(ROOT / "data_small"), **TINY)
    params = model.init_params(cfg, seed=0)
    kept = {}
    for lam in (0.0, 0.05, 1.0):
        r = P.prune(params, cfg, corpus, lam=lam, steps=60,
                    settings=P.PruneSettings(lr_params=0.0, settle=None, log_every=20))
        kept[lam] = int(r.retained["enc"].sum())
        print(f"lambda {lam:4.2f}: {commands.format_retained(r.retained)}; open along the run "
              f"{[h['open']['enc'] for h in r.history]}")
    n = cfg.n_enc_layers * cfg.n_heads
    assert kept[0.0] == n and kept[1.0] == 0, kept
    assert kept[0.0] >= kept[0.05] >= kept[1.0], kept


def exercise_4():
    """Figure 8's claim for one mask: specialised_share compares the share of heads with a role among the kept
    heads with the share among all heads. Make a 3 x 2 encoder whose heads (0, 1), (1, 0) and (2, 1) have a role,
    prune it two ways, and check both shares by hand: keeping the role heads gives 1 against 0.5 (the claim
    holds), keeping the others gives 0 against 0.5."""
    roles = {(l, h): set() for l in range(3) for h in range(2)}
    roles[0, 1], roles[1, 0], roles[2, 1] = {"positional"}, {"syntactic"}, {"syntactic", "rare"}
    keep_roles = xp.asarray([[False, True], [True, False], [False, True]])
    keep_others = ~keep_roles
    good, bad = findings.specialised_share(keep_roles, roles), findings.specialised_share(keep_others, roles)
    print(f"keeping the role heads: {good}; keeping the others: {bad}")
    assert good == (1.0, 0.5) and bad == (0.0, 0.5)
    assert good[0] > good[1] and not bad[0] > bad[1]



def exercise_5():
    """Section 6's pooled carrier test, rebuilt from its parts. For each seed of the shipped pruning pilot whose
    model the need study measured (report.pilot_runs), X = the carriers among n survivors drawn at random from the
    N heads is hypergeometric: P(X = i) = C(K, i) C(N - K, n - i) / C(N, n). Convolve the seeds' pmfs by hand and
    check the tail P(X_1 + ... >= kept) against needs.carriers_kept_pooled; then draw random masks of each seed's
    size and check that the per-seed tail of needs.carriers_kept agrees with the share of draws that keep as
    many carriers (within five standard errors), and that the mean count is K n / N."""
    import math
    import random
    from minihead import needs, report
    rows, _ = report.pilot_runs()
    kepts = [x["kept"] for x in rows if x["kept"]]
    dist = [1.0]
    for k in kepts:
        N, K, n = k["n_heads"], len(k["carriers"]), len(k["survivors"])
        pmf = [math.comb(K, i) * math.comb(N - K, n - i) / math.comb(N, n) for i in range(min(K, n) + 1)]
        dist = [sum(dist[j] * pmf[i - j] for j in range(len(dist)) if i - j < len(pmf) and i >= j)
                for i in range(len(dist) + len(pmf) - 1)]
    total = sum(k["kept"] for k in kepts)
    by_hand, pooled = sum(dist[total:]), needs.carriers_kept_pooled(kepts)
    print(f"pooled tail by hand {by_hand:.3g}, carriers_kept_pooled {pooled['p']:.3g} ({total} carriers kept)")
    assert math.isclose(by_hand, pooled["p"], rel_tol=1e-9)
    rng, draws = random.Random(0), 20000
    for k in kepts:
        N, carriers, n = k["n_heads"], set(range(len(k["carriers"]))), len(k["survivors"])
        counts = [len(carriers & set(rng.sample(range(N), n))) for _ in range(draws)]
        share = sum(c >= k["kept"] for c in counts) / draws
        se = math.sqrt(max(k["p"] * (1 - k["p"]), 1 / draws) / draws)
        mean = sum(counts) / draws
        print(f"{len(carriers)} carriers, {n} of {N} kept: tail {k['p']:.3g}, simulated {share:.3g}; mean "
              f"{mean:.2f} against K n / N = {len(carriers) * n / N:.2f}")
        assert abs(share - k["p"]) <= 5 * se
        assert abs(mean - len(carriers) * n / N) < 0.05

if __name__ == "__main__":
    from run_exercises import main   # beside this file: the runner every solution file shares
    main(globals(), sys.argv[1:])
