"""The command line, ``python -m minihead {train,translate,evaluate,importance,roles,prune,reproduce,emergence,needs} ...``.

Every sub-command's parser is here (:func:`build_parser`), with argparse types that refuse bad values (a beam of 0,
a negative count, ``--lambda nan``), and one ``validate_<command>(args)`` that checks the rest before any work:
input files exist and are files, output paths can be created and written, settings have the right type and range,
and a training never replaces a trained model unless asked (``--overwrite``; ``--resume`` continues it). A run
folder has one writer: the commands that train take its lock (:func:`minihead.checkpoint.run_lock`) before working.
What each command then does is ``minihead.commands.cmd_<command>``.

Errors about the user's input are one line on stderr, ``error: <file or setting>: <problem>``, exit status 2;
Ctrl-C prints one line saying where the run can resume from, exit status 130. No traceback either way.
"""
import argparse
import contextlib
import math
import os
import shlex
import signal
import sys
import threading
import warnings

from dataclasses import fields

from matplotlib.backend_bases import FigureCanvasBase   # the image formats the installed matplotlib writes

# importing checkpoint imports the backend: a bad MINIHEAD_BACKEND fails here, and __main__.py prints it
from . import checkpoint, commands, study
from .checkpoint import MODEL_FILES
from .data.conllu_io import read_conllu
from .data.corpus import read_split, resolve_data
from .errors import MiniheadError, UsageError
from .model import Config
from .prune import KIND_SETS
from .train import PRESETS, TrainConfig, check_resume, check_settings, preset, setting_names

DATA = "data_small"
PROG = "python -m minihead"


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
    check_output_file(path, what)
    formats = FigureCanvasBase.get_supported_filetypes()
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in formats:
        raise UsageError(f"{path}: {what} needs an image file name ending in one of "
                         f"{', '.join('.' + f for f in sorted(formats))}" + ("" if ext else " (it has no extension)"))


def check_data(a, splits):
    """Resolve ``a.data`` as every command does (a relative folder missing here is taken from the repository
    root) and check that ``<split>.src`` / ``<split>.tgt`` are files for each split."""
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


# ------------------------------------------------------------------------------------------ commands
def validate_train(a):
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
        ck = checkpoint.load(os.path.join(a.out, "last.npz"))
        check_resume(ck, *preset(a.config, ck.cfg.vocab_size, **a.settings))
    a.train_pairs, a.dev_pairs = read_split(a.data, "train"), read_split(a.data, "dev")   # malformed lines: file:line
    a.locks = [a.out]


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


def validate_importance(a):
    check_input_file(a.checkpoint, "checkpoint")
    check_data(a, (a.split,))
    if a.out:
        check_output_folder(a.out, "--out")


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
    real = (a.train_src, a.train_tgt, a.conllu)
    if any(real) and not all(real):
        raise UsageError("a real corpus needs --train-src, --train-tgt and --conllu")
    a.seeds_list = None if a.seeds is None else parse_seeds(a.seeds)
    if a.quick and a.scale not in (None, "quick"):
        raise UsageError(f"--quick is --scale quick; give one of --quick and --scale {a.scale}")
    if a.scale is not None and any(real):
        raise UsageError("--scale: a real corpus runs at quick or full scale; give --quick or nothing")
    a.scale_name = a.scale or ("quick" if a.quick else "full")
    if a.seeds_list and any(real):
        raise UsageError("--seeds: the study over seeds runs on data_small; leave it out with a real corpus")
    if a.merge is not None and (any(real) or a.seeds_list):
        raise UsageError("--merge merges finished reports; run it without --seeds or a real corpus")
    if (a.dev_src is None) != (a.dev_tgt is None) or (a.test_src is None) != (a.test_tgt is None):
        raise UsageError("--dev-src / --dev-tgt and --test-src / --test-tgt come in pairs")
    for opt in ("train_src", "train_tgt", "conllu", "dev_src", "dev_tgt", "test_src", "test_tgt"):
        if getattr(a, opt):
            check_input_file(getattr(a, opt), "--" + opt.replace("_", "-"))
    for source in a.merge or []:      # a report folder, or a study.json itself
        check_input_file(source if source.endswith(".json") else os.path.join(source, "study.json"), "--merge study")
    if a.conllu:   # found now, not after training: the roles are measured on these trees
        if not read_conllu(a.conllu):
            raise UsageError(f"{a.conllu}: --conllu holds no dependency trees")
    if not a.out:
        raise UsageError("--out '': give the folder the report is written to")
    check_report_folder(a.out, "--out")
    a.locks = [a.out]
    if a.merge is None:   # a merge trains nothing; a real corpus is cached under runs/ too
        check_output_folder(str(study.RUNS), "the runs folder")
    if not any(real) and a.merge is None:   # the run folders the models live in (one per seed), held throughout
        s = study.SCALES[a.scale_name]
        a.locks += [study.run_folder(s["study"], "data_small", study.RUNS, **study.study_overrides(s, k))
                    for k in (a.seeds_list or [None])]
    for folder in a.locks:
        check_not_locked(folder)


