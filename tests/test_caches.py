"""Caches that cannot lie: a cached model, measurement or corpus is used only for exactly what made it, a run folder
has one writer for a whole command, and a replaced model is replaced only once its successor has saved.

Each test is a case that returned a wrong result (or lost a model) with exit status 0 before it was fixed."""
import os
import shutil
import subprocess
import sys

import pytest

from minihead import checkpoint, cli, commands, emergence, study
from minihead import stages
from minihead.__main__ import main
from minihead.errors import CheckpointError, MiniheadError, UsageError
from minihead.train import Corpus, preset, train

TINY = dict(max_steps=5, eval_every=3, d_model=16, n_heads=2, d_ff=16, n_train=60, dev_bleu_sentences=4)


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def refused(capsys, argv, *needles):
    """main(argv) exits 2 with one 'error: ' line holding every needle and nothing on stdout."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert exc.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert out == "", f"work began before the refusal: {out!r}"
    return lines[0]


def test_a_trace_holds_its_run_folder_for_the_whole_command(tmp_path, monkeypatch, capsys):
    """emergence --trace keeps its run folder's lock between segments too (while it measures a step), so a second
    trace of the same folder cannot train on in between and leave rows labelled with steps whose parameters they do
    not hold; and the command refuses at once, before any work, when another live process holds the folder."""
    args = ("data_small", "quick", 1, TINY, 2, str(tmp_path / "runs"), 6)
    out, _ = study.trace_folder(*args[:6], n_trees=6)
    held_while_measuring = []
    measure = stages.measure_functions

    def spy(*a, **k):
        held_while_measuring.append(checkpoint._lock_owner(os.path.join(out, checkpoint.LOCK_NAME)) == os.getpid())
        return measure(*a, **k)
    monkeypatch.setattr(stages, "measure_functions", spy)
    rows = emergence.trace_seed(*args, progress=False)
    assert [r["step"] for r in rows] == [2, 4, 5] and held_while_measuring == [True, True, True]
    assert not os.path.exists(os.path.join(out, checkpoint.LOCK_NAME)), "released at the end"
    other = _sleeper()
    try:
        with open(os.path.join(out, checkpoint.LOCK_NAME), "w") as f:
            f.write(f"{other.pid}\n")
        refused(capsys, ["emergence", "--seeds", "1", "--trace", "2", "--n-trees", "6", "--runs", tmp_path / "runs",
                         "--set", *[f"{k}={v}" for k, v in TINY.items()]],
                f"another run (pid {other.pid}) is writing to this folder")
    finally:
        other.kill()
        other.wait()


def _corpus(lines):
    pairs = [(s.split(), s.upper().split()) for s in lines]
    return Corpus.build(pairs, pairs[:5])


def test_resume_on_a_vocabulary_of_the_same_size_but_other_words_is_refused(tmp_path):
    """train(resume=True) on data whose vocabulary has as many words as the saved run's but not the same ones
    (one training line replaced) is a UsageError naming the checkpoint and how many ids changed, not a run that
    goes on with every id meaning another word."""
    lines = [f"a{i % 9} b{(3 * i) % 9} c{i % 4}" for i in range(60)]
    corpus = _corpus(lines)
    cfg, tcfg = preset("quick", len(corpus.vocab), max_steps=2, eval_every=2, d_model=16, d_ff=16, n_heads=2,
                       dev_bleu_sentences=2)
    train(corpus, cfg, tcfg, str(tmp_path / "run"), progress=False)
    other = _corpus([line.replace("c3", "d3") for line in lines])     # c3 -> d3: same size, other words
    assert len(other.vocab) == len(corpus.vocab) and other.vocab.itos != corpus.vocab.itos
    with pytest.raises(UsageError, match=r"last.npz: cannot resume on other data: \d+ of \d+ ids name other words"):
        train(other, cfg, tcfg.__class__(**{**tcfg.__dict__, "max_steps": 4}), str(tmp_path / "run"), resume=True,
              progress=False)
    assert checkpoint.load(str(tmp_path / "run" / "last.npz")).meta["step"] == 2, "nothing was trained on"


@pytest.mark.parametrize("content", [["README.md", "setup.py"], ["README.md"], ["notes.txt"]])
def test_reproduce_refuses_an_out_folder_that_is_not_a_report(tmp_path, monkeypatch, capsys, content):
    """reproduce --out FOLDER where FOLDER holds files that are not a minihead report (the project's root, say,
    whose README.md the report would replace) is refused in one line before any work; --out '' too; an empty
    folder or an earlier report (README.md with results.json) is accepted."""
    import minihead.reproduce as rep
    monkeypatch.setattr(rep, "reproduce", lambda *a, **k: pytest.fail("work began"))
    monkeypatch.setattr(study, "RUNS", tmp_path / "runs")
    folder = tmp_path / "project"
    folder.mkdir()
    for name in content:
        (folder / name).write_text("the user's own\n")
    refused(capsys, ["reproduce", "--quick", "--out", folder, "--no-progress"], "not a minihead report")
    assert sorted(os.listdir(folder)) == sorted(content)
    assert (folder / content[0]).read_text() == "the user's own\n"
    refused(capsys, ["reproduce", "--quick", "--out", "", "--no-progress"], "--out ''")
    (tmp_path / "empty").mkdir()
    cli.check_report_folder(str(tmp_path / "empty"), "--out")
    report = tmp_path / "report"
    report.mkdir()
    for name in ("README.md", "results.json", "relevance.png"):
        (report / name).write_text("{}")
    (report / "seed-1").mkdir()
    cli.check_report_folder(str(report), "--out")


def test_real_corpus_cache_is_keyed_by_content_not_size(tmp_path):
    """An in-place edit of a corpus file that keeps its size ('.' -> '!') names another run folder, so the BPE and
    the model learned on the old text are never reused for the new one; the same bytes name the same folder."""
    src, tgt = tmp_path / "a.src", tmp_path / "a.tgt"
    src.write_text("a man rides a horse .\n")
    tgt.write_text("ein mann reitet ein pferd .\n")
    before = study.real_run_folder([str(src), str(tgt)], "quick", 100, 10, runs=tmp_path)
    assert study.real_run_folder([str(src), str(tgt)], "quick", 100, 10, runs=tmp_path) == before
    size = src.stat().st_size
    src.write_text("a man rides a horse !\n")
    assert src.stat().st_size == size
    assert study.real_run_folder([str(src), str(tgt)], "quick", 100, 10, runs=tmp_path) != before


@pytest.mark.parametrize("value", ["nan", "inf", "0.1,-inf", "0.1,nan"])
def test_emergence_refuses_non_finite_l0_weights(capsys, value):
    """emergence --prune with NaN or an infinite L0 weight is refused in one line before any work (it pruned on NaN
    gates and cached and counted the verdict)."""
    refused(capsys, ["emergence", "--seeds", "1", "--prune", value], f"--prune {value!r}", "NaN or infinite")


def test_negative_seed_is_refused_before_the_first_seed_trains(capsys):
    """--seeds 5,-1 is refused before seed 5 trains, not when the turn of -1 comes."""
    refused(capsys, ["emergence", "--seeds", "5,-1"], "--seeds '5,-1': seeds are whole numbers >= 0")


def test_emergence_measurement_is_keyed_by_the_model(tmp_path, monkeypatch):
    """The emergence measurement cached beside a model is measured again once the model has changed (trained on
    with train --resume, say), rather than the old model's measurement printed for the new one."""
    runs = str(tmp_path / "runs")
    first = emergence.run_seed("data_small", "quick", 1, TINY, runs, n_trees=6, progress=False)
    s = study.load_study("quick", "data_small", runs=runs, progress=False, seed=1, **TINY)
    ck = checkpoint.load(s.path)
    params = {k: v * 1.5 for k, v in ck.params.items()}                     # the model is not what it was
    checkpoint.save(s.path, params, ck.cfg, ck.vocab, meta=ck.meta)
    calls = []
    measure = stages.measure_functions
    monkeypatch.setattr(stages, "measure_functions", lambda *a, **k: calls.append(1) or measure(*a, **k))
    again = emergence.run_seed("data_small", "quick", 1, TINY, runs, n_trees=6, progress=False)
    assert calls == [1], "the changed model was measured again"
    assert again.seed == first.seed
    assert first.model == stages.params_fingerprint(ck.params) and again.model == stages.params_fingerprint(params)
    emergence.run_seed("data_small", "quick", 1, TINY, runs, n_trees=6, progress=False)
    assert calls == [1], "and that measurement is cached in turn"


