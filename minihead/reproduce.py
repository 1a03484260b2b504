"""``python -m minihead reproduce``: the whole study in one command, and a report beside the paper.

Stages (each cached under the study's run folder, so an interrupted run resumes where it stopped):
train -> test BLEU -> head importance (LRP relevance, confidence, Michel et al., single-head ablation)
-> head roles -> encoder-head pruning sweep -> all-attention pruning -> the same configurations
trained from scratch -> ``report/README.md`` with the figures and, for every finding, the paper's
number beside ours (``minihead.paper``).

On data_small (default) or on a real corpus: ``--train-src/--train-tgt`` (BPE learned on it) and
``--conllu`` (gold trees of real English) for the head roles.
"""
import json
import os
import time

from . import backend, paper
from . import findings
from .backend import xp

# Settings of each scale. Chapters 2, 5 and 6 read them from here, so their cached stages are shared.
# n_scratch: the most pruned all-attention configurations also trained from scratch; scratch_steps None = the
# same budget as the pruned model (its training steps plus the steps that pruning run used, in training batches).
# prune_steps is a CAP: each pruning run stops once 90% of its gates are settled (prune.prune's settle). On the
# quick model (one BLAS thread) every encoder lambda settled within 380 steps (40-380), while the official joint
# optimiser (gates at the weights' rate) left every gate unsettled at 600 (issue 17's report).
SCALES = {
    "quick": {"study": "quick", "n_dev": 300, "n_test": 200, "n_ablation": 150, "prune_steps": 600,
              "enc_lambdas": (0.0, 0.005, 0.01, 0.015, 0.02, 0.03, 0.1), "all_lambdas": (0.03, 0.1),
              "n_scratch": 1, "scratch_steps": None,
              "prune": {"lr_gates": 0.2, "lr_params": 1e-3, "max_tokens": 1250, "seed": 0, "log_every": 10},
              "prune_all": {"log_every": 5}},
    "full": {"study": "default", "n_dev": 1000, "n_test": 1000, "n_ablation": 300, "prune_steps": 800,
             # sized for the 90-minute budget on 2 cores: the cold run took 62 min (training 14, one pruning
             # run ~2.3, one from-scratch training of 2,800 steps ~14.5); the other lambdas of an earlier
             # 8 + 4 sweep added little
             "enc_lambdas": (0.0, 0.01, 0.02, 0.03, 0.05, 0.3), "all_lambdas": (0.03, 0.1),
             "n_scratch": 2, "scratch_steps": None,
             "prune": {"lr_gates": 0.1, "lr_params": 1e-3, "max_tokens": 3000, "seed": 0, "log_every": 10},
             "prune_all": {"log_every": 5}},
}


def _bar(n_stages, progress):
    from tqdm.auto import tqdm
    return tqdm(total=n_stages, desc="reproduce", unit="stage", disable=not progress)


def _tolist(d):
    return {k: backend.to_host(v).tolist() for k, v in d.items()}


N_OFFICIAL = 150   # dev pairs for the official-variant relevance (its impact tensors make it ~7x the z-rule's cost)


