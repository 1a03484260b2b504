"""The data layer: shipped synthetic data, generator rules, CoNLL-U validation, vocabulary,
batching, BPE and the loaders' error messages."""
import collections
import os
import pathlib
import random

import numpy as np
import pytest

from minihead import backend
from minihead.data import bpe, conllu_io, corpus, synth, vocab
from minihead.data.bpe import BPE
from minihead.data.vocab import BOS, EOS, PAD, UNK, Vocab
from minihead.errors import DataError

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "data_small"
REALDATA = pathlib.Path(os.environ.get("MINIHEAD_REALDATA", ROOT.parent / "shared" / "realdata"))
SEED = 1234


@pytest.fixture(scope="module")
def lex():
    return synth.Lexicon(SEED)


@pytest.fixture(scope="module")
def sample(lex):
    return synth.generate(1500, SEED, lex)


# ---- shipped data ---------------------------------------------------------------------------------
def test_regenerating_data_small_is_byte_identical(tmp_path):
    """python -m minihead.data.synth --seed 1234 regenerates data_small/ byte for byte, and the same command
    with --control regenerates data_small/control/ and with --matched data_small/matched/ (same file names, same
    bytes); all shipped data (three languages of 32,000 pairs) stays under 18 MiB."""
    total = 0
    for sub, extra in (("", []), ("control", ["--control"]), ("matched", ["--matched"])):
        out, shipped_dir = tmp_path / (sub or "main"), DATA / sub
        synth.main(["--out", str(out), "--seed", str(SEED)] + extra)
        shipped = sorted(p.name for p in shipped_dir.iterdir() if p.is_file())
        assert shipped == sorted(p.name for p in out.iterdir())
        for name in shipped:
            assert (out / name).read_bytes() == (shipped_dir / name).read_bytes(), f"{sub}/{name}"
        total += sum((shipped_dir / n).stat().st_size for n in shipped)
    assert sorted(p.name for p in DATA.iterdir() if p.is_dir()) == ["control", "matched"]
    assert total < 18 * 2**20


def test_cli_small_sizes_and_train_conllu(tmp_path):
    """The generator's command line honours --n-train/--n-dev/--n-test and --train-conllu: the train
    trees' tokens are the train.src lines, and the data README with its statistics is written."""
    synth.main(["--out", str(tmp_path), "--seed", "5", "--n-train", "40", "--n-dev", "6",
                "--n-test", "6", "--train-conllu"])
    splits, trees = corpus.load_data_small(tmp_path)
    train = conllu_io.read_conllu(tmp_path / "train.conllu")
    assert len(train) == 40 and [s.tokens for s in train] == splits["train"][0]
    assert len(trees["test"]) == 6 and "## Statistics" in (tmp_path / "README.md").read_text()


def _independent_tree_check(s):
    """One root, heads in range, every word reaches the root (no cycle), written from scratch."""
    n = len(s.tokens)
    assert len(s.heads) == len(s.deprels) == len(s.upos) == n
    assert [h for h in s.heads if h == 0] == [0] and all(0 <= h <= n for h in s.heads)
    for i in range(n):
        k, steps = i, 0
        while s.heads[k] != 0:
            k, steps = s.heads[k] - 1, steps + 1
            assert steps <= n


def test_shipped_trees_are_well_formed_and_match_the_text():
    """data_small has 30,000 / 1,000 / 1,000 pairs; every dev and test tree has exactly one root, heads in
    range and no cycle (checked by an independent walk to the root), and its tokens are the .src line's."""
    splits, trees = corpus.load_data_small(DATA)  # also runs check_tokens_match
    assert {k: len(v[0]) for k, v in splits.items()} == {"train": 30000, "dev": 1000, "test": 1000}
    for name in ("dev", "test"):
        assert len(trees[name]) == 1000
        for s, toks in zip(trees[name], splits[name][0]):
            _independent_tree_check(s)
            assert s.tokens == toks and s.deprels[s.heads.index(0)] == "root"
        assert trees[name][0].meta["sent_id"] == f"{name}-1"


def test_shipped_train_has_rare_words_and_no_overlap_with_dev_test():
    """The training side has over 300 words seen at most 5 times (so rare-word heads have something to
    find), and no dev or test source sentence occurs in train."""
    splits, _ = corpus.load_data_small(DATA)
    freq = vocab.frequencies(splits["train"][0])
    rare = [t for t, c in freq.items() if c <= 5]
    assert len(rare) > 300
    train = {" ".join(s) for s in splits["train"][0]}
    assert not train & {" ".join(s) for s in splits["dev"][0] + splits["test"][0]}


# ---- generator ------------------------------------------------------------------------------------
def test_generator_is_deterministic_and_prefix_stable(lex):
    """synth.generate: the same seed gives the same pairs and trees (with or without a prebuilt lexicon),
    the first n pairs do not depend on how many are drawn, and another seed gives other sentences."""
    a, b = synth.generate(60, SEED, lex), synth.generate(60, SEED)
    assert [(p.src, p.tgt, p.tree.heads) for p in a] == [(p.src, p.tgt, p.tree.heads) for p in b]
    assert [p.src for p in synth.generate(25, SEED, lex)] == [p.src for p in a[:25]]
    assert [p.src for p in synth.generate(25, SEED + 1)] != [p.src for p in a[:25]]


