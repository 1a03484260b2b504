"""Need marks and need accuracy (minihead/needs.py): the marks of hand-read generated sentences, the marks of the
shipped data_small references (rebuilt exactly from the control's tokens), the scoring, and the teacher-forced
predictions of a tiny untrained model."""
import pathlib
from types import SimpleNamespace

import pytest

from minihead import model, needs
from minihead.backend import xp
from minihead.data import read_conllu, synth
from minihead.data.corpus import read_lines
from minihead.data.vocab import Vocab, batches
from minihead.errors import DataError, MiniheadError

DATA = pathlib.Path(__file__).resolve().parents[1] / "data_small"
SEED = 1234          # data_small's (and data_small/control's, see their README.md) lexicon seed


def counts(marks):
    """{need: number of tokens carrying it} over a list of sentences' marks."""
    return {n: sum(n in m for ms in marks for m in ms) for n in needs.NEEDS}


def dress(tok, mark, particle):
    """The needs-language token rebuilt from its control twin and its marks: the control's one name particle
    becomes the marked case particle; any other token takes its fused marker (case, adverb or gender suffix),
    then its sandhi ending."""
    if tok == particle:
        (marker,) = mark.values()
        return marker
    fused = "".join(mark.get(n, "") for n in ("nsubj", "obj", "advmod", "amod"))
    return tok + fused + (f"-{mark['sandhi']}" if "sandhi" in mark else "")


# --------------------------------------------------------------------------- hand-read sentences
@pytest.fixture(scope="module")
def gen7():
    lex = synth.Lexicon(7)
    return lex, synth.generate(20, 7, lex), synth.generate(20, 7, lex, needs=False)


# Lexicon(7): subject cases ma, kha, zhi and object cases tsi, tsa, gu for verb classes 0, 1, 2.
# Sandhi by the next source word's initial: a-h -> k, i-q -> m, r-z -> t, "." -> k.
HAND = {
    # adverb, adjective, subject case fused on a noun. "a"=vo-k (next "dag": k); "dag"=nek + ma (beends: class 0)
    # -k (next "beends"); the PP "the seg flacheam near" = rai-t goko-k yaikysh-k zhai, "seg" taking -o for
    # flacheam's gender 1; "peslamply"=raik + e (beends: class 0) -m (next "near"); "beends"=tsugika-m.
    12: ("a dag beends peslamply near the seg flacheam .",
         "vo-k nekma-k rai-t goko-k yaikysh-k zhai raike-m tsugika-m .",
         [{"sandhi": "k"}, {"sandhi": "k", "nsubj": "ma"}, {"sandhi": "t"}, {"sandhi": "k", "amod": "o"},
          {"sandhi": "k"}, {}, {"sandhi": "m", "advmod": "e"}, {"sandhi": "m"}, {}]),
    # a name keeps its form and is followed by the case particle of its verb (teajonged: class 2, zhi); two
    # adjectives agree with a plural noun of gender 2 (-i); the object noun takes gu (class 2) before -t.
    6: ("jeoratus teajonged every cub flacheam that flooviged near some let seg ploums .",
        "jeoratus zhi tsu-m khaki-t goki-m zidazen-k zhai bi-k qoalo-k yaikyshgu-t noa lezu-m moshu-k .",
        [{}, {"nsubj": "zhi"}, {"sandhi": "m"}, {"sandhi": "t", "amod": "i"}, {"sandhi": "m", "amod": "i"},
         {"sandhi": "k"}, {}, {"sandhi": "k"}, {"sandhi": "k", "amod": "o"}, {"sandhi": "t", "obj": "gu"}, {},
         {"sandhi": "m"}, {"sandhi": "k"}, {}]),
    # a rare noun ("flusni") takes its object case (tsi) but no sandhi ending
    18: ("the fea rabs the flusni .",
         "rai-k tsanenma-t rai-k koayaiziktsi loqexa-t .",
         [{"sandhi": "k"}, {"sandhi": "t", "nsubj": "ma"}, {"sandhi": "k"}, {"obj": "tsi"}, {"sandhi": "t"}, {}]),
}


