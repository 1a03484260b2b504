"""What each sub-command of ``python -m minihead`` does, once :mod:`minihead.cli` has parsed and checked its
arguments: ``cmd_<command>(a)`` runs it on the checked namespace ``a`` and returns its result (the tests call them
through :func:`minihead.cli.main`). Nothing here parses arguments or validates input files: that is the CLI's job."""
import contextlib
import json
import os
import shutil
import sys
from dataclasses import replace

import matplotlib

from . import backend, checkpoint, findings, importance, needs, paper, report, reproduce, stages, study
from .analysis import (AnalysisError, format_positional, format_rare, format_table, head_roles, save_figures,
                       unknown_words)
from .checkpoint import MODEL_FILES
from .data.bpe import BPE
from .data.conllu_io import read_conllu
from .data.corpus import REPO_ROOT, read_lines, read_parallel, read_sentences, read_split
from .data.vocab import batches, frequencies
from .emergence import run_seed, trace_seed
from .evaluate import score
from .prune import PruneSettings, check_kinds, gated_bleu, prune
from .train import Corpus, preset, train
from .translate import translate


def cmd_train(a):
    n_train = preset(a.config, 100, **a.settings)[1].n_train
    corpus = Corpus.build(a.train_pairs, a.dev_pairs, n_train=n_train)
    cfg, tcfg = preset(a.config, len(corpus.vocab), **a.settings)
    print(f"training {a.config!r}: {cfg.n_enc_layers}+{cfg.n_dec_layers} layers x {cfg.n_heads} heads, "
          f"d_model {cfg.d_model}, {len(corpus.train_src)} pairs, vocabulary {len(corpus.vocab)} -> {a.out}")
    if not a.overwrite:
        res = train(corpus, cfg, tcfg, a.out, resume=a.resume, progress=not a.no_progress)
    else:   # the new model is trained beside the old one, which it replaces only once it has saved
        new = os.path.join(os.path.abspath(a.out), f".overwrite-{os.getpid()}")
        try:
            res = train(corpus, cfg, tcfg, new, progress=not a.no_progress)
            for f in MODEL_FILES:
                if os.path.exists(os.path.join(new, f)):
                    os.replace(os.path.join(new, f), os.path.join(a.out, f))
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(a.out, f))
            res.best_path, res.last_path = (os.path.join(a.out, os.path.basename(p)) for p in (res.best_path,
                                                                                             res.last_path))
        finally:
            shutil.rmtree(new, ignore_errors=True)
    print(f"best dev BLEU {res.best_bleu:.2f} ({len(res.history)} evaluations); checkpoint {res.best_path}")
    return res


def _load(path):
    return checkpoint.load(path)


def _source_lines(a):
    if a.input:
        return read_sentences(a.input), None
    pairs = read_split(a.data, a.split)
    return [s for s, _ in pairs], [t for _, t in pairs]


def cmd_translate(a):
    ck = _load(a.checkpoint)
    src, _ = _source_lines(a)
    hyps = translate(ck.params, ck.cfg, ck.vocab, src, beam=a.beam)
    text = "\n".join(" ".join(h) for h in hyps) + "\n"
    if a.output:
        os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)   # validated as creatable
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {len(hyps)} translations to {a.output}")
    else:
        sys.stdout.write(text)
    return hyps


def cmd_evaluate(a):
    ck = _load(a.checkpoint)
    src, refs = _source_lines(a)
    hyps = translate(ck.params, ck.cfg, ck.vocab, src, beam=a.beam)
    s = score(hyps, refs)
    print(f"{a.split}: BLEU {s['bleu']:.2f}  chrF {s['chrf']:.2f}  (beam {a.beam}, {len(hyps)} sentences)")
    print(f"  {s['bleu_signature']}\n  {s['chrf_signature']}")
    for h, r, x in list(zip(hyps, refs, src))[:a.show]:
        print(f"  src: {' '.join(x)}\n  ref: {' '.join(r)}\n  hyp: {' '.join(h)}")
    return s


