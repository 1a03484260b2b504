"""The sharded training step (minihead/shards.py): the same loss and gradients as the whole batch's.

A batch's rows do not interact in the model and each shard's loss is averaged over the whole batch's real
target tokens, so with shards s of the rows

    L = sum_s sum_{n in s} m_n l_n / sum_n m_n   and   dL/dtheta = sum_s dL_s/dtheta, dL/dg = sum_s dL_s/dg.

In float64 without dropout the sharded step must match model.loss_and_grads to rounding; in float32 it must
be deterministic (same seed, same bits), whatever the BLAS thread count outside it.
"""
import numpy as np
import pytest

from minihead import backend, bench, model, shards


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


@pytest.mark.parametrize("n", [2, 3, 7])
def test_sharded_gradients_equal_the_batch_gradients(n):
    """float64, no dropout, gates on all three attention types: the sharded loss, nll sum, every parameter
    gradient and every gate gradient equal model.loss_and_grads's to 1e-12 relative to the array's largest
    entry, plus 1e-15 (the key biases' gradients are zero in theory, roundoff of 1e-18 in practice)."""
    cfg = _cfg("float64")
    params = model.init_params(cfg, seed=2)
    gen = np.random.default_rng(0)
    gates = {k: gen.uniform(0.3, 1.0, (2, 2)) for k in model.GATE_KINDS}
    b = _batch(7)
    loss, grads, info = model.loss_and_grads(params, cfg, b, gates)
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
    one thread or at two outside the step (each shard pins BLAS to one thread), and the step generator moves
    on by one draw per shard (so a checkpoint of its state resumes the same masks)."""
    from threadpoolctl import threadpool_limits
    cfg = _cfg("float32", dropout=0.2)
    params = model.init_params(cfg, seed=2)
    b = _batch(7)
    runs = []
    for threads in (1, 2, 1):
        gen = backend.rng(4)
        with threadpool_limits(threads, "blas"):
            loss, grads, _ = shards.loss_and_grads(params, cfg, b, 2, rng=gen)
        runs.append((float(loss), grads, gen.bit_generator.state))
    for loss, grads, state in runs[1:]:
        assert loss == runs[0][0] and state == runs[0][2]
        assert all(np.array_equal(grads[k], runs[0][1][k]) for k in grads)
    moved = backend.rng(4)
    moved.integers(0, 2 ** 63 - 1, size=2)
    assert runs[0][2] == moved.bit_generator.state
    other = shards.loss_and_grads(params, cfg, b, 2, rng=backend.rng(5))[0]
    assert float(other) != runs[0][0], "another dropout seed gives another loss"
