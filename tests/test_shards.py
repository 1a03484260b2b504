"""The sharded training step (minihead/shards.py): the same loss and gradients as the whole batch's, computed in
worker processes or one shard after another.

A batch's rows do not interact in the model and each shard's loss is averaged over the whole batch's real
target tokens, so with shards s of the rows

    L = sum_s sum_{n in s} m_n l_n / sum_n m_n   and   dL/dtheta = sum_s dL_s/dtheta, dL/dg = sum_s dL_s/dg.

In float64 without dropout the sharded step must match model.loss_and_grads to rounding; in float32 it must
be deterministic (same seed, same bits) with or without the worker processes, whatever the BLAS thread count
outside it.
"""
import dataclasses
import glob
import os

import numpy as np
import pytest

from minihead import backend, bench, model, shards
from minihead.errors import TrainingError


def _cfg(dtype, dropout=0.0):
    return model.Config(vocab_size=40, n_enc_layers=2, n_dec_layers=2, n_heads=2, d_model=8, d_ff=12,
                        dropout=dropout, label_smoothing=0.1, dtype=dtype)


def _batch(B=7):
    return bench.synthetic_batches(40, n_batches=1, B=B, S=9, T=8, seed=3)[0]


def test_split_covers_every_row_once():
    """split(batch, n): min(n, B) contiguous shards of near-equal size whose rows, tokens and indices are the
    batch's, in order."""
    b = _batch(7)
    for n in (1, 2, 3, 7, 12):
        parts = shards.split(b, n)
        assert len(parts) == min(n, 7)
        assert max(len(p.index) for p in parts) - min(len(p.index) for p in parts) <= 1
        assert np.array_equal(np.concatenate([p.src for p in parts]), b.src)
        assert np.array_equal(np.concatenate([p.tgt_mask for p in parts]), b.tgt_mask)
        assert sum(p.n_tokens for p in parts) == b.n_tokens
        assert sum((p.index for p in parts), []) == b.index


@pytest.mark.parametrize("n, processes", [(2, True), (3, True), (3, False), (7, False)])
def test_sharded_gradients_equal_the_batch_gradients(n, processes):
    """float64, no dropout, gates on all three attention types: the sharded loss, nll sum, every parameter
    gradient and every gate gradient equal model.loss_and_grads's to 1e-12 relative to the array's largest
    entry, plus 1e-15 (the key biases' gradients are zero in theory, roundoff of 1e-18 in practice); with the
    shards beyond the first in worker processes, and one after another in this process."""
    cfg = _cfg("float64")
    params = model.init_params(cfg, seed=2)
    gen = np.random.default_rng(0)
    gates = {k: gen.uniform(0.3, 1.0, (2, 2)) for k in model.GATE_KINDS}
    b = _batch(7)
    loss, grads, info = model.loss_and_grads(params, cfg, b, gates)
    if processes:
        with shards.Workers(params, cfg, n) as workers:
            loss_s, grads_s, info_s = shards.loss_and_grads(params, cfg, b, n, gates, workers=workers)
    else:
        loss_s, grads_s, info_s = shards.loss_and_grads(params, cfg, b, n, gates)
    assert abs(float(loss) - float(loss_s)) < 1e-12 * abs(float(loss))
    assert abs(float(info["nll_sum"]) - float(info_s["nll_sum"])) < 1e-12 * abs(float(info["nll_sum"]))
    assert set(grads_s) == set(grads)
    for k in grads:
        assert np.abs(grads[k] - grads_s[k]).max() <= 1e-12 * np.abs(grads[k]).max() + 1e-15, k
    for k in model.GATE_KINDS:
        assert np.abs(info["dgates"][k] - info_s["dgates"][k]).max() <= 1e-12 * np.abs(info["dgates"][k]).max(), k


