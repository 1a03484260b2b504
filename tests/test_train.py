"""Training, checkpoints and decoding: determinism, exact resume, atomic and pickle-free files."""
import os
import pathlib
import random
import signal
import zipfile

import numpy as np
import pytest

from minihead import checkpoint, model
from minihead.errors import CheckpointError
from minihead.train import Corpus, preset, train
from minihead.translate import translate


def toy_corpus(n=800, seed=0):
    """A reversal task with a case change: enough to see learning in a few dozen steps."""
    r = random.Random(seed)
    words = [f"w{i}" for i in range(30)]

    def pair():
        s = [r.choice(words) for _ in range(r.randint(3, 7))]
        return s, [w.upper() for w in reversed(s)]
    return Corpus.build([pair() for _ in range(n)], [pair() for _ in range(40)])


def tiny(corpus, **kw):
    kw = {"max_steps": 24, "eval_every": 8, "max_tokens": 600, "warmup": 10, "dev_bleu_sentences": 20,
          "patience": 100, "n_enc_layers": 1, "n_dec_layers": 1, "d_model": 16, "d_ff": 32, "dropout": 0.1, **kw}
    return preset("quick", len(corpus.vocab), **kw)   # dropout on (the quick preset has none): resume must restore its generator


@pytest.mark.parametrize("shards", [1, 2])
def test_same_seed_same_numbers(tmp_path, shards):
    """Two runs with one seed agree bit for bit: loss curve, dev BLEU and every weight (with each batch in one
    piece and split in two shards, one of them in a worker process)."""
    c = toy_corpus()
    cfg, tcfg = tiny(c, shards=shards)
    r1 = train(c, cfg, tcfg, str(tmp_path / "a"), progress=False)
    r2 = train(c, cfg, tcfg, str(tmp_path / "b"), progress=False)
    assert r1.history == r2.history and r1.curve == r2.curve and len(r1.curve) == 1
    assert all(np.array_equal(r1.params[k], r2.params[k]) for k in r1.params)
    r3 = train(c, cfg, tiny(c, seed=2, shards=shards)[1], str(tmp_path / "c"), progress=False)
    assert r3.history != r1.history, "a different seed gives different numbers"


@pytest.mark.parametrize("shards", [1, 2])
def test_resume_is_exact(tmp_path, shards):
    """Stopping after 13 steps (mid-epoch, between evaluations) and resuming from last.npz gives the
    same history and weights as an uninterrupted run: weights, Adam moments, step, batch position and
    the dropout generator's state are all checkpointed (with two shards, the shards' dropout seeds are
    drawn from that generator)."""
    c = toy_corpus()
    cfg, tcfg = tiny(c, shards=shards)
    full = train(c, cfg, tcfg, str(tmp_path / "full"), progress=False)
    part = str(tmp_path / "part")
    train(c, cfg, tcfg, part, progress=False, stop_after=13)
    resumed = train(c, cfg, tcfg, part, resume=True, progress=False)
    assert resumed.history == full.history and resumed.curve == full.curve
    assert all(np.array_equal(resumed.params[k], full.params[k]) for k in full.params)


def test_save_every_lets_a_killed_run_resume(tmp_path, monkeypatch):
    """With one dev evaluation at the end (eval_every = max_steps, as for a from-scratch run) and
    save_every = 5, a run killed during step 13 resumes from the step-10 save and ends with the same
    history and weights as an uninterrupted run."""
    import minihead.train as T
    c = toy_corpus()
    cfg, tcfg = tiny(c, eval_every=24)
    full = train(c, cfg, tcfg, str(tmp_path / "full"), progress=False, save_every=5)
    real, calls = T.loss_and_grads, []

    def killed_at_13(*a, **kw):
        calls.append(1)
        if len(calls) == 13:
            raise KeyboardInterrupt
        return real(*a, **kw)
    monkeypatch.setattr(T, "loss_and_grads", killed_at_13)
    part = str(tmp_path / "part")
    with pytest.raises(KeyboardInterrupt):
        train(c, cfg, tcfg, part, progress=False, save_every=5)
    monkeypatch.setattr(T, "loss_and_grads", real)
    assert checkpoint.load(os.path.join(part, "last.npz")).meta["step"] == 10
    resumed = train(c, cfg, tcfg, part, resume=True, progress=False, save_every=5)
    assert resumed.history == full.history and resumed.curve == full.curve and len(full.history) == 1
    assert all(np.array_equal(resumed.params[k], full.params[k]) for k in full.params)


