"""The emergence command end to end on a tiny model (the criteria it applies are tested in tests/test_findings.py)."""
import json
import pathlib
from types import SimpleNamespace

import numpy as np
import pytest

from minihead import emergence
from minihead import checkpoint, cli, findings, report, stages, study
from minihead.data.corpus import REPO_ROOT
from minihead.cli import main


def _report(share_possible, share_all=None, confidence=None, acc=None, baseline=None, rare=None):
    sp = np.asarray(share_possible, dtype=float)                                  # (L, H, 2)
    return SimpleNamespace(shares_possible=sp, shares=sp if share_all is None else np.asarray(share_all),
                           confidence=np.asarray(confidence if confidence is not None else np.ones(sp.shape[:2])),
                           acc=acc or {}, baseline=baseline or {}, rare=rare)


def test_emergence_command_trains_measures_and_caches_per_seed(tmp_path, capsys):
    """`python -m minihead emergence` trains one (tiny) model per seed on data_small, prints a row per seed and
    the number of seeds meeting each criterion, writes JSON, and a second call reads the cached results
    (identical numbers, no retraining)."""
    argv = ["emergence", "--seeds", "1,2", "--set", "max_steps=3", "eval_every=3", "d_model=16", "n_heads=2",
            "d_ff=16", "n_train=60", "dev_bleu_sentences=4", "--n-trees", "6", "--runs", str(tmp_path / "runs"),
            "--json", str(tmp_path / "e.json")]
    first = main(argv + ["--study", str(tmp_path / "study.json")])
    out = capsys.readouterr().out
    assert [r.seed for r in first] == [1, 2] and "positional head (share >= 0.9)" in out
    assert "of 2 seeds" in out and (tmp_path / "e.json").exists()
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all("-t" in f for f in folders)
    stamps = {f: (tmp_path / "runs" / f / "best.npz").stat().st_mtime_ns for f in folders}
    again = main(argv)
    assert [r.__dict__ for r in again] == [r.__dict__ for r in first]
    assert stamps == {f: (tmp_path / "runs" / f / "best.npz").stat().st_mtime_ns for f in folders}
    # --study: the per-seed verdicts, their summary over seeds and the provenance the chapters check
    doc = json.loads((tmp_path / "study.json").read_text())
    assert doc["seeds"] == [1, 2] and set(doc["summary"]) == {"positional", "syntactic", "rare_word"}
    assert doc["summary"]["positional"]["of"] == 2
    assert doc["provenance"]["preset"]["model"]["d_model"] == 16 and doc["provenance"]["n_trees"] == 6


def test_emergence_prunes_encoder_heads_and_judges_survivors(tmp_path):
    """run_seed(prune_lambdas=...): one encoder pruning run per lambda (cached: a second call reads the same
    survivors), the survivors' heads with a role among the seed's own role heads, and the two encoder pruning
    verdicts of sec. 6 (most heads prunable, against the lambda = 0 run at the same step; the head functions survive)
    in the result."""
    settings = dict(max_steps=3, eval_every=3, d_model=16, n_heads=2, d_ff=16, n_train=60, dev_bleu_sentences=4)
    args = ("data_small", "quick", 1, settings, str(tmp_path / "runs"), 6)
    kw = dict(progress=False, prune_lambdas=(0.0, 50.0), prune_steps=4, prune_n_test=5)
    r = emergence.run_seed(*args, **kw)
    p = r.pruning
    assert [k["lam"] for k in p["runs"]] == [0.0, 50.0] and p["n_enc"] == 3 * 2
    roles = {(l, h) for l, h, _ in p["roles"]}
    # one role classifier: the roles judged are minihead.roles.classify_heads' on the same dev trees
    s = study.load_study("quick", "data_small", runs=str(tmp_path / "runs"), progress=False, seed=1, **settings)
    assert p["roles"] == [[l, h, sorted(v)] for (l, h), v in sorted(stages.roles_stage(s, 6, split="dev").roles.items())
                          if v]
    for k in p["runs"]:
        assert all(0 <= l < 3 and 0 <= h < 2 for l, h in k["heads"])
        assert [lh for lh in k["heads"] if tuple(lh) in roles] == k["with_role"]
    assert set(p["prunable"]) >= {"status", "numbers"} and set(p["functions_survive"]) >= {"status", "numbers"}
    assert emergence.run_seed(*args, **kw).pruning == p