@pytest.mark.parametrize("k", sorted(HAND))
def test_need_marks_of_hand_read_sentences(gen7, k):
    """Pair k of synth.generate(20, seed=7) is the source / target written above, and need_marks gives exactly the
    marks read off it by hand (adverb + adjective + fused subject case; name + particle; rare noun object)."""
    lex, pairs, _ = gen7
    src, tgt, marks = HAND[k]
    assert pairs[k].src == src.split() and pairs[k].tgt == tgt.split()
    assert needs.need_marks(pairs[k].tree, lex) == marks
    assert all(needs.marker_ok(t, n, x) for t, m in zip(tgt.split(), marks) for n, x in m.items())


def test_need_marks_rebuild_generated_targets_from_the_control(gen7):
    """For each of the 20 generated pairs, dressing the control translation's tokens with the marks gives the
    needs-language translation token for token (so no mark is missing, extra or wrong), and all five needs and
    a name's case particle occur among them."""
    lex, pairs, control = gen7
    all_marks = []
    for p, c in zip(pairs, control):
        marks = needs.need_marks(p.tree, lex)
        assert [dress(t, m, lex.subj_case_tgt[0]) for t, m in zip(c.tgt, marks)] == p.tgt
        all_marks.append(marks)
    assert all(counts(all_marks).values())
    assert any(m and "sandhi" not in m and t == next(iter(m.values()))
               for p, ms in zip(pairs, all_marks) for t, m in zip(p.tgt, ms))


def test_marker_ok_and_stem_follow_the_rules():
    """marker_ok: sandhi is the ending "-x"; fused case, adverb and gender suffixes come before it (or end a token
    without one: a rare noun); a particle is the marker itself. stem strips exactly those markers."""
    ok, cases = needs.marker_ok, ("ma", "kha", "zhi", "tsi", "tsa", "gu")
    assert ok("goko-k", "sandhi", "k") and not ok("goko-m", "sandhi", "k") and not ok("goko", "sandhi", "k")
    assert ok("goko-k", "amod", "o") and not ok("goka-k", "amod", "o")
    assert ok("raike-m", "advmod", "e") and not ok("raikoa-m", "advmod", "e")
    assert ok("nekma-k", "nsubj", "ma") and not ok("nekkha-k", "nsubj", "ma") and not ok("nek-k", "nsubj", "ma")
    assert ok("koayaiziktsi", "obj", "tsi") and ok("zhi", "nsubj", "zhi") and not ok("ma", "nsubj", "zhi")
    assert {needs.stem(t, cases) for t in ("nekma-k", "nekkha-t", "nek-m", "nek")} == {"nek"}
    assert {needs.stem(t, cases) for t in ("goko-k", "goka-t", "goki", "gok-m")} == {"gok"}
    assert needs.stem("zhi", cases) == needs.stem("ma", cases) == ""     # particles align with each other
    assert needs.stem("tsugika-m", cases) == "tsugik"                     # stems keep their consonant


def test_need_marks_reject_another_lexicon(shipped):
    """A data_small tree read with another seed's lexicon is a DataError naming the unknown word, and scoring
    predictions of the wrong length is a DataError."""
    with pytest.raises(DataError, match="not a word of this lexicon"):
        needs.need_marks(shipped.test.trees[0], synth.Lexicon(7))
    with pytest.raises(DataError, match="sentence 1"):
        needs.teacher_forced_scores([shipped.test.ref[0][:-1]], shipped.test.marks[:1])


# --------------------------------------------------------------------------- the shipped data
@pytest.fixture(scope="module")
def shipped():
    lex = synth.Lexicon(SEED)
    out = SimpleNamespace(lex=lex)
    for split in ("dev", "test"):
        trees = read_conllu(DATA / f"{split}.conllu")
        setattr(out, split, SimpleNamespace(
            trees=trees, src=[s.split() for s in read_lines(DATA / f"{split}.src")],
            ref=[s.split() for s in read_lines(DATA / f"{split}.tgt")],
            control=[s.split() for s in read_lines(DATA / "control" / f"{split}.tgt")],
            marks=[needs.need_marks(t, lex) for t in trees]))
    return out