def test_generator_relations_lengths_long_distance(sample):
    """On 1,500 generated pairs every relation of the grammar occurs (> 20 times each), mean length is
    10-14 words within MAX_LEN, over 15% of subjects are more than 3 words from their verb, relative
    pronouns are both subjects and objects, adverbs stand on both sides of the verb, and every tree is
    well formed."""
    rels = collections.Counter(r for p in sample for r in p.tree.deprels)
    for r in ("nsubj", "obj", "amod", "advmod", "det", "case", "nmod", "obl", "acl:relcl",
              "conj", "cc", "punct", "root"):
        assert rels[r] > 20, r
    lens = [len(p.src) for p in sample]
    assert 10 <= sum(lens) / len(lens) <= 14 and max(lens) <= synth.MAX_LEN
    dist = [abs(i - (p.tree.heads[i] - 1)) for p in sample for i in range(len(p.src))
            if p.tree.deprels[i] == "nsubj"]
    assert sum(d > 3 for d in dist) / len(dist) > 0.15
    # Relative pronouns fill both roles and adverbs occur on both sides of the verb.
    roles = {p.tree.deprels[i] for p in sample for i in range(len(p.src)) if p.tree.upos[i] == "PRON"}
    assert roles == {"nsubj", "obj"}
    sides = {(i < p.tree.heads[i] - 1) for p in sample for i in range(len(p.src))
             if p.tree.deprels[i] == "advmod"}
    assert sides == {True, False}
    for p in sample:
        _independent_tree_check(p.tree)


def _subject_number(tree, v):
    """Number of verb v's subject from the tree's FEATS: coordination plural, a relative pronoun
    takes the number of the noun its clause modifies."""
    s = next(i for i in range(len(tree)) if tree.heads[i] == v + 1 and tree.deprels[i] == "nsubj")
    if any(tree.heads[k] == s + 1 and tree.deprels[k] == "conj" for k in range(len(tree))):
        return "Plur"
    if tree.upos[s] == "PRON":
        s = tree.heads[v] - 1
    return "Plur" if "Number=Plur" in tree.feats[s] else "Sing"


def _sandhi(p, i):
    """The sandhi ending of a word at source position i: set by the first letter of source token i + 1."""
    return "-" + synth.SANDHI[synth.sandhi_class(p.src[i + 1])]


def test_target_needs_agreement_case_order_and_copy_rules(sample, lex):
    """Checked from the tree and alignment for every generated pair (the language of data_small):
    an adjective = its stem + the gender suffix of its NOUN + the sandhi ending of the NEXT source token,
    and it precedes its noun; a verb = stem + (tense, subject number) suffix + sandhi ending, after its
    subject and object (verb-final); the head noun of a subject or object = stem [+ plural] + the case
    suffix of its VERB's hidden class (subject case for nsubj, object case for obj) + the sandhi ending
    for a frequent noun, fused in one token; after a name, which is copied, the case is the next token;
    an adverb carries the verb's class suffix; determiners carry the sandhi ending. Over 20 subject
    cases are decided by a verb more than 3 words away (a need only the nsubj arc can meet)."""
    n_far = 0
    for p in sample:
        t = p.tree
        pos = collections.defaultdict(list)
        for k, a in enumerate(p.align):
            pos[a].append(k)
        for i in range(len(t)):
            if t.upos[i] == "ADJ":
                noun = lex.by_form[t.tokens[t.heads[i] - 1]][0]
                (k,) = pos[i]
                assert any(p.tgt[k] == s + synth.GENDER_SUFFIX[noun.gender] + _sandhi(p, i)
                           for s in lex.by_form[t.tokens[i]][0].tgt)
                assert k < min(pos[t.heads[i] - 1])
            elif t.upos[i] == "DET":
                assert [p.tgt[k] for k in pos[i]] == [lex.det_tgt[t.tokens[i]] + _sandhi(p, i)]
            elif t.upos[i] == "ADV":
                e_v = lex.by_form[t.tokens[t.heads[i] - 1]][0]
                (k,) = pos[i]
                assert any(p.tgt[k] == s + synth.ADV_SUFFIX[e_v.vclass] + _sandhi(p, i)
                           for s in lex.by_form[t.tokens[i]][0].tgt)
            elif t.upos[i] == "VERB":
                e = lex.by_form[t.tokens[i]][0]
                tense = "Past" if "Tense=Past" in t.feats[i] else "Pres"
                ks = pos[i]
                particles = set(lex.case_tgt) | set(lex.subj_case_tgt)
                verb_k = [k for k in ks if p.tgt[k] not in particles]
                assert len(verb_k) == 1
                suffix = synth.VERB_SUFFIX[(tense, _subject_number(t, i))]
                assert any(p.tgt[verb_k[0]] == s + suffix + _sandhi(p, i) for s in e.tgt)
                for d in range(len(t)):
                    if t.heads[d] == i + 1 and t.deprels[d] in ("nsubj", "obj"):
                        assert max(pos[d]) < verb_k[0]
                        case = (lex.subj_case_tgt if t.deprels[d] == "nsubj" else lex.case_tgt)[e.vclass]
                        if t.upos[d] == "PROPN":   # the copied name, then the case as a particle
                            (k,) = pos[d]
                            assert p.tgt[k + 1] == case and p.align[k + 1] == i
                        elif t.upos[d] == "NOUN":  # fused: stem [+ plural] + case [+ sandhi]
                            noun, number = lex.by_form[t.tokens[d]]
                            (k,) = pos[d]
                            ending = _sandhi(p, d) if noun.kind == "noun" else ""
                            plural = synth.PLURAL_SUFFIX if number == "Plur" else ""
                            assert any(p.tgt[k] == s + plural + case + ending for s in noun.tgt)
                            n_far += t.deprels[d] == "nsubj" and i - d > 3
                # every other token aligned to the verb is the case particle after a name
                names = [d for d in range(len(t)) if t.heads[d] == i + 1 and t.upos[d] == "PROPN"
                         and t.deprels[d] in ("nsubj", "obj")]
                assert len(ks) == 1 + len(names)
            elif t.upos[i] == "PROPN":
                assert [p.tgt[k] for k in pos[i]] == [t.tokens[i]]
    assert n_far > 20


