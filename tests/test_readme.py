"""The README's reader's path stays true: its findings table is the one rendered from the shipped studies, every
function and test the formula map (docs/formulas.md) names exists, and the tests read as a specification (each
states what it checks in its docstring)."""
import ast
import difflib
import importlib
import json
import pathlib
import re

import pytest

from minihead import report

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORMULAS = ROOT / "docs" / "formulas.md"                            # the formula map's home, linked from the README
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
    """The rows of the table under '## Formula map' (of docs/formulas.md) as lists of cells (header and rule rows
    left out)."""
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
    """Each row of the formula map (docs/formulas.md) names at least one function (`minihead/file.py:name`, imported and
    looked up with getattr, Class.method allowed) and one test (`tests/test_x.py::test_name`, found by parsing
    the file with ast), and every one it names exists. A rename that leaves a row stale fails here."""
    rows = formula_rows(FORMULAS.read_text())
    assert len(rows) >= 30, f"the formula map has {len(rows)} rows"
    problems = missing_names(rows)
    assert not problems, "\n".join(problems)


def test_formula_map_covers_every_formula_of_the_paper():
    """The map has a row for each formula issue 13 lists: the hard-concrete sample, expected L0, the test-time
    gate, each LRP rule, head relevance, confidence, the positional criterion, syntactic accuracy and the offset
    baseline, the rare-word share, Michel importance, and each layer's backward."""
    firsts = [cells[0] for cells in formula_rows(FORMULAS.read_text())]
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


# ------------------------------------------------------------------ the README as an entry point
README_COMMANDS = ("pip install -r requirements.txt && python -m minihead reproduce --quick",
                   "pip install -r requirements.txt && python -m pytest")
REGENERATE = "python -m minihead.report --readme"


def readme_block(text):
    """What the README holds between its findings markers (markers excluded, outer newlines stripped)."""
    from minihead.report import README_MARKERS
    begin, end = README_MARKERS
    assert text.count(begin) == 1 and text.count(end) == 1, f"README.md needs one {begin} and one {end}"
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def shipped_studies():
    """The shipped studies the README's table is rendered from, as documents."""
    from minihead.report import README_STUDIES
    from minihead.study import STUDIES
    return {name: json.loads((pathlib.Path(STUDIES) / f"{name}.json").read_text()) for name, _ in README_STUDIES}


def test_readme_findings_table_is_rendered_from_the_shipped_studies():
    """The findings table between the README's markers is exactly minihead.report.readme_findings() of the
    shipped studies (chapters/studies/full.json and quick.json): no number in it is typed by hand, and a new study
    that is shipped without re-rendering the README fails here."""
    from minihead.report import readme_findings
    have = readme_block((ROOT / "README.md").read_text())
    want = readme_findings()
    diff = "\n".join(difflib.unified_diff(have.splitlines(), want.splitlines(), "README.md", "rendered", lineterm=""))
    assert have == want, f"README.md's findings table differs from the shipped studies'; run `{REGENERATE}`\n{diff}"


def test_readme_findings_table_has_every_finding_beside_the_papers_number():
    """The rendered table has one row per finding of minihead.findings.FINDINGS, in that order, whose paper cell is
    the paper's number (minihead.findings.FINDINGS, from minihead/paper.py), and for each shipped study this
    project's numbers and its verdict; a finding that does not hold says why in the last cell (WHY_NOT for one that
    was judged, its own reason for one that is untestable or not measured)."""
    from minihead import findings
    from minihead.report import README_STUDIES, WHY_NOT, readme_findings
    studies = shipped_studies()
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in readme_findings(studies).splitlines() if line.startswith("| ") and not line.startswith("| finding |")]
    assert [r[0] for r in rows] == [findings.what(n) for n in findings.FINDINGS]
    for name, cells in zip(findings.FINDINGS, rows):
        assert cells[1] == findings.FINDINGS[name][1] and cells[1], name
        for i, (study, label) in enumerate(README_STUDIES):
            f = studies[study]["summary"][name]
            assert cells[2 + 2 * i] and cells[3 + 2 * i].strip("*").startswith(f["status"]), (name, study)
            if f["status"] in ("untestable", "not measured"):
                assert f"{label.split()[0]}: {f['reason']}" in cells[-1], (name, study)
            elif f["status"] != "holds":
                assert f"{label.split()[0]}: {WHY_NOT[(name, study)]}" in cells[-1], (name, study)


def test_readme_findings_refuses_a_failure_without_a_reason():
    """A study in which a finding does not hold in every seed, with no sentence for it in WHY_NOT, is refused
    naming the finding and the study, so the README never shows a failure without its reason."""
    from minihead.errors import MiniheadError
    from minihead.report import readme_findings
    studies = shipped_studies()
    studies["full"]["summary"]["syntactic"].update(held_in=2, status="varies")
    with pytest.raises(MiniheadError, match="syntactic in full"):
        readme_findings(studies)


