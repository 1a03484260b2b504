"""The command line: user errors are one clear line naming the file and problem, exit status 2."""
import os
import pathlib
import subprocess
import sys

import pytest

from minihead import checkpoint
from minihead.__main__ import main

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_cli(*args, env=None):
    e = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "minihead", *args], capture_output=True, text=True, env=e, cwd=ROOT)


def test_missing_checkpoint_is_one_line(tmp_path):
    """A checkpoint path that does not exist (run as ``python -m minihead translate``): exit status 2 and stderr
    is exactly the one line ``error: <path>: no such checkpoint file``."""
    r = run_cli("translate", str(tmp_path / "nope.npz"))
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: {tmp_path / 'nope.npz'}: no such checkpoint file"


def test_unknown_backend_is_one_line():
    """``MINIHEAD_BACKEND=tpu``: the command exits with a non-zero status and stderr names ``unknown backend
    'tpu'`` (the exact one-line form and status 2 are specified by test_bad_backend_is_one_line_at_import)."""
    r = run_cli("translate", "x.npz", env={"MINIHEAD_BACKEND": "tpu"})
    assert r.returncode != 0 and "unknown backend 'tpu'" in r.stderr


def test_misaligned_parallel_files_name_both(tmp_path, capsys):
    """train.src with 2 lines beside train.tgt with 1: ``train`` exits with status 2 and its error names both
    files, train.src and train.tgt."""
    (tmp_path / "train.src").write_text("a b\nc d\n")
    (tmp_path / "train.tgt").write_text("x\n")
    (tmp_path / "dev.src").write_text("a\n")
    (tmp_path / "dev.tgt").write_text("x\n")
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", str(tmp_path), "--out", str(tmp_path / "run"), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "train.src" in err and "train.tgt" in err


def test_train_translate_evaluate_end_to_end(tmp_path, capsys):
    """A tiny training run through the CLI, then translate and evaluate its checkpoint."""
    data = tmp_path / "data"
    data.mkdir()
    pairs = [(f"w{i % 7} w{(i * 3) % 7} .", f"W{(i * 3) % 7} W{i % 7} .") for i in range(200)]
    for split, sl in (("train", pairs[:180]), ("dev", pairs[180:190]), ("test", pairs[190:])):
        (data / f"{split}.src").write_text("".join(s + "\n" for s, _ in sl))
        (data / f"{split}.tgt").write_text("".join(t + "\n" for _, t in sl))
    out = tmp_path / "run"
    main(["train", "--data", str(data), "--out", str(out), "--no-progress", "--set", "max_steps=6",
          "eval_every=3", "n_enc_layers=1", "n_dec_layers=1", "d_model=16", "d_ff=16", "max_tokens=400"])
    ck = checkpoint.load(str(out / "best.npz"))
    assert ck.cfg.n_enc_layers == 1 and ck.meta["step"] in (3, 6)
    hyp_file = tmp_path / "hyp.txt"
    main(["translate", str(out / "best.npz"), "--data", str(data), "--output", str(hyp_file)])
    assert len(hyp_file.read_text().splitlines()) == 10
    s = main(["evaluate", str(out / "best.npz"), "--data", str(data), "--beam", "2"])
    assert 0.0 <= s["bleu"] <= 100.0 and "tok:13a" in s["bleu_signature"]
    assert "BLEU" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------------------
# Issue 15: the command line checks before it works, never loses a model, never saves NaN, never shows a
# traceback. Every refused case: exit status 2, one line "error: <file or setting>: <problem>" on stderr, no
# traceback, and the working folder (data, trained model) byte-identical afterwards.

TINY = ["--no-progress", "--set", "max_steps=2", "eval_every=2", "n_enc_layers=1", "n_dec_layers=1", "d_model=16",
        "d_ff=16", "max_tokens=400", "warmup=2", "dev_bleu_sentences=5"]


