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
    """Read a study over seeds: for each shipped study (chapters/studies/quick.json and full.json), list every
    finding of minihead.findings.FINDINGS with the number of seeds it held in, and check that the status the
    chapters act on agrees with that count ("all": every seed, a claim the chapters assert; "none": no seed;
    "some": in between)."""
    for name in ("quick", "full"):
        study = json.loads((ROOT / "chapters" / "studies" / f"{name}.json").read_text())
        summary = study["summary"]
        print(f"{name}: seeds {study['seeds']}")
        assert set(summary) == set(findings.FINDINGS), sorted(set(summary) ^ set(findings.FINDINGS))
        for key, what in findings.FINDINGS.items():
            f = summary[key]
            print(f"  {what:75s} {f['held_in']} of {f['of']} ({f['status']})")
            assert f["of"] == len(study["seeds"])
            want = "all" if f["held_in"] == f["of"] else "none" if f["held_in"] == 0 else "some"
            assert f["status"] == want, (name, key, f)


if __name__ == "__main__":
    from run_exercises import main   # beside this file: the runner every solution file shares
    main(globals(), sys.argv[1:])
