"""Do the paper's head functions emerge? One model per seed, trained and measured the same way.

``python -m minihead emergence --config quick --seeds 1,2,3 [--data data_small/control]`` trains one model
per seed on a parallel corpus with gold trees (data_small by default), then measures on the dev trees (where a
recipe is chosen; ``--split test`` judges a chosen recipe on the test trees), for each seed: dev BLEU, the best
encoder head's share of argmaxes on -1 / +1 and its confidence (sec. 5.1),
the best head per dependency relation and direction against the fixed-offset baseline (sec. 5.2, Table 1)
and the rare-word share (sec. 5.3). The verdicts come from :mod:`minihead.findings`, the one home of the
paper's criteria. Models are cached per seed under ``runs/emergence/`` by :func:`minihead.study.load_study`
(the folder names every setting that determines the model, BLAS thread count and data hash included), so a
second call only measures.

``--prune 0.05,0.1,0.2`` also prunes each seed's encoder heads with the hard-concrete gates at those lambdas
(:func:`minihead.stages.sweep`, cached beside the model) and judges sec. 6's two encoder findings on the heads
the seed's own measurement gave a role: most heads prunable at small cost, and the specialised heads among the
survivors (Figure 8).
"""
import os
from dataclasses import dataclass

from tqdm.auto import tqdm

from . import checkpoint, findings, stages, study
from .errors import MiniheadError
from .prune import PruneSettings
from .train import dev_bleu
from .train import train as train_model


@dataclass
class SeedResult:
    """What one seed's model shows. Shares and accuracies are fractions in [0, 1]."""
    seed: int
    dev_bleu: float
    steps: int
    positional: dict          # findings.positional(...) as a dict
    syntactic: dict           # findings.syntactic(...) as a dict
    rare: dict                # findings.rare_word(...) as a dict
    pruning: dict = None      # with --prune: per-lambda survivors and the two encoder pruning verdicts
    model: str = None         # the model's fingerprint (minihead.stages.params_fingerprint)


def prune_seed(s, lambdas, steps=600, n_test=300, n_trees=None, progress=True, split="dev"):
    """Prune the encoder heads of study ``s`` at each lambda (cached beside the model) and judge, on the roles the
    model's heads have on the trees of ``split`` this command measures on (:func:`minihead.roles.classify_heads`,
    through :func:`minihead.stages.roles_stage`): :func:`minihead.findings.most_encoder_heads_prunable` (each run
    against the lambda = 0 run at its step) and :func:`minihead.findings.functions_survive` (roles re-measured on each
    pruned model). Returns a plain dict."""
    n_enc = s.cfg.n_enc_layers * s.cfg.n_heads
    base = stages.baseline(s, n_test=n_test)
    runs = stages.sweep(s, lambdas, "enc", steps, PruneSettings(), n_test=n_test, progress=progress,
                        after=stages.functions_after(s, n_trees, split=split))
    runs = stages.with_reference(s, runs, PruneSettings(), n_test=n_test)
    rep = stages.roles_stage(s, n_trees, split=split)
    kept = [{"lam": float(x["lam"]), "bleu": float(x["bleu"]),
             "heads": [[l, h] for l, row in enumerate(x["retained"]["enc"]) for h, k in enumerate(row) if k]}
            for x in runs]
    for k in kept:
        k["with_role"] = [lh for lh in k["heads"] if rep.roles.get(tuple(lh))]
    return checkpoint.plain({
        "bleu_before": float(base["bleu"]), "n_enc": n_enc,
        "roles": [[l, h, sorted(v)] for (l, h), v in sorted(rep.roles.items()) if v],
        "runs": kept, "prunable": findings.most_encoder_heads_prunable(runs, n_enc).to_dict(),
        "functions_survive": findings.functions_survive(runs, findings.functions(rep.roles, rep), n_enc).to_dict()})