def write_data(folder, n=200):
    folder.mkdir(parents=True, exist_ok=True)
    pairs = [(f"w{i % 7} w{(i * 3) % 7} .", f"W{(i * 3) % 7} W{i % 7} .") for i in range(n)]
    for split, sl in (("train", pairs[:n - 20]), ("dev", pairs[n - 20:n - 10]), ("test", pairs[n - 10:])):
        (folder / f"{split}.src").write_text("".join(s + "\n" for s, _ in sl))
        (folder / f"{split}.tgt").write_text("".join(t + "\n" for _, t in sl))
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained once through the CLI: (data folder, run folder)."""
    base = tmp_path_factory.mktemp("trained")
    data = write_data(base / "data")
    main(["train", "--data", str(data), "--out", str(base / "run"), *TINY])
    return data, base / "run"


@pytest.fixture
def ws(tmp_path, trained):
    """A private copy of the trained model and its data under tmp_path (so a test may compare every byte)."""
    import shutil
    shutil.copytree(trained[0], tmp_path / "data")
    shutil.copytree(trained[1], tmp_path / "run")
    return tmp_path


def tree(folder):
    """Every file under ``folder`` (relative path -> bytes) and every folder (-> None)."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def refused(capsys, argv, *needles):
    """Run main(argv) in-process; assert exit status 2, one stderr line starting 'error: ' holding every
    needle, no traceback, nothing on stdout (no work reported). Returns the line."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert exc.value.code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert str(needle) in lines[0], (needle, lines[0])
    assert out == "", f"work was reported before the refusal: {out!r}"
    return lines[0]


def fill(argv, ws):
    d = {"data": ws / "data", "run": ws / "run", "ck": ws / "run" / "best.npz", "tmp": ws}
    return [str(a).format(**d) for a in argv]


# --- data loss: an existing model is never replaced, resumed with other settings, or shared by two writers
def test_train_refuses_a_folder_holding_a_model(ws, capsys):
    """``train`` into an --out that already holds a trained model, without --resume or --overwrite: exit status
    2, one line ``error: <out>: already holds a trained model (best.npz, last.npz)`` that points to --resume and
    --overwrite, nothing on stdout, and the data and run folders left byte-identical."""
    before = tree(ws)
    refused(capsys, ["train", "--data", ws / "data", "--out", ws / "run", *TINY],
            f"{ws / 'run'}: already holds a trained model (best.npz, last.npz)", "--resume", "--overwrite")
    assert tree(ws) == before


def test_overwrite_replaces_and_resume_may_raise_max_steps(ws, capsys):
    """--overwrite trains afresh (a new seed: new weights); --resume may change max_steps and goes on."""
    old = (ws / "run" / "best.npz").read_bytes()
    main(["train", "--data", str(ws / "data"), "--out", str(ws / "run"), *TINY, "seed=5", "--overwrite"])
    assert (ws / "run" / "best.npz").read_bytes() != old
    assert checkpoint.load(str(ws / "run" / "last.npz")).meta["train"]["seed"] == 5
    main(["train", "--data", str(ws / "data"), "--out", str(ws / "run"), *TINY, "seed=5", "max_steps=4", "--resume"])
    assert checkpoint.load(str(ws / "run" / "last.npz")).meta["step"] == 4
    assert not (ws / "run" / "run.lock").exists(), "the lock is released"
    capsys.readouterr()


@pytest.mark.parametrize("extra, needles", [
    (["seed=2", "lr=0.001", "--resume"], ["cannot resume with settings that differ", "seed 1 (saved) vs 2 (now)",
                                           "lr 0.01 (saved) vs 0.001 (now)"]),
    (["d_model=32", "--resume"], ["cannot resume", "d_model 16 (saved) vs 32 (now)"]),
    (["--resume", "--overwrite"], ["--resume and --overwrite exclude each other"]),
])
def test_resume_with_other_settings_is_refused(ws, capsys, extra, needles):
    """--resume with settings other than the saved run's (seed and lr; d_model) is refused naming each changed
    field as ``<field> <saved> (saved) vs <now> (now)``, and --resume with --overwrite is refused as
    contradictory: exit status 2, one ``error: `` line, nothing on stdout, every file byte-identical."""
    before = tree(ws)
    refused(capsys, ["train", "--data", ws / "data", "--out", ws / "run", *TINY, *extra], *needles)
    assert tree(ws) == before


def test_resume_without_a_saved_run_is_refused(ws, capsys):
    """--resume into a folder without last.npz: exit status 2, one line ``error: <out>: nothing to resume (no
    last.npz)``, nothing on stdout, every file byte-identical."""
    (ws / "empty").mkdir()
    before = tree(ws)
    refused(capsys, ["train", "--data", ws / "data", "--out", ws / "empty", *TINY, "--resume"],
            f"{ws / 'empty'}: nothing to resume (no last.npz)")
    assert tree(ws) == before


def test_a_second_writer_is_refused_while_the_first_lives(ws, capsys):
    """Another live process holds the run folder's lock: a second training into it is refused, naming the
    pid; once that process is dead its lock is stale and taken over (and released at the end)."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (ws / "run" / "run.lock").write_text(f"{other.pid}\n")
        before = tree(ws)
        for extra in (["--resume"], ["--overwrite"]):
            refused(capsys, ["train", "--data", ws / "data", "--out", ws / "run", *TINY, *extra],
                    f"{ws / 'run'}: another run (pid {other.pid}) is writing to this folder")
            assert tree(ws) == before
    finally:
        other.kill()
        other.wait()
    main(["train", "--data", str(ws / "data"), "--out", str(ws / "run"), *TINY, "max_steps=4", "--resume"])
    assert not (ws / "run" / "run.lock").exists()
    capsys.readouterr()