def test_a_run_folder_copied_from_another_seed_is_refused(tmp_path):
    """A study run folder whose model was trained with other settings (another seed's folder copied into this
    seed's place) is a CheckpointError naming the file and the differing setting, not the other seed's model
    reported under this seed."""
    runs = str(tmp_path / "runs")
    two = study.load_study("quick", "data_small", runs=runs, progress=False, seed=2, **TINY)
    one = study.run_folder("quick", "data_small", runs, seed=1, **TINY)
    shutil.copytree(os.path.dirname(two.path), one)
    with pytest.raises(CheckpointError, match=r"best.npz: trained with other settings than asked: seed 2 \(saved\) "
                                              r"vs 1 \(asked\)"):
        study.load_study("quick", "data_small", runs=runs, progress=False, seed=1, **TINY)


def test_overwrite_keeps_the_old_model_until_the_new_one_has_saved(tmp_path, monkeypatch, capsys):
    """train --overwrite whose new run fails before saving (it diverges, or is interrupted) leaves the old model in
    place, byte for byte, and no half-made folder beside it; one that succeeds replaces it."""
    from test_cli import TINY as CLI_TINY, write_data
    import minihead.train as train_mod
    data = write_data(tmp_path / "data")
    out = tmp_path / "run"
    main(["train", "--data", str(data), "--out", str(out), *CLI_TINY])
    before = {f: (out / f).read_bytes() for f in ("best.npz", "last.npz")}
    real_train = train_mod.train

    def failing(corpus, cfg, tcfg, folder, **kw):
        real_train(corpus, cfg, tcfg, folder, stop_after=1, **kw)           # saves a little, then fails
        raise MiniheadError(f"{folder}: training diverged at step 2")
    monkeypatch.setattr(commands, "train", failing)
    with pytest.raises(SystemExit):
        main(["train", "--data", str(data), "--out", str(out), *CLI_TINY, "seed=7", "--overwrite"])
    capsys.readouterr()
    assert {f: (out / f).read_bytes() for f in before} == before
    assert sorted(os.listdir(out)) == ["best.npz", "last.npz"]
    monkeypatch.setattr(commands, "train", real_train)
    main(["train", "--data", str(data), "--out", str(out), *CLI_TINY, "seed=7", "--overwrite"])
    assert checkpoint.load(str(out / "best.npz")).meta["train"]["seed"] == 7
    assert sorted(os.listdir(out)) == ["best.npz", "last.npz"]