@pytest.mark.parametrize("split", ["dev", "test"])
def test_shipped_marks_line_up_with_the_references(shipped, split):
    """Every data_small dev / test reference has one mark per token, every mark is carried by its token
    (marker_ok), a token ends in a sandhi ending exactly when it is marked for sandhi, and every need occurs
    (test split: sandhi 8639, nsubj 1219, obj 769, advmod 459, amod 1944)."""
    d = getattr(shipped, split)
    assert len(d.marks) == len(d.ref) == 1000
    for ref, marks in zip(d.ref, d.marks):
        assert len(marks) == len(ref)
        for tok, m in zip(ref, marks):
            assert all(needs.marker_ok(tok, n, x) for n, x in m.items()), (tok, m)
            assert ("sandhi" in m) == (needs.strip_sandhi(tok) != tok), (tok, m)
    assert min(counts(d.marks).values()) > 400, counts(d.marks)


@pytest.mark.parametrize("split", ["dev", "test"])
def test_control_has_none_of_the_marks(shipped, split):
    """data_small/control (same seed, lexicon, trees and word order) dressed with the marks is the needs reference
    token for token; undressed, none of its tokens carries a sandhi, case, adverb or gender marker, and its name
    particle is one and the same whatever the role and verb."""
    d, particle = getattr(shipped, split), shipped.lex.subj_case_tgt[0]
    seen_particle = False
    for ctrl, ref, marks in zip(d.control, d.ref, d.marks):
        assert [dress(t, m, particle) for t, m in zip(ctrl, marks)] == ref
        for tok, m in zip(ctrl, marks):
            if tok == particle:
                seen_particle = True
            else:
                assert not any(needs.marker_ok(tok, n, x) for n, x in m.items()), (tok, m)
    assert seen_particle


# --------------------------------------------------------------------------- scoring
def test_references_score_perfectly(shipped):
    """The test references, as teacher-forced predictions and as greedy hypotheses, get accuracy 1.0 on every
    need, with every marked position matched."""
    d = shipped.test
    tf, greedy = needs.teacher_forced_scores(d.ref, d.marks), needs.greedy_scores(d.ref, d.ref, d.marks)
    for n, c in counts(d.marks).items():
        assert tf[n] == {"correct": c, "total": c, "accuracy": 1.0}
        assert greedy[n] == {"correct": c, "total": c, "matched": c, "accuracy": 1.0}


def test_control_as_hypothesis_is_aligned_but_misses_the_needs(shipped):
    """Greedy-scoring the control translations against the test references: the stems ignore the markers, so every
    marked position is matched, and no need is met except the name particles of class-0 subjects (the control's
    one particle)."""
    d, particle = shipped.test, shipped.lex.subj_case_tgt[0]
    s = needs.greedy_scores(d.control, d.ref, d.marks)
    lucky = sum(t == particle for r in d.ref for t in r)   # a class-0 subject's name particle, not a fused case
    assert lucky > 0
    for n, c in counts(d.marks).items():
        assert s[n]["matched"] == s[n]["total"] == c
        assert s[n]["correct"] == (lucky if n == "nsubj" else 0), (n, s[n])


def _first(d, need):
    """(sentence, position) of the first token in d marked for ``need``."""
    return next((s, j) for s, ms in enumerate(d.marks) for j, m in enumerate(ms) if need in m)


def test_one_wrong_gender_costs_exactly_one_amod(shipped):
    """Changing one adjective's gender suffix (its sandhi ending kept) lowers the amod count by one under teacher
    forcing and under greedy scoring (still matched), and leaves every other need's count unchanged."""
    d = shipped.test
    s, j = _first(d, "amod")
    tok, suffix = d.ref[s][j], d.marks[s][j]["amod"]
    other = next(g for g in synth.GENDER_SUFFIX if g != suffix)
    base = needs.strip_sandhi(tok)
    wrong = [list(r) for r in d.ref]
    wrong[s][j] = base[:len(base) - len(suffix)] + other + tok[len(base):]
    assert wrong[s][j] != tok and wrong[s][j].endswith(tok[len(base):])
    for before, after in ((needs.teacher_forced_scores(d.ref, d.marks), needs.teacher_forced_scores(wrong, d.marks)),
                          (needs.greedy_scores(d.ref, d.ref, d.marks), needs.greedy_scores(wrong, d.ref, d.marks))):
        for n in needs.NEEDS:
            assert after[n]["correct"] == before[n]["correct"] - (n == "amod")
            assert after[n]["total"] == before[n]["total"] and after[n].get("matched") == before[n].get("matched")


