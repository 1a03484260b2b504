"""The exercises' solutions: every function ``exercise_K`` of ``chapters/solutions/NN_solutions.py`` runs, from the
repository root, as ``python chapters/solutions/NN_solutions.py exercise_K`` in quick mode with one BLAS thread,
and its asserts hold; and the chapters' "Exercises" cells and the solution files point at each other.

Each solution ends with asserts on its result, so a test here fails when the package stops doing what the
exercise teaches. They use small inputs only (hand-made maps, tiny models, the tiny settings of
tests/test_emergence.py), so the whole file runs in well under two minutes on one core."""
import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "chapters" / "solutions").glob("[0-9][0-9]_solutions.py"))
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))
POINTER = re.compile(r"`solutions/(\d\d_solutions\.py)`,\s*`(exercise_\d+)`")


def exercises(path):
    """Names of the top-level exercise_K functions of a solution file, read with ast, in order."""
    tree = ast.parse(path.read_text())
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("exercise_")]


CASES = [(p, name) for p in SOLUTIONS for name in exercises(p)]


def exercise_cell(chapter):
    """The text of the chapter source's last cell when it is the "## Exercises" markdown cell, else None."""
    cells = re.split(r"^# %%.*$", chapter.read_text(), flags=re.M)
    last = cells[-1]
    return last if "# ## Exercises" in last else None


@pytest.mark.parametrize("path,name", CASES, ids=[f"{p.stem}::{n}" for p, n in CASES])
def test_solution_runs_and_its_checks_hold(path, name):
    """The solution runs as a script from the repository root (MINIHEAD_QUICK=1, OPENBLAS_NUM_THREADS=1, the
    matplotlib backend Agg) and exits 0: every assert at its end held."""
    env = {**os.environ, "MINIHEAD_QUICK": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    env.pop("MINIHEAD_BACKEND", None)                     # the solutions are NumPy exercises
    done = subprocess.run([sys.executable, str(path.relative_to(ROOT)), name], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{path.name} {name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert f"--- {name}" in done.stdout


def test_every_exercise_has_a_solution_and_every_solution_an_exercise():
    """Each chapter (01-07; the index 00 too, when it has one) ends with one "## Exercises" markdown cell; every
    exercise in it points at `solutions/NN_solutions.py`, `exercise_K` of its own chapter, which exists, and every
    exercise_K of a solution file is pointed at by its chapter; chapters 01-07 have 3 to 5 exercises."""
    assert SOLUTIONS, "no solution files in chapters/solutions/"
    pointed = set()
    for chapter in CHAPTERS:
        cell = exercise_cell(chapter)
        if cell is None:
            assert chapter.name.startswith("00_"), f"{chapter.name}: no '## Exercises' cell at its end"
            continue
        refs = POINTER.findall(cell)
        assert all(f.startswith(chapter.name[:2]) for f, _ in refs), (chapter.name, refs)
        if not chapter.name.startswith("00_"):
            assert 3 <= len(refs) <= 5, f"{chapter.name}: {len(refs)} exercises"
        for f, name in refs:
            path = ROOT / "chapters" / "solutions" / f
            assert path.exists() and name in exercises(path), f"{chapter.name} points at {f} {name}"
        pointed |= set(refs)
    defined = {(p.name, name) for p, name in CASES}
    assert defined == pointed, f"solutions no chapter points at: {sorted(defined - pointed)}"
