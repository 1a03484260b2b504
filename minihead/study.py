"""The models every chapter and command analyse, and the studies made of them.

A *study model* is a preset trained on data_small (or a real corpus), trained once and cached:
``load_study("quick")`` is the quick model (what the tests and CI use), ``load_study("default")`` the chapters' model,
each trained by :func:`minihead.train.train` the first time and read from its run folder afterwards (an interrupted
training resumes from ``last.npz``). :func:`run_folder` names the folder after everything that determines the model.

A *study over seeds* is what ``reproduce --seeds`` and ``emergence --study`` write, one document per study:
:data:`SCALES` (the settings of each scale), the provenance that makes a shipped document stale when the settings,
the data or the criteria change (:func:`study_provenance`, :func:`emergence_provenance`, one check:
:func:`check_provenance`), and the readers the chapters use (:func:`load_shipped_study`, :func:`load_trace`).
"""
import hashlib
import json
import os
from dataclasses import dataclass

from threadpoolctl import threadpool_info

from . import checkpoint, findings, needs
from .data import bpe as bpe_mod
from .data.corpus import REPO_ROOT, load_data_small, read_parallel, resolve_data
from .data.vocab import frequencies
from .errors import MiniheadError
from .train import Corpus, preset, preset_settings
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
    counts = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
    return max(counts) if counts else 1


def blas_kernel():
    """The BLAS library's kernels as threadpoolctl names them, in lower case: for OpenBLAS the CPU family whose
    kernels it chose when it loaded ("haswell", "skylakex"; ``OPENBLAS_CORETYPE`` picks them), else the library's
    name. Float32 GEMM sums depend on the kernels as on the thread split (docs/studies.md, Determinism), so models
    trained under two kernel sets differ and are cached apart."""
    info = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    if not info:
        return "none"
    return str(info[0].get("architecture") or info[0].get("internal_api") or "unknown").lower()


# the files a study's verdicts depend on: the parallel text and the dev trees its head roles are measured on
STUDY_FILES = ("train.src", "train.tgt", "dev.src", "dev.tgt", "test.src", "test.tgt", "dev.conllu")


def check_provenance(path, have, want, remake):
    """Refuse a shipped document whose recorded provenance ``have`` differs from today's ``want`` in any key of
    ``want`` (settings, data hash): a MiniheadError naming ``path``, the key, both values and how to ``remake`` it."""
    for k in want:
        if have.get(k) != want[k]:
            raise MiniheadError(f"{path}: stale, its {k} differs from today's ({have.get(k)!r} vs {want[k]!r}); {remake}")


def data_fingerprint(folder, names=("train.src", "train.tgt", "dev.src", "dev.tgt", "test.src", "test.tgt")):
    """Short hash of the bytes of a data folder's parallel files: a regenerated language gets new run folders."""
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
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_folder(name, data="data_small", runs=None, **overrides):
    """``runs/<name>[-<setting><value>...]-t<BLAS threads>-<BLAS kernels>-<hash>``, the hash over the preset's
    settings (with the overrides) and the data's bytes: everything that determines the model is in the name, so the
    test suite (one BLAS thread) never reuses a model the command line trained with two, a folder copied from a
    machine whose BLAS chose other kernels (:func:`blas_kernel`) is not read as this machine's, a regenerated
    data_small never reuses a model of the old one, and a preset whose settings change never reuses a model trained
    under the old ones."""
    key = json.dumps({"preset": preset_settings(name, **overrides), "data": data_fingerprint(resolve_data(data))},
                     sort_keys=True)
    return os.path.join(str(runs or RUNS), f"{_tag(name, overrides)}-t{blas_threads()}-{blas_kernel()}-"
                                           f"{hashlib.sha1(key.encode()).hexdigest()[:8]}")


def study_overrides(s, seed=None):
    """The preset settings of one model of scale ``s``: its ``train`` overrides (tests use tiny ones) and, when
    ``seed`` differs from the preset's own, the seed. A seed equal to the preset's is not named, so
    ``--seeds 1,2,3`` reuses the model (and every cached stage) that ``reproduce`` without ``--seeds`` trained."""
    over = dict(s.get("train", {}))
    if seed is not None and seed != preset(s["study"], 1, **over)[1].seed:
        over["seed"] = int(seed)
    return over