def test_control_language_has_the_same_words_without_the_needs(lex):
    """The control (needs=False) translates the same trees into the same number of target tokens with
    the same alignment, and each of its target tokens depends on its own source word only: no sandhi
    ending, no gender or verb-class suffix, no case on the subject and object nouns, and one particle after
    a name whatever its role."""
    needs, control = synth.generate(300, SEED, lex), synth.generate(300, SEED, lex, needs=False)
    particles = {lex.subj_case_tgt[0]}
    for p, c in zip(needs, control):
        assert p.src == c.src and p.align == c.align and len(p.tgt) == len(c.tgt)
        for k, (tn, tc) in enumerate(zip(p.tgt, c.tgt)):
            assert "-" not in tc
            i = c.align[k]
            if c.tree.upos[i] == "VERB" and tn in set(lex.case_tgt) | set(lex.subj_case_tgt):
                assert tc in particles
            elif c.tree.upos[i] == "NOUN" and c.tree.deprels[i] in ("nsubj", "obj"):
                noun, number = lex.by_form[c.tree.tokens[i]]
                plural = synth.PLURAL_SUFFIX if number == "Plur" else ""
                assert tc in [s + plural for s in noun.tgt]
            elif c.tree.upos[i] == "ADJ":
                assert tc in lex.by_form[c.tree.tokens[i]][0].tgt
            elif c.tree.upos[i] == "ADV":
                assert tc in lex.by_form[c.tree.tokens[i]][0].tgt
    # Both variants draw the synonyms identically: the control is the needs language with the needs removed.
    assert sum(p.tgt != c.tgt for p, c in zip(needs, control)) > 250


def test_matched_control_keeps_every_suffix_and_sets_it_from_the_word_itself(lex):
    """The matched control (needs=False, matched=True) translates the same trees into the same number of target
    tokens, with a suffix on exactly the tokens that carry one in the needs language, but each suffix is a
    function of the word that carries it: the sandhi ending S(own initial), an adjective's gender suffix
    GENDER_SUFFIX[own_class(adj, 3)], an adverb's ADV_SUFFIX[own_class(adv, 3)], a subject or object noun's case
    (subj_case_tgt + case_tgt)[own_class(noun singular, 6)] whatever its verb or role, and the particle after a
    name the same by the name, aligned to the name."""
    needs = synth.generate(300, SEED, lex)
    matched = synth.generate(300, SEED, lex, needs=False, matched=True)
    cases = lex.subj_case_tgt + lex.case_tgt
    forms = collections.defaultdict(set)   # (source form, role) -> target tokens, over the whole sample
    for p, m in zip(needs, matched):
        assert p.src == m.src and len(p.tgt) == len(m.tgt)
        for k, (tn, tm) in enumerate(zip(p.tgt, m.tgt)):
            assert ("-" in tn) == ("-" in tm), (tn, tm)
            i, t = m.align[k], m.tree
            if "-" in tm:
                assert tm.endswith("-" + synth.SANDHI[synth.sandhi_class(t.tokens[i])])
            base = tm.split("-")[0]
            if t.upos[i] == "ADJ":
                assert base.endswith(synth.GENDER_SUFFIX[synth.own_class(t.tokens[i], 3)])
            elif t.upos[i] == "ADV":
                assert base.endswith(synth.ADV_SUFFIX[synth.own_class(t.tokens[i], 3)])
            elif t.upos[i] == "NOUN" and t.deprels[i] in ("nsubj", "obj"):
                noun = lex.by_form[t.tokens[i]][0]
                assert base.endswith(cases[synth.own_class(noun.src[0], 6)])
            elif t.upos[i] == "PROPN" and tm != t.tokens[i]:   # the particle after a name, aligned to the name
                assert tm == cases[synth.own_class(t.tokens[i], 6)] and t.deprels[i] in ("nsubj", "obj")
            forms[(t.tokens[i], t.deprels[i] in ("nsubj", "obj"))].add(tm)
    # Given the word and whether it is an argument, only the synonym choice varies: at most two target tokens
    # (a name: itself and its particle), where the needs language gives a word many (endings, verb classes).
    assert max(len(v) for v in forms.values()) <= 2
    with pytest.raises(ValueError):
        synth.generate(1, SEED, lex, needs=True, matched=True)
    with pytest.raises(SystemExit):   # one language per command: --control and --matched exclude each other
        synth.main(["--out", "unused", "--control", "--matched"])