def test_split_test_judges_the_roles_on_the_test_trees(tmp_path, monkeypatch):
    """`emergence --split test` measures the same model on the first N TEST trees (dev is where recipes are chosen,
    test where a chosen recipe is judged): its verdicts are stages.measure_functions' on those trees, cached apart
    from the dev measurement (both read back unchanged), and its study names the split and the test trees' hash, so
    a shipped study judged on test is checked against test.conllu and one claiming the dev trees is refused."""
    from minihead.errors import MiniheadError
    from minihead.train import PRESETS
    settings = dict(max_steps=3, eval_every=3, d_model=16, n_heads=2, d_ff=16, n_train=60, dev_bleu_sentences=4)
    args = ("data_small", "quick", 1, settings, str(tmp_path / "runs"), 6)
    on_test = emergence.run_seed(*args, progress=False, split="test")
    on_dev = emergence.run_seed(*args, progress=False)
    s = study.load_study("quick", "data_small", runs=str(tmp_path / "runs"), progress=False, seed=1, **settings)
    pos, syn, rare = stages.measure_functions(s.params, s.cfg, s.vocab, s.trees["test"][:6], s.corpus.src_freq)
    assert (on_test.positional, on_test.syntactic, on_test.rare) == tuple(map(checkpoint.plain, (pos, syn, rare)))
    assert on_test.syntactic != on_dev.syntactic and on_test.model == on_dev.model
    assert emergence.run_seed(*args, progress=False, split="test").__dict__ == on_test.__dict__
    assert emergence.run_seed(*args, progress=False).__dict__ == on_dev.__dict__
    data = str(pathlib.Path(str(REPO_ROOT)) / "data_small")
    doc = study.emergence_doc([on_test], "quick", data, 6, {}, split="test")
    assert doc["provenance"]["roles_trees"] == "test"
    assert "roles_trees" not in study.emergence_doc([on_dev], "quick", data, 6, {})["provenance"]
    monkeypatch.setattr(study, "STUDIES", str(tmp_path))
    monkeypatch.setitem(PRESETS, "emerge-like", PRESETS["quick"])
    (tmp_path / "emerge-like.json").write_text(json.dumps({**doc, "study": "emerge-like"}))
    assert study.load_shipped_study("emerge-like")["seeds"] == [1]
    forged = {**doc, "study": "emerge-like", "provenance": {**doc["provenance"], "roles_trees": "dev"}}
    (tmp_path / "emerge-like.json").write_text(json.dumps(forged))
    with pytest.raises(MiniheadError, match=r"stale"):
        study.load_shipped_study("emerge-like")


def test_shipped_emergence_study_is_checked_against_the_preset_and_data(tmp_path, monkeypatch):
    """A study written by `emergence --study` is read by study.load_shipped_study(preset name) when its
    provenance is today's preset (no overrides), data_small's content hash and today's criteria; a study judged
    by other criteria or made with other settings is refused as stale, naming the command that remakes it."""
    from minihead.errors import MiniheadError
    from minihead.train import PRESETS
    monkeypatch.setattr(study, "STUDIES", str(tmp_path))
    data = str(pathlib.Path(str(REPO_ROOT)) / "data_small")
    criteria = {"criteria": findings.CRITERIA_VERSION}
    doc = {"study": "quick", "summary": {},
           "provenance": {**study.emergence_provenance("quick", data, None, {}), **criteria}}
    (tmp_path / "emerge-like.json").write_text(json.dumps(doc))
    monkeypatch.setitem(PRESETS, "emerge-like", PRESETS["quick"])
    assert study.load_shipped_study("emerge-like")["summary"] == {}
    old = {**doc, "provenance": {**doc["provenance"], "criteria": findings.CRITERIA_VERSION - 1}}
    (tmp_path / "emerge-like.json").write_text(json.dumps(old))
    with pytest.raises(MiniheadError, match=r"stale, its criteria differs"):
        study.load_shipped_study("emerge-like")
    doc["provenance"] = {**study.emergence_provenance("quick", data, None, {"max_steps": 7}), **criteria}
    (tmp_path / "emerge-like.json").write_text(json.dumps(doc))
    with pytest.raises(MiniheadError, match=r"stale, its preset differs.*emergence --config quick --seeds"):
        study.load_shipped_study("emerge-like")