def test_diverging_training_stops_without_saving_nan(ws, capsys, monkeypatch):
    """A non-finite loss at step 3 (of a run evaluating every step) stops training with one line; what was
    saved at steps 1-2 is untouched, finite and loadable."""
    import minihead.train as T
    real, calls = T.loss_and_grads, []

    def nan_at_3(*a, **kw):
        calls.append(1)
        loss, grads, cache = real(*a, **kw)
        return (float("nan") if len(calls) == 3 else loss), grads, cache
    monkeypatch.setattr(T, "loss_and_grads", nan_at_3)
    out = ws / "new"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", str(ws / "data"), "--out", str(out), *TINY, "max_steps=5", "eval_every=1"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"error: {out}: training diverged at step 3: loss nan" in err and f"{out / 'last.npz'}" in err
    assert checkpoint.load(str(out / "last.npz")).meta["step"] == 2     # loading checks every weight is finite
    assert sorted(os.listdir(out)) == ["best.npz", "last.npz"], "no lock or temporary file left"


def test_a_learning_rate_that_diverges_stops_in_one_line(ws, capsys):
    """lr=1e30 is a valid number but blows the weights up at once: one line naming the step, no numpy
    overflow warnings, no file and no run folder left."""
    before = tree(ws)
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", str(ws / "data"), "--out", str(ws / "new"), *TINY, "lr=1e30", "max_steps=20"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Warning" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {ws / 'new'}: training diverged at step ") and "no checkpoint was saved" in err
    assert tree(ws) == before


def test_a_nan_checkpoint_is_refused(ws, capsys):
    """A checkpoint whose weights hold NaN (written behind minihead's back) is refused by every reader."""
    import numpy as np
    path = ws / "nan.npz"
    with np.load(ws / "run" / "best.npz") as z:
        arrays = {k: z[k] for k in z.files}
    name = next(k for k in arrays if k.startswith("param."))
    arrays[name] = np.full_like(arrays[name], np.nan)
    np.savez(path, **arrays)
    before = tree(ws)
    refused(capsys, ["translate", path, "--data", ws / "data"], f"{path}: parameter {name[6:]!r} holds NaN")
    refused(capsys, ["evaluate", path, "--data", ws / "data"], "holds NaN or infinity")
    assert tree(ws) == before