def test_greedy_alignment_survives_a_dropped_token(shipped):
    """Dropping one adjective (marked sandhi + amod) from one hypothesis leaves exactly that position unmatched:
    matched = total - 1 for sandhi and amod, matched = total elsewhere, every matched position still correct;
    dropping an unmarked postposition instead leaves everything matched."""
    d = shipped.test
    s, j = _first(d, "amod")
    hyps = [list(r) for r in d.ref]
    del hyps[s][j]
    g = needs.greedy_scores(hyps, d.ref, d.marks)
    for n in needs.NEEDS:
        assert g[n]["matched"] == g[n]["total"] - (n in ("sandhi", "amod")) == g[n]["correct"], (n, g[n])
    s, j = next((s, j) for s, ms in enumerate(d.marks) for j, m in enumerate(ms)
                if not m and d.ref[s][j] in shipped.lex.prep_tgt.values())
    hyps = [list(r) for r in d.ref]
    del hyps[s][j]
    g = needs.greedy_scores(hyps, d.ref, d.marks)
    assert all(g[n]["matched"] == g[n]["total"] == g[n]["correct"] for n in needs.NEEDS)


# --------------------------------------------------------------------------- a tiny model
@pytest.fixture(scope="module")
def tiny(shipped):
    """A tiny untrained float64 model over a vocabulary of the first 12 test pairs."""
    d = shipped.test
    src, ref, trees = d.src[:12], d.ref[:12], d.trees[:12]
    vocab = Vocab.build(src + ref)
    cfg = model.Config(vocab_size=len(vocab), n_enc_layers=1, n_dec_layers=1, n_heads=2, d_model=16, d_ff=32,
                       dropout=0.0, dtype="float64")
    return SimpleNamespace(params=model.init_params(cfg, 3), cfg=cfg, vocab=vocab, src=src, ref=ref, trees=trees)


def test_teacher_forced_predictions_come_back_in_input_order(tiny):
    """Batching by length reorders the 12 pairs (of different lengths) into several batches, yet the predictions
    come back in the input order: one token per reference token, the same as running each pair alone."""
    t = tiny
    ids = ([t.vocab.encode(s) for s in t.src], [t.vocab.encode(r) for r in t.ref])
    order = [i for b in batches(*ids, max_tokens=150) for i in b.index]
    assert len({len(r) for r in t.ref}) > 3 and order != sorted(order) and len(list(batches(*ids, 150))) > 1
    preds = needs.teacher_forced_predictions(t.params, t.cfg, t.vocab, t.src, t.ref, max_tokens=150)
    assert [len(p) for p in preds] == [len(r) for r in t.ref]
    for i in range(len(t.src)):
        alone = needs.teacher_forced_predictions(t.params, t.cfg, t.vocab, t.src[i:i + 1], t.ref[i:i + 1])
        assert preds[i] == alone[0]
    assert all(tok in t.vocab.stoi for p in preds for tok in p)


def test_need_scores_counts_every_marked_token(tiny, shipped):
    """need_scores on the tiny model: both parts count every marked reference token of the 12 pairs (greedy ones
    matched or not), with accuracies in [0, 1]."""
    t = tiny
    out = needs.need_scores(t.params, t.cfg, t.vocab, t.src, t.ref, t.trees, shipped.lex)
    want = counts(shipped.test.marks[:12])
    for part in ("teacher_forced", "greedy"):
        for n in needs.NEEDS:
            r = out[part][n]
            assert r["total"] == want[n] and 0 <= r["correct"] <= r.get("matched", r["total"])
            assert r["accuracy"] is None or 0.0 <= r["accuracy"] <= 1.0


