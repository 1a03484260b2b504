"""Do the paper's head functions emerge? One model per seed, trained and measured the same way.

``python -m minihead emergence --config quick --seeds 1,2,3 [--data data_small/control]`` trains one model
per seed on a parallel corpus with gold trees (data_small by default), then measures on the dev trees, for
each seed: dev BLEU, the best encoder head's share of argmaxes on -1 / +1 and its confidence (sec. 5.1),
the best head per dependency relation and direction against the fixed-offset baseline (sec. 5.2, Table 1)
and the rare-word share (sec. 5.3). The verdicts come from :mod:`minihead.findings`, the one home of the
paper's criteria. Models are cached per seed under ``runs/emergence/`` by :func:`minihead.study.load_study`
(the folder names every setting that determines the model, BLAS thread count and data hash included), so a
second call only measures.

``--prune 0.05,0.1,0.2`` also prunes each seed's encoder heads with the hard-concrete gates at those lambdas
(:func:`minihead.prune.sweep`, cached beside the model) and judges sec. 6's two encoder findings on the heads
the seed's own measurement gave a role: most heads prunable at small cost, and the specialised heads among the
survivors (Figure 8).
"""
import json
import os
from dataclasses import dataclass

from . import findings, paper, study
from .errors import MiniheadError


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


def measure(params, cfg, vocab, trees, src_freq):
    """The three head functions of one model on gold ``trees``: dicts of :mod:`minihead.findings`."""
    from .analysis import head_roles
    rep = head_roles(params, cfg, vocab, trees, src_freq)
    return (findings.positional(rep).to_dict(), findings.syntactic(rep).to_dict(),
            findings.rare_word(rep).to_dict())


def head_roles_of(r):
    """{(layer, head): set of roles} from one seed's measured verdict dicts: the positional heads (sec. 5.1), the
    heads over the offset baseline for some relation (sec. 5.2) and the rare-word head if it holds (sec. 5.3)."""
    roles = {}
    for l, h, _ in r["positional"]["heads"]:
        roles.setdefault((l, h), set()).add("positional")
    for _, _, l, h, _, _ in r["syntactic"]["heads"]:
        roles.setdefault((l, h), set()).add("syntactic")
    if r["rare"]["held"] and r["rare"]["head"] is not None:
        roles.setdefault(tuple(r["rare"]["head"]), set()).add("rare")
    return roles


def prune_seed(s, r, lambdas, steps=600, n_test=300, progress=True):
    """Prune the encoder heads of study ``s`` at each lambda (cached beside the model) and judge, on the roles
    that the seed's measurement ``r`` found: :func:`minihead.findings.most_encoder_heads_prunable` (each run
    against the lambda = 0 run at its step) and :func:`minihead.findings.functions_survive` (roles re-measured on
    each pruned model, on the dev trees this command measures on). Returns a plain dict."""
    from .prune import baseline, sweep, with_reference
    from .reproduce import functions_after, roles_stage
    n_enc = s.cfg.n_enc_layers * s.cfg.n_heads
    roles = head_roles_of(r)
    base = baseline(s, n_test=n_test)
    runs = sweep(s, lambdas, "enc", steps, n_test=n_test, progress=progress, after=functions_after(s, split="dev"))
    runs = with_reference(s, runs, n_test=n_test)
    rep = roles_stage(s, split="dev")
    before = findings.functions(rep.roles, rep)
    kept = [{"lam": float(x["lam"]), "bleu": float(x["bleu"]),
             "heads": [[l, h] for l, row in enumerate(x["retained"]["enc"]) for h, k in enumerate(row) if k]}
            for x in runs]
    for k in kept:
        k["with_role"] = [lh for lh in k["heads"] if tuple(lh) in roles]
    return json.loads(json.dumps({
        "bleu_before": float(base["bleu"]), "n_enc": n_enc, "roles": [[l, h, sorted(v)] for (l, h), v in roles.items()],
        "runs": kept, "prunable": findings.most_encoder_heads_prunable(runs, n_enc).to_dict(),
        "functions_survive": findings.functions_survive(runs, before, n_enc).to_dict()}))