def _entry(pool, synonyms=False):
    return next(e for e in pool if (len(e.tgt) > 1) == synonyms)


def test_translate_hand_checked_examples(lex):
    """Two trees written by hand, their targets derived by hand from the rules (S(w) = sandhi ending
    for the first letter of w, g = the noun's gender suffix, class = the verb's hidden class):
    1. "the N1s near the N2 V-ed a A1 A2 N3 ." (past: the source verb shows no number)
       -> the-S(N1s) N1-en-SUBJ(class)-S(near) the-S(N2) N2-S(V-ed) near' | a-S(A1) A1-g-S(A2) A2-g-S(N3)
          N3-OBJ(class)-S(.) | V-un-S(a) | .
    2. "X and the N1s that V2-ed N2s V3 ." (coordinated subject headed by the name X; subject relative
       clause whose past verb takes the plural of its antecedent N1s)
       -> X SUBJ(class of V3) AND the-S(N1s) N1-en-S(that) REL_S N2-en-OBJ(class of V2)-S(V3)
          V2-un-S(N2s) V3-an-S(.) .
    (with particles=True, example 1 is the earlier variant: SUBJ(class) and OBJ(class) are tokens of their
    own after N2's postposition and after N3.)"""
    S = lambda w: "-" + synth.SANDHI[synth.sandhi_class(w)]   # noqa: E731
    n1, n2, n3 = [e for e in lex.nouns if len(e.tgt) == 1][:3]
    a1, a2 = [e for e in lex.adjs if len(e.tgt) == 1][:2]
    v = next(e for e in lex.verbs_tr if len(e.tgt) == 1 and e.vclass == 1)
    toks = ["the", n1.src[1], "near", "the", n2.src[0], v.src[2], "a", a1.src[0], a2.src[0], n3.src[0], "."]
    heads = [2, 6, 5, 5, 2, 0, 10, 10, 10, 6, 6]
    rels = ["det", "nsubj", "case", "det", "nmod", "root", "det", "amod", "amod", "obj", "punct"]
    upos = ["DET", "NOUN", "ADP", "DET", "NOUN", "VERB", "DET", "ADJ", "ADJ", "NOUN", "PUNCT"]
    tgt, align = synth.translate(conllu_io.Sentence(toks, heads, rels, upos), lex, random.Random(0))
    g = synth.GENDER_SUFFIX[n3.gender]
    assert tgt == [lex.det_tgt["the"] + S(n1.src[1]), n1.tgt[0] + "en" + lex.subj_case_tgt[1] + S("near"),
                   lex.det_tgt["the"] + S(n2.src[0]), n2.tgt[0] + S(v.src[2]), lex.prep_tgt["near"],
                   lex.det_tgt["a"] + S(a1.src[0]), a1.tgt[0] + g + S(a2.src[0]), a2.tgt[0] + g + S(n3.src[0]),
                   n3.tgt[0] + lex.case_tgt[1] + S("."), v.tgt[0] + "un" + S("a"), "."]
    assert align == [0, 1, 3, 4, 2, 6, 7, 8, 9, 5, 10]
    tree = conllu_io.Sentence(toks, heads, rels, upos)
    tgt, align = synth.translate(tree, lex, random.Random(0), particles=True)
    assert tgt == [lex.det_tgt["the"] + S(n1.src[1]), n1.tgt[0] + "en" + S("near"),
                   lex.det_tgt["the"] + S(n2.src[0]), n2.tgt[0] + S(v.src[2]), lex.prep_tgt["near"],
                   lex.subj_case_tgt[1],
                   lex.det_tgt["a"] + S(a1.src[0]), a1.tgt[0] + g + S(a2.src[0]), a2.tgt[0] + g + S(n3.src[0]),
                   n3.tgt[0] + S("."), lex.case_tgt[1], v.tgt[0] + "un" + S("a"), "."]
    assert align == [0, 1, 3, 4, 2, 5, 6, 7, 8, 9, 5, 5, 10]

    name = lex.names[0]
    v2 = next(e for e in lex.verbs_tr if len(e.tgt) == 1 and e.vclass == 0)
    v3 = next(e for e in lex.verbs_in if len(e.tgt) == 1 and e.vclass == 2)
    toks = [name, "and", "the", n1.src[1], "that", v2.src[2], n2.src[1], v3.src[0], "."]
    heads = [8, 4, 4, 1, 6, 4, 6, 0, 8]
    rels = ["nsubj", "cc", "det", "conj", "nsubj", "acl:relcl", "obj", "root", "punct"]
    upos = ["PROPN", "CCONJ", "DET", "NOUN", "PRON", "VERB", "NOUN", "VERB", "PUNCT"]
    tgt, _ = synth.translate(conllu_io.Sentence(toks, heads, rels, upos), lex, random.Random(0))
    assert tgt == [name, lex.subj_case_tgt[2], lex.and_tgt, lex.det_tgt["the"] + S(n1.src[1]),
                   n1.tgt[0] + "en" + S("that"), lex.rel_tgt["nsubj"], n2.tgt[0] + "en" + lex.case_tgt[0] + S(v3.src[0]),
                   v2.tgt[0] + "un" + S(n2.src[1]), v3.tgt[0] + "an" + S("."), "."]


