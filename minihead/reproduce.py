"""``python -m minihead reproduce``: the whole study in one command, and a report beside the paper.

Stages (each cached in the study model's run folder by :mod:`minihead.stages`, so an interrupted run resumes where
it stopped): train -> test BLEU -> head importance (LRP relevance, confidence, Michel et al., single-head ablation)
-> head roles -> encoder-head pruning sweep -> all-attention pruning -> the same configurations trained from
scratch -> ``report/README.md`` (:mod:`minihead.report`) with the figures and, for every finding, the paper's number
beside ours. Every verdict is a criterion of :mod:`minihead.findings`.

On data_small (default) or on a real corpus (:func:`reproduce_real`: BPE learned on it, gold trees of real English
for the head roles). ``--seeds 1,2,3`` runs the study once per seed (each model and its stages in its own run
folder, each seed's report in ``report/seed-K/``) and adds what one model cannot tell: in how many seeds each finding
holds, and its numbers as mean +- sd over seeds (``report/README.md``; ``report/study.json``, laid out by
:func:`minihead.study.seeds_doc`, for the chapters). Studies of single seeds made apart merge into one
(:func:`merge_reports`).
"""
import os
import shutil
import time

from tqdm.auto import tqdm

from . import findings, report, stages
from .analysis import head_roles
from .data.conllu_io import read_conllu
from .evaluate import score
from .prune import PruneSettings
from .study import SCALES, load_real_study, load_study, merge_seeds, read_study, seeds_doc, study_overrides
from .translate import translate

N_STAGES = 7   # train, importance, roles, encoder sweep, all-attention sweep, from scratch, report


def run_study(s, out, progress=True, seed=None, runs=None, bar=None):
    """Train (or read) one model of scale ``s`` (``seed``: see :func:`study_overrides`; ``runs``: the runs
    folder, default ``runs/``), run every stage (each cached in the model's run folder) and write its report
    into ``out``. Returns (report path, {finding: Verdict}, test BLEU, {stage: wall seconds}, the model's
    fingerprint (:func:`minihead.stages.params_fingerprint`, so studies of one seed can be checked to share a model)).
    """
    own_bar = bar is None
    bar = tqdm(total=N_STAGES, desc="reproduce", unit="stage", disable=not progress) if own_bar else bar
    elapsed, t0 = {}, time.time()

    def done(stage):                 # wall seconds per stage, for the report
        nonlocal t0
        elapsed[stage], t0 = time.time() - t0, time.time()
        bar.update(1)
    study = load_study(s["study"], runs=runs, progress=progress, **study_overrides(s, seed))
    done("train")
    imp = stages.importance_stage(study, s["n_dev"], s["n_ablation"])
    summ = stages.importance_summary(imp)
    done("importance")
    rep = stages.roles_stage(study, s.get("n_trees"))
    done("roles")
    base, enc, allk, scratch = stages.prune_stages(study, s, progress, done)
    verdicts = findings.study_verdicts(summ, rep, enc, allk, scratch, study.cfg, imp=imp)
    path = report.write_report(out, study, s, imp, summ, rep, base, enc, allk, scratch, elapsed, verdicts)
    bar.update(1)
    if own_bar:
        bar.close()
    return path, verdicts, base["bleu"], elapsed, stages.params_fingerprint(study.params)


def reproduce(quick=True, out="report", progress=True, log=print, scale=None, seeds=None, runs=None):
    """The whole study on data_small; ``scale`` (a dict like SCALES') overrides the named scale. Without
    ``seeds``: one model (the preset's seed), its report in ``out``. With ``seeds`` (a list): one model per seed
    (:func:`reproduce_seeds`). Returns the path of ``out``/README.md."""
    s = scale or SCALES["quick" if quick else "full"]
    if seeds is not None:
        return reproduce_seeds(seeds, s, out, progress, log, runs)
    path = run_study(s, out, progress, runs=runs)[0]
    log(f"report written to {path}")
    return path


