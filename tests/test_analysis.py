"""minihead.analysis: attention maps over words, the head-roles report and the ``roles`` command.

Toy models (a couple of encoder layers, d_model 16) are trained on a slice of data_small in seconds;
the extraction is checked against an independent single-sentence encoder run. Where the shared real
data exists, a tiny BPE model trained on Multi30k EN-DE is analysed on UD English EWT dev trees.
"""
import os
import pathlib
from dataclasses import replace

import numpy as np
import pytest

from minihead import analysis, backend, checkpoint, cli, commands, paper, roles
from minihead.data.bpe import BPE, piece_to_word, tokenize
from minihead.data.conllu_io import Sentence, read_conllu, write_conllu
from minihead.data.corpus import REPO_ROOT, load_data_small
from minihead.data.vocab import EOS, UNK, frequencies
from minihead.errors import CheckpointError, MiniheadError
from minihead.model import encoder_forward, init_params
from minihead.train import Corpus, preset, train

N_TRAIN = 1500
TINY = dict(max_steps=30, eval_every=30, max_tokens=800, warmup=10, dev_bleu_sentences=10,
            patience=100, n_enc_layers=2, n_dec_layers=1, d_model=16, d_ff=32, n_heads=2)


def realdata_dir():
    env = os.environ.get("MINIHEAD_REALDATA")
    return pathlib.Path(env) if env else \
        pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "realdata"


@pytest.fixture(scope="module")
def small():
    splits, trees = load_data_small()
    return splits, trees


@pytest.fixture(scope="module")
def word_model(small, tmp_path_factory):
    """A tiny word-level model trained for 30 steps on the first 1500 data_small pairs, saved as a
    checkpoint whose metadata records n_train (the roles command reads the frequencies from it)."""
    splits, _ = small
    corpus = Corpus.build(list(zip(*splits["train"])), list(zip(*splits["dev"]))[:20], n_train=N_TRAIN)
    cfg, tcfg = preset("quick", len(corpus.vocab), **TINY)
    out = tmp_path_factory.mktemp("word_model")
    res = train(corpus, cfg, tcfg, str(out / "run"), progress=False)
    path = checkpoint.save(str(out / "ck.npz"), res.params, cfg, corpus.vocab,
                           meta={"train": {**tcfg.to_dict(), "n_train": N_TRAIN}})
    return res.params, cfg, corpus, path


@pytest.fixture(scope="module")
def bpe_model(small):
    """An untrained model (random weights) over BPE pieces of data_small with few merges, so that
    most rare words are split into several pieces."""
    splits, _ = small
    src, tgt = splits["train"]
    bpe = BPE.learn(src[:N_TRAIN] + tgt[:N_TRAIN], 150)
    corpus = Corpus.build([(bpe.segment(s), bpe.segment(t)) for s, t in zip(src[:N_TRAIN], tgt[:N_TRAIN])],
                          [])
    cfg, _ = preset("quick", len(corpus.vocab), **TINY)
    return init_params(cfg, seed=3), cfg, corpus.vocab, bpe


def as_float64(params, cfg):
    """The same model in float64, so batched and single runs agree to rounding (1e-12)."""
    return {k: v.astype("float64") for k, v in params.items()}, replace(cfg, dtype="float64")


def single_run(params, cfg, vocab, tokens):
    """Reference: the encoder on one sentence alone (no padding); A of every layer (L, H, n+1, n+1)."""
    ids = vocab.encode(tokens) + [EOS]
    src = backend.to_device(np.array([ids]))
    _, cache = encoder_forward(params, cfg, src, src != 0)
    return backend.to_host(np.stack([backend.to_host(c["self"]["f"]["A"][0]) for c in cache["layers"]]))


# ----------------------------------------------------------------------------------------------
# Extraction

