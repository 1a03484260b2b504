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
from .train import Corpus, preset
from .train import train as train_model

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


def blas_threads():
    """Threads the BLAS library uses now (threadpoolctl). Float32 GEMM sums depend on how the work is split
    between threads, so models trained with 1 and with 2 threads differ and are cached apart."""
    from threadpoolctl import threadpool_info
    counts = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
    return max(counts) if counts else 1


# the files a study's verdicts depend on: the parallel text and the dev trees its head roles are measured on
STUDY_FILES = ("train.src", "train.tgt", "dev.src", "dev.tgt", "test.src", "test.tgt", "dev.conllu")


def check_provenance(path, have, want, remake):
    """Refuse a shipped document whose recorded provenance ``have`` differs from today's ``want`` in any key of
    ``want`` (settings, data hash): a MiniheadError naming ``path``, the key, both values and how to ``remake`` it."""
    from .errors import MiniheadError
    for k in want:
        if have.get(k) != want[k]:
            raise MiniheadError(f"{path}: stale, its {k} differs from today's ({have.get(k)!r} vs {want[k]!r}); {remake}")


def data_fingerprint(folder, names=("train.src", "train.tgt", "dev.src", "dev.tgt", "test.src", "test.tgt")):
    """Short hash of the bytes of a data folder's parallel files: a regenerated language gets new run folders."""
    import hashlib
    h = hashlib.sha1()
    for n in names:
        path = os.path.join(str(folder), n)
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(n.encode() + b"\0" + f.read())
    return h.hexdigest()[:8]


def file_hash(path):
    """SHA-1 of a file's bytes (hex): what a cache made from the file is keyed by, so an edit in place, even one
    that keeps the size, is a new key."""
    import hashlib
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_folder(name, data="data_small", runs=None, **overrides):
    """``runs/<name>[-<setting><value>...]-t<BLAS threads>-<hash>``, the hash over the preset's settings (with the
    overrides) and the data's bytes: everything that determines the model is in the name, so the test suite (one
    BLAS thread) never reuses a model the command line trained with two, a regenerated data_small never reuses a
    model of the old one, and a preset whose settings change never reuses a model trained under the old ones."""
    import hashlib
    from .data.corpus import resolve_data
    from .train import preset_settings
    key = json.dumps({"preset": preset_settings(name, **overrides), "data": data_fingerprint(resolve_data(data))},
                     sort_keys=True)
    return os.path.join(str(runs or RUNS), f"{_tag(name, overrides)}-t{blas_threads()}-"
                                           f"{hashlib.sha1(key.encode()).hexdigest()[:8]}")


def _tag(name, overrides):
    """The study's name: the preset and every setting it overrides."""
    return name + "".join(f"-{k}{v}" for k, v in sorted(overrides.items()))


def prepare(name="quick", data="data_small", **overrides):
    """What training the named preset on ``data`` starts from: (splits, trees, corpus, cfg, tcfg), the corpus
    built on the preset's first ``n_train`` training pairs and the configs sized to its vocabulary."""
    splits, trees = load_data_small(data)
    n_train = preset(name, 1, **overrides)[1].n_train
    corpus = Corpus.build(list(zip(*splits["train"])), list(zip(*splits["dev"])), n_train=n_train)
    cfg, tcfg = preset(name, len(corpus.vocab), **overrides)
    return splits, trees, corpus, cfg, tcfg


def _trained(out, corpus, cfg, tcfg, progress):
    """The finished training in run folder ``out``: trained first (or resumed from last.npz) when ``done.json``
    does not mark it finished. Returns (the done.json record, the best.npz checkpoint), the checkpoint loaded only
    when its model settings, training settings and vocabulary are the ones asked for (a folder copied from another
    seed, or trained on other data, is an error naming the file)."""
    done = os.path.join(out, "done.json")
    if not os.path.exists(done):
        res = train_model(corpus, cfg, tcfg, out, resume=os.path.exists(os.path.join(out, "last.npz")),
                          progress=progress)
        checkpoint.save_json(done, {"history": res.history, "curve": res.curve, "best_bleu": res.best_bleu})
    logged = _done_record(done)
    ck = checkpoint.load(_best_of(out), expect_cfg=cfg, expect_vocab=corpus.vocab, expect_train=tcfg.to_dict())
    return logged, ck


def _done_record(done):
    """The finished training's record (done.json): its history, curve and best BLEU; a file of another shape is
    an error naming it (delete it: the training resumes from last.npz and ends at once), not a KeyError."""
    logged = checkpoint.load_json(done)
    if not (isinstance(logged, dict) and isinstance(logged.get("history"), list)):
        raise checkpoint.CheckpointError(f"{done}: not a finished training's record (no history); delete it: the "
                                         f"training then resumes from last.npz and ends at once")
    return logged


