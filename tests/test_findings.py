"""The paper's criteria of minihead/findings.py that judge importance and pruning, each at its held / not-held
boundary on hand-made measurements (no model is trained), and the study over seeds' summary of verdicts.
(The head-role criteria, positional, syntactic, rare-word and few-heads, are tested in tests/test_emergence.py.)"""
from types import SimpleNamespace

import numpy as np
import pytest

from minihead import findings, paper

CFG = SimpleNamespace(n_enc_layers=2, n_dec_layers=2, n_heads=2, n_layers=lambda kind: 2)   # 4 heads per type


def test_every_threshold_is_the_paper_modules():
    """Each criterion's threshold is read from minihead/paper.py, the one place it is written."""
    assert (findings.RANK_AGREEMENT_MIN, findings.PRUNE_BLEU_TOLERANCE, findings.PRUNE_KEEP_SHARE) == \
        (paper.RANK_AGREEMENT_MIN, paper.PRUNE_BLEU_TOLERANCE, paper.PRUNE_KEEP_SHARE) == (0.0, 1.0, 0.5)


@pytest.mark.parametrize("criterion", [findings.relevance_agrees_with_ablation, findings.important_heads_confident])
def test_rank_agreements_need_a_positive_spearman(criterion):
    """Sec. 4: relevance agrees with ablation / important heads are confident when Spearman's rho over the
    encoder heads is > 0: 0.01 holds, 0 and NaN (a constant score) do not; the official variant's rho rides
    along in the numbers without deciding."""
    v = criterion(0.01, -0.5)
    assert v.held and v.numbers() == {"rho": 0.01, "rho_official": -0.5}
    assert not criterion(0.0, 0.9).held and not criterion(float("nan")).held
    assert criterion(0.3).to_dict()["numbers"]["rho_official"] is None


def _enc_run(kept, bleu, lam=0.1, mask=None):
    return {"lam": lam, "n_retained": {"enc": kept}, "bleu": bleu,
            "retained": {"enc": mask if mask is not None else [[True] * 2, [False] * 2]}}


def test_most_encoder_heads_prunable_needs_half_kept_within_one_bleu():
    """Sec. 6.2: the knee is the fewest encoder heads kept by a run within 1 BLEU of the full model; held when
    that is at most half of the heads. 4 of 8 at -1.0 BLEU holds; 4 of 8 at -1.01 does not (the knee falls back
    to the 6-head run), nor does 5 of 8 within 1 BLEU; with no qualifying run every head counts as kept."""
    v = findings.most_encoder_heads_prunable([_enc_run(6, 30.0), _enc_run(4, 29.0), _enc_run(2, 20.0)], 30.0, 8)
    assert v.held and (v.kept, v.bleu_kept) == (4, 29.0)
    assert v.numbers() == {"kept": 4.0, "kept_share": 0.5, "bleu_full": 30.0, "bleu_change": -1.0}
    v = findings.most_encoder_heads_prunable([_enc_run(6, 30.0), _enc_run(4, 28.99)], 30.0, 8)
    assert not v.held and v.kept == 6
    assert not findings.most_encoder_heads_prunable([_enc_run(5, 30.5)], 30.0, 8).held
    none = findings.most_encoder_heads_prunable([_enc_run(2, 10.0)], 30.0, 8)
    assert not none.held and (none.kept, none.bleu_kept) == (8, 30.0)


def test_specialised_heads_survive_needs_a_larger_role_share_among_survivors():
    """Sec. 6.2, Figure 8: in every encoder run keeping at most half of the heads (and one or more), the share of
    role-carrying heads among the survivors exceeds their share among all heads. One head of four has a role
    (25%): a run keeping it and one other (50%) holds, a run keeping two role-less heads (0%) does not; both
    together are 'partly'; a run keeping three heads is not judged, and with no judged run it is not held."""
    roles = {(0, 0): {"positional"}}
    keeps = _enc_run(2, 0, 0.1, [[True, True], [False, False]])
    drops = _enc_run(2, 0, 0.2, [[False, True], [True, False]])
    v = findings.specialised_heads_survive([keeps], roles, 4)
    assert v.held and v.detail == [(0.1, 2, 0.5, 0.25)] and v.numbers()["excess_share"] == 0.25
    both = findings.specialised_heads_survive([keeps, drops], roles, 4)
    assert not both.held and both.partly and (both.runs_held, both.runs) == (1, 2)
    assert not findings.specialised_heads_survive([drops], roles, 4).partly
    many = findings.specialised_heads_survive([_enc_run(3, 0, 0.1, [[True, True], [True, False]])], roles, 4)
    assert not many.held and many.runs == 0 and many.numbers()["excess_share"] is None