def cmd_importance(a):
    """Head relevance (LRP), confidence and Michel et al. importance of every head, per layer."""
    ck = _load(a.checkpoint)
    pairs = read_split(a.data, a.split)[:a.n]
    v = ck.vocab
    bs = list(batches([v.encode(s) for s, _ in pairs], [v.encode(t) for _, t in pairs], 3000))
    rel = importance.head_relevance(ck.params, ck.cfg, bs)
    conf = importance.head_confidence(ck.params, ck.cfg, bs)
    mich = importance.michel_importance(ck.params, ck.cfg, bs)
    names = {"enc": "encoder self-attention", "dec_self": "decoder self-attention", "dec_enc": "decoder-encoder"}
    for k in names:
        print(f"\n{names[k]}: relevance / confidence / Michel importance ({len(pairs)} {a.split} pairs)")
        for l in range(ck.cfg.n_layers(k)):
            cells = "  ".join(f"{float(rel[k][l, h]):.2f}/{float(conf[k][l, h]):.2f}/{float(mich[k][l, h]):.2f}"
                              for h in range(ck.cfg.n_heads))
            print(f"  layer {l}: {cells}   top-quarter share {float(importance.top_quarter_share(rel[k])[l]):.2f}")
    if a.out:
        matplotlib.use("Agg")
        os.makedirs(a.out, exist_ok=True)
        for k in names:
            ax = importance.plot_importance(rel[k], conf[k], title=names[k])
            path = os.path.join(a.out, f"relevance_{k}.png")
            ax.figure.savefig(path, dpi=110, bbox_inches="tight")
            print(f"saved {path}")
    return rel, conf, mich


def _need_file(path, what):
    if not os.path.isfile(path):
        raise AnalysisError(f"{path}: no such {what} file")


def _frequencies(path, lower, n_lines=None):
    lines = read_lines(path)[:n_lines]
    return frequencies((ln.lower() if lower else ln).split() for ln in lines)


def cmd_roles(a):
    """The ``roles`` command; returns the RolesReport. Bad input raises a MiniheadError whose message
    is one line naming the file and the problem."""

    ck = checkpoint.load(a.checkpoint)
    default_data = REPO_ROOT / "data_small"
    conllu = a.conllu or str(default_data / "dev.conllu")
    _need_file(conllu, "CoNLL-U")
    bpe = None
    if a.bpe:
        _need_file(a.bpe, "BPE")
        bpe = BPE.load(a.bpe)
    trees = read_conllu(conllu)[:a.max_sentences]
    if not trees:
        raise AnalysisError(f"{conllu}: no sentences")
    if a.lower:
        trees = [replace(t, tokens=[w.lower() for w in t.tokens]) for t in trees]
    words = [t.tokens for t in trees]

    unknown = unknown_words(ck.vocab, words, bpe)
    n_words = sum(len(w) for w in words)
    if len(unknown) > a.max_unknown * n_words:
        s, k = unknown[0]
        lines = getattr(trees[s], "line_numbers", None)
        where = f"{conllu}:{lines[k]}" if lines else f"{conllu}, sentence {s + 1}"
        raise AnalysisError(f"{where}: {len(unknown)} of {n_words} words are unknown to the vocabulary "
                            f"of {a.checkpoint} (first: {words[s][k]!r}); wrong model, or does it need "
                            f"--bpe / --lower?")

    train_src = a.train_src or (None if a.conllu else str(default_data / "train.src"))
    if train_src:
        _need_file(train_src, "training source")
        n_train = (ck.meta.get("train") or {}).get("n_train") if not a.train_src else None
        freqs, source = _frequencies(train_src, a.lower, n_train), train_src
    elif bpe is None:
        # Joint source+target counts of the vocabulary: an approximation, said so below.
        freqs = {t: c for t, c in zip(ck.vocab.itos, ck.vocab.counts) if c > 0}
        source = "the checkpoint vocabulary's joint source+target counts"
    else:
        freqs, source = None, None   # the vocabulary's piece counts are no word frequencies

    rep = head_roles(ck.params, ck.cfg, ck.vocab, trees, freqs, bpe=bpe)
    print(f"{a.checkpoint}: encoder {rep.n_layers} layers x {rep.n_heads} heads on {len(trees)} "
          f"sentences of {conllu} ({rep.n_words} words, {rep.n_unknown} unknown"
          f"{', BPE ' + a.bpe if a.bpe else ''})")
    print("\n## Positional heads (argmax shares at -1 / +1 over the queries where the offset exists; brackets: over "
          "all queries)\n")
    print(format_positional(rep))
    print(f"\npositional (>= {paper.POSITIONAL['threshold']:.2f} on one offset): "
          f"{rep.heads_with('positional') or 'none'}")
    print("\n## Syntactic heads: Table 1 (best head / most-frequent-offset baseline, %)\n")
    print(format_table(rep))
    print(f"\nsyntactic (>= baseline + {paper.SYNTACTIC_MARGIN * 100:.0f} points): "
          f"{rep.heads_with('syntactic') or 'none'}")
    print("\n## Rare-word heads\n")
    if source is None:
        print("(skipped: with --bpe the word frequencies need --train-src)")
    else:
        print(f"word frequencies from {source}")
        print(format_rare(rep))
        print(f"\nrare-word head (a first-layer head on the rarest token >= {paper.RARE_SHARE:.0%} of the time): "
              f"{rep.heads_with('rare') or 'none'}")
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(a.checkpoint)), "roles")
    paths = save_figures(rep, out)
    print(f"\nfigures: {', '.join(paths)}")
    return rep


