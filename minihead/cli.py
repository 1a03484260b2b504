"""The command line, ``python -m minihead {train,translate,evaluate,importance,roles,prune,reproduce} ...``.

Every sub-command is registered here (:func:`build_parser`), with argparse types that refuse bad values
(a beam of 0, a negative count, ``--lambda nan``), and has one ``validate_<command>(args)`` that checks the
rest before any work: input files exist and are files, output paths can be created and written, settings
have the right type and range, and a training never replaces a trained model unless asked (``--overwrite``;
``--resume`` continues it). A run folder has one writer: the commands that train take its lock
(:func:`minihead.checkpoint.run_lock`) before working.

Errors about the user's input are one line on stderr, ``error: <file or setting>: <problem>``, exit status 2;
Ctrl-C prints one line saying where the run can resume from, exit status 130. No traceback either way.
"""
import argparse
import contextlib
import math
import os
import shlex
import shutil
import sys
import warnings

# importing checkpoint imports the backend: a bad MINIHEAD_BACKEND fails here, and __main__.py prints it
from . import checkpoint
from .errors import MiniheadError, UsageError

DATA = "data_small"
PROG = "python -m minihead"
MODEL_FILES = ("best.npz", "last.npz", "done.json")   # what a training folder holds once it has saved


class UserExit(SystemExit):
    """Exit with status ``code`` after the one-line message (already printed to stderr); ``str()`` gives it,
    so in-process callers can read what went wrong."""

    def __init__(self, message, code=2):
        super().__init__(code)
        self.message = message

    def __str__(self):
        return self.message


def _fail(message, code=2, prefix="error: "):
    line = " ".join(str(message).split())        # one line, whatever the message held
    print(f"{prefix}{line}", file=sys.stderr)
    raise UserExit(line, code)


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (``error: python -m minihead train: argument ...``), and no
    abbreviated options (``--res`` for ``--resume``): the commands printed back to the user (where to resume) are
    the ones typed, so each option is spelled out."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        _fail(f"{self.prog}: {message}")


# ------------------------------------------------------------------------------------------ argparse types
def integer(lo):
    """An argparse type: an integer >= ``lo`` (``3.5``, ``-1`` or ``x`` refused with the reason)."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {v}")
        return v
    parse.__name__ = f"integer >= {lo}"
    return parse


def number(lo, hi=None, lo_open=False):
    """An argparse type: a finite float >= ``lo`` (> with ``lo_open``) and <= ``hi``; nan and inf refused."""
    what = f"a finite number {'>' if lo_open else '>='} {lo:g}" + (f" and <= {hi:g}" if hi is not None else "")

    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not math.isfinite(v) or v < lo or (lo_open and v == lo) or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v
    parse.__name__ = what
    return parse


def _retype(parser, **types):
    """Give options registered elsewhere (roles, prune) the refusing types above; a missing one is a bug."""
    for action in parser._actions:
        if action.dest in types:
            action.type = types.pop(action.dest)
    if types:
        raise RuntimeError(f"{parser.prog}: no options {sorted(types)} to retype")


# ------------------------------------------------------------------------------------------ path checks
def check_input_file(path, what):
    """``path`` must be an existing file (not a folder)."""
    if os.path.isdir(path):
        raise UsageError(f"{path}: {what} is a folder, expected a file")
    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such {what} file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{path}: {what} is not readable")


def check_output_folder(path, what):
    """``path`` must be a writable folder, or creatable: its nearest existing ancestor a writable folder."""
    full = os.path.abspath(path)
    if os.path.exists(full) and not os.path.isdir(full):
        raise UsageError(f"{path}: {what} is a file, expected a folder")
    anc = full
    while not os.path.exists(anc):
        anc = os.path.dirname(anc)
    if not os.path.isdir(anc):
        raise UsageError(f"{path}: cannot create {what}: {anc} is a file")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise UsageError(f"{path}: cannot write {what}: {anc} is not writable")


REPORT_ENTRIES = ("README.md", "results.json", "study.json")   # with its .png figures and seed-K folders


def check_report_folder(path, what):
    """``path`` must be a folder a report may be written into: writable or creatable (:func:`check_output_folder`)
    and either empty, new, or an earlier report (its README.md beside results.json or study.json, nothing but
    those, figures (.png) and seed-K folders in it). A folder holding other files (``--out .``, ``--out data_small``) is
    refused, since writing the report would replace their README.md."""
    check_output_folder(path, what)
    if not os.path.isdir(path) or not os.listdir(path):
        return
    entries = os.listdir(path)
    foreign = sorted(e for e in entries if e not in REPORT_ENTRIES and not e.startswith("seed-")
                     and not e.endswith(".png"))   # a report's figures, whatever a later version names them
    is_report = ("results.json" in entries or "study.json" in entries) and not foreign
    if not is_report:
        shown = ", ".join(foreign[:4]) + (" ..." if len(foreign) > 4 else "") if foreign else "no results.json"
        raise UsageError(f"{path}: {what} holds files that are not a minihead report ({shown}); writing the report "
                         f"there would replace its README.md: choose an empty or new folder")


def check_output_file(path, what):
    """``path`` must name a file that can be written: not a folder, its folder writable or creatable."""
    if os.path.isdir(path):
        raise UsageError(f"{path}: {what} is a folder, expected a file name")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{path}: {what} is not writable")
    check_output_folder(os.path.dirname(os.path.abspath(path)), f"the folder of {what}")


def check_figure_file(path, what):
    """A writable file name whose extension is an image format matplotlib writes (found before the work, not by
    ``savefig`` after it)."""
    from matplotlib.backend_bases import FigureCanvasBase   # the formats of the installed matplotlib
    check_output_file(path, what)
    formats = FigureCanvasBase.get_supported_filetypes()
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in formats:
        raise UsageError(f"{path}: {what} needs an image file name ending in one of "
                         f"{', '.join('.' + f for f in sorted(formats))}" + ("" if ext else " (it has no extension)"))


def check_data(a, splits):
    """Resolve ``a.data`` as every command does (a relative folder missing here is taken from the repository
    root) and check that ``<split>.src`` / ``<split>.tgt`` are files for each split."""
    from .data.corpus import resolve_data
    a.data = str(resolve_data(a.data))
    if not os.path.isdir(a.data):
        raise UsageError(f"{a.data}: no such data folder" if not os.path.exists(a.data)
                         else f"{a.data}: --data is a file, expected a folder")
    for split in splits:
        for side in ("src", "tgt"):
            check_input_file(os.path.join(a.data, f"{split}.{side}"), f"{split} {side} data")


def check_not_locked(folder):
    """Refuse at once when another live process holds ``folder``'s run lock."""
    owner = checkpoint.lock_holder(folder)
    if owner is not None:
        raise UsageError(f"{folder}: another run (pid {owner}) is writing to this folder; wait for it to end "
                         f"or choose another folder")


