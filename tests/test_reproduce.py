"""The one-command study end to end, at a miniature scale so that it runs in CI in seconds.

It uses the cached quick model (trained by the chapters or by the first test that needs it) and
tiny sweeps, and checks that the report holds every finding row beside the paper's number, that
the stages are cached (a second run recomputes nothing), and that the real-corpus path runs."""
import json
import pathlib

import pytest

from minihead import reproduce
from minihead.cache import CacheError, cached_json, key_hash

TINY = {"study": "quick", "n_dev": 40, "n_test": 40, "n_ablation": 10, "enc_lambdas": (0.05,),
        "all_lambdas": (0.05,), "prune_steps": 15, "n_scratch": 1, "scratch_steps": 20,
        "prune": {"lr_gates": 0.2, "max_tokens": 1250}}


def test_reproduce_writes_a_report_beside_the_paper(tmp_path):
    """reproduce() at a tiny scale writes report/README.md with a row for every finding beside the
    paper's number, the wall time and the Table 1 / Table 2 sections, the figures, and results.json
    with the time of each stage; a second run hits the cache for its five cacheable stages and gives
    the same results."""
    out = tmp_path / "report"
    path = reproduce.reproduce(out=str(out), progress=False, scale=TINY, log=lambda *a: None)
    text = pathlib.Path(path).read_text()
    for row in ("a few heads carry most relevance", "positional heads", "syntactic heads",
                "most encoder heads prunable", "specialised heads survive pruning longest",
                "encoder self-attention pruned first", "decoder self-attention survives in lower layers",
                "pruned beats the same configuration from scratch", "Wall time of this run",
                "Table 1 shape", "Table 2"):
        assert row in text, row
    assert "10 of 48 kept, -0.15 BLEU (WMT)" in text, "the paper's number stands beside ours"
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


def test_real_corpus_needs_its_three_files():
    """python -m minihead reproduce on a real corpus needs --train-src, --train-tgt and --conllu
    together: one of them alone exits naming all three."""
    from minihead.__main__ import main
    with pytest.raises(SystemExit, match="--train-src, --train-tgt and --conllu"):
        main(["reproduce", "--train-src", "x.en"])


# ------------------------------------------------------------------ the stage cache (minihead/cache.py)
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