def reproduce_seeds(seeds, s, out="report", progress=True, log=print, runs=None):
    """The study over seeds: :func:`run_study` for each seed (its report in ``out/seed-<k>/``, its stages cached
    in its own run folder), then ``out/README.md`` with, for every finding, the seeds in which it holds and
    its numbers as mean +- sd with each seed's value, and ``out/study.json`` (:func:`minihead.study.seeds_doc`)."""
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"reproduce_seeds: seeds {seeds!r}: give at least one seed, each once")
    per_seed = []
    with tqdm(total=N_STAGES * len(seeds), desc="reproduce", unit="stage", disable=not progress) as bar:
        for k in seeds:
            bar.set_description(f"reproduce, seed {k}")
            path, verdicts, bleu, elapsed, model = run_study(s, os.path.join(out, f"seed-{k}"), progress, seed=k,
                                                             runs=runs, bar=bar)
            per_seed.append({"seed": k, "report": os.path.relpath(path, out), "test_bleu": bleu, "model": model,
                             "seconds": elapsed, "findings": {n: v.to_dict() for n, v in verdicts.items()}})
    path = report.write_seeds_report(out, seeds_doc(s, per_seed))
    log(f"report written to {path}")
    return path


def merge_reports(sources, out, log=print):
    """One report over seeds from studies made apart (``reproduce --seeds K --out DIR`` on other machines or in
    other sessions): each source is a report folder holding study.json, or a study.json file itself. Their seeds
    are merged by :func:`minihead.study.merge_seeds` (refused unless made alike), the seed folders of a report
    folder are copied into ``out``, and ``out/README.md`` and ``out/study.json`` are written as one run over all the
    seeds would write them. Returns the path of README.md."""
    paths = [s if s.endswith(".json") else os.path.join(s, "study.json") for s in sources]
    docs = [read_study(p) for p in paths]
    doc = merge_seeds(docs, what=", ".join(paths))
    for path, d in zip(paths, docs):
        for p in d["per_seed"]:
            src = os.path.join(os.path.dirname(path), os.path.dirname(p["report"]))
            dst = os.path.join(out, os.path.dirname(p["report"]))
            if os.path.abspath(src) != os.path.abspath(dst) and os.path.isdir(src):
                shutil.copytree(src, dst, dirs_exist_ok=True)
    path = report.write_seeds_report(out, doc)
    log(f"report written to {path} ({len(doc['seeds'])} seeds: {', '.join(map(str, doc['seeds']))})")
    return path


def reproduce_real(train_src, train_tgt, conllu, dev_src=None, dev_tgt=None, test_src=None, test_tgt=None,
                   quick=True, out="report-real", progress=True, log=print):
    """The study on a real parallel corpus (BPE learned on it) with gold trees of real English: test BLEU,
    head importance, head roles on the trees, and the encoder-head pruning sweep. (All-attention pruning
    and from-scratch training are left to the data_small run: they cost hours on 2 cores at this size.)"""
    s = SCALES["quick" if quick else "full"]
    t0 = time.time()
    study = load_real_study(train_src, train_tgt, dev_src, dev_tgt, test_src, test_tgt,
                            name=s["study"], progress=progress)
    n = s["n_test"]
    src, ref = study.splits["test"][0][:n], study.splits["test"][1][:n]
    bleu = score(translate(study.params, study.cfg, study.vocab, src), ref)
    imp = stages.importance_stage(study, s["n_dev"], s["n_ablation"])
    summ = stages.importance_summary(imp)
    rep = head_roles(study.params, study.cfg, study.vocab, read_conllu(conllu), study.src_word_freq, bpe=study.bpe)
    base = stages.baseline(study, n_test=n)
    enc = stages.sweep(study, s["enc_lambdas"], ("enc",), s["prune_steps"], PruneSettings(), n_test=n,
                       progress=progress)
    path = report.write_real_report(out, study, dict(train_src=train_src, train_tgt=train_tgt, conllu=conllu,
                                                     quick=quick), bleu, len(src), summ, rep, base, enc,
                                    time.time() - t0)
    log(f"report written to {path}")
    return path