def test_checkpoint_round_trip_without_pickle(tmp_path):
    """save() then load() returns the same config, metadata, vocabulary and bit-identical parameters; the file
    loads with ``allow_pickle=False`` and holds no object arrays; no temporary file is left beside it."""
    c = toy_corpus(200)
    cfg, _ = tiny(c)
    params = model.init_params(cfg, 0)
    path = str(tmp_path / "ck.npz")
    checkpoint.save(path, params, cfg, c.vocab, meta={"step": 3})
    assert os.listdir(tmp_path) == ["ck.npz"], "no temporary file left behind"
    with np.load(path, allow_pickle=False) as z:      # every entry loads without pickle
        assert all(z[k].dtype != object for k in z.files)
    ck = checkpoint.load(path)
    assert ck.cfg == cfg and ck.meta == {"step": 3} and ck.vocab.itos == c.vocab.itos
    assert all(np.array_equal(ck.params[k], params[k]) for k in params)


def test_checkpoint_errors_name_the_file(tmp_path):
    """load() raises CheckpointError naming the file for each failure: ``<path>: no such checkpoint``, ``<path>:
    not a readable`` (a corrupt zip), ``config does not match`` (expect_cfg differs), and ``<path>: parameter
    '<name>' missing`` (an entry dropped)."""
    c = toy_corpus(200)
    cfg, _ = tiny(c)
    missing = str(tmp_path / "nope.npz")
    with pytest.raises(CheckpointError, match="nope.npz: no such checkpoint"):
        checkpoint.load(missing)
    bad = tmp_path / "corrupt.npz"
    bad.write_bytes(b"PK\x03\x04 this is not a zip")
    with pytest.raises(CheckpointError, match="corrupt.npz: not a readable"):
        checkpoint.load(str(bad))
    good = str(tmp_path / "good.npz")
    checkpoint.save(good, model.init_params(cfg, 0), cfg, c.vocab)
    other = model.Config(**{**cfg.to_dict(), "d_model": 32})
    with pytest.raises(CheckpointError, match="config does not match"):
        checkpoint.load(good, expect_cfg=other)
    # a checkpoint whose parameter was dropped
    arrays = dict(np.load(good, allow_pickle=False))
    del arrays["param.enc0.self.Wq"]
    trunc = str(tmp_path / "trunc.npz")
    np.savez(trunc, **arrays)
    with pytest.raises(CheckpointError, match="trunc.npz: parameter 'enc0.self.Wq' missing"):
        checkpoint.load(trunc)


def test_atomic_save_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    """A crash while writing leaves the previous checkpoint intact and no temporary file."""
    c = toy_corpus(200)
    cfg, _ = tiny(c)
    path = str(tmp_path / "last.npz")
    checkpoint.save(path, model.init_params(cfg, 0), cfg, c.vocab, meta={"v": 1})

    def boom(fileobj, arrays):
        fileobj.write(b"half")
        raise OSError("disk full")
    monkeypatch.setattr(checkpoint.backend, "save_npz", boom)
    with pytest.raises(OSError):
        checkpoint.save(path, model.init_params(cfg, 1), cfg, c.vocab, meta={"v": 2})
    assert os.listdir(tmp_path) == ["last.npz"]
    assert zipfile.is_zipfile(path) and checkpoint.load(path).meta == {"v": 1}