# --- every numeric setting checked (type, range, finite) before any work
@pytest.mark.parametrize("setting, needle", [
    ("lr=nan", "setting lr=nan: must be a finite number > 0"),
    ("lr=inf", "setting lr=inf: must be a finite number > 0"),
    ("lr=-1", "setting lr=-1.0: must be a finite number > 0"),
    ("clip=nan", "setting clip=nan"),
    ("max_steps=0", "setting max_steps=0: must be an integer >= 1"),
    ("max_steps=-3", "setting max_steps=-3: must be an integer >= 1"),
    ("max_steps=3.5", "--set max_steps=3.5: max_steps must be an integer"),
    ("eval_every=0", "setting eval_every=0: must be an integer >= 1"),
    ("warmup=0", "setting warmup=0: must be an integer >= 1"),
    ("dev_bleu_sentences=0", "setting dev_bleu_sentences=0: must be an integer >= 1"),
    ("n_train=-5", "setting n_train=-5: must be an integer >= 1"),
    ("n_heads=0", "setting n_heads=0: must be an integer >= 1"),
    ("shards=0", "setting shards=0: must be an integer >= 1"),
    ("d_model=31", "setting d_model=31: must be divisible by n_heads=2"),
    ("dropout=1.5", "setting dropout=1.5: must be a number in [0, 1)"),
    ("seed=-1", "setting seed=-1: must be an integer >= 0"),
    ("pre_norm=maybe", "--set pre_norm=maybe: pre_norm must be true or false"),
    ("dtype=float16", "setting dtype='float16': must be float32 or float64"),
    ("nosuchkey=3", "--set nosuchkey=3: unknown setting 'nosuchkey'"),
    ("vocab_size=10", "--set vocab_size=10: vocab_size is set by the training data"),
    ("lr", "--set lr: expected KEY=VALUE"),
])
def test_bad_settings_are_refused_before_work(ws, capsys, setting, needle):
    """Each bad ``--set`` value (NaN, infinite, negative, zero or fractional where an integer >= 1 is needed,
    d_model not divisible by n_heads, dropout outside [0, 1), a bool other than true/false, an unknown dtype or
    key, vocab_size, a missing ``=``) is refused with exit status 2 and one ``error: `` line holding the
    expected message, before any work: nothing on stdout, and not even the run folder is created."""
    before = tree(ws)
    refused(capsys, ["train", "--data", ws / "data", "--out", ws / "new", *TINY, setting], needle)
    assert tree(ws) == before, "nothing written (not even the run folder)"


