"""``python -m minihead reproduce``: the whole study in one command, and a report beside the paper.

Stages (each cached under the study's run folder, so an interrupted run resumes where it stopped):
train -> test BLEU -> head importance (LRP relevance, confidence, Michel et al., single-head ablation)
-> head roles -> encoder-head pruning sweep -> all-attention pruning -> the same configurations
trained from scratch -> ``report/README.md`` with the figures and, for every finding, the paper's
number beside ours (``minihead.paper``).

On data_small (default) or on a real corpus: ``--train-src/--train-tgt`` (BPE learned on it) and
``--conllu`` (gold trees of real English) for the head roles.

Every verdict ("holds here") is a criterion of :mod:`minihead.findings`. ``--seeds 1,2,3`` runs the study once
per seed (each model and its stages in its own run folder, each seed's report in ``report/seed-K/``) and adds
what one model cannot tell: in how many seeds each finding holds, and its numbers as mean +- sd over seeds
(``report/README.md``; ``report/study.json`` for the chapters, laid out by :func:`minihead.findings.summarize`).
"""
import json
import os
import time

from . import backend, checkpoint, paper
from . import findings
from .backend import xp
from .errors import MiniheadError

# Settings of each scale. Chapters 2, 5 and 6 read them from here, so their cached stages are shared.
# n_scratch: the most pruned all-attention configurations also trained from scratch; scratch_steps None = the
# same budget as the pruned model (its training steps plus the steps that pruning run used, in training batches).
# prune_steps is a CAP: each pruning run stops once 90% of its gates are settled (prune.prune's settle). On the
# quick model (one BLAS thread) every encoder lambda settled within 380 steps (40-380), while the official joint
# optimiser (gates at the weights' rate) left every gate unsettled at 600 (issue 17's report).
SCALES = {
    "quick": {"study": "quick", "n_dev": 300, "n_test": 200, "n_ablation": 150, "prune_steps": 600,
              # 0.2 and 0.3 since the quick model has 6 encoder heads (2026-12-04): 0.1 kept 3-4 of them
              "enc_lambdas": (0.0, 0.005, 0.01, 0.015, 0.02, 0.03, 0.1, 0.2, 0.3), "all_lambdas": (0.03, 0.1),
              "n_scratch": 1, "scratch_steps": None,
              "prune": {"lr_gates": 0.2, "lr_params": 1e-3, "max_tokens": 1250, "seed": 0, "log_every": 10},
              "prune_all": {"log_every": 5}},
    "full": {"study": "default", "n_dev": 1000, "n_test": 1000, "n_ablation": 300, "prune_steps": 800,
             # on the default (emerge) model one seed took 69-79 min on one core with three seeds sharing two
             # (importance 5, encoder sweep 17, all-attention sweep 6, two from-scratch trainings 41); 0.1 and 0.2
             # fill the gap between 0.05 (6-8 of 12 heads kept) and 0.3 (2-3 kept), where the knee lies
             "enc_lambdas": (0.0, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3), "all_lambdas": (0.03, 0.1),
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
           "relevance": "per prediction; z signed and abs; official with full attention",  # what the file holds
           "z_residual": "output bias not an input"}          # since 2026-12-04 (before: split by f, bias included)
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
    with magnitude shares, the official variant) and the rank agreements of the encoder heads (z-rule signed
    shares; magnitude shares as ``*_abs``, the official variant's as ``*_official``)."""
    from .importance import rank_agreement, top_quarter_share
    rel = xp.asarray(imp["relevance"]["enc"])
    conf, mich, abl = (xp.asarray(imp[k]["enc"]) for k in ("confidence", "michel", "ablation"))
    extra = {f"top_quarter_share_{name}": backend.to_host(top_quarter_share(xp.asarray(imp[key]["enc"]))).tolist()
             for name, key in (("abs", "relevance_abs"), ("official", "relevance_official")) if key in imp}
    if "relevance_abs" in imp:      # the z-rule's magnitude shares: the ones that can rank heads (findings)
        mag = xp.asarray(imp["relevance_abs"]["enc"])
        extra.update(rho_relevance_confidence_abs=rank_agreement(mag, conf),
                     rho_relevance_ablation_abs=rank_agreement(mag, abl))
    if "relevance_official" in imp:
        off = xp.asarray(imp["relevance_official"]["enc"])
        extra.update(rho_relevance_confidence_official=rank_agreement(off, conf),
                     rho_relevance_ablation_official=rank_agreement(off, abl))
    return {**extra, "top_quarter_share": backend.to_host(top_quarter_share(rel)).tolist(),
            "rho_relevance_confidence": rank_agreement(rel, conf),
            "rho_relevance_ablation": rank_agreement(rel, abl),
            "rho_confidence_ablation": rank_agreement(conf, abl),
            "rho_michel_ablation": rank_agreement(mich, abl)}


def roles_stage(study, n_trees=None, split=None, gates=None, params=None):
    """Head roles on the first ``n_trees`` trees of ``split`` (default :data:`ROLES_SPLIT`, the test trees: the
    recipes were chosen on dev, so roles are judged on trees they were not tuned on). ``params`` / ``gates``: a
    pruned model's (its roles re-measured as pruned)."""
    from .analysis import head_roles
    trees = study.trees[split or ROLES_SPLIT][:n_trees]
    return head_roles(study.params if params is None else params, study.cfg, study.vocab, trees,
                      study.corpus.src_freq, gates=gates)


ROLES_SPLIT = "test"     # the split whose gold trees judge the head roles (dev is for choosing recipes)


def functions_after(study, n_trees=None, split=None):
    """The ``after`` measure of an encoder sweep (:func:`minihead.prune.prune_study`): the functions of the
    pruned model's SURVIVING heads, roles re-measured with its gates on the judged trees (Figure 8 shows the
    heads left after pruning). Returns (name, settings, measure)."""
    def measure(params, gates, retained):
        rep = roles_stage(study, n_trees, split, gates=gates, params=params)
        m = backend.to_host(retained["enc"])
        survivors = {(l, h) for l in range(m.shape[0]) for h in range(m.shape[1]) if m[l, h]}
        return findings.functions(rep.roles, rep, heads=survivors)
    return ("functions_after", {"split": split or ROLES_SPLIT, "n_trees": n_trees, "criteria": findings.CRITERIA_VERSION},
            measure)


def prune_stages(study, s, progress, done=lambda stage: None):
    """Test BLEU before pruning, the encoder-head sweep, the all-attention sweep and the most pruned
    all-attention configurations trained from scratch; ``done(stage)`` is called after each of the last three."""
    from .prune import baseline, from_scratch, scratch_budget, sweep, with_reference
    kw = s.get("prune", {})
    base = baseline(study, n_test=s["n_test"])
    enc = sweep(study, s["enc_lambdas"], "enc", s["prune_steps"], n_test=s["n_test"], progress=progress,
                after=functions_after(study, s.get("n_trees")), **kw)
    enc = with_reference(study, enc, n_test=s["n_test"], **kw)     # each run beside lambda = 0 at its step
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
    """Save the figure that ``draw(plt)`` returns (a Figure, or an Axes of one) at ``path``; returns its name."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = draw(plt)
    fig = fig.figure            # an Axes' figure; a Figure's is itself
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return os.path.basename(path)


ROLE_NAMES = {"positional": "positional", "syntactic": "syntactic", "rare": "rare-word"}


def plot_encoder_pruning(enc, base_bleu, n_heads):
    """Figure 7's kind: test BLEU against the encoder heads retained by each run of the encoder sweep ``enc``,
    with the BLEU of all ``n_heads`` heads. Returns the Figure."""
    from . import figures
    fig, axes = figures.new_figure(figsize=(5.2, 3.4))
    ax = axes[0, 0]
    pts = sorted((r["n_retained"]["enc"], r["bleu"], r.get("ref_bleu")) for r in enc)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="pruned (encoder heads)")
    if all(p[2] is not None for p in pts):
        ax.plot([p[0] for p in pts], [p[2] for p in pts], "x:", c="black",
                label="lambda = 0 run at the same step (reference)")
    ax.axhline(base_bleu, ls="--", c="gray", label=f"all {n_heads} heads, before pruning")
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(-0.5, n_heads + 0.5)
    ax.set(xlabel="retained encoder heads", ylabel="test BLEU", title="Figure 7's kind, at reduced scale")
    ax.legend()
    return fig


def plot_head_functions(roles, enc, n_layers, n_heads, max_cols=5):
    """Figure 8's kind: the encoder heads as a layer x head grid, one panel with every head and one per run of
    the encoder sweep ``enc`` (most heads kept first). A cell's colour is the head's role (``roles``:
    {(l, h): set} of :func:`minihead.roles.classify_heads`; a head with several roles takes the first of
    positional, syntactic, rare-word; its letters P / S / R are all written), grey for no role, white where the
    run pruned the head (its letters then in grey). Returns the Figure."""
    import math
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch
    from . import figures
    runs = sorted(enc, key=lambda r: (-r["n_retained"]["enc"], r["lam"]))
    panels = [("every head", None)] + [(f"lambda {r['lam']:g}: {r['n_retained']['enc']} of {n_layers * n_heads} "
                                        "kept", r) for r in runs]
    ncols = min(max_cols, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = figures.new_figure(nrows, ncols, figsize=(ncols * (0.45 * n_heads + 1.0),
                                                          nrows * (0.45 * n_layers + 1.0) + 0.7))
    for i, ax in enumerate(axes.flat):
        if i >= len(panels):
            ax.set_axis_off()
            continue
        title, run = panels[i]
        kept = None if run is None else backend.to_host(xp.asarray(run["retained"]["enc"]))
        img = backend.to_host(xp.zeros((n_layers, n_heads, 3)))           # RGB per cell
        for l in range(n_layers):
            for h in range(n_heads):
                role = next((r for r in figures.ROLE_COLOURS if r in roles.get((l, h), ())), None)
                alive = kept is None or bool(kept[l, h])
                colour = (figures.ROLE_COLOURS[role] if role else figures.NO_ROLE_COLOUR) if alive \
                    else figures.PRUNED_COLOUR
                img[l, h] = to_rgb(colour)
                letters = "".join(figures.ROLE_LETTERS[r] for r in figures.ROLE_COLOURS if r in roles.get((l, h), ()))
                if letters:
                    ax.text(h, l, letters, ha="center", va="center", fontsize=8,
                            color=figures.text_colour(img[l, h]) if alive else "darkgray")
        ax.imshow(img, aspect="auto")
        figures.integer_ticks(ax, n_x=n_heads, n_y=n_layers)
        ax.set_xticks([x - 0.5 for x in range(1, n_heads)], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, n_layers)], minor=True)
        ax.grid(which="minor", color="black", lw=0.5)
        ax.tick_params(which="minor", length=0)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(title, fontsize=9)
    handles = [Patch(facecolor=figures.ROLE_COLOURS[r], edgecolor="black", label=f"{ROLE_NAMES[r]} "
                     f"({figures.ROLE_LETTERS[r]})") for r in figures.ROLE_COLOURS]
    handles += [Patch(facecolor=figures.NO_ROLE_COLOUR, edgecolor="black", label="no role"),
                Patch(facecolor=figures.PRUNED_COLOUR, edgecolor="black", label="pruned")]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8)
    fig.suptitle("Figure 8's kind: encoder head functions, and which heads survive pruning", fontsize=10)
    return fig


def plot_all_pruning(allk, cfg):
    """Figure 9's kind: for each run of the all-attention sweep ``allk``, the heads retained per attention type
    (encoder self, decoder self, decoder-encoder), in total (first panel) and per layer (one panel per type).
    Returns the Figure."""
    from matplotlib.ticker import MaxNLocator
    from . import figures
    from .prune import GATE_KINDS
    kinds = [k for k in GATE_KINDS if all(k in r["n_retained"] for r in allk)]
    H = cfg.n_heads
    fig, axes = figures.new_figure(1, 1 + len(kinds), figsize=(5.5 + 3.2 * len(kinds), 3.8),
                                   gridspec_kw={"width_ratios": [1.7] + [1] * len(kinds)})
    axes = axes[0]
    ax = axes[0]
    width = 0.8 / max(len(kinds), 1)
    for j, k in enumerate(kinds):
        xs = [i + (j - (len(kinds) - 1) / 2) * width for i in range(len(allk))]
        bars = ax.bar(xs, [r["n_retained"][k] for r in allk], width, color=figures.KIND_COLOURS[k],
                      label=figures.KIND_NAMES[k])
        ax.bar_label(bars, fontsize=7)
    for total in sorted({cfg.n_layers(k) * H for k in kinds}):
        ax.axhline(total, ls="--", c="gray", lw=0.8, label=f"all {total} heads of a type")
    ax.set_xticks(range(len(allk)), [f"lambda {r['lam']:g}\nBLEU {r['bleu']:.1f}" for r in allk])
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="all-attention run", ylabel="heads retained", title="heads retained per attention type")
    ax.legend(fontsize=7, loc="upper center", ncol=2)
    ax.set_ylim(0, 1.5 * max([cfg.n_layers(k) * H for k in kinds] or [1]))
    for ax, k in zip(axes[1:], kinds):
        L = cfg.n_layers(k)
        w = 0.8 / max(len(allk), 1)
        for i, r in enumerate(allk):
            m = backend.to_host(xp.asarray(r["retained"][k], dtype="float64"))       # (L, H)
            ax.bar([l + (i - (len(allk) - 1) / 2) * w for l in range(L)], m.sum(1), w, color=f"C{i}",
                   label=f"lambda {r['lam']:g}")
        ax.axhline(H, ls="--", c="gray", lw=0.8, label=f"all {H} heads of a layer")
        figures.integer_ticks(ax, n_x=L)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, 1.5 * H + 0.5)
        ax.set(xlabel="layer", ylabel="heads retained", title=figures.KIND_NAMES[k])
        ax.title.set_fontsize(10)
        ax.legend(fontsize=7, loc="upper center", ncol=2)
    axes[0].title.set_fontsize(10)
    fig.suptitle("Figure 9's kind: heads retained when every attention type is pruned", fontsize=10)
    return fig


def _role_counts(roles, heads):
    """role -> how many of ``heads`` have it, and "other" -> how many have none."""
    out = {r: sum(1 for lh in heads if r in roles.get(lh, ())) for r in ROLE_NAMES}
    out["other"] = sum(1 for lh in heads if not roles.get(lh))
    return out


def head_functions_caption(roles, enc, n_layers, n_heads):
    """The report's caption of :func:`plot_head_functions`: the paper's Figure 8 numbers (:mod:`minihead.paper`)
    beside this model's role counts, all heads and among each run's survivors."""
    heads = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    mine = _role_counts(roles, heads)
    per_run = []
    for r in sorted(enc, key=lambda r: (-r["n_retained"]["enc"], r["lam"])):
        m = backend.to_host(xp.asarray(r["retained"]["enc"]))
        c = _role_counts(roles, [lh for lh in heads if m[lh]])
        per_run.append(f"{r['n_retained']['enc']} (lambda {r['lam']:g}: {c['positional']} / {c['syntactic']} / "
                       f"{c['rare']})")
    ps = paper.SURVIVOR_ROLES_AT_48
    return (f"*Head functions, Figure 8's kind (`head_functions.png`).* Paper, Figure 8 (WMT): of {paper.SETTING['encoder_heads']} encoder heads "
            f"{ps['positional']} positional, {ps['syntactic']} syntactic, {ps['rare']} rare-word, {ps['other']} "
            f"other; {PAPER_SAYS['functions_survive']}. This model: of {len(heads)} encoder heads "
            f"{mine['positional']} positional, {mine['syntactic']} syntactic, {mine['rare']} rare-word, "
            f"{mine['other']} with no role; heads kept per run (of them positional / syntactic / rare-word): "
            + ("; ".join(per_run) or "no run") + ".")


def all_pruning_caption(allk, cfg):
    """The report's caption of :func:`plot_all_pruning`: the paper's Figure 9 / Table 2 configurations
    (:mod:`minihead.paper`) beside this model's, as heads kept enc-self / dec-self / dec-enc."""
    per_type = paper.SETTING["layers"] * paper.SETTING["heads"]
    theirs = "; ".join(f"{a} / {b} / {c}" for (a, b, c), _, _ in paper.TABLE2["WMT"])
    mine = "; ".join(f"{r['n_retained'].get('enc', '-')} / {r['n_retained'].get('dec_self', '-')} / "
                     f"{r['n_retained'].get('dec_enc', '-')} (lambda {r['lam']:g})" for r in allk)
    n = cfg.n_enc_layers * cfg.n_heads
    return (f"*All attention types pruned, Figure 9's kind (`prune_all.png`).* Paper, Figure 9 and Table 2 (WMT, of "
            f"{per_type} heads per type): enc-self / dec-self / dec-enc kept {theirs}. This model (of {n} heads per "
            f"type): {mine or 'no run'}.")


def encoder_pruning_caption(v, base_bleu, n_heads):
    """The report's caption of :func:`plot_encoder_pruning`: the paper's Figure 7 number beside this model's
    knee (the "prunable" verdict ``v``)."""
    return (f"*Encoder-head pruning, Figure 7's kind (`prune_encoder.png`).* Paper, Figure 7: {PAPER_SAYS['prunable']}. "
            f"This model: {v.text()} (before pruning: {base_bleu:.2f}).")


# what the paper reports for each finding (the report's "paper" column), from minihead.findings.FINDINGS
PAPER_SAYS = {name: theirs for name, (_, theirs, _) in findings.FINDINGS.items()}


def findings_rows(v):
    """The rows of one model's findings table, one per finding of :data:`minihead.findings.FINDINGS` in ``v``
    ({name: Verdict}, :func:`minihead.findings.study_verdicts`): the paper's number, this model's, the criterion
    and the verdict (with its reason where untestable or not measured; a pooled finding's verdict here is only
    the sign of this model's number, the claim is judged over seeds)."""
    rows = []
    for name, x in v.items():
        _, theirs, crit = findings.FINDINGS[name]
        verdict = x.status + (f" ({x.reason})" if x.reason else "") + (" (this seed's sign; judged pooled over "
                                                                       "seeds)" if name in findings.POOLED else "")
        rows.append(f"| {findings.what(name)} | {theirs} | {x.text()} | {crit} | {verdict} |")
    return rows


def write_report(out, study, s, imp, summ, rep, base, enc, allk, scratch, elapsed, verdicts=None):
    """``report/README.md`` (findings beside the paper's, figures, tables), the figures and ``results.json``
    (with every finding's verdict under "findings"). ``elapsed``: stage -> wall seconds of this run;
    ``verdicts``: :func:`minihead.findings.study_verdicts` of these results (computed when not given)."""
    os.makedirs(out, exist_ok=True)
    L, H = study.cfg.n_enc_layers, study.cfg.n_heads
    figs = {}
    from . import figures
    from .importance import plot_importance
    figs["relevance"] = _fig(os.path.join(out, "relevance.png"), lambda plt: plot_importance(
        xp.asarray(imp["relevance"]["enc"]), xp.asarray(imp["confidence"]["enc"]),
        title="encoder head relevance (LRP) and confidence"))
    figs["prune"] = _fig(os.path.join(out, "prune_encoder.png"),
                         lambda plt: plot_encoder_pruning(enc, base["bleu"], L * H))
    figs["functions"] = _fig(os.path.join(out, "head_functions.png"),
                             lambda plt: plot_head_functions(rep.roles, enc, L, H))
    figs["prune_all"] = _fig(os.path.join(out, "prune_all.png"), lambda plt: plot_all_pruning(allk, study.cfg))

    lines = [f"# minihead reproduction report ({'quick' if s['study'] == 'quick' else 'full'} scale)", "",
             f"Model `{study.name}`: {study.cfg.n_enc_layers}+{study.cfg.n_dec_layers} layers x {H} heads, "
             f"d_model {study.cfg.d_model}, trained on {len(study.corpus.train_src)} pairs of data_small; "
             f"test BLEU {base['bleu']:.2f} (greedy, first {s['n_test']} test sentences). "
             f"Paper: Transformer-base, 6 layers x 8 heads, WMT / OpenSubtitles EN-RU ({paper.SOURCE}).",
             f"Wall time of this run: {sum(elapsed.values()) / 60:.1f} min (cached stages are read, not recomputed): "
             + ", ".join(f"{k} {v / 60:.1f}" for k, v in elapsed.items()) + " min.", "",
             "## Findings, ours beside the paper's", "",
             "| finding | paper | this model | criterion | verdict here |", "|---|---|---|---|---|"]
    v = verdicts or findings.study_verdicts(summ, rep, enc, allk, scratch, study.cfg, imp=imp)
    lines += findings_rows(v)
    paired = list(zip(allk[-len(scratch):], scratch)) if scratch else []
    lines += ["", f"![relevance]({figs['relevance']})", "",
              "*Head relevance and confidence, Figure 1's kind (`relevance.png`):* heads of each encoder layer sorted "
              "by relevance, on the fixed scales {:g}..{:g} and {:g}..{:g} of every figure.".format(
                  *figures.RELEVANCE_RANGE, *figures.CONFIDENCE_RANGE), "",
              f"![pruning]({figs['prune']})", "", encoder_pruning_caption(v["prunable"], base["bleu"], L * H), "",
              f"![head functions]({figs['functions']})", "", head_functions_caption(rep.roles, enc, L, H), "",
              f"![all-attention pruning]({figs['prune_all']})", "", all_pruning_caption(allk, study.cfg), "",
              f"## Table 1 shape: best head and offset baseline per relation ({ROLES_SPLIT} trees)", "",
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
                   "scratch": [sc["bleu"] for sc in scratch], "seconds": elapsed,
                   "findings": {name: x.to_dict() for name, x in v.items()}}, f, indent=1)
    return path