def test_ctrl_c_during_a_save_arrives_once_the_file_is_whole(tmp_path, monkeypatch):
    """checkpoint._signals_held: a Ctrl-C (SIGINT) delivered while a checkpoint is written is held until the file
    is complete, then raised as KeyboardInterrupt; the checkpoint loads, and SIGINT's handler is the one it had.
    (The delivery is made by calling the installed handler, as Python would on the signal.)"""
    c = toy_corpus(200)
    cfg, _ = tiny(c)
    path = str(tmp_path / "last.npz")
    real = checkpoint.backend.save_npz
    before = signal.getsignal(signal.SIGINT)

    def interrupted(fileobj, arrays):
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)     # Ctrl-C arrives mid-write
        real(fileobj, arrays)
    monkeypatch.setattr(checkpoint.backend, "save_npz", interrupted)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, model.init_params(cfg, 1), cfg, c.vocab, meta={"v": 2})
    assert checkpoint.load(path).meta == {"v": 2} and os.listdir(tmp_path) == ["last.npz"]
    assert signal.getsignal(signal.SIGINT) is before


def test_training_learns_and_beam_agrees_with_greedy(tmp_path):
    """The toy reversal task is learned (dev BLEU rises), and beam search (width 4) decodes no worse than greedy."""
    c = toy_corpus(3000)
    cfg, tcfg = tiny(c, max_steps=200, eval_every=100, max_tokens=2000, warmup=200, n_enc_layers=2,
                     n_dec_layers=2, d_model=64, d_ff=128, n_heads=4)
    res = train(c, cfg, tcfg, str(tmp_path / "r"), progress=False)
    assert res.history[-1]["dev_bleu"] > res.history[0]["dev_bleu"]
    assert res.history[-1]["loss"] < res.history[0]["loss"]
    src = c.dev_src[:10]
    g = translate(res.params, cfg, c.vocab, src, beam=1)
    b = translate(res.params, cfg, c.vocab, src, beam=4)
    assert len(g) == len(b) == 10 and all(isinstance(t, list) for t in b)
    from minihead.evaluate import bleu
    assert bleu(b, c.dev_tgt[:10]) >= bleu(g, c.dev_tgt[:10]) - 10


def test_incremental_decoding_matches_the_training_forward():
    """decoder_step's logits at every position equal the teacher-forced forward's (float64, 1e-10),
    pre-norm and post-norm, with gates: the key/value history is the causal mask of training."""
    from minihead import translate as tr
    from minihead.layers import attention_bias, sinusoidal_positions
    gen = np.random.default_rng(0)
    for pre_norm in (True, False):
        cfg = model.Config(vocab_size=17, n_enc_layers=2, n_dec_layers=2, n_heads=2, d_model=8, d_ff=12,
                           pre_norm=pre_norm, dtype="float64")
        params = model.init_params(cfg, 1)
        gates = {k: gen.uniform(0.2, 1, (2, 2)) for k in model.GATE_KINDS}
        src = gen.integers(4, 17, (3, 5))
        src_mask = np.ones((3, 5), bool)
        src_mask[1, 3:] = False
        tgt_in = gen.integers(4, 17, (3, 6))
        tgt_in[:, 0] = 1
        logits, _ = model.forward(params, cfg, src, src_mask, tgt_in, np.ones((3, 6), bool), gates)
        enc, _ = model.encoder_forward(params, cfg, src, src_mask, gates)
        pe, hist = sinusoidal_positions(6, 8, "float64"), [None, None]
        bias = attention_bias(src_mask, dtype="float64")
        kv = tr.cross_keys_values(params, cfg, enc) if pre_norm else None   # both paths
        for t in range(6):
            step = tr.decoder_step(params, cfg, enc, bias, tgt_in[:, t], t, pe, hist, gates, kv)
            assert np.abs(step - logits[:, t]).max() < 1e-10, (pre_norm, t)