# --- argument values refused by their argparse types (counts used to be Python slices)
@pytest.mark.parametrize("argv, needle", [
    (["translate", "{ck}", "--beam", "0"], "translate: argument --beam: must be an integer >= 1, got 0"),
    (["evaluate", "{ck}", "--beam", "-1"], "evaluate: argument --beam: must be an integer >= 1, got -1"),
    (["evaluate", "{ck}", "--show", "-1"], "argument --show: must be an integer >= 0, got -1"),
    (["importance", "{ck}", "--n", "-995"], "importance: argument --n: must be an integer >= 1, got -995"),
    (["importance", "{ck}", "--n", "0"], "argument --n: must be an integer >= 1, got 0"),
    (["roles", "{ck}", "--max-sentences", "-1"], "roles: argument --max-sentences: must be an integer >= 1"),
    (["roles", "{ck}", "--max-unknown", "nan"], "argument --max-unknown: must be a finite number >= 0 and <= 1"),
    (["prune", "{ck}", "--lambda", "nan"], "prune: argument --lambda: must be a finite number >= 0, got 'nan'"),
    (["prune", "{ck}", "--lambda", "inf"], "argument --lambda: must be a finite number >= 0, got 'inf'"),
    (["prune", "{ck}", "--lambda", "-0.1"], "argument --lambda: must be a finite number >= 0, got '-0.1'"),
    (["prune", "{ck}", "--lambda", "0.1", "--n-test", "0"], "argument --n-test: must be an integer >= 1, got 0"),
    (["prune", "{ck}", "--lambda", "0.1", "--n-test", "-1"], "argument --n-test: must be an integer >= 1"),
    (["prune", "{ck}", "--lambda", "0.1", "--steps", "0"], "argument --steps: must be an integer >= 1"),
    (["prune", "{ck}", "--lambda", "0.1", "--lr-gates", "0"], "argument --lr-gates: must be a finite number > 0"),
    (["train", "--config", "nope"], "train: argument --config: invalid choice: 'nope'"),
    (["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
])
def test_bad_argument_values_are_refused(ws, capsys, argv, needle):
    """Argument values refused by their argparse types (--beam 0 or -1, --show -1, --n 0 or negative,
    --max-sentences -1, --max-unknown nan, --lambda nan / inf / negative, --n-test, --steps, --lr-gates 0,
    an unknown --config or command): exit status 2, one line ``error: python -m minihead [command]: argument
    <option>: <why>`` (the rule and the value given), nothing on stdout, every file byte-identical."""
    before = tree(ws)
    refused(capsys, fill(argv, ws), needle)
    assert tree(ws) == before


# --- input and output paths checked before any work
def _bad_inputs(ws):
    (ws / "partial").mkdir()
    for f in ("train.src", "train.tgt", "dev.src"):
        (ws / "partial" / f).write_text("a\n")
    (ws / "dirdev").mkdir()
    for f in ("train.src", "train.tgt", "dev.tgt"):
        (ws / "dirdev" / f).write_text("a\n")
    (ws / "dirdev" / "dev.src").mkdir()
    (ws / "emptydev").mkdir()
    for f in ("train.src", "train.tgt"):
        (ws / "emptydev" / f).write_text("a\n")
    for f in ("dev.src", "dev.tgt"):
        (ws / "emptydev" / f).write_text("")
    (ws / "empty.txt").write_text("")
    (ws / "gap.txt").write_text("w1 w2 .\n\nw3 .\n")
    (ws / "binary.bpe").write_bytes(b"#version: 0.2\n\xff\xfe\x00\x81 b\n")
    import numpy as np
    np.save(ws / "weights.npy", np.zeros(3))


@pytest.mark.parametrize("argv, needle", [
    (["train", "--data", "{tmp}/nope"], "{tmp}/nope: no such data folder"),
    (["train", "--data", "{data}/train.src"], "{data}/train.src: --data is a file, expected a folder"),
    (["train", "--data", "{tmp}/partial"], "{tmp}/partial/dev.tgt: no such dev tgt data file"),
    (["train", "--data", "{tmp}/dirdev"], "{tmp}/dirdev/dev.src: dev src data is a folder, expected a file"),
    (["train", "--data", "{tmp}/emptydev", "--out", "{tmp}/new"], "{tmp}/emptydev/dev.src: no sentence pairs"),
    (["train", "--data", "{data}", "--out", "{data}/train.src"], "{data}/train.src: --out is a file, expected a folder"),
    (["train", "--data", "{data}", "--out", "{data}/train.src/sub"], "cannot create --out: {data}/train.src is a file"),
    (["translate", "{tmp}/nope.npz"], "{tmp}/nope.npz: no such checkpoint file"),
    (["translate", "{run}"], "{run}: checkpoint is a folder, expected a file"),
    (["translate", "{tmp}/weights.npy", "--data", "{data}"], "{tmp}/weights.npy: not a readable .npz checkpoint"),
    (["translate", "{ck}", "--input", "{tmp}/nope.txt"], "{tmp}/nope.txt: no such --input file"),
    (["translate", "{ck}", "--input", "{data}"], "{data}: --input is a folder, expected a file"),
    (["translate", "{ck}", "--input", "{tmp}/empty.txt"], "{tmp}/empty.txt: no sentences (the file is empty)"),
    (["translate", "{ck}", "--input", "{tmp}/gap.txt"], "{tmp}/gap.txt:2: empty line"),
    (["translate", "{ck}", "--data", "{data}", "--output", "{run}"], "{run}: --output is a folder, expected a file"),
    (["translate", "{ck}", "--data", "{tmp}/nope"], "{tmp}/nope: no such data folder"),
    (["evaluate", "{ck}", "--input", "{data}/test.src"], "evaluate needs references: use --split, not --input"),
    (["evaluate", "{ck}", "--data", "{data}", "--split", "nosuch"], "{data}/nosuch.src: no such nosuch src data file"),
    (["importance", "{ck}", "--data", "{data}", "--out", "{ck}"], "{ck}: --out is a file, expected a folder"),
    (["roles", "{ck}", "--out", "{ck}"], "{ck}: --out is a file, expected a folder"),
    (["roles", "{ck}", "--conllu", "{tmp}/nope.conllu"], "{tmp}/nope.conllu: no such --conllu file"),
    (["roles", "{ck}", "--bpe", "{tmp}/binary.bpe", "--out", "{tmp}/figs"], "{tmp}/binary.bpe:2: not valid UTF-8"),
    (["prune", "{ck}", "--lambda", "0.1", "--data", "{data}", "--out", "{run}"],
     "{run}: --out is a folder, expected a file name"),
    (["prune", "{ck}", "--lambda", "0.1", "--data", "{tmp}/partial"], "{tmp}/partial/dev.tgt: no such dev tgt data"),
    (["reproduce", "--train-src", "{data}/train.src"], "a real corpus needs --train-src, --train-tgt and --conllu"),
    (["reproduce", "--quick", "--out", "{ck}"], "{ck}: --out is a file, expected a folder"),
])
def test_bad_paths_are_refused_before_work(ws, capsys, argv, needle):
    """Every command checks its input and output paths before any work: a missing or partial data folder, a
    file where a folder is expected or the reverse, an unreadable or non-.npz checkpoint, an empty --input or
    one with an empty line (file:line named), a BPE file that is not UTF-8 (file:line named), --out below a
    file, an incomplete real corpus for reproduce. Each gives exit status 2 and one ``error: <path>: <problem>``
    line, nothing on stdout, and leaves every file byte-identical."""
    _bad_inputs(ws)
    before = tree(ws)
    refused(capsys, fill(argv, ws), needle.format(tmp=ws, data=ws / "data", run=ws / "run", ck=ws / "run" / "best.npz"))
    assert tree(ws) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders: the refusal cannot happen")
def test_read_only_out_is_refused(ws, capsys):
    """``train --out`` inside a read-only folder: exit status 2, one ``error: `` line saying ``<folder> is not
    writable``, and the run folder is not created (skipped as root, who can write there)."""
    ro = ws / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        refused(capsys, ["train", "--data", ws / "data", "--out", ro / "run", *TINY], f"{ro} is not writable")
    finally:
        ro.chmod(0o755)
    assert not (ro / "run").exists()


def test_every_command_finds_data_small_from_anywhere(tmp_path, monkeypatch):
    """The default --data is resolved the same way for every command: from another working folder,
    data_small is the repository's."""
    import argparse

    from minihead import cli
    monkeypatch.chdir(tmp_path)
    for splits in (("train", "dev"), ("test",), ("dev",), ("train", "dev", "test")):
        a = argparse.Namespace(data=cli.DATA)
        cli.check_data(a, splits)
        assert a.data == str(ROOT / "data_small")


# --- one line where a traceback used to be
@pytest.mark.parametrize("backend_name, needle", [
    ("nonsense", "error: MINIHEAD_BACKEND=nonsense: unknown backend 'nonsense'; choose one of numpy, cupy"),
    ("cupy", "error: MINIHEAD_BACKEND=cupy"),
])
@pytest.mark.parametrize("argv", [["--help"], ["translate", "x.npz"]])
def test_bad_backend_is_one_line_at_import(backend_name, needle, argv):
    """An unknown MINIHEAD_BACKEND, or cupy where CuPy is missing, fails when the package is imported, before
    argparse (even for --help): exit status 2, nothing on stdout, and stderr is one line starting ``error:
    MINIHEAD_BACKEND=<name>`` (for an unknown name: ``unknown backend '<name>'; choose one of numpy, cupy``)."""
    if backend_name == "cupy":
        try:
            import cupy  # noqa: F401
            pytest.skip("CuPy is installed here")
        except ImportError:
            pass
    r = run_cli(*argv, env={"MINIHEAD_BACKEND": backend_name})
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(needle), r.stderr


def signal_training(tmp_path, signum):
    """Start a long training as ``python -m minihead train`` and send it ``signum`` once it has saved last.npz;
    returns (argv, data folder, run folder, exit status, stderr)."""
    import time
    data = write_data(tmp_path / "data")
    out = tmp_path / "run"
    argv = ["train", "--data", str(data), "--out", str(out), *TINY, "max_steps=100000", "eval_every=1", "patience=100000"]
    e = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "minihead", *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=e, cwd=ROOT)
    try:
        t0 = time.time()
        while not (out / "last.npz").exists() and time.time() - t0 < 60 and p.poll() is None:
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signum)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    return argv, data, out, p.returncode, err