# ------------------------------------------------------------------------------------------ --set
def _field_kind(f):
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return "optional int" if "Optional" in str(f.type) else t


def parse_settings(items):
    """``--set KEY=VALUE`` items -> {key: value}, each converted to its field's type (an int field refuses
    ``3.5``, a float field ``nan``, a bool field anything but true/false); unknown keys refused."""
    from dataclasses import fields

    from .model import Config
    from .train import TrainConfig, setting_names
    kinds = {f.name: _field_kind(f) for f in fields(TrainConfig) + fields(Config)}
    out = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--set {item}: expected KEY=VALUE")
        k, text = item.split("=", 1)
        if k == "vocab_size":
            raise UsageError(f"--set {item}: vocab_size is set by the training data")
        if k not in kinds:
            raise UsageError(f"--set {item}: unknown setting {k!r}; settings are {', '.join(setting_names())}")
        kind = kinds[k]
        try:
            if kind == "bool":
                if text.lower() not in ("true", "false"):
                    raise ValueError
                v = text.lower() == "true"
            elif kind == "optional int":
                v = None if text.lower() == "none" else int(text)
            elif kind == "int":
                v = int(text)
            elif kind == "float":
                v = float(text)
            else:
                v = text
        except ValueError:
            want = {"bool": "true or false", "optional int": "an integer or none", "int": "an integer",
                    "float": "a number"}[kind]
            raise UsageError(f"--set {item}: {k} must be {want}") from None
        out[k] = v
    return out


# ------------------------------------------------------------------------------------------ commands
def _pairs(data, split):
    from .data.corpus import read_parallel
    src, tgt = os.path.join(data, f"{split}.src"), os.path.join(data, f"{split}.tgt")
    pairs = read_parallel(src, tgt)
    if not pairs:
        raise UsageError(f"{src}: no sentence pairs ({split} split is empty)")
    return pairs