def test_incremental_beam_search_matches_its_slow_twin(tmp_path):
    """Beam search with the reordered key/value history (incremental=True) returns the same hypotheses as
    re-running the decoder over every whole prefix (incremental=False), in float64 with gates, on a model
    trained just enough that beam and greedy disagree (so the beams really are reordered)."""
    from dataclasses import replace
    from minihead import translate as tr
    from minihead.data.vocab import batches
    c = toy_corpus(800)
    cfg, tcfg = tiny(c, max_steps=150, eval_every=150, max_tokens=1000, warmup=50, d_model=32, d_ff=48,
                     n_heads=2)
    res = train(c, cfg, tcfg, str(tmp_path / "r"), progress=False)
    cfg64 = replace(cfg, dtype="float64")
    params = {k: v.astype("float64") for k, v in res.params.items()}
    gates = {k: np.random.default_rng(1).uniform(0.5, 1, (1, 2)) for k in model.GATE_KINDS}
    ids = [c.vocab.encode(s) for s in c.dev_src[:8]]
    (batch,) = list(batches(ids, [[] for _ in ids], 10_000))
    fast = tr.beam_batch(params, cfg64, batch, beam=3, gates=gates)
    slow = tr.beam_batch(params, cfg64, batch, beam=3, gates=gates, incremental=False)
    greedy = tr.greedy_batch(params, cfg64, batch, gates=gates)
    assert fast.shape != greedy.shape or (fast != greedy).any()    # the check is not vacuous
    assert fast.shape == slow.shape and (fast == slow).all()


# ---- issue 15: never save NaN, one writer per run folder, resume only what was saved, atomic caches
def _dead_pid():
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_non_finite_weights_are_never_saved(tmp_path):
    """save() refuses parameters or extras holding NaN or infinity: the earlier file stays byte-identical
    and no temporary file is left."""
    c = toy_corpus(200)
    cfg, _ = tiny(c)
    path = tmp_path / "best.npz"
    checkpoint.save(str(path), model.init_params(cfg, 0), cfg, c.vocab)
    before = path.read_bytes()
    for bad in (np.nan, np.inf):
        params = model.init_params(cfg, 1)
        params["dec0.ffn.W1"][0, 0] = bad
        with pytest.raises(CheckpointError, match=r"best.npz: not saved: parameter 'dec0.ffn.W1' holds NaN"):
            checkpoint.save(str(path), params, cfg, c.vocab)
    with pytest.raises(CheckpointError, match="entry 'log_alpha.enc' holds NaN"):
        checkpoint.save(str(path), model.init_params(cfg, 1), cfg, c.vocab,
                        extra={"log_alpha.enc": np.full((1, 4), np.nan, "float32")})
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["best.npz"]


def test_train_checks_its_settings_and_corpus_before_any_work(tmp_path):
    """The library entry point checks too: a NaN learning rate, a non-integer step count or an empty dev set
    raise UsageError (a ValueError) naming the setting, and nothing is created."""
    from minihead.errors import UsageError
    c = toy_corpus(100)
    for kw, msg in (({"lr": float("nan")}, "setting lr=nan"), ({"max_steps": 3.5}, "setting max_steps=3.5"),
                    ({"n_heads": 3}, "d_model=16: must be divisible by n_heads=3")):
        cfg, tcfg = tiny(c, **kw)
        with pytest.raises(UsageError, match=msg):
            train(c, cfg, tcfg, str(tmp_path / "out"), progress=False)
    no_dev = Corpus(c.vocab, c.train_src, c.train_tgt, [], [])
    with pytest.raises(UsageError, match="100 training and 0 dev pairs"):
        train(no_dev, *tiny(c), str(tmp_path / "out"), progress=False)
    assert os.listdir(tmp_path) == []


