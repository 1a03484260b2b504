"""The README's reader's path stays true: every function and test its formula map names exists, and the tests read
as a specification (each states what it checks in its docstring)."""
import ast
import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FUNCTION = re.compile(r"`(minihead/[\w/]+\.py):([\w.]+)`")          # `minihead/file.py:name` or :Class.method
TEST = re.compile(r"`(tests/test_\w+\.py)::(\w+)`")                 # `tests/test_x.py::test_name`
# The formulas the map must cover (issue 13): a word of each, found in the first column of some row.
REQUIRED = ("hard-concrete sample", "expected L0", "test-time gate", "LRP linear", "LRP LayerNorm", "LRP embedding",
            "LRP element-wise", "head relevance", "confidence", "positional criterion", "syntactic accuracy",
            "offset baseline", "rare-word share", "Michel importance", "linear y = x W + b, backward",
            "LayerNorm, backward", "masked softmax, backward", "label-smoothed cross-entropy, backward",
            "feed-forward", "gated multi-head attention", "the whole encoder-decoder, backward")
# Test files whose every test must have a docstring. The other files join the list as their owners finish
# (issue 13 asks it of all of tests/).
DOCUMENTED = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))   # every test file, none forgotten


def formula_rows(readme_text):
    """The rows of the table under '## Formula map' as lists of cells (header and rule rows left out)."""
    section = readme_text.split("\n## Formula map\n", 1)
    if len(section) < 2:
        return []
    rows = []
    for line in section[1].split("\n## ", 1)[0].splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:]


def defined_tests(path):
    """Names of the top-level test functions of a test file, read with ast (the file is not imported)."""
    tree = ast.parse((ROOT / path).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


def missing_names(rows):
    """Every function and test a formula-map row names that does not exist, as 'row N: name (why)' lines;
    also rows that name no function or no test."""
    problems = []
    for i, cells in enumerate(rows, 1):
        text = " | ".join(cells)
        functions, tests = FUNCTION.findall(text), TEST.findall(text)
        if not functions or not tests:
            problems.append(f"row {i} ({cells[0]}): names {len(functions)} functions and {len(tests)} tests")
        for path, dotted in functions:
            module = importlib.import_module(path[:-3].replace("/", "."))
            obj = module
            for part in dotted.split("."):
                obj = getattr(obj, part, None)
            if not callable(obj):
                problems.append(f"row {i} ({cells[0]}): {path}:{dotted} is not a function there")
        for path, name in tests:
            if not (ROOT / path).exists():
                problems.append(f"row {i} ({cells[0]}): {path} does not exist")
            elif name not in defined_tests(path):
                problems.append(f"row {i} ({cells[0]}): {path}::{name} is not a test there")
    return problems


def test_formula_map_names_only_functions_and_tests_that_exist():
    """Each row of the README's formula map names at least one function (`minihead/file.py:name`, imported and
    looked up with getattr, Class.method allowed) and one test (`tests/test_x.py::test_name`, found by parsing
    the file with ast), and every one it names exists. A rename that leaves a row stale fails here."""
    rows = formula_rows((ROOT / "README.md").read_text())
    assert len(rows) >= 30, f"the formula map has {len(rows)} rows"
    problems = missing_names(rows)
    assert not problems, "\n".join(problems)


def test_formula_map_covers_every_formula_of_the_paper():
    """The map has a row for each formula issue 13 lists: the hard-concrete sample, expected L0, the test-time
    gate, each LRP rule, head relevance, confidence, the positional criterion, syntactic accuracy and the offset
    baseline, the rare-word share, Michel importance, and each layer's backward."""
    firsts = [cells[0] for cells in formula_rows((ROOT / "README.md").read_text())]
    absent = [word for word in REQUIRED if not any(word in first for first in firsts)]
    assert not absent, f"no formula-map row for {absent}"


def test_formula_map_check_reports_stale_rows():
    """missing_names reports a renamed function, a renamed test, a missing method and a row without a test,
    one line each naming the row; a correct row passes."""
    good = ["expected L0", "", "`minihead/gates.py:HardConcrete.penalty_forward`",
            "`tests/test_gates.py::test_penalty_matches_monte_carlo`"]
    assert missing_names([good]) == []
    bad = [["a", "", "`minihead/gates.py:no_such_function`", "`tests/test_gates.py::test_penalty_matches_monte_carlo`"],
           ["b", "", "`minihead/gates.py:HardConcrete.no_such_method`", "`tests/test_gates.py::test_no_such_test`"],
           ["c", "", "`minihead/gates.py:l0_total`", "no test"]]
    problems = missing_names(bad)
    assert len(problems) == 4, problems
    assert problems[0].startswith("row 1 (a): minihead/gates.py:no_such_function")
    assert any("test_no_such_test is not a test there" in p for p in problems)
    assert problems[-1] == "row 3 (c): names 1 functions and 0 tests"


@pytest.mark.parametrize("name", DOCUMENTED)
def test_every_test_states_what_it_specifies(name):
    """Every test function of the file has a docstring (the README's promise: read a test first, then the
    function it checks)."""
    tree = ast.parse((ROOT / "tests" / name).read_text())
    bare = [n.name for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test") and not ast.get_docstring(n)]
    assert not bare, f"tests/{name}: tests without a docstring: {bare}"