SWEEP_FIELDS = ("lam", "n_retained", "bleu", "n_retained_continuous", "bleu_continuous", "settled_share", "steps_used",
                "settled", "ref_bleu", "functions_after")


def study_overrides(s, seed=None):
    """The preset settings of one model of scale ``s``: its ``train`` overrides (tests use tiny ones) and, when
    ``seed`` differs from the preset's own, the seed. A seed equal to the preset's is not named, so
    ``--seeds 1,2,3`` reuses the model (and every cached stage) that ``reproduce`` without ``--seeds`` trained."""
    from .train import preset
    over = dict(s.get("train", {}))
    if seed is not None and seed != preset(s["study"], 1, **over)[1].seed:
        over["seed"] = int(seed)
    return over


def run_study(s, out, progress=True, seed=None, runs=None, bar=None):
    """Train (or read) one model of scale ``s`` (``seed``: see :func:`study_overrides`; ``runs``: the runs
    folder, default ``runs/``), run every stage (each cached in the model's run folder) and write its report
    into ``out``. Returns (report path, {finding: Verdict}, test BLEU, {stage: wall seconds})."""
    from .study import load_study
    own_bar = bar is None
    bar = _bar(7, progress) if own_bar else bar
    elapsed, t0 = {}, time.time()

    def done(stage):                 # wall seconds per stage, for the report
        nonlocal t0
        elapsed[stage], t0 = time.time() - t0, time.time()
        bar.update(1)
    study = load_study(s["study"], runs=runs, progress=progress, **study_overrides(s, seed))
    done("train")
    imp = importance_stage(study, s["n_dev"], s["n_ablation"])
    summ = importance_summary(imp)
    done("importance")
    rep = roles_stage(study, s.get("n_trees"))
    done("roles")
    base, enc, allk, scratch = prune_stages(study, s, progress, done)
    verdicts = findings.study_verdicts(summ, rep, enc, allk, scratch, study.cfg, imp=imp)
    path = write_report(out, study, s, imp, summ, rep, base, enc, allk, scratch, elapsed, verdicts)
    bar.update(1)
    if own_bar:
        bar.close()
    return path, verdicts, base["bleu"], elapsed


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
    its numbers as mean +- sd with each seed's value, and ``out/study.json`` (see :func:`write_seeds_report`)."""
    from tqdm.auto import tqdm
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"reproduce_seeds: seeds {seeds!r}: give at least one seed, each once")
    per_seed = []
    with tqdm(total=7 * len(seeds), desc="reproduce", unit="stage", disable=not progress) as bar:
        for k in seeds:
            bar.set_description(f"reproduce, seed {k}")
            path, verdicts, bleu, elapsed = run_study(s, os.path.join(out, f"seed-{k}"), progress, seed=k, runs=runs,
                                                      bar=bar)
            per_seed.append({"seed": k, "report": os.path.relpath(path, out), "test_bleu": bleu,
                             "seconds": elapsed, "findings": {n: v.to_dict() for n, v in verdicts.items()}})
    path = write_seeds_report(out, s, per_seed)
    log(f"report written to {path}")
    return path