def run_seed(data, config, seed, overrides, runs_dir, n_trees=None, progress=True, prune_lambdas=(), prune_steps=600,
             prune_n_test=300):
    """Train (or reuse) the model of one seed and measure it; returns a SeedResult. The model is the study model
    of :func:`minihead.study.load_study` (cached in its run folder, named by preset, settings, seed, BLAS threads
    and data hash); the measurement is cached beside it, keyed by the trees it was made on and the model's
    parameters. The run folder is held (:func:`minihead.checkpoint.run_lock`) for the whole of it."""
    from . import checkpoint
    with checkpoint.run_lock(study.run_folder(config, data, runs_dir, seed=seed, **overrides)):
        return _run_seed(data, config, seed, overrides, runs_dir, n_trees, progress, prune_lambdas, prune_steps,
                         prune_n_test)


def _run_seed(data, config, seed, overrides, runs_dir, n_trees, progress, prune_lambdas, prune_steps, prune_n_test):
    from .cache import cached_json
    from .prune import params_fingerprint
    s = study.load_study(config, data, runs=runs_dir, progress=progress, seed=seed, **overrides)
    trees = s.trees["dev"][:n_trees]
    key = {"version": 2, "n_trees": n_trees, "trees": study.data_fingerprint(data, ("dev.conllu",)),
           "model": params_fingerprint(s.params)}   # a model trained on (train --resume) is measured again

    def compute():
        pos, syn, rare = measure(s.params, s.cfg, s.vocab, trees, s.corpus.src_freq)
        best = max(s.history, key=lambda h: h["dev_bleu"])   # the evaluation that wrote best.npz
        return {"seed": seed, "dev_bleu": best["dev_bleu"], "steps": best["step"], "positional": pos,
                "syntactic": syn, "rare": rare}

    r = cached_json(os.path.join(os.path.dirname(s.path), "emergence.json"), key, compute)
    r.pop("cached", None)
    r = json.loads(json.dumps(r))   # the same plain values whether computed or read back
    if prune_lambdas:
        r["pruning"] = prune_seed(s, r, prune_lambdas, prune_steps, prune_n_test, progress=progress)
    return SeedResult(**r)