def test_a_diverging_step_raises_and_is_not_saved(tmp_path, monkeypatch):
    """An infinite gradient norm at step 5 stops training (TrainingError naming the step); last.npz keeps
    step 4, loads (every weight finite) and no lock is left."""
    import minihead.train as T
    from minihead.errors import TrainingError
    c = toy_corpus(200)
    cfg, tcfg = tiny(c, eval_every=2)
    real, calls = T.loss_and_grads, []

    def inf_grad_at_5(*a, **kw):
        calls.append(1)
        loss, grads, cache = real(*a, **kw)
        if len(calls) == 5:
            grads["enc0.ffn.W1"][0, 0] = np.inf
        return loss, grads, cache
    monkeypatch.setattr(T, "loss_and_grads", inf_grad_at_5)
    with pytest.raises(TrainingError, match=r"training diverged at step 5: loss [0-9.]+, gradient norm inf"):
        train(c, cfg, tcfg, str(tmp_path), progress=False)
    assert checkpoint.load(str(tmp_path / "last.npz")).meta["step"] == 4
    assert sorted(os.listdir(tmp_path)) == ["best.npz", "last.npz"]


def test_run_lock_one_writer_per_folder(tmp_path):
    """run.lock holds the writer's pid: nested use by one process is fine, another live process's lock is
    refused naming its pid, a dead process's lock (and its .tmp-PID files) is taken over, and the lock goes
    when the block ends, even on an error (an existing folder stays, even empty)."""
    import subprocess
    import sys

    from minihead.errors import RunLockedError
    folder = tmp_path / "run"
    with checkpoint.run_lock(str(folder)):
        assert (folder / "run.lock").read_text().strip() == str(os.getpid())
        with checkpoint.run_lock(str(folder)):
            pass
        assert (folder / "run.lock").exists(), "an inner block does not release the outer lock"
    assert not folder.exists(), "the lock is gone, and so is the folder it made for a run that wrote nothing"
    folder.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (folder / "run.lock").write_text(str(other.pid))
        with pytest.raises(RunLockedError, match=f"run: another run \\(pid {other.pid}\\) is writing"):
            with checkpoint.run_lock(str(folder)):
                pass
        assert checkpoint.lock_holder(str(folder)) == other.pid
        dead = _dead_pid()
        (folder / "run.lock").write_text(str(dead))
        (folder / f".last.npz.tmp-{other.pid}").write_bytes(b"a live writer's")
        (folder / f".last.npz.tmp-{dead}").write_bytes(b"half")
        (folder / f"prune-x.json.tmp-{dead}").write_bytes(b"half")
        assert checkpoint.lock_holder(str(folder)) is None
        with pytest.raises(KeyError):
            with checkpoint.run_lock(str(folder)):
                assert (folder / "run.lock").read_text().strip() == str(os.getpid())
                assert sorted(os.listdir(folder)) == [f".last.npz.tmp-{other.pid}", "run.lock"], \
                    "the dead writer's temporaries are removed, the live one's kept"
                raise KeyError("boom")
    finally:
        other.kill()
        other.wait()
    assert not (folder / "run.lock").exists()


def test_save_removes_a_killed_writers_temporary(tmp_path):
    """A ``.last.npz.tmp-<pid>`` left by a writer that died (its pid no longer alive) is removed by the next
    save() into that folder: only last.npz remains."""
    c = toy_corpus(200)
    cfg, _ = tiny(c)
    dead = _dead_pid()
    (tmp_path / f".last.npz.tmp-{dead}").write_bytes(b"half a checkpoint")
    checkpoint.save(str(tmp_path / "last.npz"), model.init_params(cfg, 0), cfg, c.vocab)
    assert os.listdir(tmp_path) == ["last.npz"]


