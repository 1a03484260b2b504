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

from . import findings, study
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
    that the seed's measurement ``r`` found: :func:`minihead.findings.most_encoder_heads_prunable` and
    :func:`minihead.findings.specialised_heads_survive`. Returns a plain dict."""
    from .prune import baseline, sweep
    n_enc = s.cfg.n_enc_layers * s.cfg.n_heads
    roles = head_roles_of(r)
    base = baseline(s, n_test=n_test)
    runs = sweep(s, lambdas, "enc", steps, n_test=n_test, progress=progress)
    kept = [{"lam": float(x["lam"]), "bleu": float(x["bleu"]),
             "heads": [[l, h] for l, row in enumerate(x["retained"]["enc"]) for h, k in enumerate(row) if k]}
            for x in runs]
    for k in kept:
        k["with_role"] = [lh for lh in k["heads"] if tuple(lh) in roles]
    return json.loads(json.dumps({
        "bleu_before": float(base["bleu"]), "n_enc": n_enc, "roles": [[l, h, sorted(v)] for (l, h), v in roles.items()],
        "runs": kept, "prunable": findings.most_encoder_heads_prunable(runs, base["bleu"], n_enc).to_dict(),
        "specialised_survive": findings.specialised_heads_survive(runs, roles, n_enc).to_dict()}))


def run_seed(data, config, seed, overrides, runs_dir, n_trees=None, progress=True, prune_lambdas=(), prune_steps=600,
             prune_n_test=300):
    """Train (or reuse) the model of one seed and measure it; returns a SeedResult. The model is the study model
    of :func:`minihead.study.load_study` (cached in its run folder, named by preset, settings, seed, BLAS threads
    and data hash); the measurement is cached beside it, keyed by the trees it was made on."""
    from .cache import cached_json
    s = study.load_study(config, data, runs=runs_dir, progress=progress, seed=seed, **overrides)
    trees = s.trees["dev"][:n_trees]
    key = {"version": 2, "n_trees": n_trees, "trees": study.data_fingerprint(data, ("dev.conllu",))}

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
    lines.append(f"positional head (share >= {findings.POSITIONAL_SHARE}, confidence > "
                 f"{findings.POSITIONAL_CONFIDENCE}): {sum(r.positional['held'] for r in results)} of {n} seeds")
    for k in (2, 3):
        lines.append(f"syntactic heads for >= {k} of the 4 relations (>= {findings.SYNTACTIC_MARGIN * 100:.0f} "
                     f"points over the offset baseline): "
                     f"{sum(len(r.syntactic['relations_held']) >= k for r in results)} of {n} seeds")
    lines.append(f"rare-word head (>= {findings.RARE_FACTOR} x chance): "
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
        for name in ("prunable", "specialised_survive"):
            lines.append(f"{findings.FINDINGS[name]}: {sum(bool(r.pruning[name]['held']) for r in results)} of {n} seeds")
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
    s.set_defaults(func=cmd_emergence)
    return s


def parse_seeds(text):
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise MiniheadError(f"--seeds {text!r}: give whole numbers separated by commas, e.g. 1,2,3") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise MiniheadError(f"--seeds {text!r}: give at least one seed, each once")
    return seeds


def cmd_emergence(a):
    """The ``emergence`` command (arguments checked by :func:`minihead.cli.validate_emergence`)."""
    results = []
    for seed in a.seeds_list:
        print(f"seed {seed}: training / measuring ({a.config}, {a.data})", flush=True)
        results.append(run_seed(a.data, a.config, seed, a.settings, a.runs, a.n_trees, prune_lambdas=a.prune_lambdas))
    print(f"\n## Emergence: {a.config}, {a.data}, seeds {','.join(map(str, a.seeds_list))}, "
          f"{study.blas_threads()} BLAS thread(s)\n")
    print(summary(results))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump([r.__dict__ for r in results], f, indent=1)
    if a.study:
        from .checkpoint import save_json
        save_json(a.study, study_doc(results, a.config, a.data, a.n_trees, a.settings))
    return results


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
                                  "specialised_survive": r.pruning["specialised_survive"]} if r.pruning else {})}}
                for r in results]
    return {"study": config, "seeds": [r.seed for r in results], "blas_threads": study.blas_threads(),
            "per_seed": per_seed, "summary": findings.summarize([p["findings"] for p in per_seed]),
            "provenance": provenance(config, data, n_trees, overrides)}
