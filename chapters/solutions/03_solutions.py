"""Solutions to the exercises of chapter 3 (head roles). Run from the repository root:

    python chapters/solutions/03_solutions.py               # every exercise
    python chapters/solutions/03_solutions.py exercise_2    # one of them

Hand-made attention maps over the chapter's toy trees and over the gold trees of data_small/ (no model is
trained); every exercise ends with asserts that check its result.
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repository root

from minihead import roles
from minihead.backend import xp
from minihead.data.conllu_io import Sentence, read_conllu


def tree(tokens, heads, deprels):
    """A Sentence from words, 1-based head ids (0 = root) and relations, as in the chapter."""
    return Sentence(tokens.split(), heads, deprels.split(), ["_"] * len(heads))


TOY_TREES = [
    tree("the old dog chased a cat .", [3, 3, 4, 0, 6, 4, 4], "det amod nsubj root det obj punct"),
    tree("dogs often chase cats .", [3, 3, 0, 3, 3], "nsubj advmod root obj punct"),
]


def peaked(targets, peak):
    """(T, T) map whose row i puts ``peak`` on targets[i] and spreads the rest of 0.95 evenly (0.05 went to EOS)."""
    T = len(targets)
    A = xp.full((T, T), (0.95 - peak) / T)
    A[xp.arange(T), xp.asarray(targets)] += peak
    return A


def exercise_1():
    """A next-word (+1) head: its +1 share over the queries where a next word exists is 1, so positional_heads
    finds it at offset +1; a weak next-word head (peak 0.3) has the same shares but a confidence below the
    paper's 0.8, so it stops being positional once confidence is asked for."""
    maps = []
    for t in TOY_TREES:
        T = len(t.tokens)
        nxt = [min(i + 1, T - 1) for i in range(T)]
        maps.append(xp.stack([peaked(nxt, 0.85), peaked(nxt, 0.3)])[None])     # (L=1, H=2, T, T)
    shares = roles.positional_shares(maps)                                       # (1, 2, 2): offsets -1, +1
    conf = roles.confidence(maps)                                                # (1, 2)
    print("shares (-1, +1):", xp.round(shares[0], 3).tolist(), " confidence:", xp.round(conf[0], 3).tolist())
    assert bool(xp.allclose(shares[0, :, 1], 1.0))
    assert roles.positional_heads(shares) == {(0, 0): 1, (0, 1): 1}
    assert roles.positional_heads(shares, confidence=conf) == {(0, 0): 1}


def exercise_2():
    """A verb->subject head: from the verb to its subject (every other word to itself) it is perfect on
    nsubj head->dep and beats the offset baseline (0.5 on these two sentences) by 50 points, so syntactic_heads
    lists it for verb->subject and for no other (relation, direction)."""
    maps = []
    for t in TOY_TREES:
        target = list(range(len(t.tokens)))
        for dep, head in t.arcs("nsubj"):
            target[head] = dep                                                   # the verb's row -> its subject
        maps.append(peaked(target, 0.85)[None, None])                            # (1, 1, T, T)
    acc, counts = roles.syntactic_accuracy(maps, TOY_TREES)
    baseline, offsets = roles.offset_baseline(TOY_TREES)
    key = ("nsubj", "head->dep")
    print(f"{roles.DIRECTION_NAMES[key]}: accuracy {float(acc[key][0, 0]):.2f} over {counts[key]} queries, "
          f"baseline {baseline[key]:.2f} at offset {offsets[key]:+d}")
    assert float(acc[key][0, 0]) == 1.0 and abs(baseline[key] - 0.5) < 1e-12
    found = {k: v for k, v in roles.syntactic_heads(acc, baseline).items() if v}
    assert list(found) == [key] and found[key] == [(0, 0)], found


def exercise_3():
    """Table 1's offset baseline on the gold dev trees of data_small/: in the synthetic source language the
    adjectives come right before their noun, so the noun's row hits one of its adjectives at offset -1 every time
    (noun->adjective: 100%, a baseline no head can beat), while an adjective hits its noun at +1 only when it is the
    last adjective before it (adjective->noun is weaker). The control language has the very same source trees, so
    its Table 1 baseline is the same: a difference between the two models' heads is the model's, not the trees'."""
    needs = read_conllu(ROOT / "data_small" / "dev.conllu")
    control = read_conllu(ROOT / "data_small" / "control" / "dev.conllu")
    baseline, offsets = roles.offset_baseline(needs)
    for key in baseline:
        print(f"{roles.DIRECTION_NAMES[key]:16s} best offset {offsets[key]:+d} hits {baseline[key]:.3f}")
    assert offsets["amod", "head->dep"] == -1 and baseline["amod", "head->dep"] == 1.0
    assert offsets["amod", "dep->head"] == 1 and baseline["amod", "dep->head"] < 0.9
    assert roles.offset_baseline(control) == (baseline, offsets)


def exercise_4():
    """A head that reads the gold trees: on the first 200 dev trees of data_small/, a head attending from every
    word to its governor is perfect in every dependent->head direction, so it is syntactic for each relation
    whose dep->head baseline leaves 10 points of room (all four here), and useless head->dep."""
    trees = read_conllu(ROOT / "data_small" / "dev.conllu")[:200]
    maps = [peaked([h - 1 if h else i for i, h in enumerate(t.heads)], 0.85)[None, None] for t in trees]
    acc, _ = roles.syntactic_accuracy(maps, trees)
    baseline, _ = roles.offset_baseline(trees)
    found = {k for k, v in roles.syntactic_heads(acc, baseline).items() if v}
    for key in sorted(acc):
        print(f"{roles.DIRECTION_NAMES[key]:16s} accuracy {float(acc[key][0, 0]):.3f}, baseline {baseline[key]:.3f}")
    assert all(float(acc[r, "dep->head"][0, 0]) == 1.0 for r in roles.RELATIONS)
    assert found == {(r, "dep->head") for r in roles.RELATIONS}, found


if __name__ == "__main__":
    from run_exercises import main   # beside this file: the runner every solution file shares
    main(globals(), sys.argv[1:])
