"""Command line: ``python -m minihead {train,translate,evaluate,importance,roles,prune,reproduce} ...``.

Every command prints what it did; errors about the user's input (files, checkpoints, backends) are
reported as one line naming the file and problem, without a traceback."""
import argparse
import os
import sys

from .errors import MiniheadError

DATA = "data_small"


def _pairs(data, split):
    from .data.corpus import read_parallel
    return read_parallel(os.path.join(data, f"{split}.src"), os.path.join(data, f"{split}.tgt"))


def _overrides(items):
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        for conv in (int, float):
            try:
                v = conv(v)
                break
            except ValueError:
                pass
        if v in ("true", "false", "True", "False"):
            v = v.lower() == "true"
        out[k] = v
    return out


def cmd_train(a):
    from .train import Corpus, preset, train
    train_pairs, dev_pairs = _pairs(a.data, "train"), _pairs(a.data, "dev")
    n_train = preset(a.config, 1, **_overrides(a.set))[1].n_train
    corpus = Corpus.build(train_pairs, dev_pairs, n_train=n_train)
    cfg, tcfg = preset(a.config, len(corpus.vocab), **_overrides(a.set))
    out = a.out or os.path.join("runs", a.config)
    print(f"training {a.config!r}: {cfg.n_enc_layers}+{cfg.n_dec_layers} layers x {cfg.n_heads} heads, "
          f"d_model {cfg.d_model}, {len(corpus.train_src)} pairs, vocabulary {len(corpus.vocab)} -> {out}")
    res = train(corpus, cfg, tcfg, out, resume=a.resume, progress=not a.no_progress)
    print(f"best dev BLEU {res.best_bleu:.2f} ({len(res.history)} evaluations); checkpoint {res.best_path}")
    return res


def _load(path):
    from . import checkpoint
    return checkpoint.load(path)


def _source_lines(a):
    from .data.corpus import read_parallel
    if a.input:
        with open(a.input, encoding="utf-8") as f:
            return [line.split() for line in f.read().splitlines()], None
    pairs = read_parallel(os.path.join(a.data, f"{a.split}.src"), os.path.join(a.data, f"{a.split}.tgt"))
    return [s for s, _ in pairs], [t for _, t in pairs]


def cmd_translate(a):
    from .translate import translate
    ck = _load(a.checkpoint)
    src, _ = _source_lines(a)
    hyps = translate(ck.params, ck.cfg, ck.vocab, src, beam=a.beam)
    text = "\n".join(" ".join(h) for h in hyps) + "\n"
    if a.output:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {len(hyps)} translations to {a.output}")
    else:
        sys.stdout.write(text)
    return hyps


def cmd_evaluate(a):
    from .evaluate import score
    from .translate import translate
    ck = _load(a.checkpoint)
    src, refs = _source_lines(a)
    if refs is None:
        raise SystemExit("evaluate needs references: use --split, not --input")
    hyps = translate(ck.params, ck.cfg, ck.vocab, src, beam=a.beam)
    s = score(hyps, refs)
    print(f"{a.split}: BLEU {s['bleu']:.2f}  chrF {s['chrf']:.2f}  (beam {a.beam}, {len(hyps)} sentences)")
    print(f"  {s['bleu_signature']}\n  {s['chrf_signature']}")
    for h, r, x in list(zip(hyps, refs, src))[:a.show]:
        print(f"  src: {' '.join(x)}\n  ref: {' '.join(r)}\n  hyp: {' '.join(h)}")
    return s


def cmd_importance(a):
    """Head relevance (LRP), confidence and Michel et al. importance of every head, per layer."""
    from . import importance
    from .data.vocab import batches
    ck = _load(a.checkpoint)
    pairs = _pairs(a.data, a.split)[:a.n]
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
        import matplotlib
        matplotlib.use("Agg")
        os.makedirs(a.out, exist_ok=True)
        for k in names:
            ax = importance.plot_importance(rel[k], conf[k], title=names[k])
            path = os.path.join(a.out, f"relevance_{k}.png")
            ax.figure.savefig(path, dpi=110, bbox_inches="tight")
            print(f"saved {path}")
    return rel, conf, mich


def build_parser():
    p = argparse.ArgumentParser(prog="python -m minihead", description=__doc__.splitlines()[0])
    sp = p.add_subparsers(dest="command", required=True)

    t = sp.add_parser("train", help="train the encoder-decoder")
    t.add_argument("--config", default="quick", help="named configuration: quick or default")
    t.add_argument("--data", default=DATA)
    t.add_argument("--out", default=None, help="run folder (default runs/CONFIG)")
    t.add_argument("--resume", action="store_true", help="continue from OUT/last.npz")
    t.add_argument("--set", nargs="*", metavar="KEY=VALUE", help="override config fields")
    t.add_argument("--no-progress", action="store_true")
    t.set_defaults(func=cmd_train)

    for name, func, helptext in (("translate", cmd_translate, "translate a split or a file"),
                                 ("evaluate", cmd_evaluate, "BLEU and chrF on a split")):
        s = sp.add_parser(name, help=helptext)
        s.add_argument("checkpoint")
        s.add_argument("--data", default=DATA)
        s.add_argument("--split", default="test")
        s.add_argument("--input", default=None, help="tokenized source file, one sentence a line")
        s.add_argument("--beam", type=int, default=1)
        if name == "translate":
            s.add_argument("--output", default=None)
        else:
            s.add_argument("--show", type=int, default=3, help="print this many examples")
        s.set_defaults(func=func)

    i = sp.add_parser("importance", help="head relevance (LRP), confidence, Michel importance")
    i.add_argument("checkpoint")
    i.add_argument("--data", default=DATA)
    i.add_argument("--split", default="dev")
    i.add_argument("--n", type=int, default=500, help="use the first N pairs")
    i.add_argument("--out", default="report/importance", help="folder for the figures ('' for none)")
    i.set_defaults(func=cmd_importance)

    from .analysis import add_roles_command
    from .prune import add_prune_command
    from .reproduce import add_reproduce_command
    add_roles_command(sp)
    add_prune_command(sp)
    add_reproduce_command(sp)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except MiniheadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2)


if __name__ == "__main__":
    main()