# --------------------------------------------------------------------------- along training
def trace_folder(data, config, seed, overrides, every, runs_dir, n_trees=None):
    """``<runs_dir>/trace-every<N>-trees<n|all>/<run folder>``: the traced run of one seed, with early stopping
    off (``patience`` past the last evaluation, an override, so it is in the run folder's name and hash)."""
    from .train import preset
    tcfg = preset(config, 1, seed=seed, **overrides)[1]
    ov = {"seed": seed, **overrides, "patience": tcfg.max_steps // tcfg.eval_every + 1}
    sub = f"trace-every{every}-trees{n_trees or 'all'}"
    return os.path.join(str(runs_dir), sub, os.path.basename(study.run_folder(config, data, None, **ov))), ov


def trace_seed(data, config, seed, overrides, every, runs_dir, n_trees=None, progress=True):
    """The head functions measured ALONG one seed's training: every ``every`` steps up to the preset's
    ``max_steps``, the parameters of that step are measured as :func:`measure` measures a finished model (best
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
    from . import checkpoint
    out, _ = trace_folder(data, config, seed, overrides, every, runs_dir, n_trees)
    with checkpoint.run_lock(out):   # one writer for the whole trace, not only while a segment trains
        return _trace_seed(data, config, seed, overrides, every, runs_dir, n_trees, progress)


def _trace_seed(data, config, seed, overrides, every, runs_dir, n_trees, progress):
    from tqdm.auto import tqdm
    from . import checkpoint
    from .train import dev_bleu
    from .train import train as train_model
    out, ov = trace_folder(data, config, seed, overrides, every, runs_dir, n_trees)
    _, trees, corpus, cfg, tcfg = study.prepare(config, data, **ov)
    trees = trees["dev"][:n_trees]
    key = {"version": 1, "every": every, "n_trees": n_trees, "trees": study.data_fingerprint(data, ("dev.conllu",))}
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
        pos, syn, rare = measure(params, cfg, corpus.vocab, trees, corpus.src_freq)
        rows.append(json.loads(json.dumps({"step": target, "dev_bleu": dev_bleu(params, cfg, corpus, tcfg.dev_bleu_sentences),
                                           "positional": pos, "syntactic": syn, "rare": rare})))
        checkpoint.save_json(path, {"key": key, "rows": rows})
    return rows


def trace_doc(traces, config, data, n_trees, overrides, every):
    """The traces of several seeds as one JSON document (``emergence --trace N --json``; the chapters plot the
    shipped ones): {"kind": "emergence-trace", "study", "data", "every", "seeds", "blas_threads", "provenance",
    "traces": {seed: rows}}."""
    return {"kind": "emergence-trace", "study": config, "data": _relative(data), "overrides": dict(overrides),
            "n_trees": n_trees, "every": every, "seeds": list(traces), "blas_threads": study.blas_threads(),
            "provenance": provenance(config, data, n_trees, overrides),
            "traces": {str(k): v for k, v in traces.items()}}


def _relative(data):
    """A data folder as the trace document names it: relative to the repository when inside it."""
    from .data.corpus import REPO_ROOT
    path = os.path.abspath(str(data))
    inside = os.path.commonpath([path, str(REPO_ROOT)]) == str(REPO_ROOT)
    return os.path.relpath(path, str(REPO_ROOT)) if inside else path


def load_trace(path):
    """A trace document (:func:`trace_doc`) such as the ones shipped in chapters/studies/, refused with the
    command that remakes it when missing, unreadable, or when its provenance (the preset's settings with its
    overrides, the data's content hash) differs from today's."""
    from .data.corpus import REPO_ROOT
    remake = "remake it with `python -m minihead emergence --trace N --json PATH` (docs/studies.md gives the command of each shipped trace)"
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise MiniheadError(f"{path}: no such trace; {remake}") from None
    except (OSError, ValueError) as exc:
        raise MiniheadError(f"{path}: does not parse as a trace ({exc}); {remake}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "emergence-trace":
        raise MiniheadError(f"{path}: holds no trace (an object with kind 'emergence-trace'); {remake}")
    missing = [k for k in ("study", "data", "n_trees", "overrides", "provenance", "traces") if k not in doc]
    if missing:
        raise MiniheadError(f"{path}: a trace without {', '.join(missing)}; {remake}")
    data = os.path.join(str(REPO_ROOT), doc["data"])
    study.check_provenance(path, doc.get("provenance", {}),
                           provenance(doc["study"], data, doc["n_trees"], doc["overrides"]), remake)
    check_trace_rows(path, doc, remake)
    return doc


def check_trace_rows(path, doc, remake):
    """Each seed's rows must be a list of measurements at the trace's steps, every ``every`` steps and the run's
    last, none skipped: a trace with a gap (or rows of the wrong shape) would plot a curve it did not measure."""
    from .train import preset
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
    from matplotlib.lines import Line2D
    from . import figures
    from .train import PRESETS
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


def summary(results):
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


def add_emergence_command(subparsers):
    """Register ``emergence`` on an argparse ``add_subparsers()`` object."""
    s = subparsers.add_parser("emergence", help="train one model per seed and measure whether positional, "
                              "syntactic and rare-word heads emerge")
    from .train import PRESETS
    s.add_argument("--config", default="quick", choices=sorted(PRESETS), help="named preset")
    s.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    s.add_argument("--data", default="data_small", help="folder laid out as data_small (train/dev/test .src/.tgt, "
                   "dev/test .conllu) "
                   "(default data_small; data_small/control is the control language)")
    s.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="override preset settings (not the seed)")
    s.add_argument("--n-trees", type=int, default=None, help="measure on the first N dev trees (default all)")
    s.add_argument("--runs", default="runs/emergence", help="cache folder of the models")
    s.add_argument("--json", default=None, help="also write the results to this JSON file")
    s.add_argument("--prune", default=None, metavar="LAMBDAS",
                   help="also prune each seed's encoder heads at these comma-separated L0 weights, e.g. 0.05,0.1,0.2, "
                   "and judge whether most heads are prunable and the heads with a role survive")
    s.add_argument("--study", default=None, help="also write the study over seeds (per-seed verdicts, their summary "
                   "and provenance) for the chapters, e.g. chapters/studies/emerge.json")
    s.add_argument("--trace", type=int, default=None, metavar="N",
                   help="instead: measure each seed's model every N training steps, with early stopping off, and "
                   "print the head functions against steps (--json writes the traces, --figure plots them)")
    s.add_argument("--figure", default=None, metavar="PNG", help="with --trace: plot the traces into this image")
    s.set_defaults(func=cmd_emergence)
    return s


def parse_seeds(text):
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise MiniheadError(f"--seeds {text!r}: give whole numbers separated by commas, e.g. 1,2,3") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise MiniheadError(f"--seeds {text!r}: give at least one seed, each once")
    if any(s < 0 for s in seeds):   # refused here, before the first seed trains, not when the bad one's turn comes
        raise MiniheadError(f"--seeds {text!r}: seeds are whole numbers >= 0")
    return seeds


def cmd_emergence(a):
    """The ``emergence`` command (arguments checked by :func:`minihead.cli.validate_emergence`)."""
    if a.trace:
        return cmd_trace(a)
    results = []
    for seed in a.seeds_list:
        print(f"seed {seed}: training / measuring ({a.config}, {a.data})", flush=True)
        results.append(run_seed(a.data, a.config, seed, a.settings, a.runs, a.n_trees, prune_lambdas=a.prune_lambdas))
    print(f"\n## Emergence: {a.config}, {a.data}, seeds {','.join(map(str, a.seeds_list))}, "
          f"{study.blas_threads()} BLAS thread(s)\n")
    print(summary(results))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)   # validated as creatable
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump([r.__dict__ for r in results], f, indent=1)
    if a.study:
        from .checkpoint import save_json
        save_json(a.study, study_doc(results, a.config, a.data, a.n_trees, a.settings))
    return results


def cmd_trace(a):
    """``emergence --trace N``: :func:`trace_seed` for each seed, the table of :func:`trace_table`, and with
    ``--json`` / ``--figure`` the document of :func:`trace_doc` and its plot."""
    traces = {}
    for seed in a.seeds_list:
        print(f"seed {seed}: tracing every {a.trace} steps ({a.config}, {a.data})", flush=True)
        traces[seed] = trace_seed(a.data, a.config, seed, a.settings, a.trace, a.runs, a.n_trees)
    print(f"\n## Emergence along training: {a.config}, {a.data}, seeds {','.join(map(str, a.seeds_list))}, "
          f"{study.blas_threads()} BLAS thread(s), early stopping off\n")
    print(trace_table(traces))
    doc = trace_doc(traces, a.config, a.data, a.n_trees, a.settings, a.trace)
    if a.json:
        from .checkpoint import save_json
        save_json(a.json, doc)
    if a.figure:
        os.makedirs(os.path.dirname(os.path.abspath(a.figure)), exist_ok=True)   # validated as creatable
        plot_trace([doc]).savefig(a.figure, dpi=120)
    return traces


def provenance(config, data, n_trees, overrides):
    """What determines an emergence study's verdicts besides the code: the preset's settings with the overrides
    applied, the data's content hash (text and dev trees) and the number of dev trees measured."""
    from .train import preset_settings
    return json.loads(json.dumps({"kind": "emergence", "preset": preset_settings(config, **overrides),
                                  "data": study.data_fingerprint(data, study.STUDY_FILES), "n_trees": n_trees}))


def study_doc(results, config, data, n_trees, overrides):
    """The study over seeds as the chapters read it (:func:`minihead.reproduce.load_shipped_study`): per-seed
    verdicts of the three head functions, :func:`minihead.findings.summarize` of them, and the provenance."""
    per_seed = [{"seed": r.seed, "dev_bleu": r.dev_bleu, "steps": r.steps,
                 "findings": {"positional": r.positional, "syntactic": r.syntactic, "rare_word": r.rare,
                              **({"prunable": r.pruning["prunable"],
                                  "functions_survive": r.pruning["functions_survive"]} if r.pruning else {})}}
                for r in results]
    return {"study": config, "seeds": [r.seed for r in results], "blas_threads": study.blas_threads(),
            "per_seed": per_seed, "summary": findings.summarize([p["findings"] for p in per_seed]),
            "provenance": provenance(config, data, n_trees, overrides)}
