"""The one-command study end to end, at a miniature scale so that it runs in CI in seconds.

It uses the cached quick model (trained by the chapters or by the first test that needs it) and
tiny sweeps, and checks that the report holds every finding row beside the paper's number, that
the stages are cached (a second run recomputes nothing), and that the real-corpus path runs. The
study over seeds trains its own tiny models (a few steps each) in a temporary runs folder."""
import json
import os
import pathlib
import statistics

import pytest

from minihead import checkpoint, findings, reproduce, stages, study
from minihead.stages import CacheError, cached_json, key_hash
from minihead.cli import main
from minihead.errors import MiniheadError

TINY = {"study": "quick", "n_dev": 40, "n_test": 40, "n_ablation": 10, "enc_lambdas": (0.05,),
        "all_lambdas": (0.05,), "prune_steps": 15, "n_scratch": 1, "scratch_steps": 20,
        "prune": {"lr_gates": 0.2, "max_tokens": 1250}}
# a model trained for three steps (seconds): for the study over seeds, which trains one per seed
TINY_MODEL = {"max_steps": 3, "eval_every": 3, "d_model": 16, "n_heads": 2, "d_ff": 16, "n_train": 60,
              "dev_bleu_sentences": 4}


def test_reproduce_writes_a_report_beside_the_paper(tmp_path):
    """reproduce() at a tiny scale writes report/README.md with a row for every finding beside the
    paper's number, the wall time and the Table 1 / Table 2 sections, the figures, and results.json
    with the time of each stage; a second run hits the cache for its five cacheable stages and gives
    the same results."""
    out = tmp_path / "report"
    path = reproduce.reproduce(out=str(out), progress=False, scale=TINY, log=lambda *a: None)
    text = pathlib.Path(path).read_text()
    for row in ("a few heads carry most relevance", "positional heads", "syntactic heads",
                "most encoder heads prunable", "the head functions survive pruning", "heads with a role are pruned last",
                "the heads with a role carry more relevance", "encoder self-attention pruned first",
                "decoder-encoder attention pruned last", "decoder self-attention survives in lower layers",
                "pruned beats the same configuration from scratch", "Wall time of this run",
                "Table 1 shape", "Table 2"):
        assert row in text, row
    assert "10 of 48 kept, -0.15 BLEU (WMT)" in text, "the paper's number stands beside ours"
    assert "lambda = 0 run at the same step" in text, "the step-matched reference is the criterion's"
    assert "## Table 1 shape: best head and offset baseline per relation (test trees)" in text
    assert (out / "relevance.png").stat().st_size > 0 and (out / "prune_encoder.png").stat().st_size > 0
    results = json.loads((out / "results.json").read_text())
    assert len(results["enc"]) == 1 and len(results["scratch"]) == 1
    assert list(results.pop("seconds")) == ["train", "importance", "roles", "prune encoder", "prune all",
                                            "from scratch"]
    # every stage is cached now: a second run gives the same numbers
    reproduce.reproduce(out=str(tmp_path / "again"), progress=False, scale=TINY, log=lambda *a: None)
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert len(again.pop("cached_stages")) == 5, "importance, baseline, two prunings and from scratch all cached"
    results.pop("cached_stages"), again.pop("seconds")
    assert again == results


def test_reproduce_prunes_as_the_paper_does_at_a_tiny_scale(tmp_path):
    """A scale in the heads8 scale's manner (pruning runs fine-tuned once their gates settle, the need scores along
    the encoder sweep, the configuration trained from scratch to the preset's plateau rule) runs end to end on a
    tiny model: each encoder run carries the functions and the need scores of its pruned model, the report has the
    table of needs along the sweep and says how the from-scratch model was trained and for how many steps."""
    scale = {**TINY, "train": TINY_MODEL, "enc_lambdas": (0.0, 0.05), "scratch_steps": stages.PLATEAU,
             "needs_after": True, "prune": {**TINY["prune"], "finetune": True}}
    path = reproduce.reproduce(out=str(tmp_path / "r"), progress=False, scale=scale, log=lambda *a: None)
    text = pathlib.Path(path).read_text()
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert [r["lam"] for r in results["enc"]] == [0.0, 0.05]
    assert all(r["functions_after"] is not None and set(r["needs_after"]) for r in results["enc"])
    assert "## Which jobs survive as encoder heads go" in text
    assert f"Trained from scratch to the preset's own plateau of dev BLEU, its best dev checkpoint scored: lambda " \
           f"0.05, {TINY_MODEL['max_steps']} steps." in text


