"""Every cached computation of a study, and the cache that keeps it: one JSON file per stage, keyed by everything
its result depends on.

A stage (the importance measures, the head roles, test BLEU before pruning, each pruning run, the step-matched
reference, each from-scratch training, one seed's emergence measurement) is stored as ``{"key": key, "result":
result}`` in a file of the run folder of the model it belongs to. :func:`cached_json` reads the file when its key
equals the caller's (the model's fingerprint, the settings, :data:`CACHE_VERSION`) and computes, writes and returns
the result otherwise; so an interrupted study resumes at its first missing stage, and a changed setting is
recomputed, never silently reused. Writes are atomic (temporary file beside the target, fsync, ``os.replace``:
:func:`minihead.checkpoint._write_atomically`), so a killed run leaves the old file or the new one, never half.

The chapters and the ``reproduce`` and ``emergence`` commands take their stages from here, so they share one cache.
"""
import hashlib
import json
import os
from dataclasses import replace

from . import backend, checkpoint, findings, importance, lrp, needs
from . import prune as pruning          # the algorithm (its module name: tests replace pruning.prune to spy on it)
from .analysis import head_roles
from .backend import xp
from .data import synth
from .data.vocab import batches
from .checkpoint import _write_atomically
from .errors import MiniheadError
from .study import ROLES_SPLIT, data_fingerprint, prepare, run_folder
from .train import TrainConfig
from .train import train as train_model

CACHE_VERSION = 3                                  # bump when the computation behind a cached file changes


class CacheError(MiniheadError, ValueError):
    """A cache file exists but cannot be read as one (not JSON, or not a ``{"key", "result"}`` object)."""


def key_hash(key):
    """Ten hex digits of the SHA-1 of ``key`` as sorted JSON: the part of a cache file's name that changes with
    its key, so results under different settings sit side by side."""
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]


def cached_json(path, key, compute):
    """Read ``path`` if it holds a result for exactly ``key``, else call ``compute()`` (a JSON-able dict), write
    ``{"key": key, "result": result}`` atomically and return the result. The returned dict carries ``cached``
    (True when read from disk). A file that does not parse is a :class:`CacheError` naming it (one line, never a
    silent recompute: deleting it is the user's choice)."""
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise CacheError(f"{path}: cache file does not parse ({exc}); delete it to recompute") from None
        if not (isinstance(data, dict) and isinstance(data.get("result"), dict)):
            raise CacheError(f"{path}: cache file holds no {{key, result}} object; delete it to recompute")
        if data.get("key") == key:
            return {**data["result"], "cached": True}
    result = compute()
    _write_atomically(path, "w", lambda f: json.dump({"key": key, "result": result}, f, indent=1, sort_keys=True))
    return {**result, "cached": False}