def test_resume_refuses_changed_settings_but_not_max_steps(tmp_path):
    """A resume whose training or model settings differ from the saved run's is refused naming each field
    (nothing is written), the shard count too, which the metadata leaves out at its default of 1; only
    max_steps may change."""
    from minihead.errors import UsageError
    c = toy_corpus()
    cfg, tcfg = tiny(c, max_steps=8)
    train(c, cfg, tcfg, str(tmp_path), progress=False)
    before = {f: (tmp_path / f).read_bytes() for f in os.listdir(tmp_path)}
    with pytest.raises(UsageError, match=r"last.npz: cannot resume .*: lr 0.01 \(saved\) vs 0.001 \(now\), "
                                         r"seed 1 \(saved\) vs 2 \(now\)"):
        train(c, cfg, tiny(c, max_steps=8, lr=1e-3, seed=2)[1], str(tmp_path), resume=True, progress=False)
    with pytest.raises(UsageError, match=r"dropout 0.1 \(saved\) vs 0.2 \(now\)"):
        train(c, *tiny(c, max_steps=8, dropout=0.2), str(tmp_path), resume=True, progress=False)
    with pytest.raises(UsageError, match=r"shards 1 \(saved\) vs 2 \(now\)"):   # shards=1 is not written, yet held
        train(c, cfg, tiny(c, max_steps=8, shards=2)[1], str(tmp_path), resume=True, progress=False)
    assert {f: (tmp_path / f).read_bytes() for f in os.listdir(tmp_path)} == before
    res = train(c, cfg, tiny(c, max_steps=16)[1], str(tmp_path), resume=True, progress=False)
    assert [h["step"] for h in res.history] == [8, 16]


def test_an_early_stopped_run_stays_stopped_when_resumed(tmp_path):
    """A run that stopped early (patience 1, a learning rate too small to improve dev BLEU, before max_steps)
    does not train on when resumed with the same settings: the resumed history equals the first one."""
    c = toy_corpus()
    cfg, tcfg = tiny(c, max_steps=200, eval_every=2, patience=1, lr=1e-9)
    first = train(c, cfg, tcfg, str(tmp_path), progress=False)
    assert first.history[-1]["step"] < 200, "stopped early"
    again = train(c, cfg, tcfg, str(tmp_path), resume=True, progress=False)
    assert again.history == first.history


def test_plateau_rule_counts_only_gains_above_min_delta(tmp_path):
    """The plateau rule (TrainConfig.min_delta): an evaluation counts as a gain only when its dev BLEU beats the
    last counted gain by more than min_delta; ``patience`` evaluations without one stop the run. best.npz is still
    every new best. Replayed here from the run's own history: with min_delta 0 the rule is plain patience, and a
    min_delta larger than any BLEU difference stops the run ``patience`` evaluations after the first one. A run
    interrupted after its first evaluation and resumed stops at the same step (the counted gain is saved)."""
    c = toy_corpus()
    cfg, tcfg = tiny(c, max_steps=200, eval_every=4, patience=2)

    def stop_step(hist, min_delta, patience):
        plateau, bad = None, 0
        for h in hist:
            if plateau is None or h["dev_bleu"] > plateau + min_delta:
                plateau, bad = h["dev_bleu"], 0
            else:
                bad += 1
            if bad >= patience:
                return h["step"]
    plain = train(c, cfg, tcfg, str(tmp_path / "plain"), progress=False)
    assert plain.history[-1]["step"] == (stop_step(plain.history, 0.0, 2) or 200)
    wide = train(c, cfg, replace_t(tcfg, min_delta=1000.0), str(tmp_path / "wide"), progress=False)
    assert [h["step"] for h in wide.history] == [4, 8, 12]
    assert wide.best_bleu == max(h["dev_bleu"] for h in wide.history)
    cut = tmp_path / "cut"
    train(c, cfg, replace_t(tcfg, min_delta=1000.0), str(cut), progress=False, stop_after=6)
    resumed = train(c, cfg, replace_t(tcfg, min_delta=1000.0), str(cut), resume=True, progress=False)
    assert resumed.history == wide.history


def replace_t(tcfg, **kw):
    from dataclasses import replace
    return replace(tcfg, **kw)