def test_sharded_step_is_deterministic_at_any_blas_thread_count():
    """float32 with dropout: the same generator state gives bit-identical loss and gradients, with BLAS at
    one thread or at two outside the step (every shard runs with BLAS at one thread), with the second shard in
    a worker process or in this one; the step generator moves on by one draw per shard (so a checkpoint of its
    state resumes the same masks)."""
    from threadpoolctl import threadpool_limits
    cfg = _cfg("float32", dropout=0.2)
    params = model.init_params(cfg, seed=2)
    b = _batch(7)
    runs = []
    with shards.Workers(params, cfg, 2) as workers:
        for threads, w in ((1, None), (2, None), (1, workers), (2, workers)):
            gen = backend.rng(4)
            with threadpool_limits(threads, "blas"):
                loss, grads, _ = shards.loss_and_grads(params, cfg, b, 2, rng=gen, workers=w)
            runs.append((float(loss), {k: g.copy() for k, g in grads.items()}, gen.bit_generator.state))
    for loss, grads, state in runs[1:]:
        assert loss == runs[0][0] and state == runs[0][2]
        assert all(np.array_equal(grads[k], runs[0][1][k]) for k in grads)
    moved = backend.rng(4)
    moved.integers(0, 2 ** 63 - 1, size=2)
    assert runs[0][2] == moved.bit_generator.state
    other = shards.loss_and_grads(params, cfg, b, 2, rng=backend.rng(5))[0]
    assert float(other) != runs[0][0], "another dropout seed gives another loss"


def test_workers_share_in_place_updates_refuse_replaced_arrays_and_clean_up():
    """Workers move the parameters into shared memory: an in-place update in this process is what the worker
    computes with (its shard's gradient follows the change), an entry replaced by a new array is refused with
    a TrainingError naming it, a failing worker's error names the shard and carries the worker's traceback, a
    failure in this process's shard leaves no reply behind for the next step, and close() gives params ordinary arrays with the same values and leaves no file in shared memory."""
    cfg = _cfg("float64")
    params = model.init_params(cfg, seed=2)
    before = {k: v.copy() for k, v in params.items()}
    b = _batch(6)
    with shards.Workers(params, cfg, 2) as workers:
        assert not glob.glob(os.path.join("/dev/shm", "minihead-shard-*")), "the files are unlinked at start"
        loss0 = float(shards.loss_and_grads(params, cfg, b, 2, workers=workers)[0])
        params["enc0.ffn.W1"] *= 1.5                          # in place: the worker sees it
        loss1 = float(shards.loss_and_grads(params, cfg, b, 2, workers=workers)[0])
        params_copy = {k: v.copy() for k, v in params.items()}
        assert loss1 == pytest.approx(float(model.loss_and_grads(params_copy, cfg, b)[0]), rel=1e-12)
        assert loss1 != loss0
        bad = dataclasses.replace(b, src=b.src.copy())
        bad.src[-1, 0] = 999                                  # out of the vocabulary, in the worker's shard only
        with pytest.raises(TrainingError, match="(?s)shard 2 of 2 failed in its worker process:.*IndexError"):
            shards.loss_and_grads(params, cfg, bad, 2, workers=workers)
        with pytest.raises(ValueError):                       # a failure here: the worker's reply is still taken
            shards.loss_and_grads(params, cfg, b, 2, gates={"enc": np.ones((9, 9))}, workers=workers)
        assert float(shards.loss_and_grads(params, cfg, b, 2, workers=workers)[0]) == loss1, "no stale reply"
        params["enc0.ffn.W1"] = params["enc0.ffn.W1"].copy()  # replaced: the worker would not see it
        with pytest.raises(TrainingError, match="'enc0.ffn.W1' was replaced by a new array"):
            shards.loss_and_grads(params, cfg, b, 2, workers=workers)
    assert all(type(v) is np.ndarray and v.base is None for v in params.values())
    assert np.array_equal(params["enc1.ffn.W1"], before["enc1.ffn.W1"])
    assert np.array_equal(params["enc0.ffn.W1"], before["enc0.ffn.W1"] * 1.5)


def test_a_dead_worker_is_a_clear_error():
    """A worker process that dies (killed here) makes the next sharded step raise a TrainingError that names
    it as exited, instead of hanging on its pipe; closing the workers afterwards still gives params back."""
    cfg = _cfg("float64")
    params = model.init_params(cfg, seed=2)
    with shards.Workers(params, cfg, 2) as workers:
        workers.procs[0].kill()
        workers.procs[0].join()
        with pytest.raises(TrainingError, match=r"shard worker process \d+ exited"):
            shards.loss_and_grads(params, cfg, _batch(6), 2, workers=workers)
    assert all(type(v) is np.ndarray and v.base is None for v in params.values())