def test_word_maps_match_single_sentence_runs_with_eos_removed(word_model, small):
    """Batched extraction equals the encoder run on each sentence alone, with the EOS row and
    column dropped; so each row sums to 1 - (its weight on EOS) <= 1."""
    params, cfg, corpus, _ = word_model
    params, cfg = as_float64(params, cfg)
    sents = small[0]["dev"][0][:40]          # lengths vary, so most rows are padded in the batch
    maps = analysis.encoder_word_maps(params, cfg, corpus.vocab, sents, max_tokens=300)
    assert len(maps) == len(sents)
    assert len({len(s) for s in sents}) > 3
    for s, m in zip(sents, maps):
        n = len(s)
        m = backend.to_host(m)
        assert m.shape == (cfg.n_enc_layers, cfg.n_heads, n, n)
        ref = single_run(params, cfg, corpus.vocab, s)                   # (L, H, n+1, n+1)
        np.testing.assert_allclose(m, ref[:, :, :n, :n], atol=1e-12)
        eos_weight = ref[:, :, :n, n]                                    # (L, H, n)
        np.testing.assert_allclose(m.sum(-1), 1.0 - eos_weight, atol=1e-12)
        assert (m.sum(-1) <= 1.0 + 1e-6).all()


def test_unknown_tokens_become_unk_and_keep_their_position(word_model):
    """A source word the vocabulary lacks is encoded as UNK in place: its sentence's word maps equal
    those of the same sentence with the literal <unk> token, the word count is kept, and unknown_words
    reports (sentence, position) for both."""
    params, cfg, corpus, _ = word_model
    known = [corpus.vocab.itos[i] for i in (10, 11, 12, 13)]
    odd = known[:2] + ["qqqxyz-never-seen"] + known[2:]
    as_unk = known[:2] + [corpus.vocab.itos[UNK]] + known[2:]
    # one call per sentence: two rows of one batched GEMM may be summed along different kernel paths
    # (1e-7 apart in float32 on some CPUs), while the same input in the same shape gives the same bits
    (a,), (b,) = (analysis.encoder_word_maps(params, cfg, corpus.vocab, [s]) for s in (odd, as_unk))
    assert a.shape[-1] == 5
    np.testing.assert_array_equal(backend.to_host(a), backend.to_host(b))
    assert analysis.unknown_words(corpus.vocab, [odd, as_unk]) == [(0, 2), (1, 2)], \
        "the literal <unk> token is a vocabulary entry but maps to UNK too"


def test_bpe_aggregation_keeps_words_and_sums_pieces(bpe_model, small):
    """With a BPE model the word maps are roles.aggregate_attention of the piece maps: columns of a
    word sum its pieces, a word's row is its first piece's row (or the mean of its pieces' rows);
    word counts are those of the input and rows still sum to 1 - EOS weight of the first piece."""
    params, cfg, vocab, bpe = bpe_model
    words = small[0]["dev"][0][:30]
    pieces = [bpe.segment(w) for w in words]
    assert sum(len(p) > len(w) for p, w in zip(pieces, words)) > 10, "the BPE splits words"
    piece_maps = analysis.encoder_word_maps(params, cfg, vocab, pieces)
    for from_word in ("first", "mean"):
        word_maps = analysis.encoder_word_maps(params, cfg, vocab, words, bpe=bpe, from_word=from_word)
        for w, p, wm, pm in zip(words, pieces, word_maps, piece_maps):
            wm, pm = backend.to_host(wm), backend.to_host(pm)
            assert wm.shape == (cfg.n_enc_layers, cfg.n_heads, len(w), len(w))
            p2w = np.array(piece_to_word(p))
            assign = (p2w[:, None] == np.arange(len(w))[None, :]).astype(float)   # (P, W)
            cols = pm @ assign                                                    # (L, H, P, W)
            if from_word == "first":
                first = [int(np.flatnonzero(p2w == k)[0]) for k in range(len(w))]
                expect = cols[:, :, first, :]
                ref = single_run(params, cfg, vocab, p)
                np.testing.assert_allclose(wm.sum(-1), 1.0 - ref[:, :, first, len(p)], atol=2e-6)
            else:
                expect = np.stack([cols[:, :, p2w == k, :].mean(2) for k in range(len(w))], axis=2)
            np.testing.assert_allclose(wm, expect, atol=2e-6)


