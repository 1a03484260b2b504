"""Solutions to the exercises of chapter 7 (real language: BPE pieces, words and trees). Run from the repository
root:

    python chapters/solutions/07_solutions.py               # every exercise
    python chapters/solutions/07_solutions.py exercise_2    # one of them

A few hand-written sentences only (no real corpus needed); every exercise ends with asserts that check its result.
"""
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))   # the repository root

from minihead import backend, roles
from minihead.backend import xp
from minihead.data.bpe import BPE, piece_to_word, unsegment
from minihead.data.conllu_io import Sentence, read_conllu, write_conllu

CAPTIONS = ["a man is riding a bike down the street .", "two men are riding bikes .",
            "a woman rides a horse on the beach .", "the riders are racing down the road .",
            "a boy is reading a book ."] * 3


def exercise_1():
    """BPE round trip: learn 40 merges on a few captions, segment a sentence that holds words never seen whole
    ("bikers", "reader"), and check that unsegment gives the words back, that piece_to_word maps each piece to
    its word, and that frequent words ("riding") stay one piece while unseen ones are split."""
    bpe = BPE.learn([c.split() for c in CAPTIONS], n_merges=40)
    words = "the bikers are riding to a reader .".split()
    pieces = bpe.segment(words)
    p2w = piece_to_word(pieces)
    print(f"{len(bpe.merges)} merges; pieces {pieces}; piece -> word {p2w}")
    assert unsegment(pieces) == words
    assert p2w[-1] == len(words) - 1 and sorted(set(p2w)) == list(range(len(words)))
    assert "riding" in pieces and "reader" not in pieces and "bikers" not in pieces


def exercise_2():
    """Pieces to words, two ways: for a random piece map of a sentence with two split words, aggregate_attention
    equals F attn A built by hand (A the pieces x words assignment, F the first-piece selector or the mean of a
    word's pieces); columns are summed over a word's pieces, so each word row keeps the total of the rows it is
    made from, and the two readouts agree on words of one piece."""
    pieces = "the bik@@ ers are rid@@ ing .".split()
    p2w = piece_to_word(pieces)                                   # [0, 1, 1, 2, 3, 3, 4]
    P, W = len(pieces), max(p2w) + 1
    attn = backend.to_device(backend.rng(7).random((P, P)), "float64")
    attn /= attn.sum(-1, keepdims=True)                           # (P, P) rows sum to 1
    A = xp.zeros((P, W))
    A[xp.arange(P), p2w] = 1.0                                    # (P, W)
    first = [p2w.index(w) for w in range(W)]
    F_first = xp.zeros((W, P))
    F_first[xp.arange(W), first] = 1.0                            # (W, P)
    F_mean = A.T / A.sum(0)[:, None]                              # (W, P)
    got_first = roles.aggregate_attention(attn, p2w, W, "first")
    got_mean = roles.aggregate_attention(attn, p2w, W, "mean")
    print("word map (first piece):\n", xp.round(got_first, 3))
    assert xp.allclose(got_first, F_first @ attn @ A) and xp.allclose(got_mean, F_mean @ attn @ A)
    assert xp.allclose(got_first.sum(-1), 1.0) and xp.allclose(got_mean.sum(-1), 1.0)
    single = [w for w in range(W) if p2w.count(w) == 1]
    assert xp.allclose(got_first[single], got_mean[single])
    assert not xp.allclose(got_first[1], got_mean[1])            # "bikers" is two pieces: the readouts differ


def exercise_3():
    """Trees in and out: write two hand-made trees as CoNLL-U in a temporary folder, read them back, and check
    that the words, heads and relations survive, and that Sentence.arcs finds the (dependent, head) pairs of a
    relation, 0-based, as the syntactic measures of chapter 3 read them."""
    trees = [Sentence("a man rides a bike .".split(), [2, 3, 0, 5, 3, 3], "det nsubj root det obj punct".split(),
                      "DET NOUN VERB DET NOUN PUNCT".split()),
             Sentence("dogs often run .".split(), [3, 3, 0, 3], "nsubj advmod root punct".split(),
                      "NOUN ADV VERB PUNCT".split())]
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "two.conllu"
        write_conllu(path, trees)
        back = read_conllu(path)
    for t, b in zip(trees, back):
        assert (b.tokens, b.heads, b.deprels, b.upos) == (t.tokens, t.heads, t.deprels, t.upos)
    print("nsubj arcs:", [b.arcs("nsubj") for b in back], " obj arcs:", [b.arcs("obj") for b in back])
    assert [b.arcs("nsubj") for b in back] == [[(1, 2)], [(0, 2)]]
    assert back[0].arcs("obj") == [(4, 2)] and back[1].arcs("obj") == []


if __name__ == "__main__":
    from run_exercises import main   # beside this file: the runner every solution file shares
    main(globals(), sys.argv[1:])