def trace_folder(data, config, seed, overrides, every, runs_dir, n_trees=None):
    """``<runs_dir>/trace-every<N>-trees<n|all>/<run folder>``: the traced run of one seed, with early stopping
    off (``patience`` past the last evaluation, an override, so it is in the run folder's name and hash)."""
    tcfg = preset(config, 1, seed=seed, **overrides)[1]
    ov = {"seed": seed, **overrides, "patience": tcfg.max_steps // tcfg.eval_every + 1}
    sub = f"trace-every{every}-trees{n_trees or 'all'}"
    return os.path.join(str(runs_dir), sub, os.path.basename(run_folder(config, data, None, **ov))), ov


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
    thread count and kernels."""
    ident = json.dumps([file_hash(p) for p in files]
                       + [name, n_merges, n_dev, sorted(overrides.items()), preset_settings(name, **overrides),
                          blas_threads(), blas_kernel()], sort_keys=True)
    return os.path.join(str(runs or RUNS), f"real-{name}-{hashlib.sha1(ident.encode()).hexdigest()[:8]}")


def load_real_study(train_src, train_tgt, dev_src=None, dev_tgt=None, test_src=None, test_tgt=None,
                    name="quick", n_merges=None, n_dev=500, runs=None, progress=True, **overrides):
    """Train (first call) or load a preset on a real parallel corpus, segmented with a BPE model learned on
    it (Sennrich et al. 2016). Raw text is tokenized with :func:`minihead.data.bpe.tokenize` (case kept).
    Without dev files the last ``n_dev`` training pairs are held out; without test files dev is reused.
    Cached under ``runs/real-<name>-<hash>/`` (hash of the files' contents, the preset's settings with the
    overrides, the merges, the held-out size and the BLAS thread count): an edited corpus is a new folder."""
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


# --------------------------------------------------------------------------- the studies over seeds
# Settings of each scale of ``python -m minihead reproduce``; chapters 2, 5 and 6 read them from here, so their cached
# stages are the command's. n_scratch: the most pruned all-attention configurations also trained from scratch;
# scratch_steps None = the same budget as the pruned model (its training steps plus the steps that pruning run used,
# in training batches); "plateau" = trained to the preset's own stopping rule (stages.scratch_steps). prune_steps is a
# CAP: each pruning run stops once 90% of its gates are settled (PruneSettings.settle); "prune" / "prune_all" are
# PruneSettings fields. On the quick model (one BLAS thread) every encoder lambda settled within 380 steps, while the
# official joint optimiser (gates at the weights' rate) left every gate unsettled at 600 (docs/experiments.md).
# "needs_after": True also scores every need of data_small on each pruned encoder model (stages.needs_after);
# "finetune" in "prune" fine-tunes each pruned model to prune_steps.
SCALES = {
    "quick": {"study": "quick", "n_dev": 300, "n_test": 200, "n_ablation": 150, "prune_steps": 600,
              # 0.2 and 0.3 since the quick model has 6 encoder heads: 0.1 kept 3-4 of them
              "enc_lambdas": (0.0, 0.005, 0.01, 0.015, 0.02, 0.03, 0.1, 0.2, 0.3), "all_lambdas": (0.03, 0.1),
              "n_scratch": 1, "scratch_steps": None,
              "prune": {"lr_gates": 0.2, "lr_params": 1e-3, "max_tokens": 1250, "seed": 0, "log_every": 10},
              "prune_all": {"log_every": 5}},
    "full": {"study": "default", "n_dev": 1000, "n_test": 1000, "n_ablation": 300, "prune_steps": 800,
             # 0.1 and 0.2 fill the gap between 0.05 (6-8 of 12 heads kept) and 0.3 (2-3 kept), where the knee lies
             "enc_lambdas": (0.0, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3), "all_lambdas": (0.03, 0.1),
             "n_scratch": 2, "scratch_steps": None,
             "prune": {"lr_gates": 0.1, "lr_params": 1e-3, "max_tokens": 3000, "seed": 0, "log_every": 10},
             "prune_all": {"log_every": 5}},
    # the study of the heads8 preset (8 heads a layer, trained to its plateau) as the paper prunes: each pruning run's
    # gates trained until settled, then fixed while the weights train on to prune_steps (every lambda, 0 included,
    # the same budget), the need scores along the encoder sweep, the most pruned configurations trained from scratch
    # to the preset's own plateau. Its lambdas extend full's downwards, since 48 encoder heads leave more to prune.
    # Not yet run over seeds: `reproduce --scale heads8 --seeds K` is several hours a seed on one core
    "heads8": {"study": "heads8", "n_dev": 1000, "n_test": 1000, "n_ablation": 300, "prune_steps": 1200,
               "enc_lambdas": (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3), "all_lambdas": (0.03, 0.1),
               "n_scratch": 2, "scratch_steps": "plateau", "needs_after": True,
               "prune": {"lr_gates": 0.1, "lr_params": 1e-3, "max_tokens": 3000, "seed": 0, "log_every": 10,
                         "finetune": True},
               "prune_all": {"log_every": 5}},
}
# the same study of heads8x32 (8 heads of 32 at d_model 256; its roles: chapters/studies/emerge-heads8x32.json); about
# twice heads8's step time, not yet run over seeds
SCALES["heads8x32"] = dict(SCALES["heads8"], study="heads8x32")
ROLES_SPLIT = "test"     # the split whose gold trees judge the head roles (dev is for choosing recipes)
STUDIES = os.path.join(str(REPO_ROOT), "chapters", "studies")      # the shipped studies over seeds and traces
DATA_SMALL = os.path.join(str(REPO_ROOT), "data_small")


def study_provenance(s, data=None):
    """What determines a study's verdicts besides the code: the scale's settings, the preset's model and training
    settings, the content hash of the data (text, dev and test trees), the version of the criteria and the trees
    the roles are judged on. Stored in study.json; a shipped study whose provenance differs from today's is stale
    (:func:`load_shipped_study`)."""
    files = STUDY_FILES + ("test.conllu",)       # the roles are judged on the test trees
    return checkpoint.plain({"scale": s, "preset": preset_settings(s["study"]),
                             "data": data_fingerprint(data or DATA_SMALL, files),
                             "criteria": findings.CRITERIA_VERSION, "roles_trees": ROLES_SPLIT})


def emergence_provenance(config, data, n_trees, overrides, split="dev"):
    """What determines an emergence study's verdicts besides the code: the preset's settings with the overrides
    applied, the data's content hash (text and dev trees, and the test trees when the roles are judged on them) and
    the number of trees measured. ``split`` is named only when it is not dev, so the studies written before it
    could be chosen keep their provenance."""
    files = STUDY_FILES + (("test.conllu",) if split != "dev" else ())
    return checkpoint.plain({"kind": "emergence", "preset": preset_settings(config, **overrides),
                             "data": data_fingerprint(data, files), "n_trees": n_trees,
                             **({"roles_trees": split} if split != "dev" else {})})


def seeds_doc(s, per_seed):
    """A study over seeds of ``reproduce`` (study.json, what the chapters and the README read): {"study": preset,
    "scale": s, "seeds": [k, ...], "blas_threads": n, "per_seed": [{"seed", "report", "test_bleu", "seconds",
    "findings": {name: Verdict.to_dict()}}], "summary": :func:`minihead.findings.summarize` of the per-seed
    findings (each number a list [mean, sd, [per-seed values]]), "provenance": :func:`study_provenance`}."""
    return {"study": s["study"], "scale": s, "seeds": [p["seed"] for p in per_seed], "blas_threads": blas_threads(),
            "per_seed": per_seed, "summary": findings.summarize([p["findings"] for p in per_seed]),
            "provenance": study_provenance(s)}


def merge_seeds(docs, what="studies"):
    """One study over seeds from several made on their own (``reproduce --seeds K`` on different machines or
    sessions): their per-seed records in seed order, summarised again. Refused when their scales, provenance or
    BLAS thread counts differ, or a seed appears twice: a MiniheadError naming the ``what`` (each doc's path)."""
    if not docs:
        raise MiniheadError(f"{what}: nothing to merge")
    first = docs[0]
    for d in docs[1:]:
        for k in ("study", "scale", "blas_threads", "provenance"):
            if checkpoint.plain(d.get(k)) != checkpoint.plain(first.get(k)):
                raise MiniheadError(f"{what}: the studies differ in {k} ({d.get(k)!r} vs {first.get(k)!r}); only "
                                    f"studies made alike merge")
    per_seed = sorted((p for d in docs for p in d["per_seed"]), key=lambda p: p["seed"])
    seeds = [p["seed"] for p in per_seed]
    if len(set(seeds)) != len(seeds):
        raise MiniheadError(f"{what}: seed(s) {sorted({k for k in seeds if seeds.count(k) > 1})} appear twice")
    return {**first, "seeds": seeds, "per_seed": per_seed,
            "summary": findings.summarize([p["findings"] for p in per_seed])}


def model_mismatches(docs):
    """Seeds whose model differs between shipped studies of one preset: ``docs`` maps a name to a study document
    (full, emergence or need study), whose per-seed records may carry ``model``, the fingerprint of the trained
    weights (:func:`minihead.stages.params_fingerprint`). Two studies are compared only when their provenance
    names the same preset settings; for each seed both fingerprint, the fingerprints must agree. Returns
    (mismatches: ["<name> seed K: <fp> vs <name> seed K: <fp>", ...], number of (study pair, seed) compared)."""
    recs = {name: ((d.get("provenance") or {}).get("preset"),
                   {p["seed"]: p["model"] for p in d["per_seed"] if p.get("model")}) for name, d in docs.items()}
    names, bad, n = sorted(recs), [], 0
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (pa, fa), (pb, fb) = recs[a], recs[b]
            if pa is None or checkpoint.plain(pa) != checkpoint.plain(pb):
                continue
            for k in sorted(set(fa) & set(fb)):
                n += 1
                if fa[k] != fb[k]:
                    bad.append(f"{a} seed {k}: {fa[k][:10]} vs {b} seed {k}: {fb[k][:10]}")
    return bad, n


def emergence_doc(results, config, data, n_trees, overrides, split="dev"):
    """The emergence study over seeds as the chapters read it (:func:`load_shipped_study`): per-seed verdicts of
    the three head functions, :func:`minihead.findings.summarize` of them, and the provenance."""
    per_seed = [{"seed": r.seed, "dev_bleu": r.dev_bleu, "steps": r.steps, **({"model": r.model} if r.model else {}),
                 "findings": {"positional": r.positional, "syntactic": r.syntactic, "rare_word": r.rare,
                              **({"prunable": r.pruning["prunable"],
                                  "functions_survive": r.pruning["functions_survive"]} if r.pruning else {})}}
                for r in results]
    return {"study": config, "data": _relative(data), "seeds": [r.seed for r in results],
            "blas_threads": blas_threads(), "per_seed": per_seed,
            "summary": findings.summarize([p["findings"] for p in per_seed]),
            "provenance": {**emergence_provenance(config, data, n_trees, overrides, split),
                           "criteria": findings.CRITERIA_VERSION}}


# The shipped head x need studies by preset: file and the `needs` arguments that remake it (docs/studies.md).
SHIPPED_NEEDS = {"default": ("needs.json", "--seeds 1,2,3"),
                 "heads8x32": ("needs-heads8x32.json",
                               "--config heads8x32 --seeds 1,2,3 --n-bleu 200 --n-dev 500 --n-ablation 150")}


def needs_provenance(config, overrides, n_bleu, n_dev, n_ablation):
    """What determines a head x need study besides the code: the preset's settings with the overrides, the content
    hash of data_small (text and the test trees the needs come from), the BLEU sentences and the dev pairs of the
    importance measures."""
    return checkpoint.plain({"kind": "need-matrix", "preset": preset_settings(config, **overrides),
                             "data": data_fingerprint(DATA_SMALL, STUDY_FILES + ("test.conllu",)), "n_bleu": n_bleu,
                             "n_dev": n_dev, "n_ablation": n_ablation})


def needs_doc(per_seed, config, overrides, n_bleu, n_dev, n_ablation):
    """The head x need matrices of several seeds' models (``python -m minihead needs --study``): {"kind":
    "need-matrix", "study": preset, "overrides", "seeds", "blas_threads", "per_seed": [{"seed", "matrix":
    :func:`minihead.needs.ablation_matrix`, "instruments": {key: (L, H) encoder scores}, "findings": sec. 4's
    verdicts (:func:`minihead.findings.relevance_verdicts`, optional)}], "agreement":
    :func:`minihead.needs.study_agreement`, "summary": :func:`minihead.findings.summarize` of the seeds'
    findings (when every seed has them), "provenance": :func:`needs_provenance`}."""
    judged = all("findings" in p for p in per_seed)
    return {"kind": "need-matrix", "study": config, "overrides": dict(overrides),
            "seeds": [p["seed"] for p in per_seed], "blas_threads": blas_threads(), "per_seed": per_seed,
            "agreement": checkpoint.plain(needs.study_agreement(per_seed)),
            **({"summary": findings.summarize([p["findings"] for p in per_seed])} if judged else {}),
            "provenance": needs_provenance(config, overrides, n_bleu, n_dev, n_ablation)}


def load_needs(path=None):
    """A head x need study (:func:`needs_doc`): ``path`` a file, or the name of a preset in :data:`SHIPPED_NEEDS`
    (default ``"default"``, the shipped ``chapters/studies/needs.json``). Refused with the command that remakes it
    (a shipped study's own; else read from the document) when missing, unreadable, of another shape, or when its
    provenance differs from today's."""
    shipped = SHIPPED_NEEDS.get(path or "default")
    path = os.path.join(STUDIES, shipped[0]) if shipped else path
    args = shipped[1] if shipped else "--config PRESET --seeds ..."
    shown = f"chapters/studies/{shipped[0]}" if shipped else path   # as the repository root reads it
    remake = f"remake it with `python -m minihead needs {args} --study {shown}` (docs/studies.md)"
    doc = _read_json(path, "head x need study", remake)
    if not (isinstance(doc, dict) and doc.get("kind") == "need-matrix" and isinstance(doc.get("per_seed"), list)
            and doc["per_seed"] and all(isinstance(p, dict) and {"seed", "matrix"} <= set(p) for p in doc["per_seed"])):
        raise MiniheadError(f"{path}: holds no head x need study (kind 'need-matrix', per-seed matrices); {remake}")
    have = doc.get("provenance", {})
    if not shipped:   # the command that made this document, from what it records
        sets = "".join(f" {k}={v}" for k, v in doc.get("overrides", {}).items())
        args = (f"--config {doc['study']} --seeds {','.join(str(p['seed']) for p in doc['per_seed'])} "
                f"--n-bleu {have.get('n_bleu')} --n-dev {have.get('n_dev')} --n-ablation {have.get('n_ablation')}"
                + (f" --set{sets}" if sets else ""))
        remake = f"remake it with `python -m minihead needs {args} --study {path}` (docs/studies.md)"
    check_provenance(path, have, needs_provenance(doc["study"], doc.get("overrides", {}), have.get("n_bleu"),
                                                  have.get("n_dev"), have.get("n_ablation")), remake)
    return doc


def _read_json(path, what, remake):
    """The JSON document at ``path``, or a MiniheadError naming it (missing, unreadable) with how to remake it."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise MiniheadError(f"{path}: no such {what}; {remake}") from None
    except (OSError, ValueError) as exc:
        raise MiniheadError(f"{path}: does not parse as a {what} ({exc}); {remake}") from None


def load_shipped_study(name="quick"):
    """The study over seeds that the chapters judge their claims by: ``chapters/studies/<name>.json``. Either a
    copy of the study.json of ``python -m minihead reproduce [--quick] --seeds 1,2,3`` (name: a scale of
    :data:`SCALES`), or the file ``python -m minihead emergence --config <name> --seeds 1,2,3 --study`` wrote
    (head roles only). Refused, with the command that remakes it, when missing or when its provenance (settings,
    data) differs from today's."""
    path = os.path.join(STUDIES, f"{name}.json")
    if name in SCALES:
        remake = (f"remake it with `python -m minihead reproduce {'--quick ' if name == 'quick' else ''}--seeds 1,2,3 "
                  f"--out report-{name}` and copy report-{name}/study.json to chapters/studies/{name}.json")
    else:
        remake = (f"remake it with `python -m minihead emergence --config {name} --seeds 1,2,3 "
                  f"--study chapters/studies/{name}.json` (with `--split test` for a study judged on the test trees)")
    if not os.path.exists(path):
        raise MiniheadError(f"{path}: no study over seeds for {name!r}; {remake}")
    doc = _read_json(path, "study", remake)
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), dict):
        raise MiniheadError(f"{path}: holds no study (an object with a 'summary'); {remake}")
    fields = ("held_in", "of", "status", "numbers") if name in SCALES else ("held_in", "of", "numbers")
    bad = [k for k, v in doc["summary"].items() if not (isinstance(v, dict) and all(f in v for f in fields))]
    if bad:   # valid JSON of the wrong shape: named here, not a KeyError in a chapter
        raise MiniheadError(f"{path}: the summary's {', '.join(bad)} lack {', '.join(fields)}; {remake}")
    have = doc.get("provenance", {})
    if name in SCALES:
        want = study_provenance(SCALES[name])
    else:   # an emergence study names its data folder (the control's, say); older ones are of data_small
        data = os.path.join(str(REPO_ROOT), doc.get("data", "data_small"))
        if doc.get("study", name) != name or doc.get("data", "data_small") != "data_small":
            split = " --split test" if have.get("roles_trees") == "test" else ""
            remake = (f"remake it with `python -m minihead emergence --config {doc.get('study', name)} --seeds 1,2,3 "
                      f"--data {doc.get('data', 'data_small')}{split} --study chapters/studies/{name}.json`")
        want = {**emergence_provenance(doc.get("study", name), data, have.get("n_trees"), {},
                                       have.get("roles_trees", "dev")),
                "criteria": findings.CRITERIA_VERSION}   # judged by today's criteria
    check_provenance(path, have, want, remake)
    return doc