def format_retained(retained):
    """One line per attention type: retained heads per layer, e.g. 'enc       2 1 0 (3 of 12)'."""
    lines = []
    for k, m in retained.items():
        m = backend.to_host(m)
        per_layer = " ".join(str(int(r.sum())) for r in m)
        lines.append(f"{k:<9} per layer {per_layer}  ({int(m.sum())} of {m.size})")
    return "\n".join(lines)


def cmd_prune(a):
    """Load the checkpoint and the training pairs it was trained on (the first n_train of its metadata),
    prune, print retained heads per layer and test BLEU before and after."""
    ck = checkpoint.load(a.checkpoint)
    pairs = {s: read_parallel(os.path.join(a.data, f"{s}.src"), os.path.join(a.data, f"{s}.tgt"))
             for s in ("train", "dev", "test")}
    train_meta = ck.meta.get("train", {})
    corpus = Corpus.build(pairs["train"], pairs["dev"], n_train=train_meta.get("n_train"), vocab=ck.vocab)
    kinds = check_kinds(a.kinds)
    max_tokens = int(train_meta.get("max_tokens", 2500))
    print(f"pruning {', '.join(kinds)} heads of {a.checkpoint}: lambda {a.lam:g}, {a.steps} steps, "
          f"{len(corpus.train_src)} training pairs")
    settings = PruneSettings(lr_gates=a.lr_gates or None, lr_params=a.lr_params, reduction=a.reduction,
                             max_tokens=max_tokens, seed=a.seed, settle=a.settle,
                             finetune=a.finetune)
    r = prune(ck.params, ck.cfg, corpus, kinds, a.lam, a.steps, settings, progress=True)
    src, ref = [s for s, _ in pairs["test"]], [t for _, t in pairs["test"]]
    before = gated_bleu(ck.params, ck.cfg, ck.vocab, src, ref, n=a.n_test)
    after = gated_bleu(r.params, ck.cfg, ck.vocab, src, ref, gates=r.gates, n=a.n_test)
    after_c = gated_bleu(r.params, ck.cfg, ck.vocab, src, ref, gates=r.gates_continuous, n=a.n_test)
    print(f"gates settled: {r.settled_share:.2f} after {r.gate_steps} steps"
          + ("" if r.settled else f" (did not reach {a.settle:g} within the cap)")
          + (f"; then fine-tuned with the gates fixed to step {r.steps_used}" if r.steps_used > r.gate_steps else ""))
    print("retained heads (binary readout, the paper's):\n" + format_retained(r.retained))
    print("retained heads (continuous readout, the official code's):\n" + format_retained(r.retained_continuous))
    n = len(src) if a.n_test is None else min(a.n_test, len(src))
    print(f"test BLEU ({n} sentences, greedy): all heads {before:.2f}, pruned {after:.2f} (continuous gates "
          f"{after_c:.2f})")
    if a.out:
        checkpoint.save(a.out, r.params, ck.cfg, ck.vocab, meta={**ck.meta, "pruned": {
            "kinds": list(kinds), "lambda": a.lam, "steps": a.steps, "seed": a.seed,
            "finetune": settings.finetune}},
            extra={f"log_alpha.{k}": v for k, v in r.log_alpha.items()})
        print(f"saved {a.out}")
    return {"retained": r.retained, "bleu_before": before, "bleu_after": after, "bleu_after_continuous": after_c,
            "result": r}


def cmd_emergence(a):
    """The ``emergence`` command (arguments checked by :func:`minihead.cli.validate_emergence`)."""
    if a.trace:
        return cmd_trace(a)
    results = []
    for seed in a.seeds_list:
        print(f"seed {seed}: training / measuring ({a.config}, {a.data})", flush=True)
        results.append(run_seed(a.data, a.config, seed, a.settings, a.runs, a.n_trees, prune_lambdas=a.prune_lambdas,
                                split=a.split))
    print(f"\n## Emergence: {a.config}, {a.data}, seeds {','.join(map(str, a.seeds_list))}, "
          f"roles on the {a.split} trees, {study.blas_threads()} BLAS thread(s)\n")
    print(report.emergence_table(results))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)   # validated as creatable
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump([r.__dict__ for r in results], f, indent=1)
    if a.study:
        checkpoint.save_json(a.study, study.emergence_doc(results, a.config, a.data, a.n_trees, a.settings, a.split))
    return results