# --------------------------------------------------------------------------- the head x need matrix
def _oracle(ref, marks, breaks):
    """A fake model under teacher forcing: it writes the reference, except that each need in ``breaks`` (need ->
    set of encoder heads (l, h) that must ALL be open for it) gets a wrong token ("x") wherever that need is
    marked while any of its heads is switched off."""
    def predict(gates):
        off = set() if gates is None else {(l, h) for l, row in enumerate(gates["enc"].tolist())
                                           for h, g in enumerate(row) if g == 0.0}
        broken = {n for n, heads in breaks.items() if heads & off}
        return [["x" if broken & set(m) else tok for tok, m in zip(toks, ms)] for toks, ms in zip(ref, marks)]
    return predict


def test_ablation_matrix_names_the_head_that_does_each_job(shipped):
    """drop[l, h, need] = acc(all heads) - acc(head (l, h) off). A fake model whose nsubj markers fail when L1H0
    is off and whose amod markers fail only when BOTH heads of layer 0 are off: the single ablations show nsubj
    lost (drop = its whole accuracy) at L1H0 alone and nothing else; amod survives every single ablation, so the
    pairs within a layer are tried and layer 0's pair loses it; BLEU is scored on the first n_bleu pairs."""
    d = shipped.test
    src, ref, trees, marks = d.src[:40], d.ref[:40], d.trees[:40], d.marks[:40]
    cfg = SimpleNamespace(n_heads=2, dtype="float64", n_layers=lambda k: 3 if k == "enc" else 1)
    predict = _oracle(ref, marks, {"nsubj": {(1, 0)}})

    def predict(gates, _single=predict):
        out = _single(gates)
        if gates is not None and gates["enc"][0].sum() == 0:           # both heads of layer 0 off
            out = [["x" if "amod" in m else tok for tok, m in zip(toks, ms)] for toks, ms in zip(out, marks)]
        return out
    seen = []

    def fake_translate(s, gates):
        seen.append(len(s))
        return [list(r) for r in ref[:len(s)]]
    m = needs.ablation_matrix(None, cfg, None, src, ref, trees, shipped.lex, n_bleu=25, predict=predict,
                              translate_fn=fake_translate)
    assert m["base"]["nsubj"] == 1.0 and m["base"]["bleu"] == pytest.approx(100.0) and set(seen) == {25}
    assert m["count"] == counts(marks) and m["count"]["nsubj"] > 0 and m["count"]["amod"] > 0
    assert m["single"][1][0]["nsubj"] == 1.0
    assert all(c["nsubj"] == 0.0 for l, row in enumerate(m["single"]) for h, c in enumerate(row) if (l, h) != (1, 0))
    assert all(c["amod"] == 0.0 and c["bleu"] == pytest.approx(0.0) for row in m["single"] for c in row)
    assert "amod" in m["survivors"] and "nsubj" not in m["survivors"]
    assert [(p["layer"], p["heads"]) for p in m["pairs"]] == [(0, [0, 1]), (1, [0, 1]), (2, [0, 1])]
    assert m["pairs"][0]["amod"] == 1.0 and m["pairs"][2]["amod"] == 0.0 and m["pairs"][1]["nsubj"] == 1.0
    assert needs.doers(m, "nsubj") == ["L1H0"] and needs.doers(m, "amod") == []


def test_ablation_matrix_skips_pairs_when_every_need_breaks_somewhere(shipped):
    """When some single ablation breaks every need (here one head carries all of them), no need survives and no
    pair is ablated."""
    d = shipped.test
    ref, marks = d.ref[:40], d.marks[:40]
    cfg = SimpleNamespace(n_heads=2, dtype="float64", n_layers=lambda k: 2 if k == "enc" else 1)
    all_at_l0h1 = _oracle(ref, marks, {n: {(0, 1)} for n in needs.NEEDS})
    m = needs.ablation_matrix(None, cfg, None, d.src[:40], ref, d.trees[:40], shipped.lex, n_bleu=5,
                              predict=all_at_l0h1, translate_fn=lambda s, g: [list(r) for r in ref[:len(s)]])
    assert m["survivors"] == [] and m["pairs"] == []
    assert all(m["single"][0][1][n] == 1.0 for n in needs.NEEDS if m["count"][n])