def test_shipped_emergence_study_of_the_control_is_checked_against_the_control(tmp_path, monkeypatch):
    """An emergence study names its data folder (emergence_doc's "data"): a study of data_small/control is checked
    against the control's content hash, so it loads; the same document claiming data_small is refused as stale,
    and the command that remakes it names the preset and the data folder."""
    from minihead.errors import MiniheadError
    monkeypatch.setattr(study, "STUDIES", str(tmp_path))
    control = str(pathlib.Path(str(REPO_ROOT)) / "data_small" / "control")
    doc = {"study": "quick", "data": "data_small/control", "summary": {},
           "provenance": {**study.emergence_provenance("quick", control, None, {}),
                          "criteria": findings.CRITERIA_VERSION}}
    (tmp_path / "quick-control.json").write_text(json.dumps(doc))
    assert study.load_shipped_study("quick-control")["data"] == "data_small/control"
    (tmp_path / "quick-control.json").write_text(json.dumps({**doc, "data": "data_small"}))
    with pytest.raises(MiniheadError, match=r"stale, its data differs.*emergence --config quick --seeds 1,2,3 "
                                            r"--data data_small --study"):
        study.load_shipped_study("quick-control")


TINY = dict(max_steps=5, eval_every=3, d_model=16, n_heads=2, d_ff=16, n_train=60, dev_bleu_sentences=4)


def test_trace_measures_the_uninterrupted_run_and_resumes(tmp_path):
    """emergence.trace_seed: rows every N steps and at max_steps; the run is trained in segments and resumed, yet
    its last row is the measurement (head functions and dev BLEU) of one uninterrupted training of the same
    settings with early stopping off; an interruption after a checkpoint but before its row resumes to the same
    rows; a trace whose run is past its next step, or made on other trees, is refused naming the file."""
    from minihead import checkpoint, study
    from minihead.errors import MiniheadError
    from minihead.train import dev_bleu, train
    args = ("data_small", "quick", 1, TINY, 2, str(tmp_path / "runs"), 6)
    rows = emergence.trace_seed(*args, progress=False)
    assert [r["step"] for r in rows] == [2, 4, 5]
    assert set(rows[0]) == {"step", "dev_bleu", "positional", "syntactic", "rare"}
    out, ov = study.trace_folder(*args[:6], n_trees=6)
    assert ov["patience"] == 5 // 3 + 1 and "patience2" in out and "trace-every2-trees6" in out
    _, trees, corpus, cfg, tcfg = study.prepare("quick", "data_small", **ov)
    whole = train(corpus, cfg, tcfg, str(tmp_path / "whole"), progress=False)
    pos, syn, rare = stages.measure_functions(whole.params, cfg, corpus.vocab, trees["dev"][:6], corpus.src_freq)
    assert [rows[-1]["positional"], rows[-1]["syntactic"], rows[-1]["rare"]] == json.loads(json.dumps([pos, syn, rare]))
    assert rows[-1]["dev_bleu"] == dev_bleu(whole.params, cfg, corpus, tcfg.dev_bleu_sentences)
    path = pathlib.Path(out) / "trace.json"
    doc = checkpoint.load_json(path)
    checkpoint.save_json(path, {**doc, "rows": doc["rows"][:2]})     # last.npz is at step 5, its row was lost
    assert emergence.trace_seed(*args, progress=False) == rows
    checkpoint.save_json(path, {**doc, "rows": doc["rows"][:1]})     # step 4 can no longer be measured
    with pytest.raises(MiniheadError, match=r"last.npz: the run is at step 5, past step 4.*delete"):
        emergence.trace_seed(*args, progress=False)
    checkpoint.save_json(path, {**doc, "key": {**doc["key"], "trees": "other"}})
    with pytest.raises(MiniheadError, match=r"trace.json: traced on other dev trees"):
        emergence.trace_seed(*args, progress=False)