def cmd_trace(a):
    """``emergence --trace N``: :func:`trace_seed` for each seed, the table of :func:`minihead.report.trace_table`, and with
    ``--json`` / ``--figure`` the document of :func:`minihead.study.trace_doc` and its plot."""
    traces = {}
    for seed in a.seeds_list:
        print(f"seed {seed}: tracing every {a.trace} steps ({a.config}, {a.data})", flush=True)
        traces[seed] = trace_seed(a.data, a.config, seed, a.settings, a.trace, a.runs, a.n_trees)
    print(f"\n## Emergence along training: {a.config}, {a.data}, seeds {','.join(map(str, a.seeds_list))}, "
          f"{study.blas_threads()} BLAS thread(s), early stopping off\n")
    print(report.trace_table(traces))
    doc = study.trace_doc(traces, a.config, a.data, a.n_trees, a.settings, a.trace)
    if a.json:
        checkpoint.save_json(a.json, doc)
    if a.figure:
        os.makedirs(os.path.dirname(os.path.abspath(a.figure)), exist_ok=True)   # validated as creatable
        report.plot_trace([doc]).savefig(a.figure, dpi=120)
    return traces


def cmd_needs(a):
    """``needs``: each seed's model (trained, or reused from its run folder: the full study's with the default
    preset) and its head x need matrix (:func:`minihead.stages.need_matrix`, cached beside it), printed as a table
    (:func:`minihead.report.need_matrix_table`); with ``--study`` / ``--figure`` the document of
    :func:`minihead.study.needs_doc` and its plot."""
    per_seed = []
    for seed in a.seeds_list:
        print(f"seed {seed}: training / switching heads off ({a.config}, {a.data})", flush=True)
        s = study.load_study(a.config, a.data, runs=a.runs, seed=seed, **a.settings)
        m = stages.need_matrix(s, a.n_bleu)
        m.pop("cached", None)
        imp = stages.importance_stage(s, a.n_dev, a.n_ablation)   # the full study's, when its settings are
        rep = stages.roles_stage(s)                                # roles on the test trees, for sec. 4's role claims
        verdicts = findings.relevance_verdicts(stages.importance_summary(imp), imp, rep.roles, s.cfg.n_heads,
                                               s.cfg.n_enc_layers * s.cfg.n_heads)
        per_seed.append({"seed": seed, "model": stages.params_fingerprint(s.params), "matrix": m,
                         "instruments": {key: imp[key]["enc"] for key in needs.INSTRUMENTS.values() if key in imp},
                         "findings": {k: v.to_dict() for k, v in verdicts.items()}})
        print(f"\n## Seed {seed}: what each encoder head does (test set, {study.blas_threads()} BLAS thread(s))\n")
        print(report.need_matrix_table(m), flush=True)
    doc = study.needs_doc(per_seed, a.config, a.settings, a.n_bleu, a.n_dev, a.n_ablation)
    print(f"\n## The importance measures against the matrix, seeds {','.join(map(str, a.seeds_list))}\n")
    print(report.instrument_table(doc["agreement"]))
    print("\n## Sec. 4's findings on these models, roles on the test trees\n")
    print(findings.findings_table(doc["summary"]))
    if a.study:
        checkpoint.save_json(a.study, doc)
    if a.figure:
        os.makedirs(os.path.dirname(os.path.abspath(a.figure)), exist_ok=True)   # validated as creatable
        report.plot_need_matrix(doc).savefig(a.figure, dpi=120)
    return doc


def cmd_reproduce(a):
    """The ``reproduce`` command: the study on data_small (one model, or one per seed with ``--seeds``), on a real
    corpus (``--train-src``/``--train-tgt``/``--conllu``), or ``--merge DIR ...`` (reports of single seeds made
    apart, merged into ``--out``)."""
    if a.merge:
        return reproduce.merge_reports(a.merge, a.out)
    if a.train_src:
        out = a.out if a.out != "report" else "report-real"
        return reproduce.reproduce_real(a.train_src, a.train_tgt, a.conllu, a.dev_src, a.dev_tgt, a.test_src,
                                        a.test_tgt, a.quick, out, not a.no_progress)
    return reproduce.reproduce(a.quick, a.out, not a.no_progress, scale=study.SCALES[a.scale_name], seeds=a.seeds_list)
