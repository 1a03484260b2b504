"""Head importance (minihead/importance.py) on toy models and SimpleNamespace batches: LRP relevance
normalisation, confidence of known attention patterns, Michel et al.'s score against finite differences,
Spearman's rho against hand-computed values, and single-head ablation with fake translate/BLEU."""
from types import SimpleNamespace

import numpy as np
import pytest

from minihead import analysis, importance, lrp, model, roles
from minihead.data.vocab import BOS, EOS, Vocab, batches
from minihead.lrp_reference import toy_batch, toy_model


def eos_batch(gen, V, B=3, S=6, T=5):
    """toy_batch with real sources ending in EOS and decoder inputs starting with BOS."""
    b = toy_batch(gen, V, B, S, T)
    for i in range(B):
        n = int(b.src_mask[i].sum())
        b.src[i, n - 1] = EOS
    b.tgt_in[:, 0] = BOS
    return b


# ----------------------------------------------------------------------------- LRP relevance
@pytest.mark.parametrize("per_position", [False, True])
def test_head_relevance_rows_sum_to_one(per_position):
    """Every layer's head relevances are shares summing to 1 (per position then averaged, or summed then
    normalised), shapes (L, H), same numbers on a rerun."""
    cfg, params = toy_model()
    gen = np.random.default_rng(20)
    batches = [eos_batch(gen, cfg.vocab_size) for _ in range(2)]
    rel = importance.head_relevance(params, cfg, batches, per_position=per_position)
    assert set(rel) == set(importance.KINDS)
    for k, M in rel.items():
        assert M.shape == (cfg.n_layers(k), cfg.n_heads)
        assert np.allclose(M.sum(-1), 1.0, atol=1e-9), (k, M)
    again = importance.head_relevance(params, cfg, batches, per_position=per_position)
    assert all(np.array_equal(rel[k], again[k]) for k in rel)


def _per_prediction(rp, mask):
    """The paper's head relevance by loops (appendix A.3): for each real (sentence, step), r[l, h] / sum_h r[l, h],
    averaged over those steps. rp.head[k]: (L, B, T0, H)."""
    out = {}
    for k, h in rp.head.items():
        want, n = np.zeros(h.shape[::3]), 0
        for bi in range(h.shape[1]):
            for t in range(h.shape[2]):
                if mask[bi, t]:
                    want += h[:, bi, t] / h[:, bi, t].sum(-1, keepdims=True)
                    n += 1
        out[k] = want / n
    return out


def test_head_relevance_definitions():
    """Default (the paper's, appendix A.3): relevance started at each generation step alone, normalised over the
    heads of each layer per step, then averaged over the real steps, under the paper's z-rule; per_position=
    False: (sum over steps of r[l, h]) / (sum over steps and heads), which differs. linear="official" is
    honoured and gives shares in [0, 1]."""
    cfg, params = toy_model(biases=True)
    b = eos_batch(np.random.default_rng(21), cfg.vocab_size)
    default = importance.head_relevance(params, cfg, [b])
    want = _per_prediction(lrp.relevance(params, cfg, b, per_position=True, rules=lrp.Rules(linear="z")), b.tgt_mask)
    r = lrp.relevance(params, cfg, b, rules=lrp.Rules(linear="z"))
    summed = importance.head_relevance(params, cfg, [b], per_position=False)
    official = importance.head_relevance(params, cfg, [b], rules=lrp.Rules(linear="official"))
    want_off = _per_prediction(lrp.relevance(params, cfg, b, per_position=True, rules=lrp.Rules(linear="official")), b.tgt_mask)
    differs = False
    for k in importance.KINDS:
        assert np.allclose(default[k], want[k])
        tot = r.head[k].sum(1)
        assert np.allclose(summed[k], tot / tot.sum(-1, keepdims=True))
        differs |= not np.allclose(summed[k], default[k], atol=1e-3)
        assert np.allclose(official[k], want_off[k])
        assert 0 <= official[k].min() and official[k].max() <= 1
    assert differs, "per-prediction normalisation is not the same number as normalising the sum"


