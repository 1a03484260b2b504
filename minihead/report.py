"""Everything the reports show: the markdown and the figures of ``reproduce`` (one model's report, the report over
seeds, the README's findings table and figure) and of ``emergence`` (its tables and the traces' figure).

It computes nothing: each function lays out results that :mod:`minihead.stages` measured, :mod:`minihead.findings`
judged and :mod:`minihead.study` stored, beside the paper's numbers (:mod:`minihead.paper`).
"""
import json
import math
import os
import textwrap

import matplotlib
from matplotlib.colors import to_rgb
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from . import backend, checkpoint, figures, findings, needs, paper
from .analysis import format_positional, format_rare, format_table
from .backend import xp
from .data.corpus import REPO_ROOT
from .errors import MiniheadError
from .importance import plot_importance, uniform_top_quarter_share
from .model import GATE_KINDS
from .stages import PLATEAU
from .study import ROLES_SPLIT, STUDIES, load_needs, load_shipped_study, load_studies, load_trace
from .train import PRESETS


def _fig(path, draw):
    """Save the figure that ``draw(plt)`` returns (a Figure, or an Axes of one) at ``path``; returns its name."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt   # here, after choosing the file backend: a notebook importing report keeps its own
    fig = draw(plt)
    fig = fig.figure            # an Axes' figure; a Figure's is itself
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return os.path.basename(path)


ROLE_NAMES = {"positional": "positional", "syntactic": "syntactic", "rare": "rare-word"}


def plot_encoder_pruning(enc, base_bleu, n_heads):
    """Figure 7's kind: test BLEU against the encoder heads retained by each run of the encoder sweep ``enc``,
    with the BLEU of all ``n_heads`` heads. Returns the Figure."""
    fig, axes = figures.new_figure(figsize=(5.2, 3.4))
    ax = axes[0, 0]
    pts = sorted((r["n_retained"]["enc"], r["bleu"], r.get("ref_bleu")) for r in enc)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="pruned (encoder heads)")
    if all(p[2] is not None for p in pts):
        ax.plot([p[0] for p in pts], [p[2] for p in pts], "x:", c="black",
                label="lambda = 0 run at the same step (reference)")
    ax.axhline(base_bleu, ls="--", c="gray", label=f"all {n_heads} heads, before pruning")
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


def write_report(out, study, s, imp, summ, rep, base, enc, allk, scratch, elapsed, verdicts):
    """``report/README.md`` (findings beside the paper's, figures, tables), the figures and ``results.json``
    (with every finding's verdict under "findings"). ``elapsed``: stage -> wall seconds of this run;
    ``verdicts``: :func:`minihead.findings.study_verdicts` of these results."""
    os.makedirs(out, exist_ok=True)
    L, H = study.cfg.n_enc_layers, study.cfg.n_heads
    figs = {}
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
    v = verdicts
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
              format_table(rep), "",
              "## Encoder-head pruning sweep", "",
              "Heads kept and BLEU under the paper's binary gates (0 or 1, whichever point mass is larger), the official "
              "code's continuous gates beside them; settled: share of gates with max(P(g=0), P(g=1)) > 0.95 at the end "
              "of the run, which stops once it reaches 0.9.", "",
              "| lambda | encoder heads kept: binary / continuous | test BLEU: binary / continuous | settled | steps |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['lam']:g} | {r['n_retained']['enc']} / {r.get('n_retained_continuous', r['n_retained'])['enc']} | "
              f"{r['bleu']:.2f} / {r.get('bleu_continuous', float('nan')):.2f} | {r.get('settled_share', float('nan')):.2f} | "
              f"{r.get('steps_used', r['steps'])} |" for r in enc]
    along = needs_along_sweep_table(enc)
    if along:
        lines += ["", "## Which jobs survive as encoder heads go", "",
                  "Teacher-forced accuracy (%) of every need of data_small on the test set, measured on each pruned "
                  "model with its gates (`stages.needs_after`).", "", along]
    lines += ["", "## All attention types (Table 2 shape): enc-self / dec-self / dec-enc heads kept", "",
              "| lambda | heads kept | BLEU pruned | BLEU from scratch |", "|---|---|---|---|"]
    scratch_of = {id(r): sc for r, sc in paired}
    for r in allk:
        n, sc = r["n_retained"], scratch_of.get(id(r))
        scratch_bleu = "-" if sc is None else f"{sc['bleu']:.2f}"
        lines.append(f"| {r['lam']:g} | {n['enc']} / {n['dec_self']} / {n['dec_enc']} | {r['bleu']:.2f} | {scratch_bleu} |")
    if paired:   # how the from-scratch column was trained: the scale's budget (stages.scratch_steps)
        budget = s.get("scratch_steps")
        how = ("to the preset's own plateau of dev BLEU, its best dev checkpoint scored" if budget == PLATEAU else
               f"for {budget} steps, the final model scored" if budget else
               "for the pruned model's budget (its training steps plus the pruning steps), the final model scored")
        steps = [f"lambda {r['lam']:g}, {sc['steps']} steps" for r, sc in paired if "steps" in sc]
        lines += ["", f"Trained from scratch {how}" + (": " + ", ".join(steps) if steps else "") + "."]
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
                "settled", "ref_bleu", "functions_after", "needs_after")


def seeds_table(summary):
    """The report's table over seeds: :func:`minihead.findings.findings_table` (finding, paper, this project,
    criterion, verdict), then every number of every finding as mean +- sd (each seed's value in brackets)."""
    lines = [findings.findings_table(summary), "", "| finding | numbers: mean +- sd (per seed) |", "|---|---|"]
    for name, f in summary.items():
        nums = "; ".join(f"{key} {findings.fmt(m)} +- {findings.fmt(sd)} ({', '.join(findings.fmt(x) for x in vals)})"
                         for key, (m, sd, vals) in f["numbers"].items() if m is not None)
        lines.append(f"| {findings.what(name)} | {nums or '-'} |")
    return "\n".join(lines)


def write_seeds_report(out, doc):
    """``out/README.md`` (the table over seeds, then a row per seed linking its own report), ``out/study.json``
    (``doc``, :func:`minihead.study.seeds_doc`) and ``out/results.json`` (the same without per_seed's findings)."""
    s, per_seed, summary = doc["scale"], doc["per_seed"], doc["summary"]
    seeds = doc["seeds"]
    n = len(seeds)
    bleus = findings._mean_sd([p["test_bleu"] for p in per_seed])
    lines = [f"# minihead reproduction report over {n} seeds ({'quick' if s['study'] == 'quick' else 'full'} scale)",
             "", f"Preset `{s['study']}`, seeds {', '.join(map(str, seeds))} (one model each, trained, analysed and "
             f"pruned alike; {doc['blas_threads']} BLAS thread(s)). Test BLEU {findings.fmt(bleus[0])} +- {findings.fmt(bleus[1])} "
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
    checkpoint.save_json(os.path.join(out, "study.json"), doc)
    checkpoint.save_json(os.path.join(out, "results.json"),
                         {**doc, "per_seed": [{k: v for k, v in p.items() if k != "findings"} for p in per_seed]})
    return path


# The top-level README.md shows one findings table rendered from the shipped studies, never typed by hand:
# tests/test_readme.py fails when the table between these markers differs from readme_findings().
README_MARKERS = ("<!-- findings:begin -->", "<!-- findings:end -->")


README_STUDIES = (("full", "full mode"), ("quick", "quick mode"))   # shipped study, column heading, in order


# Why a finding does not hold in every seed of a study, (finding, study) -> one sentence for the reader. Shown only
# where the study says it does not hold everywhere; a study in which a finding fails with no sentence here is
# refused by readme_findings, so the README never states a failure without its reason (or "not measured").
WHY_NOT = {
    ("role_relevance", "full"): "the heads with a role get no more LRP relevance than their neighbours (the "
                                "difference beside): with two heads a layer, whose shares sum to one, each role head "
                                "is ranked against one other head, and the pooled test cannot tell the two apart",
    ("role_ablation", "full"): "removing a head with a role does not cost more BLEU than removing one without in a "
                               "way the pooled test can tell from chance (the differences beside); chapter 2's head x "
                               "need matrix names the heads the translation needs",
    ("confident", "full"): "the rank agreement is positive but weak (each seed's rho beside), and pooled over the "
                           "seeds it does not reach p < 0.05",
    ("rare_word", "full"): "no first-layer head points at the rarest token half of the time (its share is near "
                           "chance, beside); presumably no rule of the synthetic language needs it (rare nouns "
                           "translate word for word)",
    ("prunable", "full"): "against the step-matched reference, every seed needs well over a third of its twelve "
                          "encoder heads to stay within 1 BLEU (the knee beside): with two heads a layer, few heads "
                          "are spare",
    ("functions_survive", "full"): "the run keeping about a third of the heads has lost functions the unpruned model "
                                   "had (left / before beside)",
    ("role_closing", "full"): "the heads with a role are not the last to close: the rank agreement between a head's "
                              "role score and the lambda that closes it is near zero (beside)",
    ("relevance_ablation", "full"): "LRP relevance and single-head ablation rank the encoder heads alike in most "
                                    "seeds, but the agreement is weak (each seed's rho beside) and pooled over the "
                                    "seeds it does not reach p < 0.05; chapter 2's head x need matrix judges each "
                                    "instrument against the heads the translation needs",
    ("relevance_closing", "full"): "relevant heads tend to close later (a positive rho in every seed, beside), but "
                                   "pooled over the seeds the agreement does not reach p < 0.05",
    ("positional", "full"): "where it fails, the best +1 head sits just under 90% of its argmaxes at 2,400 steps "
                            "(the share beside)",
    ("dec_enc_last", "full"): "where it fails, decoder self-attention and decoder-encoder attention kept the same "
                              "share of their heads (a tie, which the paper's strict order does not allow)",
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
        studies = load_studies([name for name, _ in README_STUDIES])
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
        raise MiniheadError(f"readme_findings: no reason in WHY_NOT (minihead/report.py) for {', '.join(missing)}, "
                            "which the studies say do not hold in every seed; add one sentence each")
    return "\n".join(lines)


def _rewrite_block(path, markers, block, what):
    """Replace what lies between the two ``markers`` lines of the file at ``path`` by ``block``; True when the file
    changed. A file without exactly one pair of markers, in order, is refused naming ``what`` belongs there."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = markers
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise MiniheadError(f"{path}: needs one {begin} line and one {end} line after it around {what}")
    head, rest = text.split(begin)
    new = f"{head}{begin}\n{block}\n{end}{rest.split(end, 1)[1]}"
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text


def update_readme(path=None):
    """Rewrite the findings table of README.md (between :data:`README_MARKERS`) from the shipped studies
    (:func:`readme_findings`); ``python -m minihead.report --readme`` does it. Returns True when the file
    changed."""
    path = path or os.path.join(str(REPO_ROOT), "README.md")
    return _rewrite_block(path, README_MARKERS, readme_findings(), "the findings table")


EMERGENCE_MARKERS = ("<!-- emergence:begin -->", "<!-- emergence:end -->")
EMERGENCE_DOC = os.path.join("docs", "experiments.md")
# shipped study, language (and recipe), in order
EMERGENCE_STUDIES = (("emerge", "needs"), ("emerge-control", "control"),
                     ("emerge-matched", "matched control"),
                     ("emerge-heads8", "needs, 8 heads of 16"), ("emerge-heads8x32", "needs, 8 heads of 32"))


def _emergence_row(label, p):
    """One seed of an emergence study (its per-seed record) as a row of :func:`emergence_studies_block`."""
    pos, syn, rare = (p["findings"][k] for k in ("positional", "syntactic", "rare_word"))
    best = (f"{pos['offset']:+d} L{pos['head'][0]}H{pos['head'][1]}: {pos['share']:.2f}, {pos['confidence']:.2f}"
            if pos.get("head") else "-")
    heads = ", ".join(f"L{l}H{h} {o:+d}" for l, h, o in pos.get("heads", [])) or "none"
    held = set(syn.get("relations_held", []))
    rels = ", ".join((f"**{r} {round(m * 100):+d}**" if r in held else f"{r} {round(m * 100):+d}")
                     for r, _, m in sorted(syn.get("best_margins", []), key=lambda x: -x[2]))
    rw = (f"L{rare['head'][0]}H{rare['head'][1]}: {rare['share']:.2f} / {rare['chance']:.2f}"
          if rare.get("share") is not None and rare.get("head") else "n/a")
    return f"| {label} | {p['seed']} | {p['dev_bleu']:.1f} | {best} | {heads} | {rels or '-'} | {rw} |"


def emergence_studies_block(studies=None):
    """The default preset's head functions on the language that needs them and on its two controls, and the heads8
    preset's on the language that needs them, one row per seed, then each study's findings table
    (:func:`minihead.findings.findings_table`), rendered from the shipped emergence studies (:data:`EMERGENCE_STUDIES`,
    read by :func:`minihead.study.load_shipped_study`, which refuses a stale one) for docs/experiments.md. ``studies``:
    {name: document}, default the shipped files (given, only those named are
    shown, in the order of :data:`EMERGENCE_STUDIES`)."""
    if studies is None:
        studies = {name: load_shipped_study(name) for name, _ in EMERGENCE_STUDIES}
    shown = [(name, label) for name, label in EMERGENCE_STUDIES if name in studies]
    lines = ["| language | seed | dev BLEU | best +-1 head: share, confidence | positional heads (share >= "
             f"{findings.POSITIONAL_SHARE:g}) | syntactic relations: best margin over the offset baseline, points "
             f"(bold: >= {findings.SYNTACTIC_MARGIN * 100:.0f}) | best first-layer head on the rarest token: "
             "share / chance |", "|---|---|---|---|---|---|---|"]
    for name, label in shown:
        lines += [_emergence_row(label, p) for p in studies[name]["per_seed"]]
    for name, label in shown:
        doc = studies[name]
        split = doc.get("provenance", {}).get("roles_trees", "dev")
        lines += ["", f"*{label}* (`chapters/studies/{name}.json`, {len(doc['seeds'])} seeds, roles on the {split} "
                  "trees):", "", findings.findings_table(doc["summary"])]
    return "\n".join(lines)


def update_emergence_doc(path=None):
    """Rewrite the emergence tables of docs/experiments.md (between :data:`EMERGENCE_MARKERS`) from the shipped
    emergence studies (:func:`emergence_studies_block`). Returns True when the file changed."""
    path = path or os.path.join(str(REPO_ROOT), EMERGENCE_DOC)
    return _rewrite_block(path, EMERGENCE_MARKERS, emergence_studies_block(), "the emergence tables")


PILOT_MARKERS = ("<!-- prune-pilot:begin -->", "<!-- prune-pilot:end -->")
PILOT_RECORD = os.path.join("docs", "pilots", "heads8x32-prune.json")   # the heads8x32 pruning pilot, seed by seed
PILOT_STUDIES = ("needs", "emergence")   # of its models: their head x need matrices, their unpruned head functions


def _unpruned_functions(rec):
    """The head functions of an emergence study's seed record (roles on the test trees) as
    :func:`minihead.findings.functions` names them: "positional", "syntactic:<relation>", "rare"."""
    f = rec["findings"]
    return ((["positional"] if f["positional"]["heads"] else [])
            + [f"syntactic:{r}" for r in sorted(f["syntactic"]["relations_held"])]
            + (["rare"] if f["rare_word"].get("held") else []))


def _same_model(entry, rec):
    """Whether a pilot seed's model is the one a shipped study measured: their fingerprints agree, or the pilot
    entry names none (made in the run folder of that study's model, before fingerprints were recorded)."""
    return rec is not None and entry.get("model") in (None, rec.get("model"))


def prune_pilot_verdicts(entry, before):
    """Sec. 6's per-seed findings of one seed of the pruning pilot (``entry``: a ``per_seed`` item of
    :data:`PILOT_RECORD`), by the shared criteria: most heads prunable against the step-matched lambda = 0 run
    (not measured without it), the functions ``before`` still on the survivors (not measured when None: the
    unpruned functions of another model are not this one's), and pruned against the
    same configuration from scratch (untestable without a twin)."""
    runs = [r for r in entry["runs"] if r.get("n_retained")]
    zero = [r for r in runs if r["lam"] == 0.0]
    runs = [{**r, "ref_bleu": zero[0]["bleu"] if zero else None} for r in runs]
    n = sum(map(len, runs[0]["retained"]["enc"]))
    twin = entry.get("from_scratch")
    paired = [r for r in runs if twin and r["lam"] == twin["lambda"]]
    return {"prunable": findings.most_encoder_heads_prunable(runs, n),
            "functions_survive": (findings.functions_survive(runs, before, n) if before is not None else
                                  findings.not_measured("no unpruned head functions of this seed's model")),
            "pruned_vs_scratch": findings.pruned_beats_scratch([r["bleu"] for r in paired],
                                                               [twin["bleu"]] if paired else [])}


def pilot_runs(record=None, studies=None):
    """The pruned runs of the heads8x32 pruning pilot, each beside what the shipped studies of the same model say of
    it: the pilot's record (:data:`PILOT_RECORD`) and ``studies`` = {"needs": a head x need study, "emergence": an
    emergence study}, by default ``needs-heads8x32.json`` and ``emerge-heads8x32.json`` (a seed whose pilot model is
    another model gets nothing of theirs). Returns (one dict per pruned run: seed, run, n (encoder heads), zero (the
    seed's lambda = 0 run or None), twin (its from-scratch twin when of this lambda, else None), kept
    (:func:`minihead.needs.carriers_kept` of the seed's matrix, or None), need_loss ((points, need) fallen most from
    the unpruned model's accuracy, or None), before (the unpruned model's functions, or None); the per-seed sec. 6
    verdicts, :func:`prune_pilot_verdicts`)."""
    if record is None:
        record = checkpoint.load_json(os.path.join(str(REPO_ROOT), PILOT_RECORD))
    if studies is None:
        studies = {"needs": load_needs("heads8x32"), "emergence": load_shipped_study("emerge-heads8x32")}
    of = {name: {p["seed"]: p for p in studies[name]["per_seed"]} for name in PILOT_STUDIES}
    rows, verdicts = [], []
    for entry in record["per_seed"]:
        k = entry["seed"]
        matrix, unpruned = ((of[name].get(k) if _same_model(entry, of[name].get(k)) else None) for name in PILOT_STUDIES)
        before = _unpruned_functions(unpruned) if unpruned else None
        verdicts.append(prune_pilot_verdicts(entry, before))
        zero = next((r for r in entry["runs"] if r["lam"] == 0.0), None)
        twin = entry.get("from_scratch")
        for r in (r for r in entry["runs"] if r["lam"] > 0):
            mask = r["retained"]["enc"]
            loss = None
            if matrix:
                base = matrix["matrix"]["base"]
                loss = max((100 * (base[q] - r["needs_after"][q]), q) for q in needs.NEEDS)
            rows.append({"seed": k, "run": r, "n": sum(map(len, mask)), "zero": zero,
                         "twin": twin if twin and twin["lambda"] == r["lam"] else None,
                         "kept": needs.carriers_kept(matrix["matrix"], mask) if matrix else None,
                         "need_loss": loss, "before": before})
    return rows, verdicts


def prune_pilot_block(record=None, studies=None):
    """The heads8x32 pruning pilot of docs/experiments.md (between :data:`PILOT_MARKERS`) and chapter 5, rendered
    from :func:`pilot_runs` (``record`` and ``studies`` as there): one row per pruned run, then the sec. 6 findings
    over the seeds (:func:`minihead.findings.summarize` of :func:`prune_pilot_verdicts`), the paired gap pooled over
    every seed with a twin."""
    rows, verdicts = pilot_runs(record, studies)
    lines = ["| seed | lambda | encoder heads kept | test BLEU, pruned | lambda = 0, same budget | need carriers "
             "kept (by chance) | functions on the survivors | largest need loss from unpruned, points | from "
             "scratch: test BLEU (stopped, best dev step) | pruned - from scratch |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for x in rows:
        r, before, kept, twin = x["run"], x["before"], x["kept"], x["twin"]
        none = "n/a (no need matrix of this model)"
        carriers = f"{kept['kept']} of {len(kept['carriers'])} (p = {findings.fmt3(kept['p'])})" if kept else none
        needs_loss = f"{x['need_loss'][0]:.1f} ({x['need_loss'][1]})" if x["need_loss"] else none
        after = r["functions_after"]
        if before is None:
            funcs = ", ".join(after)
        else:
            lost, gained = [f for f in before if f not in after], [f for f in after if f not in before]
            funcs = ((f"lost {', '.join(lost)} of {len(before)}" if lost else f"all {len(before)} of the unpruned "
                      "model's") + (f"; gained {', '.join(gained)}" if gained else ""))
        ref = f"{x['zero']['bleu']:.2f}" if x["zero"] else "not run"
        scratch = f"{twin['bleu']:.2f} ({twin['steps']:,}, {twin['best_step']:,})" if twin else "not run"
        gap = f"{r['bleu'] - twin['bleu']:+.2f}" if twin else "not run"
        lines.append(f"| {x['seed']} | {r['lam']:g} | {r['n_retained']['enc']} of {x['n']} | {r['bleu']:.2f} | "
                     f"{ref} | {carriers} | {funcs} | {needs_loss} | {scratch} | {gap} |")
    seeds = list(dict.fromkeys(x["seed"] for x in rows))
    pooled = pilot_carriers_pooled(rows)
    lines += ["", f"Need carriers among the survivors, over the {pooled['n']} seeds with a need matrix of their model "
              f"(each seed's most pruned run): {pooled['kept']} of {pooled['carriers']} kept; if each seed's survivors "
              f"were drawn at random, that many or more with probability {findings.fmt3(pooled['p'])} "
              "(`needs.carriers_kept_pooled`).",
              "", f"Judged by the shared criteria over the {len(verdicts)} seeds (seeds {', '.join(map(str, seeds))}):",
              "", findings.findings_table(findings.summarize(verdicts), names=list(verdicts[0]))]
    return "\n".join(lines)


def pilot_carriers_pooled(rows):
    """:func:`minihead.needs.carriers_kept_pooled` over the seeds of :func:`pilot_runs`' ``rows`` that have a need
    matrix of their model, one run per seed (its largest lambda: the seeds' tails are independent, a seed's runs
    are not)."""
    last = {}
    for x in rows:
        if x["kept"] and (x["seed"] not in last or x["run"]["lam"] > last[x["seed"]]["run"]["lam"]):
            last[x["seed"]] = x
    return needs.carriers_kept_pooled([x["kept"] for x in last.values()])


def plot_pilot_survivors(record=None, studies=None):
    """Figure 8's kind with the ground truth beside it: for each pruned run of the pruning pilot
    (:func:`pilot_runs`), the layers x heads grid of its encoder heads, each cell pruned or kept and, where the
    seed's head x need matrix is this model's, whether it is one of the heads that carry 80% of the need damage
    (:func:`minihead.needs.carriers`). Returns the figure."""
    rows, _ = pilot_runs(record, studies)
    L, H = (len(rows[0]["run"]["retained"]["enc"]), len(rows[0]["run"]["retained"]["enc"][0])) if rows else (1, 1)
    colours = ["white", "#bbbbbb", "tab:red", "#f4c7c3"]   # pruned, kept, carrier kept, carrier pruned
    cmap = matplotlib.colors.ListedColormap(colours)
    fig, axes = figures.new_figure(1, max(len(rows), 1), figsize=(max(0.3 * H, 1.6) * max(len(rows), 1) + 1.0,
                                                                  0.3 * L + 1.6))
    for ax, x in zip(axes[0], rows):
        mask = x["run"]["retained"]["enc"]
        carriers = set(x["kept"]["carriers"]) if x["kept"] else set()
        grid = [[(2 if f"L{l}H{h}" in carriers else 1) if k else (3 if f"L{l}H{h}" in carriers else 0)
                 for h, k in enumerate(row)] for l, row in enumerate(mask)]                      # [L][H] codes
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=3.5, aspect="equal")
        for l in range(L + 1):
            ax.axhline(l - 0.5, color="black", lw=0.3)
        for h in range(H + 1):
            ax.axvline(h - 0.5, color="black", lw=0.3)
        figures.integer_ticks(ax, n_x=H, n_y=L)
        ax.tick_params(labelsize=6, length=2)
        kept = (f", {x['kept']['kept']} of {len(carriers)} carriers" if x["kept"] else ", no matrix of this model")
        ax.set_title(figures.wrap_title(f"seed {x['seed']}, lambda {x['run']['lam']:g}: "
                                        f"{x['run']['n_retained']['enc']} of {x['n']} kept{kept}", 24), fontsize=8)
        ax.set_xlabel("head", fontsize=8)
    axes[0][0].set_ylabel("layer", fontsize=8)
    labels = ["pruned", "kept", "need carrier, kept", "need carrier, pruned"]
    fig.legend([Patch(facecolor=c, edgecolor="black", lw=0.3) for c in colours], labels, loc="outside lower center",
               ncols=4, fontsize=8)
    width = fig.get_figwidth()
    fig.suptitle(figures.wrap_title("Which encoder heads survive pruning, and the heads the need matrix says do the "
                                    "work", width * 11), fontsize=10)
    return fig


def update_pilot_doc(path=None):
    """Rewrite the pruning pilot's table of docs/experiments.md (between :data:`PILOT_MARKERS`) from its record
    (:func:`prune_pilot_block`). Returns True when the file changed."""
    path = path or os.path.join(str(REPO_ROOT), EMERGENCE_DOC)
    return _rewrite_block(path, PILOT_MARKERS, prune_pilot_block(), "the pruning pilot's table")


README_FIGURE = os.path.join("docs", "figures", "emergence.png")


README_TRACES = (("trace-quick.json", "data_small: the translation needs the heads"),
                 ("trace-quick-control.json", "control: it does not"))


def readme_figure(path=None):
    """The README's figure, drawn from the shipped traces (:data:`README_TRACES`, read by
    :func:`minihead.study.load_trace`, which refuses a stale one): the head functions measured along training
    on the language whose translation needs them and on its control. Returns the path written."""
    path = path or os.path.join(str(REPO_ROOT), README_FIGURE)
    docs = [load_trace(os.path.join(STUDIES, name)) for name, _ in README_TRACES]
    fig = plot_trace(docs, labels=[label for _, label in README_TRACES])
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def trace_table(traces):
    """One row per traced step: dev BLEU, the best +-1 head's share / confidence and the relations with a
    syntactic head, a column per seed."""
    seeds = list(traces)
    lines = ["| step | " + " | ".join(f"seed {k}: BLEU, best +-1 head: share / confidence, relations" for k in seeds)
             + " |",
             "|---|" + "---|" * len(seeds)]
    by_step = {}
    for k in seeds:
        for r in traces[k]:
            p = r["positional"]
            by_step.setdefault(r["step"], {})[k] = (f"{r['dev_bleu']:.1f}, {p['offset']:+d}: {p['share']:.2f} / "
                                                   f"{p['confidence']:.2f}"
                                                   f"{' *' if p['held'] else ''}, "
                                                   f"{len(r['syntactic']['relations_held'])}")
    for step in sorted(by_step):
        lines.append(f"| {step} | " + " | ".join(by_step[step].get(k, "") for k in seeds) + " |")
    lines.append("")
    lines.append(f"* a positional head (share >= {findings.POSITIONAL_SHARE}; the paper observes confidence > "
                 f"{paper.POSITIONAL['min_confidence']}); relations: how many of the 4 have a syntactic head")
    return "\n".join(lines)


def plot_trace(docs, labels=None, axes=None):
    """The head functions along training, one line per seed and per document (``docs``: trace documents of
    :func:`trace_doc`, e.g. the language with needs and its control, drawn solid and dashed): the best +-1 head's
    share of argmaxes, its confidence (with the criteria's lines, 0.9 and 0.8) and the number of relations with a
    syntactic head; a dotted vertical line marks where the preset itself stops when the trace trains on past it.
    Returns the matplotlib Figure. Its own figure (``axes`` None) has constrained layout and one legend below the
    panels (every line, the criteria and the preset's stop); on a caller's axes the legend is in the last panel."""
    own = axes is None
    if own:
        fig, axes = figures.new_figure(1, 3, figsize=(13, 4.2))
        axes = axes[0]
    fig = axes[0].figure
    styles = ("-", "--", ":", "-.")
    for i, doc in enumerate(docs):
        label = (labels or [d["data"] for d in docs])[i]
        for j, (seed, rows) in enumerate(doc["traces"].items()):
            steps = [r["step"] for r in rows]
            kw = dict(ls=styles[i % len(styles)], color=f"C{j}", label=f"{label}, seed {seed}")
            axes[0].plot(steps, [r["positional"]["share"] for r in rows], **kw)
            axes[1].plot(steps, [r["positional"]["confidence"] for r in rows], **kw)
            axes[2].plot(steps, [len(r["syntactic"]["relations_held"]) for r in rows], **kw)
    handles = list(axes[0].get_lines())
    stopped = False
    for doc in docs:    # where the preset itself stops, when the trace trains past it
        stop = PRESETS[doc["study"]][1]["max_steps"]
        if stop < max(r["step"] for rows in doc["traces"].values() for r in rows):
            stopped = True
            for ax in axes:
                ax.axvline(stop, color="grey", ls=":", lw=0.8)
    axes[0].axhline(findings.POSITIONAL_SHARE, color="k", lw=0.8)
    axes[1].axhline(paper.POSITIONAL["min_confidence"], color="k", lw=0.8)
    handles.append(Line2D([], [], color="k", lw=0.8, label=f"criterion: share {findings.POSITIONAL_SHARE:g}, "
                                                          f"confidence {paper.POSITIONAL['min_confidence']:g} (observed by the paper)"))
    if stopped:
        handles.append(Line2D([], [], color="grey", ls=":", lw=0.8, label="the preset stops here"))
    for ax, title in zip(axes, ("best +-1 head: share of argmaxes", "its confidence",
                                "relations with a syntactic head (of 4)")):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training step")
    axes[0].set_ylabel("share of argmaxes")
    axes[1].set_ylabel("confidence")
    axes[2].set_ylabel("relations")
    axes[0].set_ylim(*figures.SHARE_RANGE)
    axes[1].set_ylim(*figures.CONFIDENCE_RANGE)
    axes[2].set_ylim(-0.2, 4.2)
    axes[2].set_yticks(range(5))
    if own:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), fontsize=8)
    else:
        axes[2].legend(handles=handles, fontsize=7, loc="lower right")
        if fig.get_layout_engine() is None:
            fig.tight_layout()
    return fig


def emergence_table(results):
    """Rows of the emergence table, one per seed, and a closing line per finding with the seed count."""
    lines = ["| seed | dev BLEU | best +-1 share (offset, layer-head) | its confidence | positional heads | "
             "syntactic relations (margin, points) | rare-word share / chance |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        p, s, q = r.positional, r.syntactic, r.rare
        rels = ", ".join(f"{rel} {d} {m * 100:+.0f}" for (rel, d, m) in s["best_margins"]) or "-"
        held = ", ".join(s["relations_held"]) or "none"
        rare = f"{q['share']:.2f} / {q['chance']:.2f}" if q["share"] is not None else "n/a"
        lines.append(f"| {r.seed} | {r.dev_bleu:.1f} | {p['share']:.2f} ({p['offset']:+d}, L{p['head'][0]}H{p['head'][1]}) "
                     f"| {p['confidence']:.2f} | {', '.join(f'L{l}H{h} {o:+d}' for l, h, o in p['heads']) or 'none'} "
                     f"| {held} ({rels}) | {rare} |")
    n = len(results)
    lines.append("")
    lines.append(f"positional head (share >= {findings.POSITIONAL_SHARE}): "
                 f"{sum(r.positional['held'] for r in results)} of {n} seeds")
    for k in (2, 3):
        lines.append(f"syntactic heads for >= {k} of the 4 relations (>= {findings.SYNTACTIC_MARGIN * 100:.0f} "
                     f"points over the offset baseline): "
                     f"{sum(len(r.syntactic['relations_held']) >= k for r in results)} of {n} seeds")
    lines.append(f"rare-word head (first layer, >= {findings.RARE_SHARE:.0%} on the rarest token): "
                 f"{sum(bool(r.rare['held']) for r in results)} of {n} seeds")
    if all(r.pruning for r in results):
        lines += ["", "Encoder heads pruned (hard-concrete gates; heads with a role marked *):", "",
                  "| seed | roles | BLEU before | lambda: heads kept (BLEU) |", "|---|---|---|---|"]
        for r in results:
            p = r.pruning
            roles = ", ".join(f"L{l}H{h} {'+'.join(v)}" for l, h, v in p["roles"]) or "none"
            runs = "; ".join(f"{k['lam']:g}: {' '.join(f'L{l}H{h}' + ('*' if [l, h] in k['with_role'] else '') for l, h in k['heads']) or 'none'} ({k['bleu']:.1f})"
                             for k in p["runs"])
            lines.append(f"| {r.seed} | {roles} | {p['bleu_before']:.1f} | {runs} |")
        lines.append("")
        for name in ("prunable", "functions_survive"):
            lines.append(f"{findings.what(name)}: {sum(bool(r.pruning[name]['held']) for r in results)} of {n} seeds")
    return "\n".join(lines)


CARRIED = 0.8   # the share of all need damage whose carriers the matrix table names (needs.carriers)
NEED_NAMES = {"sandhi": "sandhi (+1)", "nsubj": "nsubj case", "obj": "obj case", "advmod": "adverb suffix",
              "amod": "adjective gender"}


def _drop_points(cell, need):
    """A cell's drop in points (accuracy x 100; BLEU as is), None where the need is absent."""
    v = cell[need]
    return None if v is None else (v if need == "bleu" else 100.0 * v)


def need_matrix_table(m):
    """One seed's head x need matrix (:func:`minihead.needs.ablation_matrix`) as markdown: the accuracy of each
    need with every head, then one row per encoder head switched off, each cell the drop in points (BLEU: on the
    first n_bleu test pairs), and the pairs of heads of one layer where some need survives every single head."""
    cols = [*m["needs"], "bleu"]
    names = [NEED_NAMES.get(n, n) for n in m["needs"]] + [f"BLEU ({m['n_bleu']} pairs)"]
    fmt = lambda v: "-" if v is None else f"{v:+.1f}"                       # noqa: E731
    lines = ["| heads switched off | " + " | ".join(names) + " |", "|---|" + "---|" * len(cols),
             "| none (accuracy, BLEU) | " + " | ".join("-" if m["base"][n] is None else
                                                        (f"{m['base'][n]:.1f}" if n == "bleu" else
                                                         f"{100 * m['base'][n]:.1f}") for n in cols) + " |"]
    for l, row in enumerate(m["single"]):
        for h, cell in enumerate(row):
            lines.append(f"| L{l}H{h} | " + " | ".join(fmt(_drop_points(cell, n)) for n in cols) + " |")
    for p in m["pairs"]:
        lines.append(f"| L{p['layer']}H{p['heads'][0]} + L{p['layer']}H{p['heads'][1]} | "
                     + " | ".join(fmt(_drop_points(p, n)) for n in cols) + " |")
    lines.append("")
    top = needs.carriers(m, CARRIED)
    lines.append(f"heads carrying {100 * CARRIED:.0f}% of all need damage (markers lost when each is switched off "
                 f"alone): {len(top)} of {sum(map(len, m['single']))}" + (" (" + ", ".join(
                     f"{name} {x:.0f}" for name, x in top) + ")" if top else ""))
    counts = ", ".join(f"{n} {m['count'][n]}" for n in m["needs"])
    lines.append(f"marked tokens: {counts}; needs no single head "
                 f"breaks (drop under {100 * m['survives']:.0f} points): {', '.join(m['survivors']) or 'none'}")
    return "\n".join(lines)


def needs_along_sweep_table(enc):
    """Which jobs survive as encoder heads go (the need scores beside Figure 7): one row per encoder sweep run that
    carries ``needs_after`` (:func:`minihead.stages.needs_after`), fewest heads pruned first, with lambda, heads
    kept, test BLEU and each need's teacher-forced accuracy in percent on the pruned model. Empty string when no
    run carries it."""
    runs = sorted((r for r in enc if r.get("needs_after")), key=lambda r: (-r["n_retained"]["enc"], r["lam"]))
    if not runs:
        return ""
    cols = list(runs[0]["needs_after"])
    lines = ["| lambda | encoder heads kept | BLEU | " + " | ".join(NEED_NAMES.get(n, n) for n in cols) + " |",
             "|---|---|---|" + "---|" * len(cols)]
    for r in runs:
        acc = r["needs_after"]
        lines.append(f"| {r['lam']:g} | {r['n_retained']['enc']} | {r['bleu']:.1f} | "
                     + " | ".join("-" if acc[n] is None else f"{100 * acc[n]:.1f}" for n in cols) + " |")
    return "\n".join(lines)


def instrument_table(agreement):
    """Each importance measure against the head x need matrix (:func:`minihead.needs.instrument_agreement`): its
    rank correlation with the markers each head's removal loses, per seed and pooled, and whether it agrees."""
    lines = ["| importance measure | Spearman rho with markers lost, per seed | pooled rho | p (one-sided) | "
             "ranks the heads the matrix says do the work? |", "|---|---|---|---|---|"]
    for name, a in agreement.items():
        per = ", ".join("n/a" if r is None or r != r else f"{r:+.2f}" for r in a["rho"])
        p = a["pooled"]
        lines.append(f"| {name} | {per} | {findings.fmt(p['rho'])} | {findings.fmt3(p['p'])} | "
                     f"{'**yes**' if a['agrees'] else 'no'} |")
    return "\n".join(lines)


def plot_need_matrix(doc, axes=None):
    """The head x need matrices of a study (:func:`minihead.study.needs_doc`), one panel per seed: rows the
    encoder heads, columns the needs and BLEU, each cell what switching that head off alone costs, in points, on
    one diverging scale (:data:`minihead.figures.DROP_POINTS_RANGE`; red: a loss). Returns the figure."""
    per_seed = doc["per_seed"]
    if axes is None:
        n = len(per_seed)
        _, axes = figures.new_figure(1, n, figsize=(3.1 * n + 1.2, 0.32 * sum(map(len, per_seed[0]["matrix"]["single"])) + 2.2))
        axes = list(axes[0])
    lo, hi = figures.colour_range("drop_points")
    image = None
    for ax, p in zip(axes, per_seed):
        m = p["matrix"]
        cols = [*m["needs"], "bleu"]
        rows = [(f"L{l}H{h}", cell) for l, r in enumerate(m["single"]) for h, cell in enumerate(r)]
        grid = [[_drop_points(cell, n) for n in cols] for _, cell in rows]
        values = [[math.nan if v is None else v for v in r] for r in grid]
        image = ax.imshow(values, cmap=figures.CMAPS["drop_points"], vmin=lo, vmax=hi, aspect="auto")
        for i, r in enumerate(grid):
            for j, v in enumerate(r):
                if v is not None:
                    ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7,
                            color=figures.cell_text_colour(image, v))
        figures.integer_ticks(ax, n_x=len(cols), n_y=len(rows), x_labels=[*m["needs"], "BLEU"],
                              y_labels=[name for name, _ in rows])
        ax.tick_params(axis="x", labelrotation=45)
        ax.set_title(f"seed {p['seed']}")
    axes[0].set_ylabel("encoder head switched off")
    fig = axes[0].figure
    fig.colorbar(image, ax=axes, label="drop in points (accuracy x 100; BLEU)", shrink=0.8)
    title = "What each encoder head does: the cost of switching it off alone (test set)"
    fig.suptitle(textwrap.fill(title, width=max(24, int(fig.get_figwidth() * 9))))   # one seed: a narrow figure
    return fig


def plot_need_grid(doc, needs_shown=None):
    """The head x need matrices of a study drawn as the paper draws heads (its Figures 1 and 8): one row of panels
    per seed, one panel per need and BLEU, each panel a layers x heads grid whose cell is what switching that head
    off alone costs, in points, on the diverging scale of :func:`plot_need_matrix`. Readable where a layer has
    many heads (48 rows of :func:`plot_need_matrix` are not). ``needs_shown``: the columns, default every need
    and BLEU. Returns the figure."""
    per_seed = doc["per_seed"]
    first = per_seed[0]["matrix"]
    cols = list(needs_shown or [*first["needs"], "bleu"])
    L, H = len(first["single"]), len(first["single"][0])
    panel = max(0.34 * H, 1.3)   # inches; two heads a layer still leave room for a panel title
    fig, axes = figures.new_figure(len(per_seed), len(cols), figsize=(panel * len(cols) + 1.6,
                                                                      (0.34 * L + 0.5) * len(per_seed) + 1.0))
    lo, hi = figures.colour_range("drop_points")
    image = None
    for row, p in zip(axes, per_seed):
        m = p["matrix"]
        for ax, need in zip(row, cols):
            grid = [[_drop_points(cell, need) for cell in layer] for layer in m["single"]]   # [L][H]
            values = [[math.nan if v is None else v for v in r] for r in grid]
            image = ax.imshow(values, cmap=figures.CMAPS["drop_points"], vmin=lo, vmax=hi, aspect="equal")
            for l, r in enumerate(grid):
                for h, v in enumerate(r):
                    if v is not None and abs(v) >= 0.5:   # a blank cell: under half a point either way
                        ax.text(h, l, f"{v:.0f}", ha="center", va="center", fontsize=5.5,
                                color=figures.cell_text_colour(image, v))
            figures.integer_ticks(ax, n_x=H, n_y=L)
            ax.tick_params(labelsize=6, length=2)
            ax.set_title(figures.wrap_title(NEED_NAMES.get(need, need.upper()), panel * 11), fontsize=8)
        row[0].set_ylabel(f"seed {p['seed']}\nlayer", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("head", fontsize=8)
    fig.colorbar(image, ax=axes, label="drop in points (accuracy x 100; BLEU)", shrink=0.8)
    fig.suptitle("What each encoder head does: the cost of switching it off alone (test set)", fontsize=10)
    return fig


def write_real_report(out, study, inputs, bleu, n_test, summ, rep, base, enc, minutes_from):
    """``out/README.md`` of the study on a real corpus (:func:`minihead.reproduce.reproduce_real`): test BLEU, the
    top-quarter relevance shares and rank agreements, the three head functions on the gold trees and the
    encoder-head sweep. ``inputs``: train_src, train_tgt, conllu, quick; ``minutes_from``: the run's wall seconds."""
    os.makedirs(out, exist_ok=True)
    L, H = study.cfg.n_enc_layers, study.cfg.n_heads
    lines = [f"# minihead on real language ({'quick' if inputs['quick'] else 'full'} scale)", "",
             f"Corpus {inputs['train_src']} / {inputs['train_tgt']} ({len(study.corpus.train_src)} pairs, BPE "
             f"{len(study.vocab)} pieces); trees {inputs['conllu']} ({rep.n_words} words, {rep.n_unknown} unknown to "
             f"the model).",
             f"Test BLEU {bleu['bleu']:.2f}, chrF {bleu['chrf']:.2f} (greedy, {n_test} sentences; "
             f"{bleu['bleu_signature']}). Wall time {minutes_from / 60:.1f} min.", "",
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
    return path


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--readme"]:
        raise SystemExit("usage: python -m minihead.report --readme  (rewrites README.md's findings table and its "
                         "figure, and docs/experiments.md's emergence tables and pruning pilot, from chapters/studies/ and docs/pilots/; the studies "
                         "themselves are `python -m minihead reproduce` and `emergence`)")
    print("README.md " + ("updated" if update_readme() else "already up to date"))
    print(f"{EMERGENCE_DOC} " + ("updated" if update_emergence_doc() else "already up to date"))
    print(f"{EMERGENCE_DOC}'s pruning pilot " + ("updated" if update_pilot_doc() else "already up to date"))
    print(f"{readme_figure()} drawn from the shipped traces")