def validate_train(a):
    from .train import check_settings, preset
    a.settings = parse_settings(a.set)
    check_settings(*preset(a.config, 100, **a.settings))    # types and ranges; the vocabulary size comes later
    check_data(a, ("train", "dev"))
    a.out = a.out or os.path.join("runs", a.config)
    check_output_folder(a.out, "--out")
    check_not_locked(a.out)
    if a.resume and a.overwrite:
        raise UsageError("--resume and --overwrite exclude each other: continue the run, or replace it")
    held = [f for f in MODEL_FILES if os.path.exists(os.path.join(a.out, f))]
    if a.resume and "last.npz" not in held:
        raise UsageError(f"{a.out}: nothing to resume (no last.npz); train without --resume")
    if held and not (a.resume or a.overwrite):
        raise UsageError(f"{a.out}: already holds a trained model ({', '.join(held)}); continue it with --resume, "
                         f"train into a new --out, or replace it with --overwrite")
    if a.resume:   # the saved run's settings must be the ones given now (the vocabulary is checked later)
        from .train import check_resume
        ck = checkpoint.load(os.path.join(a.out, "last.npz"))
        check_resume(ck, *preset(a.config, ck.cfg.vocab_size, **a.settings))
    a.train_pairs, a.dev_pairs = _pairs(a.data, "train"), _pairs(a.data, "dev")   # malformed lines: file:line
    a.locks = [a.out]


def cmd_train(a):
    from .train import Corpus, preset, train
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
    from .data.corpus import read_sentences
    if a.input:
        return read_sentences(a.input), None
    pairs = _pairs(a.data, a.split)
    return [s for s, _ in pairs], [t for _, t in pairs]


def validate_translate(a):
    check_input_file(a.checkpoint, "checkpoint")
    if getattr(a, "output", None):
        check_output_file(a.output, "--output")
    if a.input:
        check_input_file(a.input, "--input")
    else:
        check_data(a, (a.split,))


def validate_evaluate(a):
    if a.input:
        raise UsageError("evaluate needs references: use --split, not --input")
    validate_translate(a)


def cmd_translate(a):
    from .translate import translate
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
    from .evaluate import score
    from .translate import translate
    ck = _load(a.checkpoint)
    src, refs = _source_lines(a)
    hyps = translate(ck.params, ck.cfg, ck.vocab, src, beam=a.beam)
    s = score(hyps, refs)
    print(f"{a.split}: BLEU {s['bleu']:.2f}  chrF {s['chrf']:.2f}  (beam {a.beam}, {len(hyps)} sentences)")
    print(f"  {s['bleu_signature']}\n  {s['chrf_signature']}")
    for h, r, x in list(zip(hyps, refs, src))[:a.show]:
        print(f"  src: {' '.join(x)}\n  ref: {' '.join(r)}\n  hyp: {' '.join(h)}")
    return s


def validate_importance(a):
    check_input_file(a.checkpoint, "checkpoint")
    check_data(a, (a.split,))
    if a.out:
        check_output_folder(a.out, "--out")


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


def validate_roles(a):
    check_input_file(a.checkpoint, "checkpoint")
    for path, what in ((a.conllu, "--conllu"), (a.bpe, "--bpe"), (a.train_src, "--train-src")):
        if path:
            check_input_file(path, what)
    check_output_folder(a.out or os.path.join(os.path.dirname(os.path.abspath(a.checkpoint)), "roles"), "--out")


def validate_prune(a):
    # the numbers first: found before the checkpoint and the data are read, not after
    if a.settle is not None and not (math.isfinite(a.settle) and 0 < a.settle <= 1):
        raise UsageError(f"--settle {a.settle}: give the share of settled gates to stop at, in (0, 1]")
    for name, v in (("--lambda", a.lam), ("--lr-gates", a.lr_gates), ("--lr-params", a.lr_params)):
        if not (math.isfinite(v) and v >= 0):
            raise UsageError(f"{name} {v}: give a finite number >= 0")
    if a.steps < 1:
        raise UsageError(f"--steps {a.steps}: give at least 1")
    check_input_file(a.checkpoint, "checkpoint")
    check_data(a, ("train", "dev", "test"))
    if a.out:
        check_output_file(a.out, "--out")