def test_synonyms_are_seeded_noise(lex):
    """A noun with target synonyms translates to each of them (the first in 45-75% of 200 draws),
    and the choice is a function of the seeded random generator only (control language: bare stems)."""
    n = _entry(lex.nouns, synonyms=True)
    tree = conllu_io.Sentence(["the", n.src[0], lex.verbs_in[0].src[1], "."], [2, 3, 0, 3],
                              ["det", "nsubj", "root", "punct"], ["DET", "NOUN", "VERB", "PUNCT"])
    draws = [synth.translate(tree, lex, random.Random(s), needs=False)[0][1] for s in range(200)]
    assert set(draws) == set(n.tgt) and 0.45 < draws.count(n.tgt[0]) / 200 < 0.75
    assert draws == [synth.translate(tree, lex, random.Random(s), needs=False)[0][1] for s in range(200)]


# ---- vocabulary and batching ----------------------------------------------------------------------
def test_vocab_order_round_trip_and_arrays():
    """Vocab: the four specials first, then words by falling count with ties broken by the string
    (independent of sentence order); encode maps unknown words to UNK, decode stops at EOS and drops
    specials; rank is the frequency rank; to_arrays/from_arrays round-trips; min_freq and max_size
    trim; arrays that do not start with the specials are refused."""
    sents = [["b", "a", "c"], ["a", "d", "b"], ["a", "<unk>"]]
    v = Vocab.build(sents)
    assert v.itos == ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d"]
    assert v.counts == [0, 0, 0, 0, 3, 2, 1, 1] and len(v) == 8
    assert v.itos == Vocab.build(list(reversed(sents))).itos  # ties broken by the string
    assert v.encode(["a", "zz", "d"]) == [4, UNK, 7]
    assert v.decode([BOS, 4, PAD, 7, EOS, 5]) == ["a", "d"]
    assert v.decode(np.array([5, 6, EOS])) == ["b", "c"]
    assert v.rank("a") == 0 and v.rank("d") == 3 and v.rank("zz") == 4
    w = Vocab.from_arrays(**{k: np.array(x) for k, x in v.to_arrays().items()})
    assert w.itos == v.itos and w.counts == v.counts and w.stoi == v.stoi
    assert Vocab.build(sents, min_freq=2).itos[4:] == ["a", "b"]
    assert Vocab.build(sents, max_size=3).itos[4:] == ["a", "b", "c"]
    with pytest.raises(DataError, match="must start with"):
        Vocab.from_arrays(["a", "b"], [1, 1])
    assert vocab.frequencies(sents)["a"] == 3


def test_batches_masks_padding_specials_and_index():
    """vocab.batches: every pair lands in exactly one batch within the token budget B (S + T) <= 400;
    src = x + EOS, tgt_in = BOS + y, tgt_out = y + EOS, padded with PAD and masked True exactly on the
    real tokens; index gives each row's pair; shuffling is seeded and only reorders batches; a pair
    over budget goes alone; source and target lists of different lengths are refused."""
    rng = random.Random(3)
    src = [[rng.randrange(4, 50) for _ in range(rng.randrange(1, 20))] for _ in range(300)]
    tgt = [[rng.randrange(4, 50) for _ in range(rng.randrange(1, 25))] for _ in range(300)]
    out = list(vocab.batches(src, tgt, max_tokens=400))
    seen = []
    for b in out:
        B, S = b.src.shape
        T = b.tgt_in.shape[1]
        assert b.tgt_out.shape == b.tgt_mask.shape == (B, T) and b.src_mask.shape == (B, S)
        assert b.src.dtype == np.int64 and b.src_mask.dtype == bool and B * (S + T) <= 400
        for r, i in enumerate(b.index):
            x, y = src[i], tgt[i]
            assert b.src[r].tolist() == x + [EOS] + [PAD] * (S - len(x) - 1)
            assert b.tgt_in[r].tolist() == [BOS] + y + [PAD] * (T - len(y) - 1)
            assert b.tgt_out[r].tolist() == y + [EOS] + [PAD] * (T - len(y) - 1)
            assert b.src_mask[r].tolist() == [True] * (len(x) + 1) + [False] * (S - len(x) - 1)
            assert b.tgt_mask[r].tolist() == [True] * (len(y) + 1) + [False] * (T - len(y) - 1)
        assert b.n_tokens == sum(len(tgt[i]) + 1 for i in b.index)
        seen += b.index
    assert sorted(seen) == list(range(300))
    shuf = [b.index for b in vocab.batches(src, tgt, 400, shuffle_rng=backend.rng(5))]
    assert shuf == [b.index for b in vocab.batches(src, tgt, 400, shuffle_rng=backend.rng(5))]
    assert shuf != [b.index for b in out] and sorted(shuf) == sorted(b.index for b in out)
    big = list(vocab.batches([[5] * 30], [[6] * 30], max_tokens=10))  # a pair over budget: alone
    assert len(big) == 1 and big[0].src.shape == (1, 31)
    with pytest.raises(DataError):
        list(vocab.batches(src, tgt[:-1], 400))


