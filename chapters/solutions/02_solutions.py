"""Solutions to the exercises of chapter 2 (head importance with LRP). Run from the repository root:

    python chapters/solutions/02_solutions.py               # every exercise
    python chapters/solutions/02_solutions.py exercise_2    # one of them

Small float64 inputs and a tiny random model only; every exercise ends with asserts that check its result.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))   # the repository root

from minihead import backend, importance, lrp, model
from minihead.backend import xp
from minihead.data.vocab import make_batch

F64 = "float64"


def tiny():
    """The chapter's tiny float64 model (2 + 2 layers, 2 heads, d_model 8) with random LayerNorm gains and
    biases, and one padded batch of two sentence pairs."""
    cfg = model.Config(vocab_size=20, n_enc_layers=2, n_dec_layers=2, n_heads=2, d_model=8, d_ff=16,
                       dropout=0.0, dtype=F64)
    gen = backend.rng(0)
    theta = model.init_params(cfg, seed=0)
    for k in theta:
        last = k.split(".")[-1]
        if last == "g":
            theta[k] = theta[k] + backend.to_device(gen.normal(0, 0.3, theta[k].shape), F64)
        elif last in ("b", "bq", "bk", "bv", "bo", "b1", "b2"):
            theta[k] = theta[k] + backend.to_device(gen.normal(0, 0.1, theta[k].shape), F64)
    batch = make_batch([[5, 6, 7, 8], [9, 10, 11]], [[12, 13, 14], [15, 16, 17, 18, 19]], [0, 1])
    return cfg, theta, batch


def exercise_1():
    """Where the epsilon rule's relevance goes: with eps = 0, sum_i R_i = sum_j R_j (z_j - b_j) / z_j, so the
    bias keeps sum_j R_j b_j / z_j; the z-rule (bias not an input) conserves exactly."""
    gen = backend.rng(3)
    x = backend.to_device(gen.normal(size=(3, 5)), F64)          # (N, din)
    W = backend.to_device(gen.normal(size=(5, 4)), F64)          # (din, dout)
    b = backend.to_device(gen.normal(size=4), F64) * 0.3         # (dout,)
    R = backend.to_device(gen.normal(size=(3, 4)), F64)          # (N, dout)
    z = x @ W + b                                                # (N, dout)
    R_eps = lrp.linear_epsilon(x, W, b, None, R, 0.0)
    predicted = float((R * (z - b) / z).sum())
    kept_by_bias = float((R * b / z).sum())
    print(f"sum R_out {float(R.sum()):+.6f}; epsilon rule: sum R_in {float(R_eps.sum()):+.6f}, predicted "
          f"{predicted:+.6f} (the bias kept {kept_by_bias:+.6f}); z-rule: {float(lrp.linear_z(x, W, b, None, R).sum()):+.6f}")
    assert abs(float(R_eps.sum()) - predicted) < 1e-9
    assert abs(float(R_eps.sum()) + kept_by_bias - float(R.sum())) < 1e-9
    assert abs(float(lrp.linear_z(x, W, b, None, R).sum()) - float(R.sum())) < 1e-9


def exercise_2():
    """Head relevance is a share: on the tiny model, importance.head_relevance with magnitude shares
    (normalise="abs") gives, for every attention type, rows (layers) that sum to 1 with every entry in [0, 1];
    the official variant's shares do too; the signed z-rule shares also sum to 1 per layer, but here some fall
    outside [0, 1]. Confidence lies between 0 and 1."""
    cfg, theta, batch = tiny()
    for name, opts in (("z-rule, magnitude", {"normalise": "abs"}), ("official", {"rules": lrp.Rules(linear="official")}),
                       ("z-rule, signed", {})):
        rel = importance.head_relevance(theta, cfg, [batch], **opts)
        for k in importance.KINDS:
            print(f"{name:18s} {k:8s} rows {xp.round(rel[k], 3).tolist()}")
            assert bool(xp.allclose(rel[k].sum(-1), 1.0)), (name, k)
            if name != "z-rule, signed":
                assert bool(xp.all(rel[k] >= 0)) and bool(xp.all(rel[k] <= 1)), (name, k)
        if name == "z-rule, signed":          # on this model some signed share falls outside [0, 1]
            assert any(bool(xp.any((rel[k] < 0) | (rel[k] > 1))) for k in importance.KINDS)
    conf = importance.head_confidence(theta, cfg, [batch])
    assert all(bool(xp.all((conf[k] > 0) & (conf[k] <= 1))) for k in importance.KINDS)


def exercise_3():
    """Spearman's rho by hand: the Pearson correlation of average ranks (ties share their mean rank), against
    importance.rank_agreement; rho = 1 for a monotone transform, -1 for a reversal; and top_quarter_share of
    equal scores is uniform_top_quarter_share."""
    a = xp.asarray([0.1, 0.4, 0.4, 0.2, 0.9, 0.0])
    b = xp.asarray([1.0, 3.0, 2.0, 2.0, 5.0, 0.5])
    ra = importance.average_ranks(a)
    assert ra.tolist() == [2.0, 4.5, 4.5, 3.0, 6.0, 1.0], ra        # the two 0.4s share ranks 4 and 5
    rb = importance.average_ranks(b)
    da, db = ra - ra.mean(), rb - rb.mean()
    by_hand = float((da * db).sum() / xp.sqrt((da * da).sum() * (db * db).sum()))
    rho = importance.rank_agreement(a, b)
    print(f"rho by hand {by_hand:+.4f}, rank_agreement {rho:+.4f}")
    assert abs(rho - by_hand) < 1e-12
    assert abs(importance.rank_agreement(a, xp.exp(a)) - 1) < 1e-12
    assert abs(importance.rank_agreement(a, -a) + 1) < 1e-12
    for H in (2, 4, 8):
        even = xp.full((3, H), 1.0 / H)
        assert bool(xp.allclose(importance.top_quarter_share(even), importance.uniform_top_quarter_share(H)))


def exercise_4():
    """Michel et al.'s importance is |dL/d xi_h| at gates xi = 1: the hand-written gate gradient of
    model.loss_and_grads against central differences of the loss in each encoder gate, and
    importance.michel_importance on one batch equal to |dL/d xi| divided by each layer's L2 norm."""
    from minihead.gradcheck import numerical_grad, rel_error
    cfg, theta, batch = tiny()
    gates = {k: xp.ones((cfg.n_layers(k), cfg.n_heads), dtype=F64) for k in importance.KINDS}
    _, _, info = model.loss_and_grads(theta, cfg, batch, gates=gates)
    for k in importance.KINDS:
        num = numerical_grad(lambda: float(model.loss_forward(theta, cfg, batch, gates=gates)[0]), gates[k])
        err = rel_error(info["dgates"][k], num)
        print(f"{k:8s} dL/d gate {xp.round(info['dgates'][k], 4).tolist()}, vs central differences {err:.1e}")
        assert err < 1e-6, (k, err)
        m = xp.abs(info["dgates"][k])
        want = m / xp.sqrt((m * m).sum(-1, keepdims=True))
        got = importance.michel_importance(theta, cfg, [batch])[k]
        assert bool(xp.allclose(got, want, atol=1e-12)), k