def _best_of(out):
    """``out/best.npz``; when it is missing the run cannot be recovered (last.npz holds the last step, not the
    best one), and the error says to delete the folder and train again."""
    best = os.path.join(out, "best.npz")
    if not os.path.exists(best):
        raise checkpoint.CheckpointError(f"{best}: missing, so this run's model cannot be recovered (last.npz is "
                                         f"its last step, not its best); delete {out} to train it again")
    return best


def load_study(name="quick", data="data_small", runs=None, progress=True, **overrides):
    """Train (first call) or load (later calls) the named preset on ``data``; ``overrides`` change the
    preset (and therefore the run folder's name, see :func:`run_folder`). ``done.json`` (the training's history, written atomically
    when it ends) marks a finished training; an unreadable one is an error naming it (delete it: the
    training then resumes from last.npz, which holds the whole history, and ends at once)."""
    splits, trees, corpus, cfg, tcfg = prepare(name, data, **overrides)
    tag = _tag(name, overrides)
    out = run_folder(name, data, runs, **overrides)
    logged, ck = _trained(out, corpus, cfg, tcfg, progress)
    return Study(tag, ck.params, ck.cfg, ck.vocab, corpus, splits, trees, logged["history"],
                 logged.get("curve", []), ck.path)


# --------------------------------------------------------------------------- real corpora
@dataclass
class RealStudy(Study):
    bpe: object = None      # the BPE model learned on the training pairs (splits hold BPE pieces)
    src_word_freq: dict = None  # training frequencies of source WORDS (for the rare-word analysis)


def real_run_folder(files, name, n_merges, n_dev, runs=None, **overrides):
    """``runs/real-<name>-<hash>``, the hash over the corpus files' CONTENTS (an edit in place that keeps the size
    is another corpus), the preset's settings with the overrides, the merges, the held-out size and the BLAS
    thread count."""
    import hashlib
    from .train import preset_settings
    ident = json.dumps([file_hash(p) for p in files]
                       + [name, n_merges, n_dev, sorted(overrides.items()), preset_settings(name, **overrides),
                          blas_threads()], sort_keys=True)
    return os.path.join(str(runs or RUNS), f"real-{name}-{hashlib.sha1(ident.encode()).hexdigest()[:8]}")


def load_real_study(train_src, train_tgt, dev_src=None, dev_tgt=None, test_src=None, test_tgt=None,
                    name="quick", n_merges=None, n_dev=500, runs=None, progress=True, **overrides):
    """Train (first call) or load a preset on a real parallel corpus, segmented with a BPE model learned on
    it (Sennrich et al. 2016). Raw text is tokenized with :func:`minihead.data.bpe.tokenize` (case kept).
    Without dev files the last ``n_dev`` training pairs are held out; without test files dev is reused.
    Cached under ``runs/real-<name>-<hash>/`` (hash of the files' contents, the preset's settings with the
    overrides, the merges, the held-out size and the BLAS thread count): an edited corpus is a new folder."""
    from .data import bpe as bpe_mod
    from .data.corpus import read_parallel
    from .data.vocab import frequencies
    n_merges = n_merges or (4000 if name == "quick" else 8000)
    files = [p for p in (train_src, train_tgt, dev_src, dev_tgt, test_src, test_tgt) if p]
    out = real_run_folder(files, name, n_merges, n_dev, runs, **overrides)
    tok = bpe_mod.tokenize
    train = read_parallel(train_src, train_tgt, tokenize=tok)
    if dev_src:
        dev = read_parallel(dev_src, dev_tgt, tokenize=tok)
    else:
        train, dev = train[:-n_dev], train[-n_dev:]
    test = read_parallel(test_src, test_tgt, tokenize=tok) if test_src else dev
    n_train = preset(name, 1, **overrides)[1].n_train
    train = train[:n_train] if n_train else train
    os.makedirs(out, exist_ok=True)
    bpe_path = os.path.join(out, "bpe.codes")
    if os.path.exists(bpe_path):
        bpe = bpe_mod.BPE.load(bpe_path)
    else:
        bpe = bpe_mod.BPE.learn([s for s, _ in train] + [t for _, t in train], n_merges)
        bpe.save(bpe_path)

    def seg(pairs):
        return [(bpe.segment(s), bpe.segment(t)) for s, t in pairs]
    train_p, dev_p, test_p = seg(train), seg(dev), seg(test)
    corpus = Corpus.build(train_p, dev_p)
    cfg, tcfg = preset(name, len(corpus.vocab), **{**overrides, "n_train": None})
    logged, ck = _trained(out, corpus, cfg, tcfg, progress)
    splits = {"train": ([s for s, _ in train_p], [t for _, t in train_p]),
              "dev": ([s for s, _ in dev_p], [t for _, t in dev_p]),
              "test": ([s for s, _ in test_p], [t for _, t in test_p])}
    return RealStudy(os.path.basename(out), ck.params, ck.cfg, ck.vocab, corpus, splits, {}, logged["history"],
                     logged.get("curve", []), ck.path, bpe=bpe, src_word_freq=frequencies([s for s, _ in train]))