# ---- BPE ------------------------------------------------------------------------------------------
def test_bpe_learns_the_textbook_example():
    """Sennrich et al. 2016, Algorithm 1: {low: 5, lower: 2, newest: 6, widest: 3}. Pair counts
    with the marker glued to the last character (subword-nmt): (e, s) = (s, t</w>) = 9, the larger
    pair wins the tie -> s t</w>, then e st</w> (9): the paper's "es", "est", "est</w>" in two
    steps; then l o (7) as the paper's fourth merge; then the three pairs of count 6, larger first;
    the last three of the 10 merges build "wid" and "widest" (count 3)."""
    b = BPE.learn({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 10)
    assert b.merges == [("s", "t</w>"), ("e", "st</w>"), ("l", "o"), ("w", "est</w>"),
                            ("n", "e"), ("ne", "west</w>"), ("lo", "w</w>"), ("w", "i"), ("wi", "d"),
                            ("wid", "est</w>")]
    assert b.segment(["newest", "lowest", "low", "wider"]) == \
        ["newest", "lo@@", "west", "low", "wid@@", "e@@", "r"]


def test_bpe_round_trip_piece_to_word_save_load(tmp_path):
    """BPE learned on 400 dev sentences: segmenting then unsegmenting gives the words back,
    piece_to_word maps every piece to its word, save/load keeps the merges, and a malformed codes
    file is refused naming its line."""
    src = corpus.read_lines(DATA / "dev.src")[:400]
    sents = [s.split() for s in src]
    b = BPE.learn(sents, 300)
    assert len(b.merges) == 300
    for s in sents:
        pieces = b.segment(s)
        assert bpe.unsegment(pieces) == s
        p2w = b.piece_to_word(pieces)
        assert len(p2w) == len(pieces) and p2w[-1] == len(s) - 1
    pieces = ["un@@", "relat@@", "ed", "dog", "."]
    assert bpe.piece_to_word(pieces) == [0, 0, 0, 1, 2] and bpe.unsegment(pieces) == ["unrelated", "dog", "."]
    b.save(tmp_path / "codes")
    c = BPE.load(tmp_path / "codes")
    assert c.merges == b.merges and c.segment(sents[0]) == b.segment(sents[0])
    (tmp_path / "bad").write_text("#version: 0.2\na b\nonlyone\n")
    with pytest.raises(DataError, match=r"bad:3: expected a merge"):
        BPE.load(tmp_path / "bad")


def test_tokenize_detokenize():
    """bpe.tokenize splits off punctuation and clitics ('s; don't -> don 't) and keeps numbers whole;
    detokenize restores the original line; lower=True lowercases."""
    line = "A woman's hat (red) costs 3.50, don't you think?"
    toks = bpe.tokenize(line)
    assert toks == ["A", "woman", "'s", "hat", "(", "red", ")", "costs", "3.50", ",", "don", "'t",
                    "you", "think", "?"]
    assert bpe.detokenize(toks) == line and bpe.tokenize(line, lower=True)[0] == "a"


# ---- loaders and their errors ---------------------------------------------------------------------
def test_read_parallel_and_its_errors(tmp_path):
    """corpus.read_parallel pairs the lines of two files (with an optional tokenizer) and refuses,
    naming file and line, files of different lengths, an empty line and bytes that are not UTF-8."""
    s, t = tmp_path / "a.src", tmp_path / "a.tgt"
    s.write_text("x y\nz\n")
    t.write_text("1 2 3\n4\n")
    assert corpus.read_parallel(s, t) == [(["x", "y"], ["1", "2", "3"]), (["z"], ["4"])]
    assert corpus.read_parallel(s, t, tokenize=lambda ln: list(ln.replace(" ", "")))[0][0] == ["x", "y"]
    t.write_text("1\n2\n3\n")
    with pytest.raises(DataError, match=r"a\.src has 2 lines but .*a\.tgt has 3"):
        corpus.read_parallel(s, t)
    t.write_text("1\n  \n")
    with pytest.raises(DataError, match=r"a\.tgt:2: empty line"):
        corpus.read_parallel(s, t)
    t.write_bytes(b"1\n\xff\xfe\n")
    with pytest.raises(DataError, match=r"a\.tgt:2: not valid UTF-8"):
        corpus.read_parallel(s, t)


def test_load_data_small_finds_the_repo_copy_from_another_cwd(monkeypatch, tmp_path):
    """load_data_small('data_small') finds the repository's copy from any working directory, and a
    folder without train.src is a one-line DataError."""
    monkeypatch.chdir(tmp_path)
    splits, trees = corpus.load_data_small("data_small")
    assert len(splits["dev"][0]) == len(trees["dev"]) == 1000
    with pytest.raises(DataError, match="no train.src"):
        corpus.load_data_small(tmp_path / "nowhere")


GOOD = """# sent_id = s1
1\tthe\tthe\tDET\t_\t_\t2\tdet\t_\t_
2\tdog\tdog\tNOUN\t_\tNumber=Sing\t3\tnsubj\t_\t_
3\truns\trun\tVERB\t_\t_\t0\troot\t_\t_
4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_

# sent_id = s2
1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tdo\tdo\tAUX\t_\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\t_\t_\t3\tadvmod\t_\t_
3\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_
3.1\tgone\t_\t_\t_\t_\t_\t_\t_\t_
4\t!\t!\tPUNCT\t_\t_\t3\tpunct\t_\t_
"""


def test_read_write_conllu_round_trip(tmp_path):
    """read_conllu keeps tokens, heads, deprels, features, metadata and source line numbers (skipping
    multi-word and empty-node lines); Sentence.rel/arcs/head_index read the tree; write_conllu then
    read_conllu gives the same trees."""
    path = tmp_path / "g.conllu"
    path.write_text(GOOD)
    a, b = conllu_io.read_conllu(path)
    assert a.tokens == ["the", "dog", "runs", "."] and a.heads == [2, 3, 0, 3]
    assert a.line_numbers == [2, 3, 4, 5] and a.meta["sent_id"] == "s1" and a.feats[1] == "Number=Sing"
    assert b.tokens == ["do", "n't", "go", "!"] and b.line_numbers == [9, 10, 11, 13]  # 1-2, 3.1 skipped
    s = conllu_io.Sentence(["x", "y"], [2, 0], ["nsubj:pass", "root"], ["NOUN", "VERB"])
    assert s.rel(0) == "nsubj" and s.arcs("nsubj") == [(0, 1)] and s.head_index(1) == -1
    conllu_io.write_conllu(tmp_path / "w.conllu", [a, b])
    c = conllu_io.read_conllu(tmp_path / "w.conllu")
    assert [(x.tokens, x.heads, x.deprels, x.upos) for x in c] == [(x.tokens, x.heads, x.deprels, x.upos) for x in (a, b)]


def _bad(tmp_path, old, new):
    path = tmp_path / "bad.conllu"
    assert old in GOOD
    path.write_text(GOOD.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old,new,msg", [
    ("2\tdog\tdog", "2 dog dog", r"bad\.conllu:3: sentence does not parse"),
    ("\t2\tdet", "\tx\tdet", r"bad\.conllu:2: sentence does not parse: Failed parsing field 'head'"),
    ("\t2\tdet", "\t_\tdet", r"bad\.conllu:2: HEAD _ is not an integer"),
    ("\t2\tdet", "\t9\tdet", r"bad\.conllu:2: HEAD 9 out of range 0\.\.4"),
    ("3\truns", "5\truns", r"bad\.conllu:4: word id 5 where 3 was expected"),
    ("\t3\tnsubj", "\t1\tnsubj", r"bad\.conllu:2: cycle in HEAD: 1 -> 2 -> 1"),
    ("\t2\tdet", "\t0\tdet", r"bad\.conllu:4: several roots: words 1, 3 have HEAD 0"),
    ("\t3\tnsubj", "\t2\tnsubj", r"bad\.conllu:3: cycle in HEAD: 2 -> 2"),
    ("4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_", "4\t.\t.\tPUNCT", r"bad\.conllu:5: expected 10 tab-separated columns"),
])
def test_conllu_errors_name_file_and_line(tmp_path, old, new, msg):
    """Each malformed CoNLL-U input (unparsable line, non-integer or out-of-range HEAD, wrong word id,
    cycle, several roots, missing columns) is a DataError naming the file and line and the problem."""
    with pytest.raises(DataError, match=msg):
        conllu_io.read_conllu(_bad(tmp_path, old, new))


