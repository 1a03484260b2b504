"""Solution to the exercise of chapter 0 (the index). Run from the repository root:

    python chapters/solutions/00_solutions.py

Reads the shipped studies only; the exercise ends with asserts that check its result.
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repository root

from minihead import findings


def exercise_1():
    """Read a study over seeds: for the shipped quick study (chapters/studies/quick.json), list every per-model
    finding of minihead.findings.FINDINGS (not pooled) with the number of its testable seeds it held in, and
    check that the status the chapters act on agrees with that count ("holds": every testable seed, a claim the
    chapters assert; "does not hold": none; "varies": in between; "untestable" / "not measured": no seed could
    judge it)."""
    study = json.loads((ROOT / "chapters" / "studies" / "quick.json").read_text())
    summary = study["summary"]
    print(f"quick: seeds {study['seeds']}")
    assert set(summary) == set(findings.FINDINGS), sorted(set(summary) ^ set(findings.FINDINGS))
    for key in findings.PER_SEED:
        f = summary[key]
        print(f"  {findings.what(key):75s} {f['held_in']} of {f['testable']} testable ({f['status']})")
        assert f["of"] == len(study["seeds"])
        if f["testable"] == 0:
            assert f["status"] in ("untestable", "not measured"), (key, f)
        else:
            want = ("holds" if f["held_in"] == f["testable"] else "does not hold" if f["held_in"] == 0
                    else "varies")
            assert f["status"] == want, (key, f)


if __name__ == "__main__":
    from run_exercises import main   # beside this file: the runner every solution file shares
    main(globals(), sys.argv[1:])