def params_fingerprint(params):
    """SHA-1 over the names, shapes and bytes of every weight: a cache entry is tied to the exact model."""
    h = hashlib.sha1()
    for k in sorted(params):
        a = backend.to_host(params[k])
        h.update(f"{k}{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def study_key(study, n_test):
    return {"version": CACHE_VERSION, "study": study.name, "model": params_fingerprint(study.params),
            "cfg": study.cfg.to_dict(), "n_test": n_test}


def _cache_dir(study, cache_dir):
    return cache_dir or os.path.dirname(os.path.abspath(study.path))


def _tolist(d):
    """kind -> array as kind -> nested lists (JSON)."""
    return {k: backend.to_host(v).tolist() for k, v in d.items()}


def _batches(study, src, tgt, max_tokens=3000):
    v = study.vocab
    return list(batches([v.encode(s) for s in src], [v.encode(t) for t in tgt], max_tokens))


# --------------------------------------------------------------------------- importance (sec. 4)
N_OFFICIAL = 150   # dev pairs for the official-variant relevance (its impact tensors make it ~7x the z-rule's cost)


def importance_stage(study, n_dev, n_ablation, cache_dir=None):
    """Head relevance per prediction (the paper's z-rule, signed shares "relevance" and magnitude shares
    "relevance_abs") and confidence, Michel importance on the first n_dev dev pairs; the official code's
    variant ("relevance_official") on the first min(n_dev, N_OFFICIAL); single-head ablation BLEU drop on the
    first n_ablation dev pairs; all cached as importance-<hash>.json."""
    key = {**study_key(study, n_dev), "what": "importance", "n_ablation": n_ablation,
           "relevance": "per prediction; z signed and abs; official with full attention",  # what the file holds
           "z_residual": "output bias not an input"}          # the z-rule's residual split (lrp.Rules)
    path = os.path.join(_cache_dir(study, cache_dir), f"importance-{key_hash(key)}.json")

    def compute():
        src, tgt = study.splits["dev"][0][:n_dev], study.splits["dev"][1][:n_dev]
        bs = _batches(study, src, tgt)
        n_off = min(n_dev, N_OFFICIAL)
        bs_off = _batches(study, src[:n_off], tgt[:n_off])
        p, cfg = study.params, study.cfg
        rel = importance.head_relevance(p, cfg, bs)
        rel_abs = importance.head_relevance(p, cfg, bs, normalise="abs")
        rel_off = importance.head_relevance(p, cfg, bs_off, rules=lrp.Rules(linear="official"))
        conf = importance.head_confidence(p, cfg, bs)
        mich = importance.michel_importance(p, cfg, bs)
        abl = importance.ablation_bleu_drop(p, cfg, study.vocab, src[:n_ablation], tgt[:n_ablation])
        return {"relevance": _tolist(rel), "relevance_abs": _tolist(rel_abs), "relevance_official": _tolist(rel_off),
                "confidence": _tolist(conf), "michel": _tolist(mich), "ablation": _tolist(abl)}
    return cached_json(path, key, compute)


def importance_summary(imp):
    """Top-quarter relevance share per encoder layer under each rule (the paper's z-rule with signed shares,
    with magnitude shares, the official variant) and the rank agreements of the encoder heads (z-rule signed
    shares; magnitude shares as ``*_abs``, the official variant's as ``*_official``)."""
    rank, top = importance.rank_agreement, importance.top_quarter_share
    rel = xp.asarray(imp["relevance"]["enc"])
    conf, mich, abl = (xp.asarray(imp[k]["enc"]) for k in ("confidence", "michel", "ablation"))
    extra = {f"top_quarter_share_{name}": backend.to_host(top(xp.asarray(imp[key]["enc"]))).tolist()
             for name, key in (("abs", "relevance_abs"), ("official", "relevance_official")) if key in imp}
    if "relevance_abs" in imp:      # the z-rule's magnitude shares: the ones that can rank heads (findings)
        mag = xp.asarray(imp["relevance_abs"]["enc"])
        extra.update(rho_relevance_confidence_abs=rank(mag, conf), rho_relevance_ablation_abs=rank(mag, abl))
    if "relevance_official" in imp:
        off = xp.asarray(imp["relevance_official"]["enc"])
        extra.update(rho_relevance_confidence_official=rank(off, conf), rho_relevance_ablation_official=rank(off, abl))
    return {**extra, "top_quarter_share": backend.to_host(top(rel)).tolist(),
            "rho_relevance_confidence": rank(rel, conf), "rho_relevance_ablation": rank(rel, abl),
            "rho_confidence_ablation": rank(conf, abl), "rho_michel_ablation": rank(mich, abl)}


# --------------------------------------------------------------------------- head roles (sec. 5)

def roles_stage(study, n_trees=None, split=None, gates=None, params=None):
    """Head roles on the first ``n_trees`` trees of ``split`` (default :data:`ROLES_SPLIT`, the test trees: the
    recipes were chosen on dev, so roles are judged on trees they were not tuned on). ``params`` / ``gates``: a
    pruned model's (its roles re-measured as pruned)."""
    trees = study.trees[split or ROLES_SPLIT][:n_trees]
    return head_roles(study.params if params is None else params, study.cfg, study.vocab, trees,
                      study.corpus.src_freq, gates=gates)


def functions_after(study, n_trees=None, split=None):
    """The ``after`` measure of an encoder sweep (:func:`prune_study`): the functions of the pruned model's
    SURVIVING heads, roles re-measured with its gates on the judged trees (Figure 8 shows the heads left after
    pruning). Returns (name, settings, measure)."""
    def measure(params, gates, retained):
        rep = roles_stage(study, n_trees, split, gates=gates, params=params)
        m = backend.to_host(retained["enc"])
        survivors = {(l, h) for l in range(m.shape[0]) for h in range(m.shape[1]) if m[l, h]}
        return findings.functions(rep.roles, rep, heads=survivors)
    settings = {"split": split or ROLES_SPLIT, "n_trees": n_trees, "criteria": findings.CRITERIA_VERSION}
    return ("functions_after", settings, measure)


def needs_after(study):
    """An ``after`` measure of an encoder sweep (:func:`prune_study`): the teacher-forced accuracy (0-1) of every
    need of data_small on the test set, measured on the pruned model with its gates (which jobs survive as heads
    go: the need scores beside Figure 7, :func:`minihead.needs.teacher_forced_scores`). Returns (name, settings,
    measure); a model of another corpus has no needs to score."""
    src, tgt = study.splits["test"]
    lex = synth.Lexicon(synth.DATA_SMALL_SEED)
    marks = [needs.need_marks(t, lex) for t in study.trees["test"]]

    def measure(params, gates, retained):
        preds = needs.teacher_forced_predictions(params, study.cfg, study.vocab, src, tgt, gates=gates)
        tf = needs.teacher_forced_scores(preds, marks)
        return {n: tf[n]["accuracy"] for n in needs.NEEDS}
    return ("needs_after", {"split": "test", "lexicon": synth.DATA_SMALL_SEED}, measure)


EMERGENCE_VERSION = 2    # the emergence measurement of one seed (emergence_stage)


def emergence_stage(study, data, n_trees=None, split="dev"):
    """The three head functions of one seed's model on its first ``n_trees`` trees of ``split`` (dev, where recipes
    are chosen, or test, where a chosen recipe is judged), as plain dicts of :mod:`minihead.findings` (positional
    sec. 5.1, syntactic sec. 5.2, rare-word sec. 5.3), with the seed's best dev BLEU and the step it was reached at
    (``data``: the folder the study was loaded from); cached as emergence.json (emergence-test.json for the test
    trees) beside the model, keyed by the trees and the model's parameters (a model trained on with
    ``train --resume`` is measured again)."""
    trees = study.trees[split][:n_trees]
    key = {"version": EMERGENCE_VERSION, "n_trees": n_trees, "trees": data_fingerprint(data, (f"{split}.conllu",)),
           "model": params_fingerprint(study.params)}

    def compute():
        pos, syn, rare = measure_functions(study.params, study.cfg, study.vocab, trees, study.corpus.src_freq)
        best = max(study.history, key=lambda h: h["dev_bleu"])   # the evaluation that wrote best.npz
        return {"dev_bleu": best["dev_bleu"], "steps": best["step"], "positional": pos, "syntactic": syn,
                "rare": rare}
    name = "emergence.json" if split == "dev" else f"emergence-{split}.json"   # the dev cache keeps its old name
    r = cached_json(os.path.join(_cache_dir(study, None), name), key, compute)
    r.pop("cached", None)
    return checkpoint.plain(r)   # the same plain values whether computed or read back


TRACE_VERSION = 1       # the rows of a trace along training (minihead.emergence.trace_seed)


def trace_key(data, every, n_trees):
    """The key of a trace's rows (trace.json beside its run): the step interval, the trees measured on."""
    return {"version": TRACE_VERSION, "every": every, "n_trees": n_trees,
            "trees": data_fingerprint(data, ("dev.conllu",))}


def measure_functions(params, cfg, vocab, trees, src_freq):
    """The three head functions of one model on gold ``trees``: (positional, syntactic, rare-word) verdicts of
    :mod:`minihead.findings` as dicts."""
    rep = head_roles(params, cfg, vocab, trees, src_freq)
    return (findings.positional(rep).to_dict(), findings.syntactic(rep).to_dict(), findings.rare_word(rep).to_dict())


# --------------------------------------------------------------------------- which head does which job
def need_matrix(study, n_bleu=300, cache_dir=None):
    """The head x need matrix of a data_small model on the TEST split (:func:`minihead.needs.ablation_matrix`:
    each encoder head switched off alone, then pairs within a layer for the needs no single ablation breaks),
    cached as needs-<hash>.json. The references' needs come from the test trees and data_small's lexicon
    (``Lexicon(synth.DATA_SMALL_SEED)``); a model of another corpus has no needs to score."""
    key = {**study_key(study, n_bleu), "what": "need matrix", "split": "test", "survives": needs.SURVIVES,
           "lexicon": synth.DATA_SMALL_SEED}
    path = os.path.join(_cache_dir(study, cache_dir), f"needs-{key_hash(key)}.json")
    src, tgt = study.splits["test"]
    return cached_json(path, key, lambda: checkpoint.plain(needs.ablation_matrix(
        study.params, study.cfg, study.vocab, src, tgt, study.trees["test"], synth.Lexicon(synth.DATA_SMALL_SEED),
        n_bleu=n_bleu)))


# --------------------------------------------------------------------------- pruning (sec. 6)
def baseline(study, n_test=None, cache_dir=None):
    """Test BLEU of the study model with every head (cached as prune-baseline-<hash>.json)."""
    key = {**study_key(study, n_test), "what": "baseline"}
    path = os.path.join(_cache_dir(study, cache_dir), f"prune-baseline-{key_hash(key)}.json")
    src, ref = study.splits["test"]
    return cached_json(path, key, lambda: {"bleu": pruning.gated_bleu(study.params, study.cfg, study.vocab, src, ref,
                                                                      n=n_test)})


def prune_study(study, kinds, lam, steps, settings=None, n_test=None, cache_dir=None, after=None):
    """:func:`minihead.prune.prune` the study model at one lambda with ``settings``
    (:class:`minihead.prune.PruneSettings`) and score it on the test set, cached under
    ``runs/<study>/prune-<kinds>-<lambda>-<hash>.json`` (hash of every setting, defaults included, the model's
    fingerprint and n_test). Returns a dict: lam, kinds, retained / gates / log_alpha (kind -> nested lists),
    n_retained (kind -> int), bleu (all three under the paper's binary readout), their continuous twins
    retained_continuous / gates_continuous / n_retained_continuous / bleu_continuous (the official code's readout),
    settled_share, steps_used, settled, history, cached. ``after``: (name, settings, measure), where
    ``measure(params, gates, retained)`` -> a JSON-able dict measured on the pruned model (the head roles
    re-measured with its gates) and stored under ``name``; ``settings`` (what determines it) join the cache key.
    A list of such triples measures each (:func:`needs_after` beside :func:`functions_after`)."""
    kinds = pruning.check_kinds(kinds)
    settings = settings or pruning.PruneSettings()
    key = {**study_key(study, n_test), "what": "prune", **settings.to_dict(), "kinds": list(kinds),
           "lam": float(lam), "steps": int(steps)}
    afters = [] if after is None else list(after) if isinstance(after, list) else [after]
    if afters:   # one measure keys as it always did; several as a list of [name, settings]
        key["after"] = [afters[0][0], afters[0][1]] if len(afters) == 1 else [[a[0], a[1]] for a in afters]
    path = os.path.join(_cache_dir(study, cache_dir),
                        f"prune-{pruning.kinds_tag(kinds)}-{lam:g}-{key_hash(key)}.json")

    def compute():
        r = pruning.prune(study.params, study.cfg, study.corpus, kinds, lam, steps, settings)
        src, ref = study.splits["test"]
        bleu = pruning.gated_bleu(r.params, study.cfg, study.vocab, src, ref, gates=r.gates,
                                  n=n_test)   # kinds not gated: 1
        bleu_c = pruning.gated_bleu(r.params, study.cfg, study.vocab, src, ref, gates=r.gates_continuous, n=n_test)
        return {"lam": float(lam), "kinds": list(kinds), "steps": int(steps), "bleu": bleu,
                "retained": _tolist(r.retained), "gates": _tolist(r.gates), "log_alpha": _tolist(r.log_alpha),
                "n_retained": {k: int(r.retained[k].sum()) for k in kinds}, "history": r.history,
                "bleu_continuous": bleu_c, "retained_continuous": _tolist(r.retained_continuous),
                "gates_continuous": _tolist(r.gates_continuous),
                "n_retained_continuous": {k: int(r.retained_continuous[k].sum()) for k in kinds},
                "settled_share": r.settled_share, "steps_used": int(r.steps_used), "settled": bool(r.settled),
                **({"gate_steps": int(r.gate_steps), "finetune_history": r.finetune_history}
                   if settings.finetune else {}),
                **{a[0]: a[2](r.params, r.gates, r.retained) for a in afters}}
    return cached_json(path, key, compute)


def sweep(study, lambdas, kinds=("enc",), steps=300, settings=None, cache_dir=None, n_test=None, progress=True,
          after=None):
    """:func:`prune_study` for each lambda (Figure 7: BLEU against retained heads; Figure 8: which heads
    survive). Returns the list of result dicts in the order of ``lambdas``."""
    out = []
    for lam in lambdas:
        r = prune_study(study, kinds, lam, steps, settings, n_test=n_test, cache_dir=cache_dir, after=after)
        if progress:
            kept = ", ".join(f"{k} {r['n_retained'][k]} ({r['n_retained_continuous'][k]})" for k in r["n_retained"])
            print(f"lambda {lam:g}: heads kept {kept}, test BLEU {r['bleu']:.2f} ({r['bleu_continuous']:.2f}); "
                  f"{r['settled_share']:.0%} of gates settled after {r['steps_used']} steps"
                  + (" (cached)" if r["cached"] else "") + "   [binary readout (continuous)]")
        out.append(r)
    return out


def reference_bleu(study, kinds, at_steps, settings=None, n_test=None, cache_dir=None):
    """The step-matched reference of a sweep (sec. 6.2: pruning runs also train on, so each is compared with a
    model trained for the same steps): one lambda = 0 run of :func:`minihead.prune.prune` with the same settings,
    run to the largest of ``at_steps`` without stopping when settled, scored on the test set (binary gates of that
    moment) after each step in ``at_steps``. The same seed draws the same batches and gate noise, so its first n
    steps ARE the lambda = 0 run of n steps. Cached as prune-reference-<hash>.json. Returns {step: BLEU}."""
    kinds = pruning.check_kinds(kinds)
    at = sorted({int(t) for t in at_steps})
    settings = settings or pruning.PruneSettings()
    fixed = {k: v for k, v in settings.to_dict().items() if k not in ("hc", "settle", "finetune")}
    key = {**study_key(study, n_test), "what": "reference", "kinds": list(kinds), "at": at, **fixed}
    path = os.path.join(_cache_dir(study, cache_dir), f"prune-reference-{key_hash(key)}.json")
    src, ref = study.splits["test"]

    def compute():
        scores = {}

        def score(step, params, log_alpha):
            if step in at:
                gates, _ = pruning.deterministic_gates(log_alpha)
                scores[str(step)] = pruning.gated_bleu(params, study.cfg, study.vocab, src, ref, gates=gates,
                                                       n=n_test)
        pruning.prune(study.params, study.cfg, study.corpus, kinds, 0.0, max(at), replace(settings, settle=None),
                      on_step=score)
        return {"bleu": scores}
    return {int(k): v for k, v in cached_json(path, key, compute)["bleu"].items()}


def with_reference(study, runs, settings=None, n_test=None, cache_dir=None):
    """The runs of an encoder :func:`sweep`, each with ``ref_bleu``: the BLEU of the lambda = 0 run at the step
    where that run stopped (:func:`reference_bleu`). With ``settings.finetune`` every run trains the same budget, so
    the reference is the sweep's own lambda = 0 run (which must be in ``runs``)."""
    if not runs:
        return runs
    if settings is not None and settings.finetune:
        zero = [r for r in runs if r["lam"] == 0.0]
        if not zero:
            raise pruning.PruneError("a fine-tuned sweep is its own reference: include lambda 0 in the sweep")
        return [{**r, "ref_bleu": zero[0]["bleu"]} for r in runs]
    ref = reference_bleu(study, runs[0]["kinds"], [r["steps_used"] for r in runs], settings, n_test=n_test,
                         cache_dir=cache_dir)
    return [{**r, "ref_bleu": ref[int(r["steps_used"])]} for r in runs]


# --------------------------------------------------------------------------- from scratch (Table 2)
SCRATCH_SAVE_EVERY = 200                           # from-scratch training: steps between resumable saves


def scratch_budget(study, prune_steps, prune_max_tokens=None):
    """"Same budget" for a configuration trained from scratch, in batches of the study's size: the steps the
    study model was trained for (its last logged step) plus the pruning steps, the latter scaled by
    prune_max_tokens / the study's max_tokens when pruning used smaller batches (same number of training
    tokens seen, to within a batch). Without ``prune_max_tokens``: study steps + pruning steps."""
    steps = float(prune_steps)
    if prune_max_tokens is not None:
        steps *= prune_max_tokens / float(checkpoint.load(study.path).meta["train"]["max_tokens"])
    return int(study.history[-1]["step"]) + int(round(steps))


PLATEAU = "plateau"   # a scale's scratch_steps: train from scratch to the study's own stopping rule


def scratch_steps(study, s, run):
    """The budget of the from-scratch twin of pruning run ``run`` at scale ``s`` (:data:`minihead.study.SCALES`):
    the scale's ``scratch_steps`` when set, a number of steps or :data:`PLATEAU` (trained as the study model was,
    until its dev-BLEU plateau rule stops it: Table 2 (sec. 6.3) compares with the configuration "trained from
    scratch", which for a recipe trained to convergence means to the same convergence); otherwise the same budget as
    the pruned model (:func:`scratch_budget` of the steps that pruning run used)."""
    return s["scratch_steps"] or scratch_budget(study, run.get("steps_used", s["prune_steps"]),
                                                prune_max_tokens=s.get("prune", {}).get("max_tokens"))


def from_scratch(study, retained, steps, n_test=None, cache_dir=None, progress=False):
    """Train the study's architecture from random initialisation (the study's seed, so the same initial
    weights and batch order) with the head configuration ``retained`` fixed (kind -> (L, H) bool; 0/1 gates,
    missing kinds all 1) with the study's training settings (lr schedule, batches, dropout), and score it on the
    test set with the same gates. ``steps``: a number of steps, after which the final model is scored (one dev
    evaluation, at the end; no early stopping or checkpoint selection, like the pruned model), or :data:`PLATEAU`:
    the study's own evaluations and stopping rule (``max_steps``, ``patience``, ``min_delta``), the best dev
    checkpoint scored, as the study model was chosen. The base model supplies only its training settings (its
    checkpoint's metadata) and its folder: the result is :func:`train_scratch`'s, which :func:`scratch_twin` gives
    without the base. Returns dict bleu, steps (trained), best_dev_bleu, history, retained, cached."""
    meta = checkpoint.load(study.path).meta
    if "train" not in meta:
        raise pruning.PruneError(f"{study.path}: no training settings in the checkpoint metadata")
    return train_scratch(study.corpus, study.cfg, TrainConfig(**meta["train"]), study.splits["test"], retained,
                         steps, _cache_dir(study, cache_dir), n_test=n_test, progress=progress)


def text_fingerprint(corpus, test):
    """SHA-1 of the text a from-scratch twin depends on: the corpus's training and dev pairs (what it trains on and
    is stopped by) and the test pairs (what it is scored on)."""
    h = hashlib.sha1()
    for part in (corpus.train_src, corpus.train_tgt, corpus.dev_src, corpus.dev_tgt, *test):
        h.update(json.dumps(list(part)).encode() + b"\0")   # token lists or strings, as the corpus holds them
    return h.hexdigest()


def train_scratch(corpus, cfg, tcfg, test, retained, steps, folder, n_test=None, progress=False):
    """:func:`from_scratch`'s training and scoring, from what determines it and nothing else: the corpus, the model
    and training settings ``cfg`` / ``tcfg``, the test pairs ``test`` = (src, ref), the masks and the budget. So its
    cache key names no base model, and a twin made without one (:func:`scratch_twin`) is the cache entry that
    ``reproduce`` reads later. Cached as ``<folder>/scratch-<hash>.json`` beside its run folder
    ``scratch-<hash>/``; the training writes ``last.npz`` every ``SCRATCH_SAVE_EVERY`` steps, so an interrupted
    run resumes there, exactly."""
    masks = {k: backend.to_host(v).astype(bool).tolist() for k, v in retained.items() if v is not None}
    if steps != PLATEAU:   # one dev evaluation, at the end: the model scored is the final one, as for the pruned model
        tcfg = replace(tcfg, max_steps=int(steps), eval_every=int(steps))
    key = {"version": CACHE_VERSION, "what": "scratch", "cfg": cfg.to_dict(), "text": text_fingerprint(corpus, test),
           "n_test": n_test, "masks": masks, "train": tcfg.to_dict()}
    name = f"scratch-{key_hash(key)}"

    def compute():
        gates = pruning.full_gates(cfg, masks)
        run_dir = os.path.join(folder, name)
        res = train_model(corpus, cfg, tcfg, run_dir, progress=progress, gates=gates,
                          resume=os.path.exists(os.path.join(run_dir, "last.npz")), save_every=SCRATCH_SAVE_EVERY)
        best = checkpoint.load(res.best_path, expect_cfg=cfg)
        src, ref = test
        bleu = pruning.gated_bleu(best.params, cfg, corpus.vocab, src, ref, gates=gates, n=n_test)
        return {"bleu": bleu, "steps": int(res.history[-1]["step"]), "best_dev_bleu": float(res.best_bleu),
                "history": res.history, "retained": masks}
    return cached_json(os.path.join(folder, name + ".json"), key, compute)


def scratch_twin(name, retained, steps, data="data_small", runs=None, n_test=None, progress=False, **overrides):
    """The from-scratch twin of a pruned configuration of preset ``name`` (with ``overrides``, the seed among them)
    WITHOUT its base model, which a twin needs only for the mask: :func:`train_scratch` on what
    :func:`minihead.study.prepare` builds, cached in the run folder the base has or will have
    (:func:`minihead.study.run_folder`), so it is the entry :func:`from_scratch` of the loaded study finds. Use it
    to train Table 2's twins from a recorded mask on a machine that lacks the base models."""
    splits, _, corpus, cfg, tcfg = prepare(name, data, **overrides)
    folder = run_folder(name, data, runs, **overrides)
    os.makedirs(folder, exist_ok=True)
    return train_scratch(corpus, cfg, tcfg, splits["test"], retained, steps, folder, n_test=n_test, progress=progress)


# --------------------------------------------------------------------------- the study's pruning stages
def prune_stages(study, s, progress, done=lambda stage: None):
    """Test BLEU before pruning, the encoder-head sweep (each run with the functions of its survivors and the
    step-matched reference), the all-attention sweep and the most pruned all-attention configurations trained
    from scratch, at scale ``s`` (:data:`minihead.study.SCALES`); ``done(stage)`` is called after each of the last
    three. Returns (baseline, encoder runs, all-attention runs, from-scratch results)."""
    kw = s.get("prune", {})
    enc_settings = pruning.PruneSettings.of(**kw)
    all_settings = pruning.PruneSettings.of(**{**kw, **s.get("prune_all", {})})
    base = baseline(study, n_test=s["n_test"])
    enc = sweep(study, s["enc_lambdas"], "enc", s["prune_steps"], enc_settings, n_test=s["n_test"], progress=progress,
                after=([functions_after(study, s.get("n_trees")), needs_after(study)] if s.get("needs_after")
                       else functions_after(study, s.get("n_trees"))))
    enc = with_reference(study, enc, enc_settings, n_test=s["n_test"])     # each run beside lambda = 0 at its step
    done("prune encoder")
    allk = sweep(study, s["all_lambdas"], "all", s["prune_steps"], all_settings, n_test=s["n_test"],
                 progress=progress)
    done("prune all")
    # the same budget: base training plus the steps that pruning run actually used (it stops once settled)
    scratch = [from_scratch(study, r["retained"], scratch_steps(study, s, r), n_test=s["n_test"])
               for r in allk[-s["n_scratch"]:]]
    done("from scratch")
    return base, enc, allk, scratch