def read_study(path):
    """A study.json of ``reproduce --seeds`` as written (no provenance check: :func:`merge_seeds` compares the
    documents it merges); a MiniheadError naming the file when it is missing, does not parse or holds no seeds."""
    doc = _read_json(path, "study", "make it with `python -m minihead reproduce --seeds K --out DIR`")
    if not (isinstance(doc, dict) and isinstance(doc.get("per_seed"), list) and doc["per_seed"]
            and all(isinstance(p, dict) and {"seed", "findings"} <= set(p) for p in doc["per_seed"])):
        raise MiniheadError(f"{path}: holds no study over seeds (per_seed records with seed and findings)")
    return doc


def load_studies(names):
    """{name: the shipped study document as it is on disk}, read without the provenance check (the README shows
    what the shipped files say, stale or not; :func:`load_shipped_study` is the checked reader)."""
    return {name: _read_json(os.path.join(STUDIES, f"{name}.json"), "study", "see docs/studies.md")
            for name in names}


def judge_against_study(name, verdicts, names=None, strict=True, log=print):
    """A chapter's closing check: ``verdicts`` ({finding: Verdict}) of the chapter's model judged by
    :func:`minihead.findings.check_claims` against the shipped study ``name`` (:func:`load_shipped_study`), then
    the chapter's findings table (:func:`minihead.findings.findings_table`: the paper's number, the study's over
    seeds, the criterion, the verdict). Without a usable study: ``strict`` re-raises (the quick study ships with
    the chapters, so missing or stale is an error); otherwise no claim is asserted and this model's verdicts are
    printed. Returns {finding: status}, or None without a study."""
    names = list(verdicts) if names is None else list(names)
    try:
        shipped = load_shipped_study(name)
    except MiniheadError as exc:
        if strict:
            raise
        log(f"{exc}\nNo study over seeds for {name!r}, so no claim is asserted. This model alone:")
        for n in names:
            log(f"  {findings.what(n)}: {verdicts[n].status} ({verdicts[n].text()})")
        return None
    log(f"the study over seeds {', '.join(map(str, shipped['seeds']))} (preset {shipped['study']}, "
        f"{shipped['blas_threads']} BLAS thread(s)):")
    status = findings.check_claims(shipped["summary"], verdicts, names=names, log=log)
    log("\n" + findings.findings_table(shipped["summary"], names))
    return status