def importance_stage(study, n_dev, n_ablation, cache_dir=None):
    """Head relevance per prediction (the paper's z-rule, signed shares "relevance" and magnitude shares
    "relevance_abs") and confidence, Michel importance on the first n_dev dev pairs; the official code's
    variant ("relevance_official") on the first min(n_dev, N_OFFICIAL); single-head ablation BLEU drop on the
    first n_ablation dev pairs; all cached as importance-<hash>.json."""
    from . import importance
    from .data.vocab import batches
    from .cache import cached_json, key_hash
    from .prune import study_key
    key = {**study_key(study, n_dev), "what": "importance", "n_ablation": n_ablation,
           "relevance": "per prediction; z signed and abs; official with full attention"}  # what the file holds
    folder = cache_dir or os.path.dirname(os.path.abspath(study.path))
    path = os.path.join(folder, f"importance-{key_hash(key)}.json")

    def compute():
        src, tgt = study.splits["dev"][0][:n_dev], study.splits["dev"][1][:n_dev]
        v = study.vocab
        bs = list(batches([v.encode(s) for s in src], [v.encode(t) for t in tgt], 3000))
        rel = importance.head_relevance(study.params, study.cfg, bs)
        rel_abs = importance.head_relevance(study.params, study.cfg, bs, normalise="abs")
        n_off = min(n_dev, N_OFFICIAL)
        bs_off = list(batches([v.encode(s) for s in src[:n_off]], [v.encode(t) for t in tgt[:n_off]], 3000))
        rel_off = importance.head_relevance(study.params, study.cfg, bs_off, linear="official")
        conf = importance.head_confidence(study.params, study.cfg, bs)
        mich = importance.michel_importance(study.params, study.cfg, bs)
        abl = importance.ablation_bleu_drop(study.params, study.cfg, v, src[:n_ablation], tgt[:n_ablation])
        return {"relevance": _tolist(rel), "relevance_abs": _tolist(rel_abs), "relevance_official": _tolist(rel_off),
                "confidence": _tolist(conf), "michel": _tolist(mich), "ablation": _tolist(abl)}
    return cached_json(path, key, compute)


def importance_summary(imp):
    """Top-quarter relevance share per encoder layer under each rule (the paper's z-rule with signed shares,
    with magnitude shares, the official variant) and the rank agreements of the encoder heads (z-rule; the
    official variant's as ``*_official``)."""
    from .importance import rank_agreement, top_quarter_share
    rel = xp.asarray(imp["relevance"]["enc"])
    conf, mich, abl = (xp.asarray(imp[k]["enc"]) for k in ("confidence", "michel", "ablation"))
    extra = {f"top_quarter_share_{name}": backend.to_host(top_quarter_share(xp.asarray(imp[key]["enc"]))).tolist()
             for name, key in (("abs", "relevance_abs"), ("official", "relevance_official")) if key in imp}
    if "relevance_official" in imp:
        off = xp.asarray(imp["relevance_official"]["enc"])
        extra.update(rho_relevance_confidence_official=rank_agreement(off, conf),
                     rho_relevance_ablation_official=rank_agreement(off, abl))
    return {**extra, "top_quarter_share": backend.to_host(top_quarter_share(rel)).tolist(),
            "rho_relevance_confidence": rank_agreement(rel, conf),
            "rho_relevance_ablation": rank_agreement(rel, abl),
            "rho_confidence_ablation": rank_agreement(conf, abl),
            "rho_michel_ablation": rank_agreement(mich, abl)}


def roles_stage(study):
    from .analysis import head_roles
    return head_roles(study.params, study.cfg, study.vocab, study.trees["dev"], study.corpus.src_freq)


def prune_stages(study, s, progress, done=lambda stage: None):
    """Test BLEU before pruning, the encoder-head sweep, the all-attention sweep and the most pruned
    all-attention configurations trained from scratch; ``done(stage)`` is called after each of the last three."""
    from .prune import baseline, from_scratch, scratch_budget, sweep
    kw = s.get("prune", {})
    base = baseline(study, n_test=s["n_test"])
    enc = sweep(study, s["enc_lambdas"], "enc", s["prune_steps"], n_test=s["n_test"], progress=progress, **kw)
    done("prune encoder")
    allk = sweep(study, s["all_lambdas"], "all", s["prune_steps"], n_test=s["n_test"], progress=progress,
                 **{**kw, **s.get("prune_all", {})})
    done("prune all")
    # the same budget: base training plus the steps that pruning run actually used (it stops once settled)
    scratch = [from_scratch(study, r["retained"], s["scratch_steps"] or scratch_budget(
        study, r.get("steps_used", s["prune_steps"]), prune_max_tokens=kw.get("max_tokens")), n_test=s["n_test"])
        for r in allk[-s["n_scratch"]:]]
    done("from scratch")
    return base, enc, allk, scratch


# --------------------------------------------------------------------------- report
def _fig(path, draw):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = draw(plt)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return os.path.basename(path)