def test_head_relevance_magnitude_shares():
    """normalise="abs": per step |r[l, h]| / sum_h |r[l, h]|, averaged over the real steps: shares in [0, 1]
    adding up to 1 per layer even under the signed z-rule; it equals "sum" where relevance is nonnegative
    (the official variant); an unknown normalisation is refused."""
    cfg, params = toy_model(biases=True)
    b = eos_batch(np.random.default_rng(25), cfg.vocab_size)
    rp = lrp.relevance(params, cfg, b, per_position=True, rules=lrp.Rules(linear="z"))
    mag = importance.head_relevance(params, cfg, [b], normalise="abs")
    for k in importance.KINDS:
        h = np.abs(rp.head[k])[:, b.tgt_mask]                # (L, real steps, H)
        want = (h / h.sum(-1, keepdims=True)).mean(1)
        assert np.allclose(mag[k], want) and np.allclose(mag[k].sum(-1), 1.0)
        assert mag[k].min() >= 0
    off_abs = importance.head_relevance(params, cfg, [b], normalise="abs", rules=lrp.Rules(linear="official"))
    off_sum = importance.head_relevance(params, cfg, [b], rules=lrp.Rules(linear="official"))
    assert all(np.allclose(off_abs[k], off_sum[k]) for k in importance.KINDS)
    with pytest.raises(importance.ImportanceError, match="normalise 'l2'"):
        importance.head_relevance(params, cfg, [b], normalise="l2")


def test_head_relevance_no_positions_raises():
    """Batches without a single real target position are an error, not a division by zero."""
    cfg, params = toy_model(layers=1)
    b = toy_batch(np.random.default_rng(22), cfg.vocab_size)
    b.tgt_mask[:] = False
    with pytest.raises(importance.ImportanceError, match="no real target"):
        importance.head_relevance(params, cfg, [b])


# ----------------------------------------------------------------------------- confidence
def test_confidence_of_uniform_attention():
    """With W^Q = W^K = 0 every head attends uniformly to the real (and, in the decoder, earlier) keys:
    enc: 1 / n_src on each non-EOS query; dec_self: 1 / (t + 1) at position t; dec_enc: 1 / n_src."""
    cfg, params = toy_model()
    for k in params:
        if k.endswith((".Wq", ".Wk")):
            params[k] = 0 * params[k]
    b = eos_batch(np.random.default_rng(23), cfg.vocab_size)
    conf = importance.head_confidence(params, cfg, [b])
    n_src = b.src_mask.sum(1)
    enc = sum((n - 1) / n for n in n_src) / sum(n - 1 for n in n_src)   # EOS queries skipped
    dec_self = [1 / (t + 1) for i in range(3) for t in range(5) if b.tgt_mask[i, t]]
    dec_enc = [1 / n_src[i] for i in range(3) for t in range(5) if b.tgt_mask[i, t]]
    assert np.allclose(conf["enc"], enc)
    assert np.allclose(conf["dec_self"], np.mean(dec_self))
    assert np.allclose(conf["dec_enc"], np.mean(dec_enc))


def test_confidence_agrees_with_roles_confidence():
    """One definition of confidence: on a model without BPE, importance.head_confidence (model tokens, EOS left
    out on both sides) gives the same encoder numbers as roles.confidence over analysis.encoder_word_maps (word
    maps with the EOS row and column cut), on sentences of several lengths."""
    cfg, params = toy_model(biases=True)
    gen = np.random.default_rng(24)
    words = [f"w{i}" for i in range(cfg.vocab_size - 4)]
    sents = [[words[int(j)] for j in gen.integers(0, len(words), n)] for n in (3, 5, 6, 2, 4)]
    vocab = Vocab.build([words])
    assert len(vocab) == cfg.vocab_size
    ids = [vocab.encode(s) for s in sents]
    bs = list(batches(ids, [[5] for _ in ids], 4000))
    via_importance = importance.head_confidence(params, cfg, bs)["enc"]
    via_roles = roles.confidence(analysis.encoder_word_maps(params, cfg, vocab, sents))
    assert np.allclose(via_importance, via_roles, atol=1e-12)
    assert np.ptp(via_roles) > 1e-3                          # heads differ: the comparison has content