def validate_reproduce(a):
    from .reproduce import SCALES
    from .study import RUNS
    real = (a.train_src, a.train_tgt, a.conllu)
    if any(real) and not all(real):
        raise UsageError("a real corpus needs --train-src, --train-tgt and --conllu")
    from .emergence import parse_seeds
    a.seeds_list = None if a.seeds is None else parse_seeds(a.seeds)
    if a.seeds_list and any(real):
        raise UsageError("--seeds: the study over seeds runs on data_small; leave it out with a real corpus")
    if (a.dev_src is None) != (a.dev_tgt is None) or (a.test_src is None) != (a.test_tgt is None):
        raise UsageError("--dev-src / --dev-tgt and --test-src / --test-tgt come in pairs")
    for opt in ("train_src", "train_tgt", "conllu", "dev_src", "dev_tgt", "test_src", "test_tgt"):
        if getattr(a, opt):
            check_input_file(getattr(a, opt), "--" + opt.replace("_", "-"))
    if a.conllu:   # found now, not after training: the roles are measured on these trees
        from .data.conllu_io import read_conllu
        if not read_conllu(a.conllu):
            raise UsageError(f"{a.conllu}: --conllu holds no dependency trees")
    if not a.out:
        raise UsageError("--out '': give the folder the report is written to")
    check_report_folder(a.out, "--out")
    check_output_folder(str(RUNS), "the runs folder")
    a.locks = [a.out]
    if not any(real):   # the run folders the models live in (one per seed), held for the whole command
        from .reproduce import study_overrides
        from .study import run_folder
        s = SCALES["quick" if a.quick else "full"]
        a.locks += [run_folder(s["study"], "data_small", RUNS, **study_overrides(s, k))
                    for k in (a.seeds_list or [None])]
    for folder in a.locks:
        check_not_locked(folder)


def validate_emergence(a):
    from .emergence import parse_seeds
    from .train import check_settings, preset
    a.seeds_list = parse_seeds(a.seeds)
    a.settings = parse_settings(a.set)
    if "seed" in a.settings:
        raise UsageError("--set seed=...: give the seeds with --seeds")
    check_settings(*preset(a.config, 100, **a.settings))
    check_data(a, ("train", "dev", "test"))   # read as data_small is (load_study): text and trees of dev and test
    for split in ("dev", "test"):
        check_input_file(os.path.join(a.data, f"{split}.conllu"), f"{split} trees ({split}.conllu)")
    check_output_folder(a.runs, "--runs")
    if a.json:
        check_output_file(a.json, "--json")
    if a.study:
        check_output_file(a.study, "--study")
    if a.trace is not None:
        if a.trace < 1:
            raise UsageError(f"--trace {a.trace}: give the number of steps between measurements, at least 1")
        if a.prune or a.study:
            raise UsageError("--trace measures along training; run --prune and --study without it")
    if a.figure:
        if a.trace is None:
            raise UsageError("--figure plots a trace; give --trace N with it")
        check_figure_file(a.figure, "--figure")
    a.prune_lambdas = ()
    if a.prune:
        try:
            a.prune_lambdas = tuple(float(x) for x in a.prune.split(",") if x.strip())
        except ValueError:
            raise UsageError(f"--prune {a.prune!r}: give L0 weights separated by commas, e.g. 0.05,0.1") from None
        if not a.prune_lambdas or any(not math.isfinite(x) or x < 0 for x in a.prune_lambdas):
            raise UsageError(f"--prune {a.prune!r}: give at least one L0 weight, none negative, NaN or infinite")
    # one writer per run folder for the whole command: every seed's model folder, or trace folder
    from . import study
    from .emergence import trace_folder
    overrides = a.settings
    a.locks = [trace_folder(a.data, a.config, k, overrides, a.trace, a.runs, a.n_trees)[0] if a.trace is not None
               else study.run_folder(a.config, a.data, a.runs, seed=k, **overrides) for k in a.seeds_list]
    for folder in a.locks:
        check_not_locked(folder)


VALIDATE = {"train": validate_train, "translate": validate_translate, "evaluate": validate_evaluate,
            "importance": validate_importance, "roles": validate_roles, "prune": validate_prune,
            "reproduce": validate_reproduce, "emergence": validate_emergence}


def _interrupted(a):
    """The one line printed on Ctrl-C: where the run can resume from."""
    cmd = getattr(a, "command", None)
    if cmd == "train":
        last = os.path.join(a.out, "last.npz")
        if not os.path.exists(last):
            return f"interrupted before the first save: nothing to resume in {a.out}"
        again = [x for x in a.argv if x not in ("--resume", "--overwrite")] + ["--resume"]
        return (f"interrupted: {last} holds the run as last saved; continue with: "
                f"{PROG} {' '.join(shlex.quote(x) for x in again)}")
    if cmd == "reproduce":
        return ("interrupted: finished stages are cached and trainings resume from their last.npz; "
                "run the same command again to continue")
    if cmd == "emergence":
        return ("interrupted: the models trained and the measurements made so far are cached in their run folders "
                "(a trace's rows too); run the same command again to continue")
    return "interrupted: nothing was saved"