def _validate_seeded_preset(a):
    """What emergence and needs check alike: the seeds, the --set overrides of the preset, the data folder read as
    data_small is (load_study: text and the trees of dev and test) and the runs folder."""
    a.seeds_list = parse_seeds(a.seeds)
    a.settings = parse_settings(a.set)
    if "seed" in a.settings:
        raise UsageError("--set seed=...: give the seeds with --seeds")
    check_settings(*preset(a.config, 100, **a.settings))
    check_data(a, ("train", "dev", "test"))
    for split in ("dev", "test"):
        check_input_file(os.path.join(a.data, f"{split}.conllu"), f"{split} trees ({split}.conllu)")
    check_output_folder(a.runs, "--runs")


def validate_emergence(a):
    _validate_seeded_preset(a)
    if a.json:
        check_output_file(a.json, "--json")
    if a.study:
        check_output_file(a.study, "--study")
    if a.trace is not None:
        if a.trace < 1:
            raise UsageError(f"--trace {a.trace}: give the number of steps between measurements, at least 1")
        if a.prune or a.study:
            raise UsageError("--trace measures along training; run --prune and --study without it")
        if a.split != "dev":
            raise UsageError("--trace measures on the dev trees, where recipes are chosen; run --split test without it")
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
    overrides = a.settings
    a.locks = [study.trace_folder(a.data, a.config, k, overrides, a.trace, a.runs, a.n_trees)[0] if a.trace is not None
               else study.run_folder(a.config, a.data, a.runs, seed=k, **overrides) for k in a.seeds_list]
    for folder in a.locks:
        check_not_locked(folder)


def validate_needs(a):
    a.data = DATA       # the needs are data_small's (its generator's rules and lexicon); no other corpus has them
    _validate_seeded_preset(a)
    if a.study:
        check_output_file(a.study, "--study")
    if a.figure:
        check_figure_file(a.figure, "--figure")
    a.locks = [study.run_folder(a.config, a.data, a.runs, seed=k, **a.settings) for k in a.seeds_list]
    for folder in a.locks:
        check_not_locked(folder)


VALIDATE = {"train": validate_train, "translate": validate_translate, "evaluate": validate_evaluate,
            "importance": validate_importance, "roles": validate_roles, "prune": validate_prune,
            "reproduce": validate_reproduce, "emergence": validate_emergence, "needs": validate_needs}


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
    if cmd == "needs":
        return ("interrupted: the models trained and the matrices measured so far are cached in their run folders; "
                "run the same command again to continue")
    if cmd == "emergence":
        return ("interrupted: the models trained and the measurements made so far are cached in their run folders "
                "(a trace's rows too); run the same command again to continue")
    return "interrupted: nothing was saved"


