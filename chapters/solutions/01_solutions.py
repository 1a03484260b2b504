"""Solutions to the exercises of chapter 1 (a Transformer from scratch). Run from the repository root:

    python chapters/solutions/01_solutions.py               # every exercise
    python chapters/solutions/01_solutions.py exercise_2    # one of them

Small float64 inputs only (no trained model); every exercise ends with asserts that check its result.
"""
import pathlib
import sys
from types import SimpleNamespace

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))   # the repository root

from minihead import backend, layers, model
from minihead.backend import xp
from minihead.gradcheck import numerical_grad, rel_error
from minihead.optim import Adam

F64 = "float64"


def tiny_config():
    """The chapter's tiny float64 model: 2 + 2 layers, 2 heads, d_model 8, no dropout."""
    return model.Config(vocab_size=20, n_enc_layers=2, n_dec_layers=2, n_heads=2, d_model=8, d_ff=16,
                        dropout=0.0, dtype=F64)


def tiny_batch():
    """One padded batch of two sentence pairs over the tiny vocabulary (the second source is padded)."""
    return SimpleNamespace(src=xp.asarray([[5, 6, 7, 2], [8, 9, 2, 0]]),
                           src_mask=xp.asarray([[True] * 4, [True, True, True, False]]),
                           tgt_in=xp.asarray([[1, 8, 9], [1, 10, 11]]), tgt_out=xp.asarray([[8, 9, 2], [10, 11, 2]]),
                           tgt_mask=xp.asarray([[True] * 3, [True] * 3]))


def exercise_1():
    """Softmax backward, checked element by element: ds = p * (dp - sum_k dp_k p_k) against central
    differences of L = sum(softmax(s + bias) * R), with a masked key (bias -inf) whose gradient must be 0."""
    gen = backend.rng(1)
    s = backend.to_device(gen.normal(size=(2, 3, 5)), F64)              # (B, T, K) scores
    R = backend.to_device(gen.normal(size=(2, 3, 5)), F64)              # upstream gradient dL/dp
    key_mask = xp.asarray([[True, True, True, True, False]] * 2)       # (B, K): the last key is padding
    bias = layers.attention_bias(key_mask, dtype=F64)[:, 0]             # (B, 1, K)
    p, cache = layers.softmax_forward(s, bias)
    ds = layers.softmax_backward(R, cache)
    num = numerical_grad(lambda: float((layers.softmax_forward(s, bias)[0] * R).sum()), s)
    err = rel_error(ds, num)
    print(f"softmax backward vs central differences: relative error {err:.1e}")
    assert err < 1e-7, err
    assert float(xp.abs(ds[..., -1]).max()) == 0.0 and float(xp.abs(p[..., -1]).max()) == 0.0
    assert bool(xp.allclose(p.sum(-1), 1.0))


def exercise_2():
    """Label-smoothed cross-entropy: its backward m_n (softmax - q_n) / sum m against central differences, for
    smoothing 0 and 0.1, with a padded (masked) position whose gradient must be exactly 0."""
    gen = backend.rng(2)
    logits = backend.to_device(gen.normal(size=(4, 6)), F64)           # (N, V)
    targets = xp.asarray([0, 3, 5, 1])                                 # (N,)
    mask = xp.asarray([True, True, True, False])                       # (N,) the last position is padding
    for smoothing in (0.0, 0.1):
        loss, _, cache = layers.xent_forward(logits, targets, mask, smoothing)
        d = layers.xent_backward(cache)
        num = numerical_grad(lambda: float(layers.xent_forward(logits, targets, mask, smoothing)[0]), logits)
        err = rel_error(d, num)
        print(f"smoothing {smoothing}: loss {float(loss):.4f}, backward vs central differences {err:.1e}")
        assert err < 1e-7, (smoothing, err)
        assert float(xp.abs(d[3]).max()) == 0.0                        # padding gets no gradient
        assert abs(float(d[:3].sum())) < 1e-12                         # each row of softmax - q sums to 0


def exercise_3():
    """The decoder is causal: changing the target token at the last position leaves the model's outputs at all
    earlier positions unchanged (to round-off), and changes the output at that position."""
    cfg = tiny_config()
    theta = model.init_params(cfg, seed=0)
    b = tiny_batch()
    logits, _ = model.forward(theta, cfg, b.src, b.src_mask, b.tgt_in, b.tgt_mask)
    tgt2 = b.tgt_in.copy()
    tgt2[:, -1] = 13                                                   # another token at the last position
    logits2, _ = model.forward(theta, cfg, b.src, b.src_mask, tgt2, b.tgt_mask)
    logits, logits2 = logits.reshape(2, 3, -1), logits2.reshape(2, 3, -1)   # (B, T, V)
    before = float(xp.abs(logits[:, :-1] - logits2[:, :-1]).max())
    at = float(xp.abs(logits[:, -1] - logits2[:, -1]).max())
    print(f"max change of the logits before the edited position {before:.1e}, at it {at:.2e}")
    assert before < 1e-12 and at > 1e-6, (before, at)


def exercise_4():
    """Overfit one batch: 150 Adam steps (lr 0.01) on the tiny model, gradients from model.loss_and_grads, bring
    the label-smoothed loss of the batch below a third of its start and make the greedy prediction (argmax
    of the logits under teacher forcing) right at every real target position."""
    cfg = tiny_config()
    theta = model.init_params(cfg, seed=0)
    b = tiny_batch()
    opt = Adam(theta)
    start = float(model.loss_forward(theta, cfg, b)[0])
    for _ in range(150):
        loss, grads, _ = model.loss_and_grads(theta, cfg, b)
        opt.step(theta, grads, 0.01)
    end = float(model.loss_forward(theta, cfg, b)[0])
    logits, _ = model.forward(theta, cfg, b.src, b.src_mask, b.tgt_in, b.tgt_mask)
    pred = logits.reshape(2, 3, -1).argmax(-1)                         # (B, T)
    print(f"loss {start:.3f} -> {end:.3f}; predictions {pred.tolist()}, targets {b.tgt_out.tolist()}")
    assert end < start / 3, (start, end)
    assert bool((pred == b.tgt_out).all())


if __name__ == "__main__":
    from run_exercises import main   # beside this file: the runner every solution file shares
    main(globals(), sys.argv[1:])