def _all_run(enc, dec_self, dec_enc, history, lam=0.1, masks=None):
    return {"lam": lam, "n_retained": {"enc": enc, "dec_self": dec_self, "dec_enc": dec_enc}, "history": history,
            "retained": masks or {}}


def _history(*opens):
    return [{"step": 10 * (i + 1), "open": dict(zip(("enc", "dec_self", "dec_enc"), o))} for i, o in enumerate(opens)]


def test_encoder_pruned_first_needs_the_final_order_and_the_first_half_loss():
    """Sec. 8: a run holds when encoder self-attention keeps the smallest share and decoder-encoder the largest
    (enc <= dec_self <= dec_enc, enc < dec_enc) AND the encoder is the first type to lose half of its heads.
    Right order and first: held. Right order but dec_self lost half one log earlier: not held, partly. Wrong
    order: neither. No run: not held."""
    first = _all_run(1, 2, 3, _history((4, 4, 4), (2, 3, 4), (1, 2, 3)))
    v = findings.encoder_pruned_first([first], CFG)
    assert v.held and v.detail[0]["order"] and v.detail[0]["first"] and v.detail[0]["kept"]["enc"] == 1
    assert v.numbers()["kept_share_enc"] == 0.25 and v.numbers()["kept_share_dec_enc"] == 0.75
    late = _all_run(1, 2, 3, _history((4, 2, 4), (2, 2, 4), (1, 2, 3)))
    v = findings.encoder_pruned_first([late], CFG)
    assert not v.held and v.partly and v.detail[0]["order"] and not v.detail[0]["first"]
    wrong = _all_run(2, 2, 2, _history((4, 4, 4), (2, 2, 2)))
    assert not findings.encoder_pruned_first([wrong], CFG).partly
    assert not findings.encoder_pruned_first([], CFG).held


def test_decoder_layer_order_needs_dec_self_low_and_dec_enc_high():
    """Sec. 8: decoder self-attention's survivors sit below the middle layer ((2 - 1) / 2 = 0.5 here), decoder-
    encoder attention's above it. Self-attention kept in layer 0 and decoder-encoder in layer 1: held; the other
    way round: neither check holds; a type that lost no head is not judged (nothing judged: not held)."""
    low, high = [[True, True], [False, False]], [[False, False], [True, True]]
    full = [[True, True], [True, True]]
    v = findings.decoder_layer_order([_all_run(4, 2, 2, [], masks={"dec_self": low, "dec_enc": high})], CFG)
    assert v.held and v.detail == [("dec_self", 0.0, True), ("dec_enc", 1.0, True)]
    assert v.numbers()["mean_layer_dec_self"] == 0.0 and v.numbers()["mean_layer_dec_enc"] == 1.0
    v = findings.decoder_layer_order([_all_run(4, 2, 2, [], masks={"dec_self": high, "dec_enc": low})], CFG)
    assert not v.held and not v.partly and v.runs == 2
    half = findings.decoder_layer_order([_all_run(4, 2, 2, [], masks={"dec_self": low, "dec_enc": low})], CFG)
    assert half.partly and (half.runs_held, half.runs) == (1, 2)
    none = findings.decoder_layer_order([_all_run(4, 4, 4, [], masks={"dec_self": full, "dec_enc": full})], CFG)
    assert not none.held and none.runs == 0


def test_pruned_beats_scratch_needs_every_configuration_at_least_equal():
    """Sec. 8, Table 2: each configuration holds when pruned BLEU >= from-scratch BLEU (a tie counts); held when
    all do, partly when some do; the numbers carry the mean pruned minus from-scratch gap; lists of different
    lengths are an error; no configuration is not held."""
    v = findings.pruned_beats_scratch([30.0, 29.0], [30.0, 28.0])
    assert v.held and v.numbers() == {"runs_held": 2.0, "runs": 2.0, "bleu_gap": 0.5}
    v = findings.pruned_beats_scratch([30.0, 29.0], [30.01, 28.0])
    assert not v.held and v.partly and v.runs_held == 1
    assert not findings.pruned_beats_scratch([1.0], [2.0]).partly
    assert not findings.pruned_beats_scratch([], []).held
    with pytest.raises(ValueError, match="1 pruned BLEU against 2 from scratch"):
        findings.pruned_beats_scratch([1.0], [1.0, 2.0])