def test_ablation_matrix_of_a_tiny_model_is_its_gated_scores(tiny, shipped):
    """On a real (tiny, untrained) model, each cell is the base accuracy minus the accuracy with exactly that
    encoder head's gate at 0 (encoder_gates), computed independently here."""
    t = tiny
    m = needs.ablation_matrix(t.params, t.cfg, t.vocab, t.src, t.ref, t.trees, shipped.lex, n_bleu=4)
    marks = shipped.test.marks[:12]
    g = needs.encoder_gates(t.cfg, [(0, 1)])
    assert g["enc"].tolist() == [[1.0, 0.0]] and g["dec_self"].tolist() == [[1.0, 1.0]]
    off = needs.teacher_forced_scores(needs.teacher_forced_predictions(t.params, t.cfg, t.vocab, t.src, t.ref,
                                                                       gates=g), marks)
    for n in needs.NEEDS:
        if m["base"][n] is not None:
            assert m["single"][0][1][n] == pytest.approx(m["base"][n] - off[n]["accuracy"])
    assert len(m["single"]) == 1 and len(m["single"][0]) == 2 and m["n_bleu"] == 4


def test_needs_command_writes_a_study_that_loads_and_resumes_from_its_cache(tmp_path, capsys):
    """``python -m minihead needs`` on a tiny preset: one matrix per seed (every encoder head of every layer, the
    need counts of the whole test set), a study document that study.load_needs accepts, its figure, and a second
    run that reads the cached matrices (same document). A document of other settings is refused as stale, naming
    the command that remakes it."""
    import json
    from minihead import study
    from minihead.cli import main
    tiny = dict(max_steps=3, eval_every=3, d_model=16, n_heads=2, d_ff=16, n_train=60, dev_bleu_sentences=4)
    out, fig = tmp_path / "needs.json", tmp_path / "needs.png"
    argv = ["needs", "--config", "quick", "--seeds", "1,2", "--runs", str(tmp_path / "runs"), "--n-bleu", "3",
            "--n-dev", "6", "--n-ablation", "3",
            "--study", str(out), "--figure", str(fig), "--set"] + [f"{k}={v}" for k, v in tiny.items()]
    doc = main(argv)
    assert "what each encoder head does" in capsys.readouterr().out
    loaded = study.load_needs(str(out))
    assert loaded["seeds"] == [1, 2] and loaded["overrides"] == tiny and fig.stat().st_size > 0
    n_layers = study.prepare("quick", "data_small", **tiny)[3].n_enc_layers
    test_counts = counts([needs.need_marks(t, synth.Lexicon(SEED)) for t in read_conllu(DATA / "test.conllu")])
    assert len({p["model"] for p in loaded["per_seed"]}) == 2      # each seed's weights, fingerprinted
    for p in loaded["per_seed"]:
        m = p["matrix"]
        assert len(m["single"]) == n_layers and all(len(r) == 2 for r in m["single"])
        assert m["count"] == test_counts and m["n_bleu"] == 3
        assert set(p["instruments"]) == set(needs.INSTRUMENTS.values())
        assert all(len(v) == n_layers and len(v[0]) == 2 for v in p["instruments"].values())
    assert set(loaded["agreement"]) == set(needs.INSTRUMENTS)
    sec4 = ["few_heads", "relevance_ablation", "confident", "role_relevance", "role_ablation"]
    assert all(list(p["findings"]) == sec4 for p in loaded["per_seed"])      # judged by the shared criteria
    assert list(loaded["summary"]) == sec4 and loaded["summary"]["few_heads"]["status"] == "untestable"  # 2 heads
    assert loaded["summary"]["role_relevance"]["of"] == 2
    assert json.dumps(main(argv), sort_keys=True) == json.dumps(doc, sort_keys=True)   # as text: NaN != NaN
    stale = {**loaded, "overrides": {**tiny, "max_steps": 4}}
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    with pytest.raises(MiniheadError, match=r"stale.json: stale, its preset differs.*minihead needs --config quick --seeds 1,2 --n-bleu 3 "):
        study.load_needs(str(tmp_path / "stale.json"))