def test_update_readme_rewrites_only_between_the_markers(tmp_path):
    """update_readme replaces what lies between the markers by the rendered table, leaves the rest of the file
    byte for byte, reports whether it changed anything, and refuses a file without the markers."""
    from minihead.errors import MiniheadError
    from minihead.report import README_MARKERS, readme_findings, update_readme
    begin, end = README_MARKERS
    path = tmp_path / "README.md"
    path.write_text(f"# title\n\n{begin}\n| stale | table |\n{end}\n\ntail\n")
    assert update_readme(str(path)) is True
    assert path.read_text() == f"# title\n\n{begin}\n{readme_findings()}\n{end}\n\ntail\n"
    assert update_readme(str(path)) is False
    path.write_text("# no markers\n")
    with pytest.raises(MiniheadError, match="findings"):
        update_readme(str(path))


def test_readme_keeps_its_two_commands_and_links_every_doc():
    """The README gives the two set-up commands .ci/run and the tests rely on, word for word, and the command that
    opens the chapters; it links every page of docs/ (the formula map's home included)."""
    text = (ROOT / "README.md").read_text()
    for command in README_COMMANDS:
        assert command in text, command
    assert "jupyter lab chapters/" in text
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    assert FORMULAS.relative_to(ROOT).as_posix() in docs
    unlinked = [d for d in docs if f"]({d})" not in text]
    assert not unlinked, f"README.md does not link {unlinked}"


def test_readme_figure_is_drawn_from_the_shipped_traces(tmp_path):
    """The README shows docs/figures/emergence.png, which exists, and report.readme_figure draws it from the
    shipped traces (load_trace refuses a stale one), so the figure is remade by the same command as the table."""
    text = (ROOT / "README.md").read_text()
    assert f"]({report.README_FIGURE})" in text and (ROOT / report.README_FIGURE).stat().st_size > 0
    out = report.readme_figure(str(tmp_path / "f.png"))
    assert pathlib.Path(out).stat().st_size > 0


def test_experiments_emergence_tables_are_rendered_from_the_shipped_emergence_studies():
    """docs/experiments.md's emergence tables (between report.EMERGENCE_MARKERS) are exactly
    report.emergence_studies_block() of the shipped emergence studies (chapters/studies/emerge.json on the language
    that needs the head functions, emerge-control.json on its control; each refused when stale): one row per seed
    of each, then each study's findings table."""
    from minihead.study import load_shipped_study
    text = (ROOT / report.EMERGENCE_DOC).read_text()
    begin, end = report.EMERGENCE_MARKERS
    have = text.split(begin, 1)[1].split(end, 1)[0].strip("\n")
    want = report.emergence_studies_block()
    diff = "\n".join(difflib.unified_diff(have.splitlines(), want.splitlines(), "docs", "rendered", lineterm=""))
    assert have == want, f"{report.EMERGENCE_DOC}'s emergence tables differ from the shipped studies'; run " \
                         f"`{REGENERATE}`\n{diff}"
    rows = [line for line in want.split("\n\n")[0].splitlines()[2:]]
    seeds = {name: load_shipped_study(name)["seeds"] for name, _ in report.EMERGENCE_STUDIES}
    assert [r.split("|")[1].strip() for r in rows] == [label for name, label in report.EMERGENCE_STUDIES
                                                       for _ in seeds[name]]


def test_experiments_pruning_pilot_is_rendered_from_its_record():
    """docs/experiments.md's pruning pilot table (between report.PILOT_MARKERS) is exactly
    report.prune_pilot_block() of docs/pilots/heads8x32-prune.json and the shipped studies of the same models
    (needs-heads8x32.json, emerge-heads8x32.json): one row per pruned run of every recorded seed, then the sec. 6
    findings over the seeds, so a seed added to the record cannot leave the prose behind."""
    text = (ROOT / report.EMERGENCE_DOC).read_text()
    begin, end = report.PILOT_MARKERS
    have = text.split(begin, 1)[1].split(end, 1)[0].strip("\n")
    want = report.prune_pilot_block()
    diff = "\n".join(difflib.unified_diff(have.splitlines(), want.splitlines(), "docs", "rendered", lineterm=""))
    assert have == want, f"{report.EMERGENCE_DOC}'s pruning pilot differs from its record's; run `{REGENERATE}`\n{diff}"
    seeds = [e["seed"] for e in json.loads((ROOT / report.PILOT_RECORD).read_text())["per_seed"]]
    rows = [r for r in want.split("\n\n")[0].splitlines()[2:]]
    assert sorted({int(r.split("|")[1]) for r in rows}) == sorted(seeds)


def _pilot_seed(seed, model, bleu0, masks, twin=None, functions=("positional", "syntactic:obj")):
    """One seed of a pruning pilot record on a 2 x 2 encoder: a lambda 0 run (unless ``bleu0`` is None) and one
    pruned run per (lambda, mask, BLEU) of ``masks``, every need scored 0.9 after pruning."""
    from minihead import needs
    run = lambda lam, m, b: {"lam": lam, "bleu": b, "retained": {"enc": m}, "n_retained": {"enc": sum(map(sum, m))},
                             "steps_used": 100, "functions_after": list(functions),
                             "needs_after": {q: 0.9 for q in needs.NEEDS}}
    runs = ([run(0.0, [[True, True], [True, True]], bleu0)] if bleu0 is not None else [])
    return {"seed": seed, **({"model": model} if model else {}), "runs": runs + [run(*m) for m in masks],
            **({"from_scratch": twin} if twin else {})}