def test_json_cache_is_atomic_and_a_corrupt_one_is_named(tmp_path):
    """save_json() is atomic: a failed write (an object JSON cannot encode) leaves the earlier done.json intact
    and no temporary file. A done.json cut short is refused with CheckpointError naming its path, ``cache file
    does not parse``, and saying to delete it."""
    from minihead.study import load_study, run_folder
    path = tmp_path / "done.json"
    checkpoint.save_json(str(path), {"best_bleu": 1.0})
    with pytest.raises(TypeError):
        checkpoint.save_json(str(path), {"x": object()})
    assert os.listdir(tmp_path) == ["done.json"] and checkpoint.load_json(str(path)) == {"best_bleu": 1.0}
    run = pathlib.Path(run_folder("quick", runs=str(tmp_path / "runs"), max_steps=2))
    run.mkdir(parents=True)
    (run / "done.json").write_text('{"history": [{"st')       # a write cut short
    with pytest.raises(CheckpointError, match=rf"{run.name}/done.json: cache file does not parse .*delete it"):
        load_study("quick", runs=str(tmp_path / "runs"), progress=False, max_steps=2)


def test_run_folder_names_every_setting_that_determines_the_model(monkeypatch):
    """study.run_folder: runs/<name>[-<override><value>]-t<BLAS threads>-<BLAS kernels>-<hash of the preset's
    settings and the data>. Changing a preset's settings (not only its overrides) changes the folder, so a stale model is never
    reused; an override changes it; two names for the same settings share the hash (default and emerge)."""
    from minihead.study import run_folder
    from minihead.train import PRESETS
    base = os.path.basename(run_folder("quick"))
    assert base.startswith("quick-t") and len(base.rsplit("-", 1)[1]) == 8
    assert os.path.basename(run_folder("default")).rsplit("-", 1)[1] == \
        os.path.basename(run_folder("emerge")).rsplit("-", 1)[1]
    assert os.path.basename(run_folder("quick", max_steps=7)).startswith("quick-max_steps7-t")
    m, t = PRESETS["quick"]
    monkeypatch.setitem(PRESETS, "quick", (m, {**t, "lr": t["lr"] / 2}))      # the preset itself changes
    assert os.path.basename(run_folder("quick")) != base


def test_translate_empty_input_rule():
    """No sentences give no translations; an empty sentence is refused naming its position (the rule of
    read_parallel and of translate --input), never decoded into a blank line."""
    from minihead.errors import DataError
    c = toy_corpus(100)
    cfg, _ = tiny(c)
    params = model.init_params(cfg, 0)
    assert translate(params, cfg, c.vocab, []) == []
    with pytest.raises(DataError, match="sentence 2: empty"):
        translate(params, cfg, c.vocab, [["w1"], [], ["w2"]])


def test_preset_settings_apply_overrides_where_preset_does():
    """train.preset_settings, the plain record of a study's settings: the preset's own dicts, with each override
    placed where train.preset puts it (a training setting in "train", a model setting in "model", even one the
    preset leaves at its default), and an unknown setting refused as preset refuses it."""
    from minihead.train import PRESETS, preset_settings
    assert preset_settings("quick") == {"model": PRESETS["quick"][0], "train": PRESETS["quick"][1]}
    s = preset_settings("quick", max_steps=7, attn_dropout=0.2)
    assert s["train"]["max_steps"] == 7 and s["model"]["attn_dropout"] == 0.2
    assert "attn_dropout" not in s["train"] and "max_steps" not in s["model"]
    with pytest.raises(ValueError, match="unknown setting 'nope'"):
        preset_settings("quick", nope=1)


def test_a_setting_added_later_keeps_old_records_valid():
    """TrainConfig.to_dict leaves ``shards`` and ``min_delta`` out at their defaults (1, 0.0), so checkpoint
    metadata and cache keys written before the settings existed stay equal to today's; any other value is written."""
    from minihead.train import TrainConfig
    assert "shards" not in TrainConfig().to_dict() and "min_delta" not in TrainConfig().to_dict()
    assert TrainConfig(min_delta=0.5).to_dict()["min_delta"] == 0.5
    assert TrainConfig(shards=2).to_dict()["shards"] == 2
    assert TrainConfig(**TrainConfig(shards=3).to_dict()) == TrainConfig(shards=3)
