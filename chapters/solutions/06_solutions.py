"""Solutions to the exercises of chapter 6 (pruning all attention types). Run from the repository root:

    python chapters/solutions/06_solutions.py               # every exercise
    python chapters/solutions/06_solutions.py exercise_2    # one of them

Hand-made pruning runs and a tiny untrained model only; every exercise ends with asserts that check its result.
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repository root

from minihead import findings, model
from minihead import prune as P
from minihead.backend import xp
from minihead.model import GATE_KINDS

# the quick preset's shape: 3 encoder and 2 decoder layers of 2 heads
CFG = model.Config(vocab_size=10, n_enc_layers=3, n_dec_layers=2, n_heads=2, d_model=8, d_ff=16)
TINY = dict(max_steps=5, eval_every=3, d_model=16, n_heads=2, d_ff=16, n_train=60, dev_bleu_sentences=4)


def made_up_run(retained):
    """A run dict as prune_study stores it, from retained masks (kind -> nested lists of bools)."""
    masks = {k: xp.asarray(v) for k, v in retained.items()}
    return {"retained": masks, "n_retained": {k: int(m.sum()) for k, m in masks.items()}}


def exercise_1():
    """Which type goes first, read from a run's log: half_closed_step finds the first logged step at which at
    most half of a type's heads are open, and encoder_closes_first asks that no type get there before the
    encoder. Build two logs, one where the encoder gets there first and one where decoder self-attention does."""
    def log(opens):
        return [{"step": 25 * (i + 1), "open": dict(zip(GATE_KINDS, o))} for i, o in enumerate(opens)]
    #                        enc dec_self dec_enc  (of 6, 4, 4 heads)
    enc_first = log([(6, 4, 4), (3, 4, 4), (2, 2, 4), (1, 2, 3)])
    dec_first = log([(6, 4, 4), (5, 2, 4), (3, 2, 4), (2, 1, 3)])
    run_a, run_b = {"history": enc_first}, {"history": dec_first}
    holds_a, steps_a = findings.encoder_closes_first(run_a, CFG)
    holds_b, steps_b = findings.encoder_closes_first(run_b, CFG)
    print(f"encoder first: {holds_a} {steps_a}\ndecoder self-attention first: {holds_b} {steps_b}")
    assert holds_a and steps_a == {"enc": 50, "dec_self": 75, "dec_enc": None}
    assert not holds_b and steps_b == {"enc": 75, "dec_self": 50, "dec_enc": None}
    assert findings.half_closed_step(enc_first, "dec_enc", 4) is None


def exercise_2():
    """Where heads survive (sec. 8): the mean layer of a type's survivors, against the middle of the decoder
    ((2 - 1) / 2 = 0.5 here). A run that keeps decoder self-attention heads in layer 0 and decoder-encoder heads
    in layer 1 shows the paper's pattern; the mirror image does not. type_order_holds asks enc <= dec_self <=
    dec_enc in share of heads kept."""
    paper_like = made_up_run({"enc": [[1, 0], [0, 0], [0, 1]], "dec_self": [[1, 1], [0, 0]],
                              "dec_enc": [[1, 0], [1, 1]]})
    mirror = made_up_run({"enc": [[1, 1], [1, 1], [1, 1]], "dec_self": [[0, 0], [1, 1]],
                          "dec_enc": [[1, 1], [0, 1]]})
    a, b = findings.survivor_layers(paper_like, CFG), findings.survivor_layers(mirror, CFG)
    print(f"paper-like: {a}, shares {findings.retained_shares(paper_like, CFG)}\nmirror: {b}")
    assert a == [("dec_self", 0.0, True), ("dec_enc", 2 / 3, True)]
    assert [holds for _, _, holds in b] == [False, False]
    assert findings.type_order_holds(paper_like, CFG) and not findings.type_order_holds(mirror, CFG)
    assert findings.mean_layer(xp.zeros((2, 2))) == 0.0                      # no survivors: layer 0 by convention


def exercise_3():
    """Table 2's verdict, pooled: findings.pruned_beats_scratch takes one seed's configurations, and
    findings.summarize judges the mean pruned - from-scratch gap over every configuration of every seed by its 95%
    t-interval (holds when the interval lies above 0). Feed it made-up BLEU for two seeds of two configurations and
    check three outcomes: a small steady gain holds; a larger mean gain that swings from seed to seed does not (the
    interval spans 0); a single configuration is untestable (no interval from one pair)."""
    def judge(*seeds):
        return findings.summarize([{"pruned_vs_scratch": findings.pruned_beats_scratch(p, s)} for p, s in seeds])[
            "pruned_vs_scratch"]
    steady = judge(([30.3, 28.2], [30.0, 28.0]), ([25.4, 27.25], [25.0, 27.0]))
    swings = judge(([33.0, 26.0], [30.0, 28.0]), ([29.0, 25.0], [25.0, 27.0]))
    single = judge(([30.0], [29.0],))
    for name, v in (("steady", steady), ("swings", swings), ("single", single)):
        print(f"{name:6s}: {v['status']:14s} {findings.study_text('pruned_vs_scratch', v)}")
    assert steady["status"] == "holds" and steady["pooled"]["low"] > 0
    assert swings["status"] == "does not hold" and swings["pooled"]["gap"] > steady["pooled"]["gap"]
    assert swings["pooled"]["low"] < 0 < swings["pooled"]["high"]
    assert single["status"] == "untestable"


def exercise_4():
    """Gates on every attention type of a tiny untrained model (the test suite's tiny settings on data_small/,
    weights frozen, 40 steps): lambda 0 keeps every head of every type, lambda 1 closes them all, and the run's
    log counts the open heads of each of the three types (what chapter 6's "which type goes first" plot reads)."""
    from minihead.study import prepare
    _, _, corpus, cfg, _ = prepare("quick", str(ROOT / "data_small"), **TINY)
    params = model.init_params(cfg, seed=0)
    for lam, want_all in ((0.0, True), (1.0, False)):
        r = P.prune(params, cfg, corpus, kinds=GATE_KINDS, lam=lam, steps=40,
                    settings=P.PruneSettings(lr_params=0.0, settle=None, log_every=20))
        run = {"retained": r.retained, "n_retained": {k: int(m.sum()) for k, m in r.retained.items()}}
        shares = findings.retained_shares(run, cfg)
        print(f"lambda {lam}: shares kept {shares}; log {[h['open'] for h in r.history]}")
        assert set(r.history[-1]["open"]) == set(GATE_KINDS)
        assert all(s == (1.0 if want_all else 0.0) for s in shares.values()), shares


if __name__ == "__main__":
    from run_exercises import main   # beside this file: the runner every solution file shares
    main(globals(), sys.argv[1:])