def test_empty_tokens_and_sentences_are_refused(bpe_model):
    """BPE segmentation would drop an empty token and shift every later word."""
    params, cfg, vocab, bpe = bpe_model
    with pytest.raises(analysis.AnalysisError, match="sentence 1, word 2: empty"):
        analysis.encoder_word_maps(params, cfg, vocab, [["a", "dog"], ["a", ""]], bpe=bpe)
    with pytest.raises(analysis.AnalysisError, match="sentence 0: no tokens"):
        analysis.encoder_word_maps(params, cfg, vocab, [[]])


def test_decoder_maps_shapes_causality_and_eos_column(word_model, small):
    """Self-attention over BOS + y is causal with rows summing to 1; cross-attention drops the
    source EOS column, so its rows sum to at most 1."""
    params, cfg, corpus, _ = word_model
    src, tgt = (x[:12] for x in small[0]["dev"])
    out = analysis.decoder_maps(params, cfg, corpus.vocab, src, tgt)
    for s, t, d in zip(src, tgt, out):
        S, T = len(s), len(t) + 1
        a_self, a_cross = backend.to_host(d["self"]), backend.to_host(d["cross"])
        assert a_self.shape == (cfg.n_dec_layers, cfg.n_heads, T, T)
        assert a_cross.shape == (cfg.n_dec_layers, cfg.n_heads, T, S)
        assert np.abs(np.triu(a_self, k=1)).max() == 0
        np.testing.assert_allclose(a_self.sum(-1), 1.0, atol=2e-6)
        assert (a_cross.sum(-1) < 1.0).all() and (a_cross.sum(-1) > 0).all()


# ----------------------------------------------------------------------------------------------
# The report

def test_head_roles_agrees_with_the_measures_it_collects(word_model, small):
    """analysis.head_roles on 150 dev trees equals the measures of roles.py applied to the same word
    maps: confidence, positional shares (shares over possible queries >= shares over all), offset
    baseline, Table 1 rows in RELATIONS x DIRECTIONS order, rare-word top_n, a role for every head,
    the syntactic margin (best accuracy minus baseline), and the word and unknown-word counts."""
    params, cfg, corpus, _ = word_model
    trees = small[1]["dev"][:150]
    rep = analysis.head_roles(params, cfg, corpus.vocab, trees, corpus.src_freq)
    L, H = cfg.n_enc_layers, cfg.n_heads
    assert (rep.n_layers, rep.n_heads) == (L, H)
    assert [m.shape[-1] for m in rep.maps] == [len(t.tokens) for t in trees]
    maps = analysis.encoder_word_maps(params, cfg, corpus.vocab, [t.tokens for t in trees])
    np.testing.assert_array_equal(backend.to_host(rep.confidence), backend.to_host(roles.confidence(maps)))
    assert backend.to_host(rep.shares).shape == (L, H, 2)
    assert (backend.to_host(rep.shares_possible) >= backend.to_host(rep.shares)).all()
    assert rep.baseline == roles.offset_baseline(trees)[0]
    assert [(r.relation, r.direction) for r in rep.table] == \
        [(r, d) for r in roles.RELATIONS for d in roles.DIRECTIONS]
    assert rep.rare is not None and rep.rare.top_n == paper.RARE["top_n"]
    assert set(rep.roles) == {(l, h) for l in range(L) for h in range(H)}
    margin = backend.to_host(rep.syntactic_margin())
    assert margin[0, 1] == pytest.approx(max(float(backend.to_host(a)[0, 1]) - rep.baseline[k]
                                             for k, a in rep.acc.items()))
    assert rep.n_words == sum(len(t.tokens) for t in trees)
    assert rep.n_unknown == len(analysis.unknown_words(corpus.vocab, [t.tokens for t in trees]))
    assert len(analysis.format_positional(rep).splitlines()) == 2 + L * H
    assert len(analysis.format_table(rep).splitlines()) == 2 + 8
    assert len(analysis.format_rare(rep).splitlines()) == 4 + L * H
    assert "OpenSubtitles" in analysis.format_table(rep)