def test_conllu_no_root_and_bad_utf8(tmp_path):
    """A sentence without a root and a file with invalid UTF-8 are DataErrors naming file and line."""
    path = tmp_path / "bad.conllu"
    path.write_text("1\ta\ta\tX\t_\t_\t2\tdep\t_\t_\n2\tb\tb\tX\t_\t_\t1\tdep\t_\t_\n")
    with pytest.raises(DataError, match=r"bad\.conllu:1: no root"):
        conllu_io.read_conllu(path)
    path.write_bytes(GOOD.encode()[:40] + b"\xc3\x28" + GOOD.encode()[40:])
    with pytest.raises(DataError, match=r"bad\.conllu:2: not valid UTF-8"):
        conllu_io.read_conllu(path)


def test_tokens_mismatch_names_both_files_and_line(tmp_path):
    """check_tokens_match accepts trees whose tokens are the text's lines, and otherwise names the text
    file and line, the tree's sentence and CoNLL-U line, and the first differing token (or a count
    mismatch)."""
    path = tmp_path / "g.conllu"
    path.write_text(GOOD)
    sents = conllu_io.read_conllu(path)
    conllu_io.check_tokens_match(sents, ["the dog runs .", "do n't go !"], path, "g.txt")
    with pytest.raises(DataError, match=r"g\.txt:2: does not match sentence 2 of .*g\.conllu "
                                        r"\(line 11\): token 3 is 'went' in the text but 'go'"):
        conllu_io.check_tokens_match(sents, ["the dog runs .", "do n't went !"], path, "g.txt")
    with pytest.raises(DataError, match=r"g\.txt:1: .*\(line 5\): token 4 is end of line in the text but '\.'"):
        conllu_io.check_tokens_match(sents, [["the", "dog", "runs"], "do"], path, "g.txt")
    with pytest.raises(DataError, match=r"g\.txt has 1 lines but .*g\.conllu has 2 sentences"):
        conllu_io.check_tokens_match(sents, ["the dog runs ."], path, "g.txt")