def _matrix(lost):
    """A matrix whose only need (nsubj, 100 marked tokens) loses lost[l][h] / 100 of its accuracy per head."""
    single = [[{**{n: 0.0 for n in needs.NEEDS}, "nsubj": x / 100, "bleu": 0.0} for x in row] for row in lost]
    return {"needs": list(needs.NEEDS), "count": {**{n: 0 for n in needs.NEEDS}, "nsubj": 100}, "single": single}


def test_instrument_agreement_is_a_pooled_rank_test_against_markers_lost():
    """markers_lost[l, h] = sum_need drop[l, h, need] x count[need]. An instrument that ranks the 12 heads of each
    of three seeds as their markers lost agrees (pooled Fisher-z p < 0.05); one that ranks them backwards, or at
    random-looking order with rho near 0, does not; an instrument a seed lacks is left out."""
    import random
    rng = random.Random(0)
    per_seed = []
    for _ in range(3):
        lost = [[rng.uniform(0, 30) for _ in range(2)] for _ in range(6)]
        m = _matrix(lost)
        flat = [x for row in lost for x in row]
        assert [x for row in needs.markers_lost(m) for x in row] == pytest.approx(flat)
        order = sorted(range(12), key=lambda i: flat[i])
        scrambled = [0.0] * 12
        for rank, i in enumerate(order):            # ranks interleaved: rho close to 0
            scrambled[i] = (rank * 5) % 12
        as_grid = lambda v: [v[2 * l:2 * l + 2] for l in range(6)]   # noqa: E731
        per_seed.append((m, {"relevance_abs": {"enc": lost}, "relevance": {"enc": as_grid([-x for x in flat])},
                             "confidence": {"enc": as_grid(scrambled)}}))
    out = needs.instrument_agreement(per_seed)
    names = {a["key"]: a for a in out.values()}
    assert set(names) == {"relevance_abs", "relevance", "confidence"}
    assert names["relevance_abs"]["agrees"] and names["relevance_abs"]["rho"] == pytest.approx([1.0] * 3)
    assert not names["relevance"]["agrees"] and names["relevance"]["pooled"]["rho"] < -0.9
    assert not names["confidence"]["agrees"] and abs(names["confidence"]["pooled"]["rho"]) < 0.5


def test_carriers_are_the_fewest_heads_with_most_of_the_damage():
    """carriers(share): heads by decreasing markers lost, taken until their sum reaches that share of the total
    markers lost (heads that lose none are never carriers; no damage, no carriers)."""
    m = _matrix([[50, 0], [30, 10], [10, -5]])             # total positive damage 100
    assert [name for name, _ in needs.carriers(m, 0.8)] == ["L0H0", "L1H0"]
    assert [name for name, _ in needs.carriers(m, 0.5)] == ["L0H0"]
    assert [name for name, _ in needs.carriers(m, 1.0)] == ["L0H0", "L1H0", "L1H1", "L2H0"]
    assert needs.carriers(_matrix([[0, 0], [0, -3]])) == []


def test_needs_after_scores_the_pruned_model_with_its_gates(tiny, shipped):
    """stages.needs_after: the ``after`` measure of an encoder sweep scores every need on the test split of the
    study with the pruned model's gates: the same accuracies as teacher_forced_scores of that gated model computed
    here; report.needs_along_sweep_table lists the runs that carry it, most heads kept first."""
    from minihead import report, stages
    t = tiny
    study = SimpleNamespace(cfg=t.cfg, vocab=t.vocab, splits={"test": (t.src, t.ref)}, trees={"test": t.trees})
    name, settings, measure = stages.needs_after(study)
    g = needs.encoder_gates(t.cfg, [(0, 0)])
    got = measure(t.params, g, {"enc": [[False, True]]})
    want = needs.teacher_forced_scores(needs.teacher_forced_predictions(t.params, t.cfg, t.vocab, t.src, t.ref,
                                                                        gates=g), shipped.test.marks[:12])
    assert name == "needs_after" and settings["split"] == "test"
    assert got == {n: want[n]["accuracy"] for n in needs.NEEDS}
    runs = [{"lam": 0.1, "n_retained": {"enc": 1}, "bleu": 10.0, "needs_after": got},
            {"lam": 0.0, "n_retained": {"enc": 2}, "bleu": 12.0, "needs_after": got},
            {"lam": 0.2, "n_retained": {"enc": 1}, "bleu": 9.0}]
    table = report.needs_along_sweep_table(runs).splitlines()
    assert len(table) == 4 and table[2].startswith("| 0 | 2 | 12.0 |") and table[3].startswith("| 0.1 | 1 | 10.0 |")
    assert report.needs_along_sweep_table(runs[2:]) == ""