def test_head_roles_refuses_piece_frequencies_with_bpe(bpe_model, small):
    """With a BPE model, word frequencies must be given by word: piece frequencies are refused naming
    'BPE pieces', and without frequencies the rare-word measure is left out (no head gets that role)."""
    params, cfg, vocab, bpe = bpe_model
    with pytest.raises(analysis.AnalysisError, match="BPE pieces"):
        analysis.head_roles(params, cfg, vocab, small[1]["dev"][:5], {"clu@@": 3, "gut": 3}, bpe=bpe)
    rep = analysis.head_roles(params, cfg, vocab, small[1]["dev"][:5], None, bpe=bpe)
    assert rep.rare is None and not rep.heads_with("rare")


# ----------------------------------------------------------------------------------------------
# The command

def run_cli(argv):
    """The roles command as the CLI parses it, run without the CLI's checks (the command's own errors are tested)."""
    return commands.cmd_roles(cli.build_parser().parse_args(argv))


def test_roles_command_prints_tables_and_saves_figures(word_model, tmp_path, capsys):
    """python -m minihead roles CHECKPOINT prints the dev set used, the positional table, Table 1 beside
    the paper's WMT numbers and the rare-word shares with their chance level, takes frequencies from
    the training source as training did, and saves the two figures."""
    _, cfg, corpus, path = word_model
    out = tmp_path / "figs"
    rep = run_cli(["roles", path, "--max-sentences", "60", "--out", str(out)])
    text = capsys.readouterr().out
    assert "dev.conllu" in text and "60 sentences" in text
    assert "| layer | head | confidence |" in text
    assert "verb->subject" in text and "paper WMT" in text
    assert "chance: rarest" in text and "train.src" in text
    # Frequencies come from the first n_train lines of train.src, as in training.
    assert rep.rare.top_n == paper.RARE["top_n"]
    for name in ("head_scores.png", "heads_sentence0.png"):
        assert (out / name).stat().st_size > 1000


def test_roles_command_with_bpe(bpe_model, small, tmp_path, capsys):
    """--bpe folds pieces into words; rare-word frequencies need --train-src (word counts), else
    that table is skipped with a note rather than computed from piece counts."""
    params, cfg, vocab, bpe = bpe_model
    ck = checkpoint.save(str(tmp_path / "bpe.npz"), params, cfg, vocab)
    codes = tmp_path / "codes.txt"
    bpe.save(codes)
    dev = str(REPO_ROOT / "data_small" / "dev.conllu")
    rep = run_cli(["roles", ck, "--conllu", dev, "--bpe", str(codes), "--max-sentences", "30",
                   "--out", str(tmp_path / "f")])
    text = capsys.readouterr().out
    assert "skipped: with --bpe" in text and rep.rare is None
    assert [m.shape[-1] for m in rep.maps] == [len(t.tokens) for t in small[1]["dev"][:30]]
    train_src = tmp_path / "train.src"
    train_src.write_text("\n".join(" ".join(s) for s in small[0]["train"][0][:N_TRAIN]) + "\n")
    rep = run_cli(["roles", ck, "--conllu", dev, "--bpe", str(codes), "--train-src", str(train_src),
                   "--max-sentences", "30", "--out", str(tmp_path / "f")])
    assert "chance: rarest" in capsys.readouterr().out
    assert rep.rare.top_n == paper.RARE["top_n"]


def one_line_error(exc_info, *parts):
    msg = str(exc_info.value)
    assert isinstance(exc_info.value, MiniheadError) and "\n" not in msg
    for part in parts:
        assert part in msg, msg