# ------------------------------------------------------------------------------------------ parser
def build_parser():
    """The parser of every sub-command; ``a.command`` names the one given (run by ``commands.cmd_<command>``)."""
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

    for name, helptext in (("translate", "translate a split or a file"), ("evaluate", "BLEU and chrF on a split")):
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

    i = sp.add_parser("importance", help="head relevance (LRP), confidence, Michel importance")
    i.add_argument("checkpoint")
    i.add_argument("--data", default=DATA)
    i.add_argument("--split", default="dev")
    i.add_argument("--n", type=integer(1), default=500, help="use the first N pairs")
    i.add_argument("--out", default="report/importance", help="folder for the figures ('' for none)")

    r = sp.add_parser("roles", help="encoder head roles: positional, syntactic, rare-word")
    r.add_argument("checkpoint")
    r.add_argument("--conllu", default=None, help="gold trees of source sentences (default data_small/dev.conllu)")
    r.add_argument("--bpe", default=None, help="BPE merges the model's source was segmented with")
    r.add_argument("--train-src", default=None, help="word-tokenized source training text, for the rare-word "
                   "frequencies (default data_small/train.src without --conllu, first n_train lines as the "
                   "checkpoint's training used)")
    r.add_argument("--lower", action="store_true", help="lowercase the CoNLL-U forms and the training text (for a "
                   "model trained on lowercased text)")
    r.add_argument("--max-sentences", type=integer(1), default=None, help="analyse only the first N trees")
    r.add_argument("--max-unknown", type=number(0, 1), default=0.5, help="refuse when more than this share of the "
                   "words is unknown to the vocabulary")
    r.add_argument("--out", default=None, help="figure folder (default: roles/ beside the checkpoint)")

    pr = sp.add_parser("prune", help="prune heads with hard-concrete gates; report kept heads and BLEU")
    pr.add_argument("checkpoint")
    pr.add_argument("--lambda", dest="lam", type=number(0), required=True, help="weight of the L0 penalty")
    pr.add_argument("--kinds", default="enc", choices=sorted(KIND_SETS), help="enc: encoder self-attention; all")
    pr.add_argument("--steps", type=integer(1), default=300, help="step cap (the run stops once the gates settle)")
    pr.add_argument("--settle", type=float, default=0.9, help="stop once this share of gates is settled")
    pr.add_argument("--finetune", action="store_true",
                    help="then fix the settled gates and train the weights on to --steps (a fixed budget per run)")
    pr.add_argument("--data", default=DATA)
    pr.add_argument("--n-test", type=integer(1), default=None, help="BLEU on the first N test sentences")
    pr.add_argument("--seed", type=integer(0), default=0)
    pr.add_argument("--lr-gates", type=number(0, lo_open=True), default=0.1, help="the gates' own Adam rate")
    pr.add_argument("--lr-params", type=number(0, lo_open=True), default=1e-3)
    pr.add_argument("--reduction", default="sum", choices=["sum", "layer_mean"])
    pr.add_argument("--out", default=None, help="save the pruned model here (.npz; log_alpha as extras)")

    rp = sp.add_parser("reproduce", help="the whole study, cached by stage, and a report beside the paper")
    rp.add_argument("--quick", action="store_true", help="the quick model and reduced sweeps (minutes); the same as "
                    "--scale quick")
    rp.add_argument("--scale", choices=sorted(study.SCALES), default=None, help="the scale of minihead/study.py's "
                    "SCALES: quick, full (the default preset, the default scale), heads8 or heads8x32 (8 heads a layer of "
                    "16 or 32 dimensions, pruned as the paper prunes; hours a seed)")
    rp.add_argument("--out", default="report")
    rp.add_argument("--no-progress", action="store_true")
    rp.add_argument("--train-src", help="a real parallel corpus (raw text, one sentence a line): source side")
    rp.add_argument("--train-tgt", help="... target side")
    for opt in ("--dev-src", "--dev-tgt", "--test-src", "--test-tgt"):
        rp.add_argument(opt)
    rp.add_argument("--conllu", help="gold trees of real source-language sentences, for the head roles")
    rp.add_argument("--seeds", default=None, help="comma-separated seeds, e.g. 1,2,3: one model per seed, each "
                    "seed's report in OUT/seed-K/, and OUT/README.md and OUT/study.json tell in how many seeds each "
                    "finding holds (default: one model, the preset's seed)")
    rp.add_argument("--merge", nargs="+", metavar="DIR", default=None, help="instead: merge studies of single seeds "
                    "made apart (each a report folder of `reproduce --seeds K --out DIR`, or its study.json; alike in "
                    "every setting) into OUT, as one run over all their seeds would write it")

    e = sp.add_parser("emergence", help="train one model per seed and measure whether positional, syntactic and "
                      "rare-word heads emerge")
    e.add_argument("--config", default="quick", choices=sorted(PRESETS), help="named preset")
    e.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    e.add_argument("--data", default=DATA, help="folder laid out as data_small (train/dev/test .src/.tgt, dev/test "
                   ".conllu) (default data_small; data_small/control is the control language)")
    e.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="override preset settings (not the seed)")
    e.add_argument("--n-trees", type=integer(1), default=None, help="measure on the first N trees (default all)")
    e.add_argument("--split", default="dev", choices=("dev", "test"), help="the gold trees the roles are judged on: "
                   "dev, where recipes are chosen (default), or test, where a chosen recipe is judged")
    e.add_argument("--runs", default="runs/emergence", help="cache folder of the models")
    e.add_argument("--json", default=None, help="also write the results to this JSON file")
    e.add_argument("--prune", default=None, metavar="LAMBDAS",
                   help="also prune each seed's encoder heads at these comma-separated L0 weights, e.g. 0.05,0.1,0.2, "
                   "and judge whether most heads are prunable and the heads with a role survive")
    e.add_argument("--study", default=None, help="also write the study over seeds (per-seed verdicts, their summary "
                   "and provenance) for the chapters, e.g. chapters/studies/emerge.json")
    e.add_argument("--trace", type=int, default=None, metavar="N",
                   help="instead: measure each seed's model every N training steps, with early stopping off, and "
                   "print the head functions against steps (--json writes the traces, --figure plots them)")
    e.add_argument("--figure", default=None, metavar="PNG", help="with --trace: plot the traces into this image")

    n = sp.add_parser("needs", help="which encoder head does which job: switch each off alone and measure every "
                      "need of data_small (the markers set by another source word) and BLEU, on the test set")
    n.add_argument("--config", default="default", choices=sorted(PRESETS), help="named preset (default: the full "
                   "study's, so its models are reused from --runs)")
    n.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    n.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="override preset settings (not the seed)")
    n.add_argument("--runs", default="runs", help="cache folder of the models (default runs, where reproduce keeps "
                   "them)")
    n.add_argument("--n-bleu", type=integer(1), default=300, help="BLEU on the first N test pairs (default 300)")
    n.add_argument("--n-dev", type=integer(1), default=study.SCALES["full"]["n_dev"], help="the importance measures "
                   "judged against the matrix, on the first N dev pairs (default: the full study's)")
    n.add_argument("--n-ablation", type=integer(1), default=study.SCALES["full"]["n_ablation"],
                   help="single-head BLEU ablation on the first N dev pairs (default: the full study's)")
    n.add_argument("--study", default=None, help="also write the matrices of all seeds, e.g. "
                   "chapters/studies/needs.json")
    n.add_argument("--figure", default=None, metavar="PNG", help="also plot the matrices into this image")
    return p


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _terminate_as_interrupt():
    """SIGTERM (``kill``, a scheduler's stop) ends a command as Ctrl-C does: the run lock released, temporary
    files removed, the one line saying where to resume. Only in the main thread, where Python runs handlers;
    returns the handler it replaced (None elsewhere)."""
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
            result = getattr(commands, f"cmd_{a.command}")(a)
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
            signal.signal(signal.SIGTERM, old_handler)