# --------------------------------------------------------------------------- traces along training
def trace_doc(traces, config, data, n_trees, overrides, every):
    """The traces of several seeds as one JSON document (``emergence --trace N --json``; the chapters plot the
    shipped ones): {"kind": "emergence-trace", "study", "data", "every", "seeds", "blas_threads", "provenance",
    "traces": {seed: rows}}."""
    return {"kind": "emergence-trace", "study": config, "data": _relative(data), "overrides": dict(overrides),
            "n_trees": n_trees, "every": every, "seeds": list(traces), "blas_threads": blas_threads(),
            "provenance": emergence_provenance(config, data, n_trees, overrides),
            "traces": {str(k): v for k, v in traces.items()}}


def _relative(data):
    """A data folder as the trace document names it: relative to the repository when inside it."""
    path = os.path.abspath(str(data))
    inside = os.path.commonpath([path, str(REPO_ROOT)]) == str(REPO_ROOT)
    return os.path.relpath(path, str(REPO_ROOT)) if inside else path


def load_trace(path):
    """A trace document (:func:`trace_doc`) such as the ones shipped in chapters/studies/, refused with the
    command that remakes it when missing, unreadable, or when its provenance (the preset's settings with its
    overrides, the data's content hash) differs from today's."""
    remake = ("remake it with `python -m minihead emergence --trace N --json PATH` (docs/studies.md gives the command "
              "of each shipped trace)")
    doc = _read_json(path, "trace", remake)
    if not isinstance(doc, dict) or doc.get("kind") != "emergence-trace":
        raise MiniheadError(f"{path}: holds no trace (an object with kind 'emergence-trace'); {remake}")
    missing = [k for k in ("study", "data", "n_trees", "overrides", "provenance", "traces") if k not in doc]
    if missing:
        raise MiniheadError(f"{path}: a trace without {', '.join(missing)}; {remake}")
    data = os.path.join(str(REPO_ROOT), doc["data"])
    check_provenance(path, doc.get("provenance", {}),
                     emergence_provenance(doc["study"], data, doc["n_trees"], doc["overrides"]), remake)
    check_trace_rows(path, doc, remake)
    return doc