def seeds_table(summary):
    """The report's table over seeds: :func:`minihead.findings.findings_table` (finding, paper, this project,
    criterion, verdict), then every number of every finding as mean +- sd (each seed's value in brackets)."""
    lines = [findings.findings_table(summary), "", "| finding | numbers: mean +- sd (per seed) |", "|---|---|"]
    for name, f in summary.items():
        nums = "; ".join(f"{key} {findings.fmt(m)} +- {findings.fmt(sd)} ({', '.join(findings.fmt(x) for x in vals)})"
                         for key, (m, sd, vals) in f["numbers"].items() if m is not None)
        lines.append(f"| {findings.what(name)} | {nums or '-'} |")
    return "\n".join(lines)


def write_seeds_report(out, s, per_seed):
    """``out/README.md`` (the table over seeds, then a row per seed linking its own report), ``out/study.json``
    and ``out/results.json``. study.json: {"study": preset, "scale": s, "seeds": [k, ...], "blas_threads": n,
    "per_seed": [{"seed", "report", "test_bleu", "seconds", "findings": {name: Verdict.to_dict()}}],
    "summary": :func:`minihead.findings.summarize` of the per-seed findings} (each number a list
    [mean, sd, [per-seed values]]); results.json: the same without per_seed's findings."""
    from .study import blas_threads
    summary = findings.summarize([p["findings"] for p in per_seed])
    seeds = [p["seed"] for p in per_seed]
    n = len(seeds)
    bleus = findings._mean_sd([p["test_bleu"] for p in per_seed])
    lines = [f"# minihead reproduction report over {n} seeds ({'quick' if s['study'] == 'quick' else 'full'} scale)",
             "", f"Preset `{s['study']}`, seeds {', '.join(map(str, seeds))} (one model each, trained, analysed and "
             f"pruned alike; {blas_threads()} BLAS thread(s)). Test BLEU {findings.fmt(bleus[0])} +- {findings.fmt(bleus[1])} "
             f"({', '.join(findings.fmt(b) for b in bleus[2])}). Wall time of this run: "
             f"{sum(sum(p['seconds'].values()) for p in per_seed) / 60:.1f} min (cached stages are read, not "
             "recomputed).", "",
             "## Findings over seeds", "",
             "Each finding is judged by its criterion in `minihead/findings.py`: a per-model finding in each seed "
             "(holds: in every seed where it is testable; varies: in some), a correlation or difference by one test "
             "pooled over the seeds. Numbers are fractions (shares, margins over the offset baseline, Spearman rho) "
             "or BLEU; sd is the sample standard deviation over seeds.", "",
             seeds_table(summary), "", "## Each seed", "",
             "| seed | test BLEU | findings held | report |", "|---|---|---|---|"]
    for p in per_seed:
        held = [name for name, v in p["findings"].items() if v["held"]]
        lines.append(f"| {p['seed']} | {p['test_bleu']:.2f} | {len(held)} of {len(p['findings'])}: "
                     f"{', '.join(held) or 'none'} | [{p['report']}]({p['report']}) |")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "README.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    doc = {"study": s["study"], "scale": s, "seeds": seeds, "blas_threads": blas_threads(), "per_seed": per_seed,
           "summary": summary, "provenance": study_provenance(s)}
    checkpoint.save_json(os.path.join(out, "study.json"), doc)
    checkpoint.save_json(os.path.join(out, "results.json"),
                         {**doc, "per_seed": [{k: v for k, v in p.items() if k != "findings"} for p in per_seed]})
    return path


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository: data_small/, chapters/
STUDIES = os.path.join(ROOT, "chapters", "studies")                   # the shipped studies over seeds