# ------------------------------------------------------------------------------------------ parser
def build_parser():
    from .train import PRESETS
    p = Parser(prog=PROG, description=__doc__.splitlines()[0])
    sp = p.add_subparsers(dest="command", required=True)

    t = sp.add_parser("train", help="train the encoder-decoder")
    t.add_argument("--config", default="quick", choices=sorted(PRESETS), help="named configuration")
    t.add_argument("--data", default=DATA, help="folder of train/dev .src/.tgt (default data_small)")
    t.add_argument("--out", default=None, help="run folder (default runs/CONFIG); one that holds a trained "
                   "model needs --resume or --overwrite")
    t.add_argument("--resume", action="store_true", help="continue from OUT/last.npz (same settings; "
                   "max_steps may change)")
    t.add_argument("--overwrite", action="store_true", help="replace the trained model in OUT")
    t.add_argument("--set", nargs="+", action="extend", metavar="KEY=VALUE", help="override config fields")
    t.add_argument("--no-progress", action="store_true")
    t.set_defaults(func=cmd_train)

    for name, func, helptext in (("translate", cmd_translate, "translate a split or a file"),
                                 ("evaluate", cmd_evaluate, "BLEU and chrF on a split")):
        s = sp.add_parser(name, help=helptext)
        s.add_argument("checkpoint")
        s.add_argument("--data", default=DATA)
        s.add_argument("--split", default="test")
        if name == "translate":
            s.add_argument("--input", default=None, help="tokenized source file, one sentence a line; an empty "
                           "line or an empty file is an error (file and line named), as in the parallel data")
            s.add_argument("--output", default=None, help="file for the translations (default stdout)")
        else:
            s.add_argument("--input", default=None, help=argparse.SUPPRESS)
            s.add_argument("--show", type=integer(0), default=3, help="print this many examples")
        s.add_argument("--beam", type=integer(1), default=1, help="beam size (1: greedy)")
        s.set_defaults(func=func)

    i = sp.add_parser("importance", help="head relevance (LRP), confidence, Michel importance")
    i.add_argument("checkpoint")
    i.add_argument("--data", default=DATA)
    i.add_argument("--split", default="dev")
    i.add_argument("--n", type=integer(1), default=500, help="use the first N pairs")
    i.add_argument("--out", default="report/importance", help="folder for the figures ('' for none)")
    i.set_defaults(func=cmd_importance)

    from .analysis import add_roles_command
    from .prune import add_prune_command
    from .reproduce import add_reproduce_command
    _retype(add_roles_command(sp), max_sentences=integer(1), max_unknown=number(0, 1))
    _retype(add_prune_command(sp), lam=number(0), steps=integer(1), n_test=integer(1), seed=integer(0),
            lr_gates=number(0, lo_open=True), lr_params=number(0, lo_open=True))
    add_reproduce_command(sp)
    from .emergence import add_emergence_command
    _retype(add_emergence_command(sp), n_trees=integer(1))
    return p


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _terminate_as_interrupt():
    """SIGTERM (``kill``, a scheduler's stop) ends a command as Ctrl-C does: the run lock released, temporary
    files removed, the one line saying where to resume. Only in the main thread, where Python runs handlers;
    returns the handler it replaced (None elsewhere)."""
    import signal
    import threading
    if threading.current_thread() is threading.main_thread():
        return signal.signal(signal.SIGTERM, _raise_interrupt)   # the handler before, restored at the end
    return None


def main(argv=None):
    """Parse, validate, lock, run. Returns the command's result; user errors exit 2 with one line."""
    argv = sys.argv[1:] if argv is None else list(argv)
    a = None
    old_handler = _terminate_as_interrupt()
    try:
        a = build_parser().parse_args(argv)
        a.argv, a.locks = argv, []
        VALIDATE[a.command](a)
        with contextlib.ExitStack() as stack:
            for folder in a.locks:
                stack.enter_context(checkpoint.run_lock(folder))
            # numeric warnings (overflow as a training diverges) are held back: shown after a command that
            # succeeds, dropped when it fails with its one-line error
            caught = stack.enter_context(warnings.catch_warnings(record=True))
            result = a.func(a)
        for w in caught:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        return result
    except MiniheadError as exc:
        _fail(exc)
    except OSError as exc:   # a write that failed although checked (disk full, permissions changed meanwhile)
        _fail(f"{exc.filename}: {exc.strerror}" if exc.filename else exc)
    except KeyboardInterrupt:
        _fail(_interrupted(a), 130, prefix="")
    finally:
        if old_handler is not None:
            import signal
            signal.signal(signal.SIGTERM, old_handler)