def write_report(out, study, s, imp, summ, rep, base, enc, allk, scratch, elapsed):
    """``report/README.md`` (findings beside the paper's, figures, tables), the figures and ``results.json``.
    ``elapsed``: stage -> wall seconds of this run."""
    os.makedirs(out, exist_ok=True)
    L, H = study.cfg.n_enc_layers, study.cfg.n_heads
    figs = {}
    from .importance import plot_importance
    figs["relevance"] = _fig(os.path.join(out, "relevance.png"), lambda plt: plot_importance(
        xp.asarray(imp["relevance"]["enc"]), xp.asarray(imp["confidence"]["enc"]),
        title="encoder head relevance (LRP) and confidence").figure)

    def curve(plt):
        fig, ax = plt.subplots(figsize=(5, 3.2))
        pts = sorted((r["n_retained"]["enc"], r["bleu"]) for r in enc)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="pruned (encoder heads)")
        ax.axhline(base["bleu"], ls="--", c="gray", label=f"all {L * H} heads")
        ax.set(xlabel="retained encoder heads", ylabel="test BLEU", title="Figure 7 at reduced scale")
        ax.legend()
        return fig
    figs["prune"] = _fig(os.path.join(out, "prune_encoder.png"), curve)

    lines = [f"# minihead reproduction report ({'quick' if s['study'] == 'quick' else 'full'} scale)", "",
             f"Model `{study.name}`: {study.cfg.n_enc_layers}+{study.cfg.n_dec_layers} layers x {H} heads, "
             f"d_model {study.cfg.d_model}, trained on {len(study.corpus.train_src)} pairs of data_small; "
             f"test BLEU {base['bleu']:.2f} (greedy, first {s['n_test']} test sentences). "
             f"Paper: Transformer-base, 6 layers x 8 heads, WMT / OpenSubtitles EN-RU ({paper.SOURCE}).",
             f"Wall time of this run: {sum(elapsed.values()) / 60:.1f} min (cached stages are read, not recomputed): "
             + ", ".join(f"{k} {v / 60:.1f}" for k, v in elapsed.items()) + " min.", "",
             "## Findings, ours beside the paper's", "",
             "| finding | paper | ours | holds here |", "|---|---|---|---|"]
    tq = summ.get("top_quarter_share_official", summ["top_quarter_share"])
    tq_abs = summ.get("top_quarter_share_abs")
    few = findings.few_heads(tq).held
    lines.append(f"| a few heads carry most relevance (share of the top quarter of heads, per layer, relevance per "
                 f"prediction) | few heads dominate | official variant: {', '.join(f'{t:.2f}' for t in tq)}"
                 + (f"; z-rule magnitude shares: {', '.join(f'{t:.2f}' for t in tq_abs)}" if tq_abs else "")
                 + f"; z-rule signed shares: {', '.join(f'{t:.2f}' for t in summ['top_quarter_share'])} (uniform: 0.25) "
                 f"| {'yes' if few else 'no'} |")
    def rhos(name):
        off = summ.get(f"rho_relevance_{name}_official")
        return f"z-rule rho = {summ[f'rho_relevance_{name}']:.2f}" + ("" if off is None else f", official variant {off:.2f}")
    rho = summ["rho_relevance_ablation"]
    lines.append(f"| relevance agrees with single-head ablation (Spearman) | important heads matter | "
                 f"{rhos('ablation')} | {'yes' if rho > 0 else 'no'} |")
    lines.append(f"| important heads are confident (Spearman relevance~confidence) | yes | "
                 f"{rhos('confidence')} | {'yes' if summ['rho_relevance_confidence'] > 0 else 'no'} |")
    pos, syn, rare = findings.positional(rep), findings.syntactic(rep), findings.rare_word(rep)
    lines.append(f"| positional heads (>= {findings.POSITIONAL_SHARE:.0%} on -1 or +1 over the queries where the offset "
                 f"exists, confidence > {findings.POSITIONAL_CONFIDENCE}) | 5 of 48 (WMT) | "
                 f"{len(pos.heads)} of {L * H}; best L{pos.head[0]}H{pos.head[1]} ({pos.offset:+d}): {pos.share:.2f} "
                 f"(all queries {pos.share_all:.2f}), confidence {pos.confidence:.2f} | {'yes' if pos.held else 'no'} |")
    margins = ", ".join(f"{r} {d} {m * 100:+.0f}" for r, d, m in syn.best_margins)
    lines.append(f"| syntactic heads (>= {findings.SYNTACTIC_MARGIN * 100:.0f} points above the offset baseline, per "
                 f"query token) | nsubj, dobj, amod, advmod | relations held: {', '.join(syn.relations_held) or 'none'} "
                 f"(best margin per relation: {margins}) | {'yes' if syn.held else 'no'} |")
    if rare.share is not None:
        lines.append(f"| a head points to the rarest token (>= {findings.RARE_FACTOR:g} x chance) | 66% (OpenSubtitles) | "
                     f"L{rare.head[0]}H{rare.head[1]}: {rare.share:.0%} vs chance {rare.chance:.0%} | "
                     f"{'yes' if rare.held else 'no'} |")
    full_bleu = base["bleu"]
    small = [r for r in enc if r["bleu"] >= full_bleu - 1.0]
    kept = min((r["n_retained"]["enc"] for r in small), default=L * H)
    lines.append(f"| most encoder heads prunable at small cost | 10 of 48 kept, -0.15 BLEU (WMT) | {kept} of {L * H} "
                 f"kept within 1 BLEU | {'yes' if kept <= L * H / 2 else 'no'} |")
    from .prune import encoder_closes_first, survivor_layers, survivor_role_shares, type_order_holds
    shares = survivor_role_shares(enc, rep.roles, L * H)          # [(lam, kept, share kept, share all)]
    over = sum(sk > sa for _, _, sk, sa in shares)
    lines.append("| specialised heads survive pruning longest (role-carrying share of the survivors > of all "
                 "heads, runs keeping at most half) | all three functions remain at 17 of 48 heads | "
                 + ("; ".join(f"{k} kept: {sk:.0%} vs {sa:.0%}" for _, k, sk, sa in shares) or "no such run")
                 + f" | {'yes' if shares and over == len(shares) else 'partly' if over else 'no'} |")
    ordered = [type_order_holds(r, study.cfg) for r in allk]
    first = [encoder_closes_first(r, study.cfg)[0] for r in allk]
    lines.append("| encoder self-attention pruned first, decoder-encoder last (share retained, all types gated) | "
                 "yes | enc / dec-self / dec-enc kept: " + "; ".join(
                     "/".join(str(r["n_retained"][k]) for k in ("enc", "dec_self", "dec_enc")) for r in allk)
                 + f" of {L * H} each; encoder first to lose half in {sum(first)} of {len(allk)} runs | "
                 f"{'yes' if all(ordered) and all(first) else 'partly' if any(ordered) else 'no'} |")
    layer_checks = [c for r in allk for c in survivor_layers(r, study.cfg)]   # (kind, mean layer, holds)
    lines.append(f"| decoder self-attention survives in lower layers, decoder-encoder in higher | yes | mean layer "
                 f"(middle {(study.cfg.n_dec_layers - 1) / 2:g}): "
                 + ("; ".join(f"{k} {ml:.2f}" for k, ml, _ in layer_checks) or "no type lost heads")
                 + f" | {'yes' if layer_checks and all(h for *_, h in layer_checks) else 'partly' if any(h for *_, h in layer_checks) else 'no'} |")
    paired = list(zip(allk[-len(scratch):], scratch)) if scratch else []
    wins = sum(r["bleu"] >= sc["bleu"] for r, sc in paired)
    lines.append(f"| pruned beats the same configuration from scratch | 7 of 7 configurations | {wins} of {len(paired)} "
                 f"| {'yes' if paired and wins == len(paired) else 'partly' if wins else 'no'} |")
    lines += ["", f"![relevance]({figs['relevance']})", "", f"![pruning]({figs['prune']})", "",
              "## Table 1 shape: best head and offset baseline per relation (dev trees)", "",
              __import__("minihead.analysis", fromlist=["format_table"]).format_table(rep), "",
              "## Encoder-head pruning sweep", "",
              "Heads kept and BLEU under the paper's binary gates (0 or 1, whichever point mass is larger), the official "
              "code's continuous gates beside them; settled: share of gates with max(P(g=0), P(g=1)) > 0.95 at the end "
              "of the run, which stops once it reaches 0.9.", "",
              "| lambda | encoder heads kept: binary / continuous | test BLEU: binary / continuous | settled | steps |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['lam']:g} | {r['n_retained']['enc']} / {r.get('n_retained_continuous', r['n_retained'])['enc']} | "
              f"{r['bleu']:.2f} / {r.get('bleu_continuous', float('nan')):.2f} | {r.get('settled_share', float('nan')):.2f} | "
              f"{r.get('steps_used', r['steps'])} |" for r in enc]
    lines += ["", "## All attention types (Table 2 shape): enc-self / dec-self / dec-enc heads kept", "",
              "| lambda | heads kept | BLEU pruned | BLEU from scratch |", "|---|---|---|---|"]
    scratch_of = {id(r): sc for r, sc in paired}
    for r in allk:
        n, sc = r["n_retained"], scratch_of.get(id(r))
        scratch_bleu = "-" if sc is None else f"{sc['bleu']:.2f}"
        lines.append(f"| {r['lam']:g} | {n['enc']} / {n['dec_self']} / {n['dec_enc']} | {r['bleu']:.2f} | {scratch_bleu} |")
    lines += ["", "Paper (Table 2, WMT): " + "; ".join(f"{a}/{b}/{c}: {p:.2f} vs {q:.2f}"
                                                   for (a, b, c), p, q in paper.TABLE2["WMT"])]
    path = os.path.join(out, "README.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
        strip = lambda d: {k: v for k, v in d.items() if k != "cached"}
        stages = [("importance", imp), ("baseline", base)] + [(f"prune-enc-{r['lam']:g}", r) for r in enc] \
            + [(f"prune-all-{r['lam']:g}", r) for r in allk] + [(f"scratch-{i}", sc) for i, sc in enumerate(scratch)]
        json.dump({"importance": strip(imp), "summary": summ, "baseline": strip(base),
                   "cached_stages": [name for name, d in stages if d.get("cached")],
                   "enc": [{k: r.get(k) for k in SWEEP_FIELDS} for r in enc],
                   "all": [{k: r.get(k) for k in SWEEP_FIELDS} for r in allk],
                   "scratch": [sc["bleu"] for sc in scratch], "seconds": elapsed}, f, indent=1)
    return path


SWEEP_FIELDS = ("lam", "n_retained", "bleu", "n_retained_continuous", "bleu_continuous", "settled_share", "steps_used",
                "settled")


def reproduce(quick=True, out="report", progress=True, log=print, scale=None):
    """The whole study on data_small; ``scale`` (a dict like SCALES') overrides the named scale."""
    from .study import load_study
    s = scale or SCALES["quick" if quick else "full"]
    bar = _bar(7, progress)
    elapsed, t0 = {}, time.time()

    def done(stage):                 # wall seconds per stage, for the report
        nonlocal t0
        elapsed[stage], t0 = time.time() - t0, time.time()
        bar.update(1)
    study = load_study(s["study"], progress=progress)
    done("train")
    imp = importance_stage(study, s["n_dev"], s["n_ablation"])
    summ = importance_summary(imp)
    done("importance")
    rep = roles_stage(study)
    done("roles")
    base, enc, allk, scratch = prune_stages(study, s, progress, done)
    path = write_report(out, study, s, imp, summ, rep, base, enc, allk, scratch, elapsed)
    bar.update(1)
    bar.close()
    log(f"report written to {path}")
    return path


def reproduce_real(train_src, train_tgt, conllu, dev_src=None, dev_tgt=None, test_src=None, test_tgt=None,
                   quick=True, out="report-real", progress=True, log=print):
    """The study on a real parallel corpus (BPE learned on it) with gold trees of real English: test BLEU,
    head importance, head roles on the trees, and the encoder-head pruning sweep. (All-attention pruning
    and from-scratch training are left to the data_small run: they cost hours on 2 cores at this size.)"""
    from .analysis import format_positional, format_rare, format_table, head_roles
    from .data.conllu_io import read_conllu
    from .evaluate import score
    from .prune import baseline, sweep
    from .study import load_real_study
    from .translate import translate
    s = SCALES["quick" if quick else "full"]
    t0 = time.time()
    study = load_real_study(train_src, train_tgt, dev_src, dev_tgt, test_src, test_tgt,
                            name=s["study"], progress=progress)
    n = s["n_test"]
    src, ref = study.splits["test"][0][:n], study.splits["test"][1][:n]
    bleu = score(translate(study.params, study.cfg, study.vocab, src), ref)
    imp = importance_stage(study, s["n_dev"], s["n_ablation"])
    summ = importance_summary(imp)
    rep = head_roles(study.params, study.cfg, study.vocab, read_conllu(conllu), study.src_word_freq, bpe=study.bpe)
    base = baseline(study, n_test=n)
    enc = sweep(study, s["enc_lambdas"], ("enc",), s["prune_steps"], n_test=n, progress=progress)
    os.makedirs(out, exist_ok=True)
    L, H = study.cfg.n_enc_layers, study.cfg.n_heads
    lines = [f"# minihead on real language ({'quick' if quick else 'full'} scale)", "",
             f"Corpus {train_src} / {train_tgt} ({len(study.corpus.train_src)} pairs, BPE {len(study.vocab)} "
             f"pieces); trees {conllu} ({rep.n_words} words, {rep.n_unknown} unknown to the model).",
             f"Test BLEU {bleu['bleu']:.2f}, chrF {bleu['chrf']:.2f} (greedy, {len(src)} sentences; "
             f"{bleu['bleu_signature']}). Wall time {(time.time() - t0) / 60:.1f} min.", "",
             "## Importance", "", "top-quarter relevance share per encoder layer: "
             + ", ".join(f"{t:.2f}" for t in summ["top_quarter_share"]) + " (uniform 0.25); "
             + f"Spearman relevance~confidence {summ['rho_relevance_confidence']:.2f}, "
             + f"relevance~ablation {summ['rho_relevance_ablation']:.2f}", "",
             "## Positional heads", "", format_positional(rep), "",
             "## Syntactic heads (Table 1 shape)", "", format_table(rep), "",
             "## Rare-word heads", "", format_rare(rep), "",
             "## Encoder-head pruning", "", f"all {L * H} heads: BLEU {base['bleu']:.2f}", "",
             "| lambda | retained encoder heads | test BLEU |", "|---|---|---|"]
    lines += [f"| {r['lam']:g} | {r['n_retained']['enc']} | {r['bleu']:.2f} |" for r in enc]
    path = os.path.join(out, "README.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    log(f"report written to {path}")
    return path


def add_reproduce_command(subparsers):
    p = subparsers.add_parser("reproduce", help="the whole study, cached by stage, and a report beside the paper")
    p.add_argument("--quick", action="store_true", help="the quick model and reduced sweeps (minutes)")
    p.add_argument("--out", default="report")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--train-src", help="a real parallel corpus (raw text, one sentence a line): source side")
    p.add_argument("--train-tgt", help="... target side")
    p.add_argument("--dev-src"), p.add_argument("--dev-tgt"), p.add_argument("--test-src"), p.add_argument("--test-tgt")
    p.add_argument("--conllu", help="gold trees of real source-language sentences, for the head roles")

    def run(a):
        if a.train_src or a.train_tgt:
            if not (a.train_src and a.train_tgt and a.conllu):
                raise SystemExit("a real corpus needs --train-src, --train-tgt and --conllu")
            out = a.out if a.out != "report" else "report-real"
            return reproduce_real(a.train_src, a.train_tgt, a.conllu, a.dev_src, a.dev_tgt, a.test_src,
                                  a.test_tgt, a.quick, out, not a.no_progress)
        return reproduce(a.quick, a.out, not a.no_progress)
    p.set_defaults(func=run)
    return p