def test_roles_command_errors_are_one_line_and_name_the_file(word_model, tmp_path):
    """The roles command's bad inputs are one-line errors naming the file: a missing checkpoint,
    CoNLL-U or BPE file, and a treebank whose words are mostly unknown to the model."""
    _, _, _, path = word_model
    with pytest.raises(CheckpointError) as e:
        run_cli(["roles", str(tmp_path / "nope.npz")])
    one_line_error(e, "nope.npz", "no such checkpoint")
    with pytest.raises(analysis.AnalysisError) as e:
        run_cli(["roles", path, "--conllu", str(tmp_path / "none.conllu")])
    one_line_error(e, "none.conllu", "no such CoNLL-U file")
    with pytest.raises(analysis.AnalysisError) as e:
        run_cli(["roles", path, "--bpe", str(tmp_path / "codes.txt")])
    one_line_error(e, "codes.txt", "no such BPE file")
    foreign = tmp_path / "foreign.conllu"
    write_conllu(foreign, [Sentence(["Ceci", "est", "étranger", "."], [3, 3, 0, 3],
                                    ["nsubj", "cop", "root", "punct"], ["PRON", "AUX", "ADJ", "PUNCT"])])
    with pytest.raises(analysis.AnalysisError) as e:
        run_cli(["roles", path, "--conllu", str(foreign)])
    one_line_error(e, "foreign.conllu:", "3 of 4 words are unknown", "'Ceci'")


# ----------------------------------------------------------------------------------------------
# Real language: Multi30k EN-DE (BPE) -> UD English EWT dev

@pytest.mark.skipif(not (realdata_dir() / "ud_en_ewt" / "dev.conllu").exists(),
                    reason="shared/realdata (UD EWT, Multi30k) not present")
def test_real_language_run_on_ewt(tmp_path):
    """Cased text on both sides (EWT forms are cased): Multi30k sentences are split by
    bpe.tokenize without lowercasing, BPE is learned on both languages, and the EWT forms go to
    the model as they are."""
    root = realdata_dir()
    en = (root / "multi30k" / "train.en").read_text(encoding="utf-8").splitlines()[:2000]
    de = (root / "multi30k" / "train.de").read_text(encoding="utf-8").splitlines()[:2000]
    en_tok, de_tok = [tokenize(x) for x in en], [tokenize(x) for x in de]
    bpe = BPE.learn(en_tok + de_tok, 600)
    pairs = [(bpe.segment(s), bpe.segment(t)) for s, t in zip(en_tok, de_tok)]
    corpus = Corpus.build(pairs[:1900], pairs[1900:1920])
    cfg, tcfg = preset("quick", len(corpus.vocab), **TINY)
    res = train(corpus, cfg, tcfg, str(tmp_path / "run"), progress=False)
    trees = read_conllu(root / "ud_en_ewt" / "dev.conllu")[:200]
    src_freq = frequencies(en_tok[:1900])
    rep = analysis.head_roles(res.params, cfg, corpus.vocab, trees, src_freq, bpe=bpe)

    L, H = cfg.n_enc_layers, cfg.n_heads
    assert backend.to_host(rep.confidence).shape == (L, H)
    assert [m.shape for m in rep.maps] == [(L, H, len(t.tokens), len(t.tokens)) for t in trees]
    n_pieces = sum(len(bpe.segment(t.tokens)) for t in trees)
    assert n_pieces > 1.2 * rep.n_words, "subwords were aggregated back into words"
    assert rep.baseline == roles.offset_baseline(trees)[0]
    assert all(rep.counts[k] > 0 for k in rep.counts)
    assert rep.n_unknown < 0.02 * rep.n_words, "BPE pieces cover nearly every EWT word"
    assert rep.rare is not None and rep.rare.n_sentences > 50
    for m in rep.maps[:20]:
        assert (backend.to_host(m).sum(-1) <= 1 + 1e-6).all()