def test_summarize_counts_seeds_and_averages_numbers():
    """findings.summarize over per-seed verdicts (Verdicts or their to_dict): held_in / of and the status all /
    some / none; each number as (mean, sample sd, per-seed values), a None value left out of mean and sd but
    kept in the values (so is a NaN); one seed has sd 0; a finding missing in one seed and an empty list are errors."""
    seeds = [{"confident": findings.important_heads_confident(0.2), "scratch": findings.pruned_beats_scratch([2.0], [1.0])},
             {"confident": findings.important_heads_confident(0.4).to_dict(),
              "scratch": findings.pruned_beats_scratch([1.0], [1.0]).to_dict()},
             {"confident": findings.important_heads_confident(-0.3, 0.1).to_dict(),
              "scratch": findings.pruned_beats_scratch([1.0, 3.0], [2.0, 1.0]).to_dict()}]
    s = findings.summarize(seeds)
    assert list(s) == ["confident", "scratch"]
    assert {k: s["confident"][k] for k in ("held_in", "of", "status")} == {"held_in": 2, "of": 3, "status": "some"}
    mean, sd, values = s["confident"]["numbers"]["rho"]
    assert values == [0.2, 0.4, -0.3] and mean == pytest.approx(0.1) and sd == pytest.approx(np.std(values, ddof=1))
    assert s["confident"]["numbers"]["rho_official"] == (0.1, 0.0, [None, None, 0.1])
    nan = findings.summarize([{"c": findings.important_heads_confident(float("nan"))},
                              {"c": findings.important_heads_confident(0.5)}])["c"]
    assert nan["held_in"] == 1 and nan["numbers"]["rho"][:2] == (0.5, 0.0)          # a NaN rho is not averaged
    assert s["scratch"]["status"] == "some" and s["scratch"]["partly_in"] == 1
    assert s["scratch"]["numbers"]["bleu_gap"][2] == [1.0, 0.0, 0.5]
    assert findings.summarize(seeds[:2])["scratch"]["status"] == "all"
    assert findings.summarize([{"confident": findings.important_heads_confident(0.0)}])["confident"]["status"] == "none"
    assert findings.summarize(seeds[:1])["confident"]["numbers"]["rho"] == (0.2, 0.0, [0.2])
    with pytest.raises(ValueError, match="'scratch' is missing in seed 2 of 2"):
        findings.summarize([seeds[0], {"confident": seeds[1]["confident"]}])
    with pytest.raises(ValueError, match="no seeds"):
        findings.summarize([])


def test_check_claims_asserts_only_what_held_in_every_seed():
    """Issue 14's rule for the chapters: a finding held in every seed of the study ("all") is asserted for the
    chapter's model (AssertionError naming the finding when it fails); one held in some seeds, or in none, is
    printed with the seeds' numbers and never asserted, whatever this model shows."""
    seeds = [{"a": findings.relevance_agrees_with_ablation(0.5), "b": findings.relevance_agrees_with_ablation(r),
              "c": findings.relevance_agrees_with_ablation(-0.2)} for r in (0.4, -0.1)]
    summary = findings.summarize(seeds)
    assert [summary[k]["status"] for k in "abc"] == ["all", "some", "none"]
    lines = []
    mine = {"a": findings.relevance_agrees_with_ablation(0.1), "b": findings.relevance_agrees_with_ablation(-0.3),
            "c": findings.relevance_agrees_with_ablation(0.9)}
    assert findings.check_claims(summary, mine, log=lines.append) == {"a": "all", "b": "some", "c": "none"}
    assert lines[0].startswith("CLAIM") and lines[1].startswith("SHOWN") and lines[2].startswith("NOT REPRODUCED")
    assert "0.40" in lines[1] and "-0.10" in lines[1]          # each seed's rho is shown
    with pytest.raises(AssertionError, match="held in all 2 seeds of the study but not in this model"):
        findings.check_claims(summary, {**mine, "a": findings.relevance_agrees_with_ablation(-0.1)}, log=lines.append)
    with pytest.raises(KeyError, match="no finding 'zzz'"):
        findings.check_claims(summary, {"zzz": mine["a"]}, log=lines.append)
