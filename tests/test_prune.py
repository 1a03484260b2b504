"""Pruning with hard-concrete gates (minihead/prune.py) on a tiny toy model: the pruning objective's gradient,
gates closing with lambda, the frozen decoder, determinism, test-time gates, the cache, from-scratch masks."""
import json
import os
import random
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from minihead import backend, checkpoint, model
from minihead import findings
from minihead import cli, commands, stages
from minihead import prune as P
from minihead.stages import CacheError
from minihead.data.vocab import batches
from minihead.gates import HardConcrete
from minihead.gradcheck import numerical_grad, rel_error
from minihead.train import Corpus, preset, train

STEPS = 60          # pruning steps in these tests: lr_gates 0.1 moves log_alpha ~0.1 a step, +3 -> -2.4 in ~55


def toy_pairs(n, seed):
    """Reversal with a case change (as tests/test_train.py's toy corpus)."""
    r = random.Random(seed)
    words = [f"w{i}" for i in range(30)]

    def pair():
        s = [r.choice(words) for _ in range(r.randint(3, 7))]
        return s, [w.upper() for w in reversed(s)]
    return [pair() for _ in range(n)]


def tiny_cfg(corpus, **kw):
    kw = {"max_steps": 30, "eval_every": 30, "max_tokens": 600, "warmup": 10, "dev_bleu_sentences": 20,
          "patience": 100, "n_enc_layers": 2, "n_dec_layers": 1, "d_model": 16, "d_ff": 32,
          "n_heads": 4, "dropout": 0.1, "lr": 5e-3, **kw}   # 4 heads a layer, as the masks below are written
    return preset("quick", len(corpus.vocab), **kw)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A Study-like namespace around a toy model trained for 30 steps (what sweep / from_scratch read)."""
    folder = tmp_path_factory.mktemp("toy_study")
    corpus = Corpus.build(toy_pairs(600, 0), toy_pairs(30, 1))
    cfg, tcfg = tiny_cfg(corpus)
    res = train(corpus, cfg, tcfg, str(folder), progress=False)
    test = toy_pairs(20, 2)
    return SimpleNamespace(name="toy", params=res.params, cfg=cfg, vocab=corpus.vocab, corpus=corpus,
                           splits={"test": ([s for s, _ in test], [t for _, t in test])},
                           history=res.history, path=res.best_path)


def run(study, kinds="enc", lam=0.05, steps=STEPS, **kw):
    settings = P.PruneSettings(**{"max_tokens": 600, "log_every": 20, **kw})
    return P.prune(study.params, study.cfg, study.corpus, kinds, lam, steps, settings)


# ------------------------------------------------------------------ the objective's gradient
@pytest.mark.parametrize("reduction", ["sum", "layer_mean"])
def test_pruning_objective_gradient_matches_central_differences(study, reduction):
    """dJ/dlog_alpha for J = CE(model with g = clip(sigmoid((logit u + log_alpha)/beta)(zeta-gamma)+gamma, 0, 1))
    + lambda * L_C, L_C = sum (or layer mean) of sigmoid(log_alpha - beta log(-gamma/zeta)), every kind gated;
    float64, no dropout, u = 0.5 and |log_alpha| < 0.6 so that no gate is clipped (the derivative is smooth)."""
    cfg = replace(study.cfg, dtype="float64")
    params = model.init_params(cfg, seed=3)
    c = study.corpus
    batch = next(batches([c.vocab.encode(s) for s in c.train_src[:6]], [c.vocab.encode(t) for t in c.train_tgt[:6]],
                         10_000))
    gen = backend.rng(4)
    la = {k: gen.uniform(-0.6, 0.6, (cfg.n_layers(k), cfg.n_heads)) for k in model.GATE_KINDS}  # kind -> (L, H)
    u = {k: np.full_like(v, 0.5) for k, v in la.items()}
    lam = 0.3

    def J():
        ce, l0, _, _ = P.gated_loss_and_grads(params, cfg, batch, la, u, lam, reduction)
        return float(ce) + lam * float(l0)

    _, _, _, dla = P.gated_loss_and_grads(params, cfg, batch, la, u, lam, reduction)
    for k in model.GATE_KINDS:
        assert dla[k].shape == la[k].shape and dla[k].dtype == np.float64
        assert rel_error(dla[k], numerical_grad(J, la[k])) < 1e-6, k


# ------------------------------------------------------------------ gates and lambda
def test_more_lambda_closes_more_gates(study):
    """Retained encoder heads fall as lambda grows (same seed, same steps); the largest lambda prunes most."""
    n = [int(run(study, "enc", lam).retained["enc"].sum()) for lam in (0.003, 0.03, 1.0)]
    assert n[0] >= n[1] >= n[2], n
    assert n[2] < n[0], n
    assert n[2] <= 1, n


def test_lambda_zero_keeps_every_gate(study):
    """Without the penalty nothing pushes the gates shut: after the same steps every head is retained
    and no log_alpha went below the pruning threshold log(-gamma/zeta) = -2.4."""
    r = run(study, "all", 0.0)
    for k in model.GATE_KINDS:
        assert r.retained[k].all(), k
        assert float(r.log_alpha[k].min()) > 0.0, k
    assert all(h["open"] == {k: 4 * study.cfg.n_layers(k) for k in model.GATE_KINDS} for h in r.history)


def test_encoder_pruning_freezes_decoder_and_shared_embedding(study):
    """kinds=("enc",): every decoder weight and the shared embedding are bit for bit unchanged; the
    encoder weights did change (so the check can fail). All-attention pruning changes the decoder."""
    r = run(study, "enc", 0.05)
    frozen = [k for k in study.params if not k.startswith("enc")]
    assert "emb" in frozen and "dec0.self.Wq" in frozen
    assert sorted(r.trained) == sorted(k for k in study.params if k.startswith("enc"))
    for k in frozen:
        assert np.array_equal(r.params[k], study.params[k]), k
    assert not np.array_equal(r.params["enc0.self.Wq"], study.params["enc0.self.Wq"])
    r_all = run(study, "all", 0.05, steps=5)
    assert not np.array_equal(r_all.params["dec0.cross.Wq"], study.params["dec0.cross.Wq"])


def test_same_seed_same_numbers(study):
    """Same seed: identical log_alpha, weights and history; another seed: other gates (the check can fail)."""
    a, b, c = run(study, "all", 0.05, seed=7), run(study, "all", 0.05, seed=7), run(study, "all", 0.05, seed=8)
    for k in model.GATE_KINDS:
        assert np.array_equal(a.log_alpha[k], b.log_alpha[k])
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert a.history == b.history
    assert any(not np.array_equal(a.log_alpha[k], c.log_alpha[k]) for k in model.GATE_KINDS), "seed matters"


def test_test_time_gates_are_the_retained_masks(study):
    """Default (paper, sec. 6.1) test-time gates are binary: 1 iff P(g=1) >= P(g=0), i.e. log_alpha >= 0;
    retained = gate 1. The official code's continuous gates clip(sigmoid(log_alpha) 1.2 - 0.1, 0, 1) come beside
    them (retained_continuous = gate > 0, a superset of the binary survivors). Pruned heads are exactly 0, and
    translating with the gates equals translating with the same zeros written by hand."""
    from minihead.translate import translate
    r = run(study, "all", 0.1)
    hc = HardConcrete()
    n_pruned = 0
    for k in model.GATE_KINDS:
        g = backend.to_host(r.gates[k])
        la = backend.to_host(r.log_alpha[k])
        np.testing.assert_array_equal(g, (la >= 0).astype(g.dtype))
        np.testing.assert_array_equal(r.retained[k], g > 0)
        gc = backend.to_host(r.gates_continuous[k])
        np.testing.assert_array_equal(gc, backend.to_host(hc.test_gate(r.log_alpha[k])))
        np.testing.assert_array_equal(r.retained_continuous[k], gc > 0)
        assert np.all(r.retained_continuous[k][r.retained[k]])
        assert np.all(g[~r.retained[k]] == 0.0)
        n_pruned += int((~r.retained[k]).sum())
    assert n_pruned > 0, "lambda 0.1 prunes something, else the check is empty"
    src = study.splits["test"][0][:8]
    by_hand = {k: np.where(r.retained[k], backend.to_host(r.gates[k]), 0.0).astype(study.cfg.dtype)
               for k in model.GATE_KINDS}
    assert translate(r.params, study.cfg, study.vocab, src, gates=r.gates) == \
        translate(r.params, study.cfg, study.vocab, src, gates=by_hand)


def test_bad_settings_raise_clear_errors(study):
    """Unknown kinds, repeated kinds, a negative lambda, a settle share outside (0, 1] and an unknown readout are
    refused with a message naming the setting."""
    with pytest.raises(P.PruneError, match="kinds 'dec'"):
        P.check_kinds("dec")
    with pytest.raises(P.PruneError, match="distinct attention types"):
        P.check_kinds(("enc", "enc"))
    with pytest.raises(P.PruneError, match="lambda >= 0"):
        run(study, "enc", -1.0)
    with pytest.raises(P.PruneError, match="settle"):
        run(study, "enc", 0.1, settle=1.5)
    with pytest.raises(P.PruneError, match="readout 'soft'"):
        P.deterministic_gates({"enc": np.zeros((1, 2))}, readout="soft")


def test_pruning_stops_once_the_gates_settle(study):
    """settle=0.9: the run stops at the first logged step where >= 90% of gates have max(P(g=0), P(g=1)) > 0.95
    (each logged step records that share, recomputed here from log_alpha); with a large lambda that is before
    the cap, and the same run with settle=None goes on to the cap. A cap too short to settle reports
    settled=False with the share it reached."""
    from minihead.gates import settled_share
    r = run(study, "enc", 1.0, steps=200)
    assert r.settled and r.steps_used < 200 and r.steps_used % 20 == 0
    assert r.settled_share >= 0.9 and r.history[-1]["settled"] == r.settled_share
    assert r.settled_share == settled_share(r.log_alpha)
    assert all(h["settled"] < 0.9 for h in r.history[:-1])
    full = run(study, "enc", 1.0, steps=200, settle=None)
    assert full.steps_used == 200 and full.history[-1]["step"] == 200
    short = run(study, "enc", 1.0, steps=20)
    assert not short.settled and short.steps_used == 20 and short.settled_share < 0.9


def test_finetune_fixes_the_settled_gates_and_spends_the_whole_budget(study):
    """finetune=True (the paper's order, sec. 6.1-6.2: prune a converged model, then train on): the gate phase is
    the plain run's, step for step (same log_alpha, same settle step), then the weights train with the binary
    gates FIXED up to the cap, so steps_used == steps for every lambda and the lambda = 0 run is the step-matched
    reference. Encoder pruning still leaves the decoder untouched; the fine-tuned weights differ from the plain
    run's; the same seed gives the same numbers."""
    plain = run(study, "enc", 1.0, steps=200)
    tuned = run(study, "enc", 1.0, steps=200, finetune=True)
    assert plain.settled and plain.steps_used < 200
    assert tuned.gate_steps == plain.steps_used and tuned.steps_used == 200
    np.testing.assert_array_equal(tuned.log_alpha["enc"], plain.log_alpha["enc"])
    np.testing.assert_array_equal(tuned.gates["enc"], plain.gates["enc"])
    assert [h["step"] for h in tuned.finetune_history][-1] == 200
    assert tuned.finetune_history[0]["step"] > plain.steps_used
    assert any(not np.array_equal(tuned.params[n], plain.params[n]) for n in tuned.trained)
    for n in study.params:
        if n not in tuned.trained:
            np.testing.assert_array_equal(tuned.params[n], study.params[n])
    again = run(study, "enc", 1.0, steps=200, finetune=True)
    assert all(np.array_equal(again.params[n], tuned.params[n]) for n in tuned.params)
    zero = run(study, "enc", 0.0, steps=200, finetune=True)
    assert zero.steps_used == 200 and bool(zero.retained["enc"].all())


def test_finetune_settings_key_and_reference(study):
    """The cache key of settings without fine-tuning is the key they had before the field existed (no
    "finetune" in it); with it the key differs. A fine-tuned sweep's reference is its own lambda = 0 run, and a
    sweep without lambda 0 is refused; fine-tuning needs a settle share and weights to train."""
    assert "finetune" not in P.PruneSettings().to_dict()
    assert P.PruneSettings(finetune=True).to_dict()["finetune"] is True
    runs = [{"lam": 0.0, "bleu": 50.0, "kinds": ["enc"]}, {"lam": 0.1, "bleu": 40.0, "kinds": ["enc"]}]
    ft = P.PruneSettings(finetune=True)
    assert [r["ref_bleu"] for r in stages.with_reference(study, runs, ft)] == [50.0, 50.0]
    with pytest.raises(P.PruneError, match="include lambda 0"):
        stages.with_reference(study, runs[1:], ft)
    with pytest.raises(P.PruneError, match="finetune"):
        run(study, "enc", 0.1, settle=None, finetune=True)
    with pytest.raises(P.PruneError, match="trains none"):
        run(study, "enc", 0.1, train_params="none", finetune=True)


def test_joint_optimiser_moves_gates_at_the_weights_rate(study):
    """lr_gates=None is the official code's joint optimiser: log_alpha takes Adam steps at lr_params, so in 20
    steps it moves at most ~20 x 1e-3 from its start at 3 (Adam moves each parameter by about lr a step), while
    the separate rate 0.1 moves it by more than 1 in the same steps."""
    joint = run(study, "enc", 0.5, steps=20, lr_gates=None, settle=None)
    sep = run(study, "enc", 0.5, steps=20, settle=None)
    assert float(np.abs(joint.log_alpha["enc"] - 3.0).max()) < 20 * 1e-3 * 1.5
    assert float(np.abs(sep.log_alpha["enc"] - 3.0).max()) > 1.0


# ------------------------------------------------------------------ cache
def test_sweep_cache_hit_returns_same_numbers_without_recomputing(study, tmp_path, monkeypatch):
    """A second sweep with the same settings reads every point from its cache file (prune is not called); any
    changed setting is a new key; naming a default explicitly is the same key. Each point records both
    readouts, the settled share and the steps used."""
    first = stages.sweep(study, [0.01, 0.5], "enc", steps=20, cache_dir=str(tmp_path), n_test=10, progress=False,
                  settings=P.PruneSettings.of(max_tokens=600))
    assert [r["cached"] for r in first] == [False, False]
    for r in first:
        assert {"bleu_continuous", "n_retained_continuous", "settled_share", "steps_used", "settled"} <= set(r)
        assert r["n_retained_continuous"]["enc"] >= r["n_retained"]["enc"] and 1 <= r["steps_used"] <= 20
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 2 and all(n.startswith("prune-enc-") for n in names), names

    def boom(*a, **k):
        raise AssertionError("recomputed although cached")
    monkeypatch.setattr(P, "prune", boom)
    again = stages.sweep(study, [0.01, 0.5], "enc", steps=20, cache_dir=str(tmp_path), n_test=10, progress=False,
                  settings=P.PruneSettings.of(max_tokens=600))
    assert [r["cached"] for r in again] == [True, True]
    for a, b in zip(first, again):
        assert {k: v for k, v in a.items() if k != "cached"} == {k: v for k, v in b.items() if k != "cached"}
    # any other setting is another key: it must recompute (and here hits the stub)
    with pytest.raises(AssertionError, match="recomputed"):
        stages.sweep(study, [0.01], "enc", steps=21, cache_dir=str(tmp_path), n_test=10, progress=False,
                  settings=P.PruneSettings.of(max_tokens=600))
    with pytest.raises(AssertionError, match="recomputed"):
        stages.sweep(study, [0.01], "enc", steps=20, cache_dir=str(tmp_path), n_test=10, progress=False,
                  settings=P.PruneSettings.of(max_tokens=600, lr_gates=0.2))
    # naming a setting at its default value is the same key (the key holds the defaults): a hit
    hit = stages.sweep(study, [0.01], "enc", steps=20, cache_dir=str(tmp_path), n_test=10, progress=False,
                  settings=P.PruneSettings.of(max_tokens=600, lr_gates=0.1, reduction="sum"))
    assert hit[0]["cached"] and hit[0]["bleu"] == first[0]["bleu"]
    with pytest.raises(P.PruneError, match="unknown pruning settings"):
        stages.sweep(study, [0.01], "enc", steps=20, cache_dir=str(tmp_path), progress=False,
                  settings=P.PruneSettings.of(lr_gate=0.2))


def test_prune_study_measures_every_after_and_keys_one_as_before(study, tmp_path):
    """prune_study(after=...): one (name, settings, measure) is keyed as [name, settings] (the key runs cached before
    several measures existed still match); a list measures each on the pruned model and stores each under its
    name, and keys all of their names and settings."""
    seen = []
    one = ("a", {"k": 1}, lambda p, g, r: seen.append("a") or {"x": 1})
    two = ("b", {"k": 2}, lambda p, g, r: seen.append("b") or {"y": int(r["enc"].sum())})
    st = P.PruneSettings(max_tokens=600, log_every=20)
    r1 = stages.prune_study(study, "enc", 0.05, 20, st, n_test=4, cache_dir=str(tmp_path), after=one)
    r2 = stages.prune_study(study, "enc", 0.05, 20, st, n_test=4, cache_dir=str(tmp_path), after=[one, two])
    assert r1["a"] == {"x": 1} and "b" not in r1
    assert r2["a"] == {"x": 1} and r2["b"] == {"y": r2["n_retained"]["enc"]} and seen == ["a", "a", "b"]
    keys = [json.loads(f.read_text())["key"]["after"] for f in sorted(tmp_path.glob("prune-*.json"))]
    assert sorted(map(json.dumps, keys)) == sorted(map(json.dumps, [["a", {"k": 1}], [["a", {"k": 1}], ["b", {"k": 2}]]]))


def test_unreadable_cache_file_names_the_file(study, tmp_path):
    """A cache file that is not JSON is an error naming the file, not a silent recompute."""
    key = {**stages.study_key(study, 5), "what": "baseline"}
    path = tmp_path / f"prune-baseline-{stages.key_hash(key)}.json"
    path.write_text("{ not json")
    with pytest.raises(CacheError, match="prune-baseline-.*does not parse"):
        stages.baseline(study, n_test=5, cache_dir=str(tmp_path))


# ------------------------------------------------------------------ from scratch
def test_from_scratch_training_uses_the_masks(study, tmp_path):
    """Training from scratch with 0/1 gates: a pruned head's slices of Wq, Wk, Wv (columns) and Wo (rows) get
    zero gradient, so Adam never moves them from their initial values; a retained head's slices do move.
    A second call is a cache hit."""
    retained = {"enc": np.array([[True, False, True, True], [True, True, True, False]]),
                "dec_enc": np.array([[False, True, True, True]])}
    r = stages.from_scratch(study, retained, steps=12, n_test=5, cache_dir=str(tmp_path))
    assert not r["cached"] and r["steps"] == 12
    run_dirs = [n for n in os.listdir(tmp_path) if n.startswith("scratch-") and not n.endswith(".json")]
    best = checkpoint.load(str(tmp_path / run_dirs[0] / "best.npz"))
    init = model.init_params(study.cfg, seed=checkpoint.load(study.path).meta["train"]["seed"])
    dh = study.cfg.d_model // study.cfg.n_heads

    def moved(name, l_prefix, h):
        cols = slice(h * dh, (h + 1) * dh)
        out = []
        for w in ("Wq", "Wk", "Wv"):
            out.append(not np.array_equal(best.params[f"{l_prefix}.{w}"][:, cols], init[f"{l_prefix}.{w}"][:, cols]))
        out.append(not np.array_equal(best.params[f"{l_prefix}.Wo"][cols], init[f"{l_prefix}.Wo"][cols]))
        return out
    assert moved("enc", "enc0.self", 1) == [False] * 4
    assert moved("enc", "enc1.self", 3) == [False] * 4
    assert moved("dec_enc", "dec0.cross", 0) == [False] * 4
    assert all(moved("enc", "enc0.self", 0)) and all(moved("dec_enc", "dec0.cross", 1))
    assert [h["step"] for h in r["history"]] == [12], "one dev evaluation, at the end (the final model is scored)"
    assert stages.scratch_budget(study, 100) == study.history[-1]["step"] + 100
    assert stages.scratch_budget(study, 100, prune_max_tokens=300) == study.history[-1]["step"] + 50  # study: 600 tokens
    again = stages.from_scratch(study, retained, steps=12, n_test=5, cache_dir=str(tmp_path))
    assert again["cached"] and again["bleu"] == r["bleu"]


def test_scratch_twin_needs_no_base_and_is_the_entry_from_scratch_reads(tmp_path):
    """stages.scratch_twin(preset, mask, steps, **overrides) trains a from-scratch twin from what study.prepare
    builds, before any base model exists, into the run folder the base will have; the base trained afterwards
    (study.load_study) finds it: from_scratch(base, mask, steps) is a cache hit with the same BLEU and history.
    The key names what the twin depends on and no base model: a study with other weights but the same settings
    and text hits the same entry; other test pairs or another mask miss it."""
    from minihead import study as S
    runs = str(tmp_path / "runs")
    tiny = dict(max_steps=4, eval_every=2, d_model=16, n_heads=2, d_ff=16, n_train=60, dev_bleu_sentences=4)
    cfg = S.prepare("quick", **tiny)[3]
    mask = {"enc": [[True, h == 0] for h in range(cfg.n_layers("enc"))]}   # layer l: head 1 pruned, except l = 0
    twin = stages.scratch_twin("quick", mask, 3, runs=runs, n_test=5, **tiny)
    assert not twin["cached"] and twin["steps"] == 3 and twin["retained"] == mask
    assert not os.path.exists(os.path.join(S.run_folder("quick", runs=runs, **tiny), "best.npz")), "no base yet"
    base = S.load_study("quick", runs=runs, progress=False, **tiny)
    hit = stages.from_scratch(base, {"enc": np.array(mask["enc"])}, 3, n_test=5)
    assert hit["cached"] and hit["bleu"] == twin["bleu"] and hit["history"] == twin["history"]
    other_weights = SimpleNamespace(**{**base.__dict__, "params": model.init_params(base.cfg, seed=99)})
    assert stages.from_scratch(other_weights, mask, 3, n_test=5)["cached"]
    src, ref = base.splits["test"]
    other_test = SimpleNamespace(**{**base.__dict__, "splits": {**base.splits, "test": (src[1:], ref[1:])}})
    assert not stages.from_scratch(other_test, mask, 3, n_test=5)["cached"]
    flipped = {"enc": [[not a, not b] for a, b in mask["enc"]]}
    assert not stages.scratch_twin("quick", flipped, 3, runs=runs, n_test=5, **tiny)["cached"]


def test_from_scratch_to_the_plateau_trains_as_the_study_model_was(study, tmp_path):
    """steps = "plateau": the configuration trained from scratch with the study's own training settings (the same
    evaluations every eval_every steps and the same stopping rule, patience and min_delta), so it is the run
    train() makes with those settings and the fixed gates, step for step; its best dev checkpoint is scored (BLEU
    with the gates on the test pairs), its steps are those trained; a second call is a cache hit, kept apart from
    a fixed budget's. stages.scratch_steps gives a scale's budget: its scratch_steps when set, else the pruned
    model's budget."""
    retained = {"enc": np.array([[True, False, True, True], [True, True, True, False]])}
    cfg, tcfg = tiny_cfg(study.corpus, eval_every=6, patience=2, min_delta=1.0)   # several evaluations, a rule
    base = train(study.corpus, cfg, tcfg, str(tmp_path / "base"), progress=False)
    short = SimpleNamespace(**{**study.__dict__, "params": base.params, "cfg": cfg, "history": base.history,
                               "path": base.best_path})
    r = stages.from_scratch(short, retained, stages.PLATEAU, n_test=5, cache_dir=str(tmp_path))
    gates = P.full_gates(cfg, {"enc": retained["enc"].tolist()})
    twin = train(study.corpus, cfg, tcfg, str(tmp_path / "twin"), progress=False, gates=gates)
    assert r["history"] == twin.history and len(twin.history) >= 2
    assert [h["step"] for h in r["history"]] == [min(6 * (i + 1), 30) for i in range(len(twin.history))]
    assert r["steps"] == twin.history[-1]["step"] and r["best_dev_bleu"] == twin.best_bleu
    best = checkpoint.load(twin.best_path)
    src, ref = study.splits["test"]
    assert r["bleu"] == P.gated_bleu(best.params, cfg, study.vocab, src, ref, gates=gates, n=5)
    again = stages.from_scratch(short, retained, stages.PLATEAU, n_test=5, cache_dir=str(tmp_path))
    assert again["cached"] and again["bleu"] == r["bleu"]
    fixed = stages.from_scratch(short, retained, r["steps"] + 1, n_test=5, cache_dir=str(tmp_path))
    assert not fixed["cached"] and [h["step"] for h in fixed["history"]] == [r["steps"] + 1]
    s = {"scratch_steps": None, "prune_steps": 50, "prune": {"max_tokens": 300}}
    assert stages.scratch_steps(study, s, {"steps_used": 40}) == stages.scratch_budget(study, 40, prune_max_tokens=300)
    assert stages.scratch_steps(study, s, {}) == stages.scratch_budget(study, 50, prune_max_tokens=300)
    assert stages.scratch_steps(study, {**s, "scratch_steps": stages.PLATEAU}, {}) == stages.PLATEAU


# ------------------------------------------------------------------ command line
def test_prune_command_reports_heads_and_bleu(study, tmp_path, capsys):
    """``prune`` on the command line prints retained heads under both readouts, the settled share and BLEU
    before / after, and saves log_alpha beside the pruned weights."""
    data = tmp_path / "data"
    data.mkdir()
    for split, pairs in (("train", list(zip(study.corpus.train_src, study.corpus.train_tgt))),
                         ("dev", list(zip(study.corpus.dev_src, study.corpus.dev_tgt))),
                         ("test", list(zip(*study.splits["test"])))):
        (data / f"{split}.src").write_text("".join(" ".join(s) + "\n" for s, _ in pairs))
        (data / f"{split}.tgt").write_text("".join(" ".join(t) + "\n" for _, t in pairs))
    out = str(tmp_path / "pruned.npz")
    a = cli.build_parser().parse_args(["prune", study.path, "--lambda", "0.5", "--steps", "10", "--data", str(data),
                                       "--n-test", "8", "--out", out])
    r = commands.cmd_prune(a)
    text = capsys.readouterr().out
    assert "enc       per layer" in text and "test BLEU (8 sentences, greedy)" in text
    assert "binary readout" in text and "continuous readout" in text and "gates settled" in text
    ck = checkpoint.load(out)
    np.testing.assert_array_equal(backend.to_host(ck.extra("log_alpha.enc")), backend.to_host(r["result"].log_alpha["enc"]))
    a = cli.build_parser().parse_args(["prune", study.path, "--lambda", "5", "--steps", "150", "--data", str(data),
                                       "--n-test", "8", "--finetune"])
    r = commands.cmd_prune(a)["result"]
    assert r.settled and r.gate_steps < 150 and r.steps_used == 150
    assert "then fine-tuned with the gates fixed to step 150" in capsys.readouterr().out


# --------------------------------------------------------------------------- reading a sweep (chapters 5, 6, report)
def _cfg(n_enc=2, n_dec=3, n_heads=2):
    layers = {"enc": n_enc, "dec_self": n_dec, "dec_enc": n_dec}
    return SimpleNamespace(n_heads=n_heads, n_dec_layers=n_dec, n_layers=lambda k: layers[k])


def _run(retained, history=(), lam=0.1):
    return {"lam": lam, "retained": {k: np.asarray(m, dtype=bool).tolist() for k, m in retained.items()},
            "n_retained": {k: int(np.sum(m)) for k, m in retained.items()}, "history": list(history)}


def test_type_order_and_encoder_first():
    """Order holds iff share(enc) <= share(dec_self) <= share(dec_enc) and share(enc) < share(dec_enc);
    'encoder first' iff enc is the first kind with open <= n/2 in the logged history (ties allowed)."""
    cfg = _cfg()                                             # 4 enc heads, 6 dec_self, 6 dec_enc
    good = _run({"enc": [[0, 1], [0, 0]], "dec_self": [[1, 1], [1, 0], [0, 0]], "dec_enc": [[0, 1], [1, 1], [1, 1]]},
                history=[{"step": 5, "open": {"enc": 3, "dec_self": 5, "dec_enc": 6}},
                         {"step": 10, "open": {"enc": 2, "dec_self": 3, "dec_enc": 6}}])
    assert findings.retained_shares(good, cfg) == {"enc": 0.25, "dec_self": 0.5, "dec_enc": 5 / 6}
    assert findings.type_order_holds(good, cfg)
    assert findings.encoder_closes_first(good, cfg) == (True, {"enc": 10, "dec_self": 10, "dec_enc": None})
    bad = _run({"enc": [[1, 1], [1, 1]], "dec_self": [[1, 1], [1, 0], [0, 0]], "dec_enc": [[1, 1], [1, 1], [1, 1]]},
               history=[{"step": 5, "open": {"enc": 4, "dec_self": 3, "dec_enc": 6}}])
    assert not findings.type_order_holds(bad, cfg)
    assert findings.encoder_closes_first(bad, cfg) == (False, {"enc": None, "dec_self": 5, "dec_enc": None})


def test_survivor_layers_mean_layer_against_the_middle():
    """mean layer = sum_l l * kept_l / sum_l kept_l; dec_self should lie below (L - 1) / 2, dec_enc above; a kind
    that kept all of its heads is not judged."""
    cfg = _cfg()                                             # 3 decoder layers: middle 1
    assert findings.mean_layer([[1, 1], [0, 1], [0, 0]]) == pytest.approx(1 / 3)
    assert findings.mean_layer([[0, 0], [0, 0]]) == 0.0
    run = _run({"enc": [[0, 0], [0, 0]], "dec_self": [[1, 1], [0, 1], [0, 0]], "dec_enc": [[0, 0], [1, 0], [1, 1]]})
    assert findings.survivor_layers(run, cfg) == [("dec_self", pytest.approx(1 / 3), True),
                                           ("dec_enc", pytest.approx(5 / 3), True)]
    flipped = _run({"dec_self": [[0, 0], [1, 0], [1, 1]], "dec_enc": [[1, 1], [1, 1], [1, 1]]})
    assert findings.survivor_layers(flipped, cfg) == [("dec_self", pytest.approx(5 / 3), False)]