def test_ctrl_c_prints_where_to_resume(tmp_path):
    """SIGINT during training: one line naming last.npz and the command that resumes it, exit status 130;
    that command then continues the run."""
    import signal
    argv, data, out, returncode, err = signal_training(tmp_path, signal.SIGINT)
    assert returncode == 130, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"interrupted: {out / 'last.npz'} holds the run as last saved; continue with: "
                          f"python -m minihead train --data {data} --out {out}") and err.strip().endswith("--resume")
    assert not (out / "run.lock").exists(), "the lock is released on Ctrl-C"
    step = checkpoint.load(str(out / "last.npz")).meta["step"]
    assert step >= 1
    main([*argv[:-3], f"max_steps={step + 1}", "eval_every=1", "patience=100000", "--resume"])
    assert checkpoint.load(str(out / "last.npz")).meta["step"] == step + 1


def test_two_reproduce_runs_cannot_share_a_study_folder(tmp_path, capsys, monkeypatch):
    """reproduce holds the run folder its model lives in (runs/quick-t<threads>-<hash>) and its report folder: a
    second run while the first lives is refused before any work, naming the folder and the first run's pid."""
    from minihead import study
    monkeypatch.setattr(study, "RUNS", tmp_path / "runs")
    folder = pathlib.Path(study.run_folder("quick", "data_small", tmp_path / "runs"))
    folder.mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (folder / "run.lock").write_text(str(other.pid))
        before = tree(tmp_path)
        refused(capsys, ["reproduce", "--quick", "--out", tmp_path / "report", "--no-progress"],
                f"{folder}: another run (pid {other.pid}) is writing to this folder")
        assert tree(tmp_path) == before
    finally:
        other.kill()
        other.wait()


def test_interrupt_lines_name_what_resumes(tmp_path):
    """The Ctrl-C line of each kind of command (the subprocess test above sends a real SIGINT to train)."""
    import argparse

    from minihead import cli
    a = argparse.Namespace(command="train", out=str(tmp_path), argv=["train", "--out", str(tmp_path), "--overwrite"])
    assert cli._interrupted(a) == f"interrupted before the first save: nothing to resume in {tmp_path}"
    (tmp_path / "last.npz").write_bytes(b"")
    assert cli._interrupted(a).endswith(f"continue with: python -m minihead train --out {tmp_path} --resume")
    assert "run the same command again" in cli._interrupted(argparse.Namespace(command="reproduce"))
    assert cli._interrupted(argparse.Namespace(command="roles")) == "interrupted: nothing was saved"
    assert cli._interrupted(None) == "interrupted: nothing was saved"