def test_confidence_leaves_eos_out(monkeypatch):
    """A known attention pattern (fed through a stand-in forward): weight on the EOS key does not count
    (the max is over non-EOS keys, no renormalisation) and EOS queries are skipped."""
    b = SimpleNamespace(src=np.array([[5, 6, EOS, 0]]), src_mask=np.array([[1, 1, 1, 0]], bool),
                        tgt_in=np.array([[BOS, 7]]), tgt_out=np.array([[7, EOS]]),
                        tgt_mask=np.array([[1, 1]], bool))
    A_enc = np.array([[[[0.1, 0.2, 0.7, 0.0],               # query 5: EOS key wins, max over rest 0.2
                        [0.6, 0.3, 0.1, 0.0],               # query 6: 0.6
                        [0.0, 0.0, 1.0, 0.0],               # query EOS: skipped
                        [0.25, 0.25, 0.25, 0.25]]]])        # padding query: skipped
    A_self = np.array([[[[1.0, 0.0], [0.4, 0.6]]]])
    A_cross = np.array([[[[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.8, 0.0]]]])
    cache = {"enc": {"layers": [{"self": {"f": {"A": A_enc}}}]},
             "dec": {"layers": [{"self": {"f": {"A": A_self}}, "cross": {"f": {"A": A_cross}}}]}}
    monkeypatch.setattr(importance.model, "forward", lambda *a, **k: (None, cache))
    cfg = model.Config(n_enc_layers=1, n_dec_layers=1, n_heads=1)
    conf = importance.head_confidence(None, cfg, [b])
    assert np.allclose(conf["enc"], (0.2 + 0.6) / 2)
    assert np.allclose(conf["dec_self"], (1.0 + 0.6) / 2)
    assert np.allclose(conf["dec_enc"], (0.5 + 0.1) / 2)


# ----------------------------------------------------------------------------- Michel et al.
def _loss(params, cfg, b, gates):
    return float(model.loss_forward(params, cfg, b, gates)[0])


def test_michel_against_finite_differences():
    """I[l, h] = mean over batches of |dL/dg_lh| at g = 1 divided by sqrt(sum_h I[l, h]^2), with dL/dg
    from central differences (L(g + e) - L(g - e)) / 2e of the batch loss; per_sentence=True the same
    with one sentence per loss."""
    cfg, params = toy_model()
    gen = np.random.default_rng(24)
    batches = [eos_batch(gen, cfg.vocab_size) for _ in range(2)]

    def fd_importance(groups):
        acc = {k: np.zeros((2, 2)) for k in importance.KINDS}
        for b in groups:
            for k in importance.KINDS:
                for l in range(2):
                    for h in range(2):
                        g = {kk: np.ones((2, 2)) for kk in importance.KINDS}
                        g[k][l, h] = 1 + 1e-6
                        lp = _loss(params, cfg, b, g)
                        g[k][l, h] = 1 - 1e-6
                        lm = _loss(params, cfg, b, g)
                        acc[k][l, h] += abs(lp - lm) / 2e-6
        return {k: (a / len(groups)) / np.linalg.norm(a / len(groups), axis=-1, keepdims=True)
                for k, a in acc.items()}
    got = importance.michel_importance(params, cfg, batches)
    want = fd_importance(batches)
    for k in importance.KINDS:
        assert np.allclose(np.linalg.norm(got[k], axis=-1), 1.0)
        assert np.allclose(got[k], want[k], atol=1e-6), k
    sent = [importance._split_rows(b) for b in batches[:1]][0]
    got_s = importance.michel_importance(params, cfg, batches[:1], per_sentence=True)
    want_s = fd_importance(sent)
    assert all(np.allclose(got_s[k], want_s[k], atol=1e-6) for k in importance.KINDS)