def exercise_5():
    """Who carries the need damage: from the shipped head x need study (chapters/studies/needs.json), each
    head's markers lost recomputed by hand, sum over needs of drop x count, equal to needs.markers_lost; the heads
    needs.carriers names carry at least 80% of the positive total, and without the last of them less than 80%."""
    from minihead import needs
    from minihead.study import load_needs
    doc = load_needs()
    for p in doc["per_seed"]:
        m = p["matrix"]
        by_hand = [[sum((cell[n] or 0.0) * m["count"][n] for n in m["needs"]) for cell in row] for row in m["single"]]
        assert by_hand == needs.markers_lost(m)
        lost = {f"L{l}H{h}": x for l, row in enumerate(by_hand) for h, x in enumerate(row)}
        total = sum(x for x in lost.values() if x > 0)
        names = [name for name, _ in needs.carriers(m, 0.8)]
        print(f"seed {p['seed']}: {len(names)} of {len(lost)} heads carry 80% of {total:.0f} markers lost: "
              + ", ".join(names))
        assert sum(lost[n] for n in names) >= 0.8 * total
        assert not names or sum(lost[n] for n in names[:-1]) < 0.8 * total


if __name__ == "__main__":
    from run_exercises import main   # beside this file: the runner every solution file shares
    main(globals(), sys.argv[1:])