def test_carriers_kept_counts_survivors_and_their_hypergeometric_tail():
    """carriers_kept(matrix, retained): the carriers (fewest heads with 80% of the markers lost) among a mask's
    survivors, and p = P(X >= kept), X hypergeometric (N heads, K carriers, n survivors), checked against the tail
    summed by hand and against a brute-force count over every mask of n survivors on a 2 x 3 grid."""
    import itertools
    import math
    m = _matrix([[50, 30, 0], [15, 5, 0]])                 # carriers: L0H0, L0H1 (80 of 100 lost)
    assert [c for c, _ in needs.carriers(m)] == ["L0H0", "L0H1"]
    mask = [[True, False, True], [True, False, False]]      # keeps one carrier of two, 3 survivors of 6
    got = needs.carriers_kept(m, mask)
    assert got["survivors"] == ["L0H0", "L0H2", "L1H0"] and got["kept"] == 1
    by_hand = (math.comb(2, 1) * math.comb(4, 2) + math.comb(2, 2) * math.comb(4, 1)) / math.comb(6, 3)
    assert got["p"] == pytest.approx(by_hand)
    masks = [c for c in itertools.combinations(range(6), 3)]
    hits = sum(len({0, 1} & set(c)) >= 1 for c in masks)
    assert got["p"] == pytest.approx(hits / len(masks))
    both = needs.carriers_kept(m, xp.asarray([[True, True, False], [False, False, False]]))   # a backend array
    assert both["kept"] == 2 and both["p"] == pytest.approx(1 / math.comb(6, 2))


def test_carriers_kept_pooled_is_the_exact_tail_of_the_summed_hypergeometrics():
    """carriers_kept_pooled(kepts): kept = sum of the seeds' carriers kept, p = P(X_1 + ... + X_k >= kept) with
    X_i ~ hypergeometric(N_i heads, K_i carriers, n_i survivors) independent, checked against a brute-force count
    over every pair of masks of two seeds on 2 x 3 grids; one seed gives carriers_kept's own p; no carriers, p None."""
    import itertools
    m1 = _matrix([[50, 30, 0], [15, 5, 0]])                 # carriers L0H0, L0H1
    m2 = _matrix([[0, 0, 90], [0, 0, 0]])                   # carrier L0H2
    k1 = needs.carriers_kept(m1, [[True, False, True], [True, False, False]])    # 1 of 2 kept, 3 survivors
    k2 = needs.carriers_kept(m2, [[False, False, True], [False, True, False]])   # 1 of 1 kept, 2 survivors
    got = needs.carriers_kept_pooled([k1, k2])
    assert (got["kept"], got["carriers"], got["n"]) == (2, 3, 2)
    pairs = list(itertools.product(itertools.combinations(range(6), 3), itertools.combinations(range(6), 2)))
    hits = sum(len({0, 1} & set(a)) + len({2} & set(b)) >= 2 for a, b in pairs)
    assert got["p"] == pytest.approx(hits / len(pairs))
    assert needs.carriers_kept_pooled([k1])["p"] == pytest.approx(k1["p"])
    none = needs.carriers_kept(_matrix([[0, 0, 0], [0, 0, 0]]), [[True, False, False], [False, False, False]])
    assert needs.carriers_kept_pooled([none])["p"] is None