def test_reproduce_over_seeds_counts_the_seeds_each_finding_holds_in(tmp_path):
    """reproduce(seeds=[1, 2]) on tiny models: out/README.md holds the table over seeds (every finding with its
    verdict and its numbers), each seed's own report is in out/seed-K/, study.json parses and its summary is
    findings.summarize of its per-seed verdicts (held_in counts the seeds whose verdict holds, a per-model
    finding's status follows that count over the testable seeds, means over the per-seed values; every encoder
    run carries its step-matched reference and the functions re-measured on the pruned model); each seed's
    stages are cached in its own run folder (seed 1, the preset's, shares
    the folder of the model trained without --seeds), and a second call reads every cache (no file rewritten,
    same verdicts)."""
    scale = {**TINY, "n_dev": 20, "n_test": 10, "n_ablation": 5, "n_trees": 30, "train": TINY_MODEL}
    runs = tmp_path / "runs"

    def run(out):
        return reproduce.reproduce(out=str(tmp_path / out), progress=False, scale=scale, seeds=[1, 2],
                                   runs=str(runs), log=lambda *a: None)
    text = pathlib.Path(run("report")).read_text()
    assert "## Findings over seeds" in text and "seed-2/README.md" in text
    for name in findings.FINDINGS:
        assert any(line.startswith(f"| {findings.what(name)} |") for line in text.splitlines()), name
    assert (tmp_path / "report" / "seed-1" / "README.md").exists() and (tmp_path / "report" / "seed-2" / "relevance.png").exists()
    doc = json.loads((tmp_path / "report" / "study.json").read_text())
    assert doc["seeds"] == [1, 2] and [p["seed"] for p in doc["per_seed"]] == [1, 2]
    models = [p["model"] for p in doc["per_seed"]]          # the fingerprint of each seed's trained weights
    assert len(set(models)) == 2 and all(len(m) == 40 for m in models)
    summary = doc["summary"]
    assert list(summary) == list(findings.FINDINGS)
    as_text = lambda obj: json.dumps(obj, sort_keys=True)     # noqa: E731  (NaN-safe equality: a rho may be NaN)
    assert as_text(summary) == as_text(findings.summarize([p["findings"] for p in doc["per_seed"]]))
    for name, f in summary.items():
        held = [p["findings"][name]["held"] for p in doc["per_seed"]]
        testable = [p["findings"][name]["status"] in ("holds", "does not hold") for p in doc["per_seed"]]
        assert (f["held_in"], f["of"], f["testable"]) == (sum(held), 2, sum(testable))
        if name not in findings.POOLED and any(testable):
            assert f["status"] == ("holds" if sum(held) == sum(testable) else "varies" if any(held)
                                   else "does not hold"), name
        for key, (mean, sd, values) in f["numbers"].items():
            xs = [x for x in values if x is not None and x == x]
            assert len(values) == 2 and (mean is None if not xs else mean == pytest.approx(statistics.fmean(xs)))
    for k in (1, 2):
        enc = json.loads((tmp_path / "report" / f"seed-{k}" / "results.json").read_text())["enc"]
        assert all(r["ref_bleu"] is not None and isinstance(r["functions_after"], list) for r in enc)
    folders = sorted(p.name for p in runs.iterdir() if p.is_dir())
    assert len(folders) == 2 and sum("-seed2-" in f for f in folders) == 1
    assert study.run_folder("quick", runs=str(runs), **TINY_MODEL) in [str(runs / f) for f in folders]
    caches = {p: p.stat().st_mtime_ns for f in folders for p in (runs / f).glob("*.json")}
    for f in folders:
        kinds = {p.name.split("-")[0] for p in (runs / f).glob("*.json")}
        assert {"importance", "prune", "scratch"} <= kinds, (f, kinds)
    run("again")
    again = json.loads((tmp_path / "again" / "study.json").read_text())
    assert {p: p.stat().st_mtime_ns for p in caches} == caches, "no cache file rewritten"
    assert as_text([p["findings"] for p in again["per_seed"]]) == as_text([p["findings"] for p in doc["per_seed"]])
    for k in (1, 2):
        seed_results = json.loads((tmp_path / "again" / f"seed-{k}" / "results.json").read_text())
        assert len(seed_results["cached_stages"]) == 5
        assert as_text(seed_results["findings"]) == as_text(doc["per_seed"][k - 1]["findings"])


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "--seeds", "1,x"], "--seeds '1,x': give whole numbers"),
    (["reproduce", "--seeds", "2,2"], "each once"),
    (["reproduce", "--seeds", "1", "--train-src", "a", "--train-tgt", "b", "--conllu", "c"],
     "--seeds: the study over seeds runs on data_small"),
    (["reproduce", "--quick", "--scale", "full"], "--quick is --scale quick"),
    (["reproduce", "--scale", "heads8", "--train-src", "a", "--train-tgt", "b", "--conllu", "c"],
     "--scale: a real corpus runs at quick or full scale"),
    (["reproduce", "--scale", "huge"], "invalid choice: 'huge'"),
])
def test_reproduce_refuses_bad_seeds_in_one_line(argv, message, capsys):
    """reproduce --seeds takes distinct whole numbers, and only on data_small: anything else exits 2 with one
    line naming the problem, before any work."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and message in err and len(err.splitlines()) == 1


def test_reproduce_command_passes_its_seeds(tmp_path, monkeypatch):
    """python -m minihead reproduce --quick --seeds 3,1 runs the study over those seeds, in that order, into
    --out; without --seeds it runs the one model of the preset's seed (seeds None)."""
    calls = []
    monkeypatch.setattr(study, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(reproduce, "reproduce", lambda *a, **kw: calls.append((a, kw)))
    main(["reproduce", "--quick", "--seeds", "3,1", "--out", str(tmp_path / "r"), "--no-progress"])
    main(["reproduce", "--quick", "--out", str(tmp_path / "r"), "--no-progress"])
    main(["reproduce", "--scale", "heads8", "--seeds", "2", "--out", str(tmp_path / "r"), "--no-progress"])
    main(["reproduce", "--out", str(tmp_path / "r"), "--no-progress"])
    quick, full, heads8 = (study.SCALES[k] for k in ("quick", "full", "heads8"))
    assert calls == [((True, str(tmp_path / "r"), False), {"scale": quick, "seeds": [3, 1]}),
                     ((True, str(tmp_path / "r"), False), {"scale": quick, "seeds": None}),
                     ((False, str(tmp_path / "r"), False), {"scale": heads8, "seeds": [2]}),
                     ((False, str(tmp_path / "r"), False), {"scale": full, "seeds": None})]


@pytest.mark.parametrize("name", sorted(study.SCALES))
def test_every_scale_names_a_preset_and_settings_its_stages_take(name):
    """Each scale of study.SCALES is runnable as written: its study is a preset, its pruning settings are
    PruneSettings fields, its lambdas are non-negative with the lambda = 0 reference among the encoder ones, and
    its from-scratch budget is a number of steps, None (the pruned model's budget) or "plateau" (the preset's own
    stopping rule)."""
    from minihead.prune import PruneSettings
    from minihead.train import PRESETS
    s = study.SCALES[name]
    assert s["study"] in PRESETS
    PruneSettings.of(**s.get("prune", {})).check()
    PruneSettings.of(**{**s.get("prune", {}), **s.get("prune_all", {})}).check()
    assert 0.0 in s["enc_lambdas"] and min(s["enc_lambdas"]) >= 0 and min(s["all_lambdas"]) > 0
    assert s["scratch_steps"] in (None, stages.PLATEAU) or int(s["scratch_steps"]) > 0


def test_a_model_trained_under_another_blas_thread_count_is_never_reused(tmp_path, monkeypatch):
    """README command one (reproduce, the machine's BLAS threads: 2 on a 2-core machine) then command two (the
    tests, one thread by conftest): load_study's run folder names the thread count, so a model trained under
    another count sits in another folder and the test session trains its own instead of loading it."""
    threads = study.blas_threads()
    monkeypatch.setattr(study, "blas_threads", lambda: threads + 1)
    other = study.load_study("quick", runs=str(tmp_path), progress=False, **TINY_MODEL)
    monkeypatch.undo()
    mine = study.load_study("quick", runs=str(tmp_path), progress=False, **TINY_MODEL)
    assert f"-t{threads + 1}-" in other.path and f"-t{threads}-" in mine.path
    assert pathlib.Path(other.path).parent != pathlib.Path(mine.path).parent
    assert len(list(tmp_path.iterdir())) == 2


def test_a_model_trained_under_other_blas_kernels_is_never_reused(tmp_path, monkeypatch):
    """A run folder names the BLAS kernels (study.blas_kernel: OpenBLAS's CPU family, which OPENBLAS_CORETYPE picks;
    float32 sums differ between them as between thread counts), so a model trained where OpenBLAS chose other
    kernels sits in another folder and this machine trains its own instead of loading it."""
    mine_kernel = study.blas_kernel()
    assert mine_kernel and mine_kernel == mine_kernel.lower()
    monkeypatch.setattr(study, "blas_kernel", lambda: "otherkernels")
    other = study.load_study("quick", runs=str(tmp_path), progress=False, **TINY_MODEL)
    monkeypatch.undo()
    mine = study.load_study("quick", runs=str(tmp_path), progress=False, **TINY_MODEL)
    assert "-otherkernels-" in other.path and f"-{mine_kernel}-" in mine.path
    assert pathlib.Path(other.path).parent != pathlib.Path(mine.path).parent
    assert len(list(tmp_path.iterdir())) == 2


def test_real_corpus_needs_its_three_files():
    """python -m minihead reproduce on a real corpus needs --train-src, --train-tgt and --conllu
    together: one of them alone exits naming all three."""
    from minihead.__main__ import main
    with pytest.raises(SystemExit, match="--train-src, --train-tgt and --conllu"):
        main(["reproduce", "--train-src", "x.en"])


# ------------------------------------------------------------------ the stage cache (minihead/stages.py)
def test_cache_recomputes_on_a_new_key_and_reads_back_the_same_key(tmp_path):
    """cached_json computes on a missing file, reads the result back (``cached`` True, compute not called) for
    the same key, and recomputes (and rewrites) when the key differs; key_hash depends on the key's content, not
    on its dict order."""
    path, calls = str(tmp_path / "stage.json"), []

    def compute(v):
        return lambda: calls.append(v) or {"value": v}
    assert cached_json(path, {"a": 1}, compute(1)) == {"value": 1, "cached": False}
    assert cached_json(path, {"a": 1}, compute(2)) == {"value": 1, "cached": True} and calls == [1]
    assert cached_json(path, {"a": 2}, compute(3)) == {"value": 3, "cached": False} and calls == [1, 3]
    assert json.loads(pathlib.Path(path).read_text()) == {"key": {"a": 2}, "result": {"value": 3}}
    assert key_hash({"a": 1, "b": 2}) == key_hash({"b": 2, "a": 1}) != key_hash({"a": 1, "b": 3})


@pytest.mark.parametrize("content", ["{ not json", "[1, 2]", '{"key": {"a": 1}}'])
def test_corrupt_cache_file_is_a_one_line_error_naming_it(tmp_path, content):
    """A cache file that is not JSON, or not a {key, result} object, raises CacheError with one line naming the
    file and saying to delete it; it is neither recomputed nor overwritten."""
    path = tmp_path / "stage.json"
    path.write_text(content)
    with pytest.raises(CacheError) as e:
        cached_json(str(path), {"a": 1}, lambda: {"value": 1})
    msg = str(e.value)
    assert msg.startswith(f"{path}: cache file") and "delete it" in msg and len(msg.splitlines()) == 1
    assert path.read_text() == content


def test_cache_write_is_atomic_and_leaves_no_temporary(tmp_path, monkeypatch):
    """The result is written to a temporary file and moved into place: after a write only the cache file is in
    the folder, and a write that fails half-way (here json.dump raising) leaves the previous file intact and no
    temporary behind."""
    path = tmp_path / "stage.json"
    cached_json(str(path), {"a": 1}, lambda: {"value": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["stage.json"]
    before = path.read_text()

    def broken_dump(obj, f, **kw):
        f.write('{"key": {"a": 2}, "res')
        raise OSError("disk full")
    monkeypatch.setattr(json, "dump", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        cached_json(str(path), {"a": 2}, lambda: {"value": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["stage.json"] and path.read_text() == before


def test_shipped_study_is_refused_when_missing_or_stale(tmp_path, monkeypatch):
    """The chapters judge their claims by chapters/studies/<scale>.json; it is refused, with the command that
    remakes it, when the file is missing, does not parse (a line number in the message), holds no study, or
    when its provenance (scale settings, preset, data hash) is not today's; and read when it matches."""
    monkeypatch.setattr(study, "STUDIES", str(tmp_path))
    with pytest.raises(MiniheadError, match=r"quick.json: no study over seeds for .quick.; remake it with .python -m minihead reproduce --quick --seeds 1,2,3"):
        study.load_shipped_study("quick")
    doc = {"summary": {}, "provenance": study.study_provenance(study.SCALES["quick"])}
    (tmp_path / "quick.json").write_text(json.dumps(doc))
    assert study.load_shipped_study("quick")["summary"] == {}
    doc["provenance"]["data"] = "00000000"
    (tmp_path / "quick.json").write_text(json.dumps(doc))
    with pytest.raises(MiniheadError, match="stale, its data differs"):
        study.load_shipped_study("quick")
    (tmp_path / "quick.json").write_text('{"summary": {')                 # cut off mid-write
    with pytest.raises(MiniheadError, match=r"quick.json: does not parse as a study \(.*line 1.*remake it with"):
        study.load_shipped_study("quick")
    (tmp_path / "quick.json").write_text("[1, 2]")
    with pytest.raises(MiniheadError, match="quick.json: holds no study"):
        study.load_shipped_study("quick")


def test_judge_against_study_asserts_claims_or_prints_without_a_study(tmp_path, monkeypatch):
    """The chapters' closing check: with a shipped study a finding held in every seed is asserted for the model;
    without one, strict (quick mode) re-raises the one-line error, otherwise no claim is asserted and the model's
    verdicts are printed."""
    monkeypatch.setattr(study, "STUDIES", str(tmp_path))
    mine = {"positional": findings.Positional(status="does not hold", share=0.5, share_all=0.4, offset=1,
                                              head=(0, 0), confidence=0.5, heads=[])}
    with pytest.raises(MiniheadError, match="no study over seeds"):
        study.judge_against_study("quick", mine)
    lines = []
    assert study.judge_against_study("quick", mine, strict=False, log=lines.append) is None
    assert "no claim is asserted" in lines[0] and "does not hold (0 head(s); best L0H0 on +1: 0.50" in lines[1]
    held = findings.Positional(status="holds", share=0.95, share_all=0.9, offset=1, head=(0, 0), confidence=0.9,
                               heads=[(0, 0, 1)])
    summary = findings.summarize([{"positional": held}, {"positional": held}])
    doc = {"study": "quick", "seeds": [1, 2], "blas_threads": 1, "summary": summary,
           "provenance": study.study_provenance(study.SCALES["quick"])}
    (tmp_path / "quick.json").write_text(json.dumps(doc))
    with pytest.raises(AssertionError, match="holds in every seed of the study"):
        study.judge_against_study("quick", mine, log=lines.append)
    assert study.judge_against_study("quick", {"positional": held}, log=lines.append) == {"positional": "holds"}
    assert lines[-1].splitlines()[1] == "| finding | paper | this project | criterion | verdict |"


def _split_study(doc, groups, root):
    """Write ``doc``'s seeds as separate study.json folders, one per group of seeds (as `reproduce --seeds K` on
    separate machines would); returns the folders."""
    folders = []
    for i, seeds in enumerate(groups):
        part = {**doc, "seeds": list(seeds), "per_seed": [p for p in doc["per_seed"] if p["seed"] in seeds],
                "summary": findings.summarize([p["findings"] for p in doc["per_seed"] if p["seed"] in seeds])}
        folder = root / f"part-{i}"
        folder.mkdir()
        (folder / "study.json").write_text(json.dumps(part))
        folders.append(str(folder))
    return folders


def test_studies_of_single_seeds_merge_into_the_study_over_all_of_them(tmp_path):
    """study.merge_seeds: the shipped quick study cut into seeds made apart (seed 1; seeds 2 and 3) merges back
    into the same seeds and the same summary over seeds; studies that differ in provenance, or share a seed, are
    refused naming the difference. `reproduce --merge SOURCE SOURCE --out OUT` (a report folder or its study.json)
    writes the merged README.md and study.json."""
    doc = json.loads((pathlib.Path(study.STUDIES) / "quick.json").read_text())
    folders = _split_study(doc, [[1], [2, 3]], tmp_path)
    parts = [study.read_study(os.path.join(f, "study.json")) for f in folders]
    merged = study.merge_seeds(parts[::-1])
    whole = findings.summarize([p["findings"] for p in doc["per_seed"]])     # the study over all three seeds
    assert merged["seeds"] == [1, 2, 3] and merged["summary"] == whole
    assert {k: v["status"] for k, v in whole.items()} == {k: v["status"] for k, v in doc["summary"].items()}
    other = {**parts[1], "provenance": {**parts[1]["provenance"], "data": "00000000"}}
    with pytest.raises(MiniheadError, match="differ in provenance"):
        study.merge_seeds([parts[0], other])
    with pytest.raises(MiniheadError, match=r"seed\(s\) \[1\] appear twice"):
        study.merge_seeds([parts[0], parts[0]])
    out = tmp_path / "merged"          # a report folder and a study.json file, in any order
    main(["reproduce", "--merge", os.path.join(folders[1], "study.json"), folders[0], "--out", str(out),
          "--no-progress"])
    written = json.loads((out / "study.json").read_text())
    assert written["seeds"] == [1, 2, 3] and written["summary"] == checkpoint.plain(whole)
    assert "over 3 seeds" in (out / "README.md").read_text()
    with pytest.raises(SystemExit):
        main(["reproduce", "--merge", str(tmp_path / "nothing"), "--out", str(tmp_path / "m2")])


def test_shipped_seeds_of_the_full_study_are_current_and_merge():
    """chapters/studies/seeds/full-seed-K.json (the full study made seed by seed, docs/studies.md): each is a study
    of one seed whose provenance is today's full scale (settings, data, criteria, the trees the roles are judged on),
    made with one BLAS thread, and together they merge into one study over their seeds."""
    files = sorted((pathlib.Path(study.STUDIES) / "seeds").glob("full-seed-*.json"))
    if not files:
        pytest.skip("no seed of the full study is shipped")
    docs = [study.read_study(str(f)) for f in files]
    for f, d in zip(files, docs):
        assert d["seeds"] == [int(f.stem.rsplit("-", 1)[1])] and d["blas_threads"] == 1, f.name
        assert d["provenance"] == study.study_provenance(study.SCALES["full"]), f.name
    merged = study.merge_seeds(docs)
    assert merged["seeds"] == sorted(d["seeds"][0] for d in docs)
    assert set(merged["summary"]) == set(findings.FINDINGS)


def test_shipped_full_study_is_the_merge_of_its_shipped_seeds():
    """chapters/studies/full.json, the study the README and the chapters' full mode judge by, is today's (its
    provenance checked by load_shipped_study) and is exactly the merge of the shipped single-seed studies
    chapters/studies/seeds/full-seed-K.json: the same seeds, per-seed records and summary, so no number in it
    comes from anywhere else."""
    full = study.load_shipped_study("full")
    files = sorted((pathlib.Path(study.STUDIES) / "seeds").glob("full-seed-*.json"))
    merged = study.merge_seeds([study.read_study(str(f)) for f in files])
    assert full["seeds"] == merged["seeds"] == [1, 2, 3]
    assert full["per_seed"] == merged["per_seed"]
    assert full["summary"] == checkpoint.plain(merged["summary"])


def test_model_mismatches_compares_the_fingerprints_of_one_preset_and_seed():
    """study.model_mismatches: two studies of the same preset that both fingerprint seed K must name one model;
    studies of other presets, and seeds only one study fingerprints, are not compared."""
    preset = {"model": {"n_heads": 2}, "train": {"max_steps": 10}}
    doc = lambda fps, p=preset: {"provenance": {"preset": p},                              # noqa: E731
                                 "per_seed": [{"seed": k, **({"model": m} if m else {})} for k, m in fps.items()]}
    same = study.model_mismatches({"full": doc({1: "a" * 40, 2: "b" * 40}), "needs": doc({1: "a" * 40, 3: "c" * 40})})
    assert same == ([], 1)
    bad, n = study.model_mismatches({"full": doc({1: "a" * 40, 2: "b" * 40}), "emerge": doc({1: "a" * 40, 2: "d" * 40})})
    assert n == 2 and bad == [f"emerge seed 2: {'d' * 10} vs full seed 2: {'b' * 10}"]
    other = doc({1: "e" * 40}, {"model": {"n_heads": 8}, "train": {"max_steps": 10}})
    assert study.model_mismatches({"full": doc({1: "a" * 40}), "wide": other, "old": doc({1: None})}) == ([], 0)


def test_shipped_studies_of_one_seed_hold_one_model():
    """The shipped studies of the default preset (the full study, the emergence study, the head x need study) that
    fingerprint a seed's model name the same weights for that seed, so a chapter that reads two of them reads one
    model (docs/studies.md, Determinism)."""
    docs = {name: json.loads((pathlib.Path(study.STUDIES) / f"{name}.json").read_text())
            for name in ("full", "emerge", "needs")}
    bad, n = study.model_mismatches(docs)
    assert not bad, bad