def test_pruning_pilot_block_judges_each_seed_by_its_own_model():
    """report.prune_pilot_block: a seed's carriers (needs.carriers_kept of ITS matrix and the run's mask), its
    largest need loss (100 x (base - after), the need named) and the functions lost from (or gained over) its unpruned
    model come
    from the shipped studies only when its model fingerprint is theirs (n/a for another model); a seed without a
    lambda 0 run has no reference ("not run", prunable not measured); the from-scratch twin's pair is pruned -
    scratch, and the pooled gap is findings.pool_paired_gap over the seeds with a twin; the carriers are pooled
    (needs.carriers_kept_pooled) over the seeds with a matrix of their model."""
    from minihead import findings, needs
    cell = lambda x: {**{q: 0.0 for q in needs.NEEDS}, "sandhi": x, "bleu": 0.0}
    matrix = {"needs": list(needs.NEEDS), "count": {q: 10 for q in needs.NEEDS},
              "base": {**{q: 0.95 for q in needs.NEEDS}, "obj": 0.99},
              "single": [[cell(0.5), cell(0.0)], [cell(0.3), cell(0.01)]]}   # carriers L0H0, L1H0
    studies = {"needs": {"per_seed": [{"seed": s, "model": "m", "matrix": matrix} for s in (1, 2, 3)]},
               "emergence": {"per_seed": [{"seed": s, "model": "m", "findings": {
                   "positional": {"heads": [[0, 1, 1]]}, "syntactic": {"relations_held": ["obj", "nsubj"]},
                   "rare_word": {"held": False}}} for s in (1, 2, 3)]}}
    record = {"per_seed": [
        _pilot_seed(1, "m", 70.0, [(0.02, [[True, False], [True, False]], 69.5)],
                    twin={"lambda": 0.02, "bleu": 69.0, "steps": 900, "best_step": 700}),
        _pilot_seed(2, None, None, [(0.02, [[True, False], [False, False]], 68.0)],
                    functions=("positional", "rare", "syntactic:obj")),
        _pilot_seed(3, "other", 71.0, [(0.05, [[False, True], [False, False]], 70.5)],
                    twin={"lambda": 0.05, "bleu": 70.0, "steps": 800, "best_step": 600})]}
    block = report.prune_pilot_block(record, studies)
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in block.split("\n\n")[0].splitlines()[2:]]
    assert [r[:5] for r in rows] == [["1", "0.02", "2 of 4", "69.50", "70.00"], ["2", "0.02", "1 of 4", "68.00",
                                                                               "not run"],
                                     ["3", "0.05", "1 of 4", "70.50", "71.00"]]
    assert rows[0][5] == "2 of 2 (p = 0.167)"                # C(2,2) C(2,0) / C(4,2) = 1/6
    assert rows[1][5].startswith("1 of 2 (p = 0.5)")          # P(X >= 1) drawing 1 of 4 with 2 carriers
    assert rows[0][7] == "9.0 (obj)" and rows[2][5].startswith("n/a") and rows[2][7].startswith("n/a")
    assert rows[0][6] == "lost syntactic:nsubj of 3"          # the unpruned model's nsubj head is gone
    assert rows[1][6] == "lost syntactic:nsubj of 3; gained rare"   # a function the unpruned model lacked
    assert rows[2][6] == "positional, syntactic:obj"          # another model: the survivors' functions only
    assert (rows[0][8], rows[0][9], rows[1][8], rows[2][9]) == ("69.00 (900, 700)", "+0.50", "not run", "+0.50")
    pooled = needs.carriers_kept_pooled([needs.carriers_kept(matrix, [[True, False], [True, False]]),
                                         needs.carriers_kept(matrix, [[True, False], [False, False]])])
    assert (f"over the 2 seeds with a need matrix of their model (each seed's most pruned run): 3 of 4 kept; "
            f"if each seed's survivors were drawn at random, that many or more with probability "
            f"{findings.fmt3(pooled['p'])}") in block                  # seed 3's model has no matrix here
    gap = findings.pool_paired_gap([(69.5, 69.0), (70.5, 70.0)])
    assert f"mean gap {findings.fmt(gap['gap'])} BLEU over 2 configurations" in block
    verdicts = report.prune_pilot_verdicts(record["per_seed"][1], [])
    assert verdicts["prunable"].status == "not measured" and verdicts["pruned_vs_scratch"].status == "untestable"
    other = report.prune_pilot_verdicts(record["per_seed"][2], None)    # no unpruned functions of this model
    assert other["functions_survive"].status == "not measured"