# ---- real data (skipped where /work/shared/realdata is absent) ------------------------------------
@pytest.mark.skipif(not (REALDATA / "ud_en_ewt" / "dev.conllu").exists(), reason="real data not present")
def test_real_data_counts():
    """The real data beside the repository is the expected release: UD English EWT dev has 2,001
    sentences, 25,147 words and the known nsubj/obj/amod/advmod counts; Multi30k val has 1,014 pairs
    (skipped when the data is absent)."""
    ewt = conllu_io.read_conllu(REALDATA / "ud_en_ewt" / "dev.conllu")
    assert len(ewt) == 2001 and sum(len(s) for s in ewt) == 25147
    counts = collections.Counter(s.deprels[i] for s in ewt for i in range(len(s)))
    assert (counts["nsubj"], counts["obj"], counts["amod"], counts["advmod"]) == (1958, 1211, 1326, 1353)
    pairs = corpus.read_parallel(REALDATA / "multi30k" / "val.en", REALDATA / "multi30k" / "val.de",
                                 tokenize=bpe.tokenize)
    assert len(pairs) == 1014 and pairs[0][0][:3] == ["A", "group", "of"]


# ---- issue 15: the smaller data cases ------------------------------------------------------------
def test_conllu_byte_order_mark_is_dropped(tmp_path):
    """A UTF-8 BOM before line 1 (as some editors write) is no part of the first field."""
    plain, bom = tmp_path / "plain.conllu", tmp_path / "bom.conllu"
    plain.write_text(GOOD, encoding="utf-8")
    bom.write_bytes(b"\xef\xbb\xbf" + GOOD.encode("utf-8"))
    assert conllu_io.read_conllu(bom) == conllu_io.read_conllu(plain)


@pytest.mark.parametrize("old,new,msg", [
    ("4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_", "4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_\textra",
     r"bad\.conllu:5: expected 10 tab-separated columns, found 11"),
    ("2\tdog\tdog", "2\t\tdog", r"bad\.conllu:3: FORM is empty"),
])
def test_conllu_eleven_columns_and_empty_form_name_the_line(tmp_path, old, new, msg):
    """A CoNLL-U line with an 11th column and a word with an empty FORM are DataErrors naming the file
    and line (and, for the columns, how many were found)."""
    with pytest.raises(DataError, match=msg):
        conllu_io.read_conllu(_bad(tmp_path, old, new))


def test_special_token_text_is_an_unknown_word():
    """Text spelling a special token ("<pad>", "<eos>", ...) encodes as <unk>: the framing ids come only
    from the batcher, never from the data."""
    v = Vocab.build([["a", "<eos>", "b", "<pad>"], ["<bos>", "a"]])
    assert v.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and len(v) == 6
    assert v.encode(["a", "<pad>", "<bos>", "<eos>", "<unk>", "b"]) == [v.stoi["a"], UNK, UNK, UNK, UNK, v.stoi["b"]]


def test_read_sentences_refuses_empty_lines_and_files(tmp_path):
    """The translate --input rule, the same as read_parallel's: an empty line is an error naming file and
    line, and so is a file with no lines."""
    good, gap, empty = tmp_path / "good.txt", tmp_path / "gap.txt", tmp_path / "empty.txt"
    good.write_text("a b\nc\n")
    gap.write_text("a b\n  \nc\n")
    empty.write_text("")
    assert corpus.read_sentences(good) == [["a", "b"], ["c"]]
    with pytest.raises(DataError, match=r"gap\.txt:2: empty line"):
        corpus.read_sentences(gap)
    with pytest.raises(DataError, match=r"empty\.txt: no sentences"):
        corpus.read_sentences(empty)


def test_unreadable_inputs_are_data_errors_naming_the_file(tmp_path):
    """A missing file, a folder where a file is expected and a binary BPE file: DataError with the path."""
    with pytest.raises(DataError, match=r"nope\.src: cannot read \(No such file or directory\)"):
        corpus.read_parallel(tmp_path / "nope.src", tmp_path / "nope.tgt")
    with pytest.raises(DataError, match=r": cannot read \(Is a directory\)"):
        corpus.read_lines(tmp_path)
    with pytest.raises(DataError, match=r"d\.conllu: cannot read"):
        conllu_io.read_conllu(tmp_path / "d.conllu")
    binary = tmp_path / "codes.bin"
    binary.write_bytes(b"#version: 0.2\na b\n\x89PNG\xff\x00\n")
    with pytest.raises(DataError, match=r"codes\.bin:3: not valid UTF-8"):
        BPE.load(binary)