def test_trace_command_prints_writes_and_plots(tmp_path, capsys):
    """`emergence --trace N`: a table row per traced step with a column per seed, --json the trace document
    (with the provenance the chapters check; study.load_trace reads it back and refuses it when stale, missing
    or lacking a field), --figure a plot of share, confidence and relations per seed."""
    from minihead.errors import MiniheadError
    argv = ["emergence", "--seeds", "1,2", "--trace", "3", "--set"] + [f"{k}={v}" for k, v in TINY.items()] + [
        "--n-trees", "6", "--runs", str(tmp_path / "runs"), "--json", str(tmp_path / "t.json"),
        "--figure", str(tmp_path / "t.png")]
    traces = main(argv)
    out = capsys.readouterr().out
    assert list(traces) == [1, 2] and [r["step"] for r in traces[2]] == [3, 5]
    assert "| step | seed 1: BLEU, best +-1 head" in out and "\n| 3 | " in out and "\n| 5 | " in out and "early stopping off" in out
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["kind"] == "emergence-trace" and doc["every"] == 3 and doc["seeds"] == [1, 2]
    assert list(doc["traces"]) == ["1", "2"] and doc["provenance"]["preset"]["model"]["d_model"] == 16
    assert (tmp_path / "t.png").stat().st_size > 0
    assert doc["data"] == "data_small" and doc["overrides"] == TINY
    assert study.load_trace(str(tmp_path / "t.json"))["traces"] == doc["traces"]
    stale = {**doc, "overrides": {**TINY, "max_steps": 6}}
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    with pytest.raises(MiniheadError, match=r"stale.json: stale, its preset differs.*emergence --trace"):
        study.load_trace(str(tmp_path / "stale.json"))
    with pytest.raises(MiniheadError, match=r"nope.json: no such trace"):
        study.load_trace(str(tmp_path / "nope.json"))
    (tmp_path / "partial.json").write_text(json.dumps({k: v for k, v in doc.items() if k not in ("data", "traces")}))
    with pytest.raises(MiniheadError, match=r"partial.json: a trace without data, traces; remake it"):
        study.load_trace(str(tmp_path / "partial.json"))
    fig = report.plot_trace([doc, doc], labels=["needs", "control"])
    assert len(fig.axes) == 3 and all(len(ax.lines) == 2 * 2 + (ax in fig.axes[:2]) for ax in fig.axes)


@pytest.mark.parametrize("argv, message", [
    (["emergence", "--seeds", "1,x"], "--seeds '1,x': give whole numbers"),
    (["emergence", "--seeds", "1,1"], "each once"),
    (["emergence", "--set", "seed=3"], "give the seeds with --seeds"),
    (["emergence", "--data", "/nope"], "/nope: no such data folder"),
    (["emergence", "--n-trees", "0"], "--n-trees"),
    (["emergence", "--prune", "0.1,x"], "--prune '0.1,x': give L0 weights"),
    (["emergence", "--prune", "-1"], "none negative"),
    (["emergence", "--trace", "0"], "--trace 0: give the number of steps"),
    (["emergence", "--trace", "100", "--prune", "0.1"], "run --prune and --study without it"),
    (["emergence", "--figure", "x.png"], "--figure plots a trace; give --trace N"),
    (["emergence", "--trace", "100", "--split", "test"], "run --split test without it"),
    (["emergence", "--split", "train"], "invalid choice: 'train'"),
])
def test_emergence_refuses_bad_arguments_in_one_line(argv, message, capsys):
    """Bad seeds, a seed given through --set, a missing data folder and a non-positive --n-trees exit 2 with one
    line naming the problem, before any work."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_parse_seeds():
    """--seeds: comma-separated whole numbers, each once, at least one."""
    assert cli.parse_seeds("3, 1,2") == [3, 1, 2]