def check_trace_rows(path, doc, remake):
    """Each seed's rows must be a list of measurements at the trace's steps, every ``every`` steps and the run's
    last, none skipped: a trace with a gap (or rows of the wrong shape) would plot a curve it did not measure."""
    traces, every = doc["traces"], doc.get("every")
    if not isinstance(traces, dict) or not isinstance(every, int) or every < 1:
        raise MiniheadError(f"{path}: its traces are not an object of seeds, or it names no step interval; {remake}")
    max_steps = preset(doc["study"], 1, **doc["overrides"])[1].max_steps
    want = sorted(set(range(every, max_steps + 1, every)) | {max_steps})
    for seed, rows in traces.items():
        ok = isinstance(rows, list) and all(isinstance(r, dict) and {"step", "dev_bleu", "positional", "syntactic",
                                                                     "rare"} <= set(r) for r in rows)
        if not ok:
            raise MiniheadError(f"{path}: seed {seed}'s rows are not measurements (step, dev_bleu, positional, "
                                f"syntactic, rare); {remake}")
        steps = [r["step"] for r in rows]
        if steps != want[:len(steps)] or not steps:
            raise MiniheadError(f"{path}: seed {seed} is measured at steps {steps}, not every {every} steps from "
                                f"{every} ({want[:4]}...); {remake}")