# --- arguments and paths checked before any work, and messages that say what happened
@pytest.mark.parametrize("argv, needle", [
    (["emergence", "--trace", "2", "--figure", "{tmp}/t.xyz"], "needs an image file name ending in one of"),
    (["emergence", "--trace", "2", "--figure", "{tmp}/t"], "(it has no extension)"),
    (["prune", "{tmp}/none.npz", "--lambda", "0.1", "--settle", "0"], "--settle 0.0: give the share"),
    (["prune", "{tmp}/none.npz", "--lambda", "0.1", "--settle", "1.5"], "--settle 1.5"),
    (["prune", "{tmp}/none.npz", "--lambda", "nan"], "argument --lambda: must be a finite number >= 0"),
    (["train", "--res"], "unrecognized arguments: --res"),
])
def test_bad_arguments_are_refused_before_any_work(tmp_path, capsys, argv, needle):
    """A figure name matplotlib cannot write (checked before the trace, not by savefig after it), prune's --settle
    outside (0, 1] or a NaN --lambda (checked before the checkpoint and data are read: the checkpoint here does not
    exist, yet the number is what is named), and an abbreviated option (the resume command printed back must be
    the one typed) are each one line, exit status 2."""
    refused(capsys, [a.format(tmp=tmp_path) for a in argv], needle)


def test_empty_trees_file_is_refused_before_training(tmp_path, capsys):
    """reproduce on a real corpus with a --conllu file that holds no trees is refused before training, naming the
    file (it was found after training, as 'head_roles: no trees')."""
    for name in ("a.src", "a.tgt"):
        (tmp_path / name).write_text("a b\n")
    (tmp_path / "empty.conllu").write_text("")
    refused(capsys, ["reproduce", "--train-src", tmp_path / "a.src", "--train-tgt", tmp_path / "a.tgt", "--conllu",
                     tmp_path / "empty.conllu", "--out", tmp_path / "report", "--no-progress"],
            f"{tmp_path / 'empty.conllu'}: --conllu holds no dependency trees")


def test_byte_order_mark_is_not_part_of_the_first_token(tmp_path):
    """A UTF-8 file that starts with a byte-order mark (as some editors write it) reads as the same tokens as
    without one."""
    from minihead.data.corpus import read_parallel
    (tmp_path / "a.src").write_bytes("\ufeffein haus\n".encode("utf-8"))
    (tmp_path / "a.tgt").write_text("a house\n", encoding="utf-8")
    assert read_parallel(str(tmp_path / "a.src"), str(tmp_path / "a.tgt")) == [(["ein", "haus"], ["a", "house"])]


def test_messages_say_what_happened():
    """An empty corpus is named as such (not 'setting vocab_size=4', a setting nobody set); Ctrl-C on emergence
    says what is cached (not 'nothing was saved'); a run lock whose pid belongs to another program says how to
    clear it."""
    from types import SimpleNamespace
    from minihead.train import check_settings
    cfg, tcfg = preset("quick", 4)
    with pytest.raises(UsageError, match="the training data has 0 distinct words"):
        check_settings(cfg, tcfg)
    assert "cached in their run folders" in cli._interrupted(SimpleNamespace(command="emergence"))