def study_provenance(s, data=None):
    """What determines a study's verdicts besides the code: the scale's settings, the preset's model and training
    settings, and the content hash of the data (text and dev trees). Stored in study.json; a shipped study whose
    provenance differs from today's is stale (:func:`load_shipped_study`)."""
    from .study import STUDY_FILES, data_fingerprint
    from .train import preset_settings
    STUDY_FILES = STUDY_FILES + ("test.conllu",)       # the roles are judged on the test trees
    data = data or os.path.join(ROOT, "data_small")
    return json.loads(json.dumps({"scale": s, "preset": preset_settings(s["study"]),
                                  "data": data_fingerprint(data, STUDY_FILES), "criteria": findings.CRITERIA_VERSION,
                                  "roles_trees": ROLES_SPLIT}))


def load_shipped_study(name="quick"):
    """The study over seeds that the chapters judge their claims by: ``chapters/studies/<name>.json``. Either a
    copy of the study.json of ``python -m minihead reproduce [--quick] --seeds 1,2,3`` (name: a scale of
    :data:`SCALES`), or the file ``python -m minihead emergence --config <name> --seeds 1,2,3 --study`` wrote
    (head roles only). Refused, with the command that remakes it, when missing or when its provenance (settings,
    data) differs from today's."""
    from . import emergence
    from .study import check_provenance
    path = os.path.join(STUDIES, f"{name}.json")
    if name in SCALES:
        remake = (f"remake it with `python -m minihead reproduce {'--quick ' if name == 'quick' else ''}--seeds 1,2,3 "
                  f"--out report-{name}` and copy report-{name}/study.json to chapters/studies/{name}.json")
    else:
        remake = (f"remake it with `python -m minihead emergence --config {name} --seeds 1,2,3 "
                  f"--study chapters/studies/{name}.json`")
    if not os.path.exists(path):
        raise MiniheadError(f"{path}: no study over seeds for {name!r}; {remake}")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise MiniheadError(f"{path}: does not parse as a study ({exc}); {remake}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), dict):
        raise MiniheadError(f"{path}: holds no study (an object with a 'summary'); {remake}")
    fields = ("held_in", "of", "status", "numbers") if name in SCALES else ("held_in", "of", "numbers")
    bad = [k for k, v in doc["summary"].items() if not (isinstance(v, dict) and all(f in v for f in fields))]
    if bad:   # valid JSON of the wrong shape: named here, not a KeyError in a chapter
        raise MiniheadError(f"{path}: the summary's {', '.join(bad)} lack {', '.join(fields)}; {remake}")
    have = doc.get("provenance", {})
    if name in SCALES:
        want = study_provenance(SCALES[name])
    else:
        want = emergence.provenance(name, os.path.join(ROOT, "data_small"), have.get("n_trees"), {})
    check_provenance(path, have, want, remake)
    return doc


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


# --------------------------------------------------------------------------- the README's findings table
# The top-level README.md shows one findings table rendered from the shipped studies, never typed by hand:
# tests/test_readme.py fails when the table between these markers differs from readme_findings().
README_MARKERS = ("<!-- findings:begin -->", "<!-- findings:end -->")
README_STUDIES = (("full", "full mode"), ("quick", "quick mode"))   # shipped study, column heading, in order

# Why a finding does not hold in every seed of a study, (finding, study) -> one sentence for the reader. Shown only
# where the study says it does not hold everywhere; a study in which a finding fails with no sentence here is
# refused by readme_findings, so the README never states a failure without its reason (or "not measured").
WHY_NOT = {
    ("relevance_ablation", "full"): "the rank agreement changes sign with the seed (each seed's rho beside), so the "
                                    "pooled test cannot tell it from none",
    ("dec_enc_last", "full"): "in every run that pruned a decoder head, decoder self-attention and decoder-encoder "
                              "attention kept the same share of their heads (a tie, which the paper's order does "
                              "not allow)",
    ("role_relevance", "quick"): "the heads with a role are not the ones LRP ranks high on this small model (the "
                                 "role heads' mean is below the others'); why is not measured here",
    ("role_ablation", "quick"): "removing a head with a role costs less BLEU than removing one without, on average; "
                                "the heads that carry the translation are not the ones the role criteria name",
    ("positional", "quick"): "the quick model's best +1 head stays below 90% of its argmaxes at 1,200 steps; the "
                             "traces of chapter 3 show it forming later in training",
    ("rare_word", "quick"): "no first-layer head points at the rarest token half of the time; presumably no rule "
                            "of the synthetic language needs it (rare nouns translate word for word)",
    ("prunable", "quick"): "with six encoder heads, keeping a third means two, and the runs that keep so few lose "
                           "more than 1 BLEU against the step-matched reference in most seeds",
    ("functions_survive", "quick"): "in the seeds where it fails, the run keeping a third of the heads loses "
                                    "syntactic functions",
    ("role_closing", "quick"): "the sweep closes heads with and without a role in no consistent order across seeds",
    ("dec_enc_last", "quick"): "in a run where the decoder types tie, the paper's strict order fails",
    ("pruned_vs_scratch", "quick"): "the gap's interval is not above 0 (its numbers beside); why is not measured here",
    ("pruned_vs_scratch", "full"): "the gap's interval is not above 0 (its numbers beside); why the from-scratch "
                                   "models do as well or better is not measured here (chapter 6 names two suspects)",
}


def readme_findings(studies=None):
    """The README's findings table, rendered from the shipped studies over seeds (``chapters/studies/full.json``
    and ``quick.json``, read as shipped): a sentence naming the studies, then one row per finding of
    :data:`minihead.findings.FINDINGS` with the paper's number, this project's numbers and verdict in each study
    (:func:`minihead.findings.study_numbers`), and, where a finding does not hold, why (:data:`WHY_NOT`; an
    untestable or unmeasured finding carries its own reason). ``studies``: {name: study document}, default the
    shipped files. Returns markdown without the markers."""
    if studies is None:
        studies = {}
        for name, _ in README_STUDIES:
            with open(os.path.join(STUDIES, f"{name}.json"), encoding="utf-8") as f:
                studies[name] = json.load(f)
    intro = []
    for name, label in README_STUDIES:
        doc = studies[name]
        model = doc["provenance"]["preset"]["model"]
        bleu = findings._mean_sd([p["test_bleu"] for p in doc["per_seed"]])
        trees = doc["provenance"].get("roles_trees", "dev")
        intro.append(f"{label}, the `{doc['study']}` preset ({model['n_enc_layers']} encoder + {model['n_dec_layers']} "
                     f"decoder layers x {model['n_heads']} heads of {model['d_model'] // model['n_heads']}), "
                     f"{len(doc['seeds'])} seeds, test BLEU {bleu[0]:.1f} +- {bleu[1]:.1f}, roles judged on the "
                     f"{trees} trees ([`chapters/studies/{name}.json`](chapters/studies/{name}.json))")
    lines = ["One model per seed, each trained, analysed and pruned alike: " + "; ".join(intro) + ". Each finding "
             "is judged by its criterion in [`minihead/findings.py`](minihead/findings.py), the paper's definition "
             "(section cited there): a per-model finding in each seed (\"holds\" in every seed where it is testable, "
             "\"varies\" in some), a correlation or a difference by one test pooled over the seeds (p < "
             f"{findings.ALPHA:g}).", "",
             "| finding | paper | " + " | ".join(f"{label}: this project | verdict" for _, label in README_STUDIES)
             + " | why not, where not |",
             "|---|---|" + "---|---|" * len(README_STUDIES) + "---|"]
    missing = []
    for name in findings.FINDINGS:
        cells, why = [], []
        for study, label in README_STUDIES:
            f = studies[study]["summary"].get(name)
            if f is None or "status" not in f:
                cells += ["-", "not judged by these criteria"]
                continue
            verdict = {"holds": "**holds**", "varies": f"varies ({f['held_in']} of {f['testable']} seeds)"}.get(
                f["status"], f["status"])
            cells += [findings.study_numbers(name, f), verdict]
            if f["status"] in ("untestable", "not measured"):
                why.append(f"{label.split()[0]}: {f['reason']}")
            elif f["status"] != "holds":
                if (name, study) not in WHY_NOT:
                    missing.append(f"{name} in {study}")
                why.append(f"{label.split()[0]}: {WHY_NOT.get((name, study), '')}")
        lines.append(f"| {findings.what(name)} | {findings.FINDINGS[name][1]} | " + " | ".join(cells)
                     + f" | {'; '.join(why) or '-'} |")
    if missing:
        raise MiniheadError(f"readme_findings: no reason in WHY_NOT (minihead/reproduce.py) for {', '.join(missing)}, "
                            "which the studies say do not hold in every seed; add one sentence each")
    return "\n".join(lines)


def update_readme(path=None):
    """Rewrite the findings table of README.md (between :data:`README_MARKERS`) from the shipped studies
    (:func:`readme_findings`); ``python -m minihead.reproduce --readme`` does it. Returns True when the file
    changed."""
    path = path or os.path.join(ROOT, "README.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = README_MARKERS
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise MiniheadError(f"{path}: needs one {begin} line and one {end} line after it around the findings table")
    head, rest = text.split(begin)
    new = f"{head}{begin}\n{readme_findings()}\n{end}{rest.split(end, 1)[1]}"
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text


README_FIGURE = os.path.join("docs", "figures", "emergence.png")
README_TRACES = (("trace-quick.json", "data_small: the translation needs the heads"),
                 ("trace-quick-control.json", "control: it does not"))


def readme_figure(path=None):
    """The README's figure, drawn from the shipped traces (:data:`README_TRACES`, read by
    :func:`minihead.emergence.load_trace`, which refuses a stale one): the head functions measured along training
    on the language whose translation needs them and on its control. Returns the path written."""
    from . import emergence
    path = path or os.path.join(ROOT, README_FIGURE)
    docs = [emergence.load_trace(os.path.join(STUDIES, name)) for name, _ in README_TRACES]
    fig = emergence.plot_trace(docs, labels=[label for _, label in README_TRACES])
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def reproduce_real(train_src, train_tgt, conllu, dev_src=None, dev_tgt=None, test_src=None, test_tgt=None,
                   quick=True, out="report-real", progress=True, log=print):
    """The study on a real parallel corpus (BPE learned on it) with gold trees of real English: test BLEU,
    head importance, head roles on the trees, and the encoder-head pruning sweep. (All-attention pruning
    and from-scratch training are left to the data_small run: they cost hours on 2 cores at this size.)"""
    from .analysis import format_positional, format_rare, format_table, head_roles
    from .importance import uniform_top_quarter_share
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
             + ", ".join(f"{t:.2f}" for t in summ["top_quarter_share"])
             + f" (uniform {uniform_top_quarter_share(H):.2f}); "
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
    p.add_argument("--seeds", default=None, help="comma-separated seeds, e.g. 1,2,3: one model per seed, each "
                   "seed's report in OUT/seed-K/, and OUT/README.md and OUT/study.json tell in how many seeds each "
                   "finding holds (default: one model, the preset's seed)")

    def run(a):
        if a.train_src or a.train_tgt:
            if not (a.train_src and a.train_tgt and a.conllu):
                raise SystemExit("a real corpus needs --train-src, --train-tgt and --conllu")
            out = a.out if a.out != "report" else "report-real"
            return reproduce_real(a.train_src, a.train_tgt, a.conllu, a.dev_src, a.dev_tgt, a.test_src,
                                  a.test_tgt, a.quick, out, not a.no_progress)
        seeds = getattr(a, "seeds_list", None)
        if seeds is None and a.seeds is not None:      # called without minihead.cli's checks
            from .emergence import parse_seeds
            seeds = parse_seeds(a.seeds)
        return reproduce(a.quick, a.out, not a.no_progress, seeds=seeds)
    p.set_defaults(func=run)
    return p


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--readme"]:
        raise SystemExit("usage: python -m minihead.reproduce --readme  (rewrites README.md's findings table and its "
                         "figure from chapters/studies/; the study itself is `python -m minihead reproduce`)")
    print("README.md " + ("updated" if update_readme() else "already up to date"))
    print(f"{readme_figure()} drawn from the shipped traces")