def run_seed(data, config, seed, overrides, runs_dir, n_trees=None, progress=True, prune_lambdas=(), prune_steps=600,
             prune_n_test=300, split="dev"):
    """Train (or reuse) the model of one seed and measure it (:func:`minihead.stages.emergence_stage`); returns a
    SeedResult; ``split``: the trees the roles are judged on (dev by default). The model is the study model of
    :func:`minihead.study.load_study` (cached in its run folder, named by preset, settings, seed, BLAS threads and
    data hash); the measurement is cached beside it. The run folder is
    held (:func:`minihead.checkpoint.run_lock`) for the whole of it."""
    with checkpoint.run_lock(study.run_folder(config, data, runs_dir, seed=seed, **overrides)):
        s = study.load_study(config, data, runs=runs_dir, progress=progress, seed=seed, **overrides)
        r = {**stages.emergence_stage(s, data, n_trees, split), "seed": seed,
             "model": stages.params_fingerprint(s.params)}
        if prune_lambdas:
            r["pruning"] = prune_seed(s, prune_lambdas, prune_steps, prune_n_test, n_trees, progress=progress,
                                      split=split)
        return SeedResult(**r)


# --------------------------------------------------------------------------- along training


def trace_seed(data, config, seed, overrides, every, runs_dir, n_trees=None, progress=True):
    """The head functions measured ALONG one seed's training: every ``every`` steps up to the preset's
    ``max_steps``, the parameters of that step are measured as :func:`minihead.stages.measure_functions` measures a finished model (best
    +-1 head with its confidence, sec. 5.1; syntactic heads, sec. 5.2; rare-word share, sec. 5.3) and their dev
    BLEU (greedy, on the preset's ``dev_bleu_sentences``). Returns the rows [{"step", "dev_bleu", "positional",
    "syntactic", "rare"}, ...].

    The run is the preset's with early stopping off, so the curve goes on where dev BLEU stalls (the emergence
    model is the best-BLEU checkpoint of the run WITH early stopping, so it can stop sooner). It is trained in
    segments, ``train(stop_after=every)`` then a resume from last.npz, which is exact (tests/test_train.py): the
    traced parameters are those an uninterrupted run passes through. Rows are kept in trace.json beside the run
    (written atomically after each segment), so an interrupted trace resumes where it stopped. The trace holds
    its run folder's lock from start to end, so a second trace of the same folder is refused at once, and each
    segment's checkpoint must be at the step the segment ended on."""
    out, _ = study.trace_folder(data, config, seed, overrides, every, runs_dir, n_trees)
    with checkpoint.run_lock(out):   # one writer for the whole trace, not only while a segment trains
        return _trace_seed(data, config, seed, overrides, every, runs_dir, n_trees, progress)


def _trace_seed(data, config, seed, overrides, every, runs_dir, n_trees, progress):
    out, ov = study.trace_folder(data, config, seed, overrides, every, runs_dir, n_trees)
    _, trees, corpus, cfg, tcfg = study.prepare(config, data, **ov)
    trees = trees["dev"][:n_trees]
    key = stages.trace_key(data, every, n_trees)
    path, last = os.path.join(out, "trace.json"), os.path.join(out, "last.npz")
    rows = []
    if os.path.exists(path):
        doc = checkpoint.load_json(path)
        if doc.get("key") != key:
            raise MiniheadError(f"{path}: traced on other dev trees or at other steps ({doc.get('key')} vs {key}); "
                                f"delete {out} to trace again")
        rows = doc["rows"]
    targets = sorted(set(range(every, tcfg.max_steps + 1, every)) | {tcfg.max_steps})
    at = checkpoint.load(last).meta["step"] if os.path.exists(last) else 0   # the step the saved run is at
    for target in tqdm(targets, desc=f"trace seed {seed}", unit="point", disable=not progress):
        if rows and rows[-1]["step"] >= target:
            continue
        if at > target:
            raise MiniheadError(f"{last}: the run is at step {at}, past step {target}, the next one {path} lacks; "
                                f"delete {out} to trace again")
        if at < target:
            params = train_model(corpus, cfg, tcfg, out, resume=at > 0, progress=False, stop_after=target - at).params
            reached = checkpoint.load(last).meta["step"]
            if reached != target:
                raise MiniheadError(f"{last}: a segment meant to end at step {target} left the run at step {reached}; "
                                    f"delete {out} to trace again")
            at = target
        else:   # saved at this step, interrupted before its row was written
            params = checkpoint.load(last).params
        pos, syn, rare = stages.measure_functions(params, cfg, corpus.vocab, trees, corpus.src_freq)
        rows.append(checkpoint.plain({"step": target, "dev_bleu": dev_bleu(params, cfg, corpus, tcfg.dev_bleu_sentences),
                                      "positional": pos, "syntactic": syn, "rare": rare}))
        checkpoint.save_json(path, {"key": key, "rows": rows})
    return rows