def test_stale_lock_message_says_how_to_clear_it(tmp_path):
    """A lock held by a live process that is not a minihead run (a reused pid): the error names the lock file and
    says it can be deleted when no run is going."""
    other = _sleeper()
    try:
        (tmp_path / checkpoint.LOCK_NAME).write_text(f"{other.pid}\n")
        with pytest.raises(checkpoint.RunLockedError, match="delete the lock file"):
            with checkpoint.run_lock(str(tmp_path)):
                pass
    finally:
        other.kill()
        other.wait()


def test_translate_output_into_a_new_folder_is_written(tmp_path, capsys):
    """translate --output into a folder that does not exist yet (validated as creatable) writes the file there
    instead of failing after the work."""
    from test_cli import TINY as CLI_TINY, write_data
    data = write_data(tmp_path / "data")
    main(["train", "--data", str(data), "--out", str(tmp_path / "run"), *CLI_TINY])
    out = tmp_path / "new" / "deeper" / "hyps.txt"
    main(["translate", str(tmp_path / "run" / "best.npz"), "--data", str(data), "--output", str(out)])
    capsys.readouterr()
    assert len(out.read_text().splitlines()) == 10


def test_a_trace_with_a_gap_is_refused(tmp_path):
    """A trace document whose rows skip a step (or are not measurements) is refused naming the seed and the steps,
    rather than plotted as if it had been measured there."""
    import json
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1]
    doc = json.loads((root / "chapters" / "studies" / "trace-quick.json").read_text())
    study.check_trace_rows("t.json", doc, "remake it")
    gap = {**doc, "traces": {**doc["traces"], "2": doc["traces"]["2"][:3] + doc["traces"]["2"][4:]}}
    (tmp_path / "gap.json").write_text(json.dumps(gap))
    with pytest.raises(MiniheadError, match=r"gap.json: seed 2 is measured at steps \[200, 400, 600, 1000"):
        study.load_trace(str(tmp_path / "gap.json"))
    bad = {**doc, "traces": {"1": [{"step": 200}]}}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(MiniheadError, match=r"seed 1's rows are not measurements"):
        study.load_trace(str(tmp_path / "bad.json"))


def test_sigterm_releases_the_run_lock_and_says_where_to_resume(tmp_path):
    """SIGTERM to a training (a scheduler's stop, ``kill``) ends it as Ctrl-C does: exit status 130, one line naming
    last.npz and the resume command, the run lock released (it was left behind, stale, before)."""
    import signal
    from test_cli import signal_training
    _, _, out, returncode, err = signal_training(tmp_path, signal.SIGTERM)
    assert returncode == 130, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"interrupted: {out / 'last.npz'} holds the run as last saved") and "--resume" in err
    assert not (out / checkpoint.LOCK_NAME).exists()


def test_ctrl_c_while_the_package_loads_is_one_line():
    """Ctrl-C in the first moments of ``python -m minihead`` (while NumPy and the package import) is one line and
    exit status 130, not a traceback from inside an import."""
    import pathlib
    import time
    root = pathlib.Path(__file__).resolve().parents[1]
    code = "\n".join([   # Ctrl-C arrives while the package imports NumPy: the KeyboardInterrupt Python raises for
        "import builtins, runpy, sys",   # it, raised where it would surface (not a real SIGINT, whose delivery
        "sys.argv = ['minihead', '--help']",   # depends on the signal mask the test runner hands down)
        "real = builtins.__import__",
        "def interrupted_import(name, *a, **k):",
        "    if name == 'numpy':",
        "        raise KeyboardInterrupt",
        "    return real(name, *a, **k)",
        "builtins.__import__ = interrupted_import",
        "runpy.run_module('minihead', run_name='__main__')"])
    t0 = time.time()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                       env=dict(os.environ, PYTHONPATH=str(root)))
    assert time.time() - t0 < 60
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip() == "interrupted before the command started: nothing was done", r.stderr


def test_emergence_writes_json_and_figure_into_new_folders(tmp_path, capsys):
    """emergence --trace with --json and --figure in folders that do not exist yet (validated as creatable) writes
    both there, instead of failing after the whole trace."""
    j, fig = tmp_path / "new" / "a" / "t.json", tmp_path / "new" / "b" / "t.png"
    main(["emergence", "--seeds", "1", "--trace", "3", "--n-trees", "6", "--runs", str(tmp_path / "runs"),
          "--json", str(j), "--figure", str(fig), "--set", *[f"{k}={v}" for k, v in TINY.items()]])
    capsys.readouterr()
    assert j.stat().st_size > 0 and fig.stat().st_size > 0