# ----------------------------------------------------------------------------- rank correlation
def test_rank_agreement_known_values():
    """rho = 1 for the same order, -1 reversed; with ties a = [1, 2, 2, 3], b = [1, 3, 2, 4]: ranks
    [1, 2.5, 2.5, 4] and [1, 3, 2, 4], rho = 4.5 / sqrt(4.5 * 5) = 0.9486833."""
    a = np.array([0.1, 0.5, 0.3, 0.9])
    assert importance.rank_agreement(a, 2 * a + 1) == pytest.approx(1.0)
    assert importance.rank_agreement(a, -a) == pytest.approx(-1.0)
    assert np.allclose(importance.average_ranks([1, 2, 2, 3]), [1, 2.5, 2.5, 4])
    assert np.allclose(importance.average_ranks([[3, 3], [3, 1]]), [3, 3, 3, 1])
    assert importance.rank_agreement([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / np.sqrt(22.5))
    assert np.isnan(importance.rank_agreement([1, 1, 1], [1, 2, 3]))
    with pytest.raises(importance.ImportanceError):
        importance.rank_agreement([1, 2], [1, 2, 3])


def test_top_quarter_share():
    """H = 8: the top 2 heads' share of each row's total; H = 3: the top 1 (ceil(3 / 4))."""
    M = np.array([[0.5, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05], [1, 1, 1, 1, 1, 1, 1, 1]], float)
    assert np.allclose(importance.top_quarter_share(M), [0.6, 0.25])
    assert np.allclose(importance.top_quarter_share([[0.2, 0.5, 0.3]]), [0.5])


# ----------------------------------------------------------------------------- ablation
def test_ablation_with_fake_translate_and_bleu():
    """Each call switches exactly one head off; drop = BLEU(all) - BLEU(one off). The fake translator
    writes which head is off into its output; the fake BLEU scores 30 minus (l + 1) * (h + 2)."""
    cfg = model.Config(n_enc_layers=2, n_dec_layers=3, n_heads=2)
    calls = []

    def fake_translate(params, cfg_, vocab, srcs, gates=None, beam=1):
        calls.append(gates)
        if gates is None:
            return [["all"] for _ in srcs]
        (kind,) = [k for k in gates if (np.asarray(gates[k]) == 0).any()]
        assert sum(int((np.asarray(g) == 0).sum()) for g in gates.values()) == 1
        l, h = map(int, np.argwhere(np.asarray(gates[kind]) == 0)[0])
        return [[kind, l, h] for _ in srcs]

    def fake_bleu(hyps, refs):
        assert len(hyps) == len(refs) == 2
        if hyps[0] == ["all"]:
            return 30.0
        _, l, h = hyps[0]
        return 30.0 - (l + 1) * (h + 2)

    out = importance.ablation_bleu_drop(None, cfg, None, [["a"], ["b"]], [["x"], ["y"]],
                                        kinds=("enc", "dec_enc"), translate_fn=fake_translate, bleu_fn=fake_bleu)
    assert len(calls) == 1 + 2 * 2 + 3 * 2
    assert np.allclose(out["enc"], [[2, 3], [4, 6]])
    assert np.allclose(out["dec_enc"], [[2, 3], [4, 6], [6, 9]])
    with pytest.raises(importance.ImportanceError, match="kind"):
        importance.ablation_bleu_drop(None, cfg, None, [], [], kinds=("cross",), translate_fn=fake_translate,
                                      bleu_fn=fake_bleu)


# ----------------------------------------------------------------------------- plots
def test_plots_draw():
    """The Figure 1 style plot sorts each layer by relevance and shows confidence in the same order."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rel = np.array([[0.1, 0.7, 0.2], [0.5, 0.25, 0.25]])
    conf = np.array([[0.3, 0.9, 0.4], [0.8, 0.2, 0.1]])
    fig = importance.plot_importance(rel, conf, title="toy")
    ax_rel, ax_conf = [a for a in fig.axes if a.images]      # the other two are colour bars
    shown = ax_conf.images[0].get_array()
    assert np.allclose(shown, [[0.9, 0.4, 0.3], [0.8, 0.2, 0.1]])
    assert np.allclose(ax_rel.images[0].get_array(), [[0.7, 0.2, 0.1], [0.5, 0.25, 0.25]])
    ax = importance.plot_relevance_bars(rel)
    assert len(ax.patches) == 6
    plt.close("all")
