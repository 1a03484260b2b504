"""The trained model every chapter and the ``reproduce`` command analyse, trained once and cached.

``load_study("quick")`` returns the quick model (what the tests and CI use) and ``load_study("default")``
the chapters' model, each trained on data_small by :func:`minihead.train.train` the first time and read
from ``runs/<name>/`` afterwards (an interrupted training resumes from ``last.npz``).
"""
import json
import os
from dataclasses import dataclass

from . import checkpoint
from .data.corpus import REPO_ROOT, load_data_small
from .train import Corpus, preset, train

RUNS = REPO_ROOT / "runs"


@dataclass
class Study:
    name: str
    params: dict
    cfg: object
    vocab: object
    corpus: Corpus          # train / dev token lists and source frequencies
    splits: dict            # split -> (src token lists, tgt token lists)
    trees: dict             # "dev" / "test" -> gold Sentence lists
    history: list           # dev BLEU and loss at each evaluation
    curve: list             # [step, training loss] every CURVE_EVERY steps
    path: str               # the best checkpoint


def load_study(name="quick", data="data_small", runs=None, progress=True, **overrides):
    """Train (first call) or load (later calls) the named preset on ``data``; ``overrides`` change the
    preset (and therefore the run folder's name)."""
    splits, trees = load_data_small(data)
    tag = name + "".join(f"-{k}{v}" for k, v in sorted(overrides.items()))
    out = os.path.join(str(runs or RUNS), tag)
    n_train = preset(name, 1, **overrides)[1].n_train
    train_pairs = list(zip(*splits["train"]))
    corpus = Corpus.build(train_pairs, list(zip(*splits["dev"])), n_train=n_train)
    cfg, tcfg = preset(name, len(corpus.vocab), **overrides)
    done = os.path.join(out, "done.json")
    if not os.path.exists(done):
        resume = os.path.exists(os.path.join(out, "last.npz"))
        res = train(corpus, cfg, tcfg, out, resume=resume, progress=progress)
        with open(done, "w") as f:
            json.dump({"history": res.history, "curve": res.curve, "best_bleu": res.best_bleu}, f)
    with open(done) as f:
        logged = json.load(f)
    ck = checkpoint.load(os.path.join(out, "best.npz"), expect_cfg=cfg)
    return Study(tag, ck.params, ck.cfg, ck.vocab, corpus, splits, trees, logged["history"],
                 logged.get("curve", []), ck.path)
