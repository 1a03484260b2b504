"""A synthetic language pair whose gold syntax is known: English-like source, verb-final target.

The source comes from a small probabilistic grammar (subjects, transitive / intransitive verbs,
objects, stacked adjectives, adverbs before or after the verb, determiners, prepositional phrases,
relative clauses, coordination); every sentence is built together with its Universal Dependencies
v2 tree (https://universaldependencies.org/u/dep/). The target is a deterministic function of that
tree and the lexicon, plus a seeded choice between synonyms (:func:`translate`):

* verb-final clauses, recursively: ``[REL] subject [obl-PP] [object CASE] [adverbs] verb``;
* adjectives come before their noun (as in the source) and take a suffix for the noun's gender (a
  lexical property of the noun that the source never shows);
* the verb takes a tense + number suffix agreeing with its subject; the source shows number only in
  the present (``runs`` / ``run``), never in the past (``walked``), so the target needs the nsubj arc;
* the subject's and the object's head nouns take a case suffix chosen by their verb's hidden class
  (``particles=True``: a separate particle token after the noun instead, which the decoder can fetch
  from the verb by itself, so no encoder head is needed; kept to show that contrast);
* prepositions become postpositions; relative clauses follow their noun; names are copied.

Word forms are generated pronounceably from the seed; frequent words have Zipfian frequencies and
a long tail of names and rare nouns occurs only a handful of times each.
``python -m minihead.data.synth --out data_small --seed 1234`` writes the shipped data set; ``--control`` the
control language (no needs) and ``--matched`` the matched control (the same suffixes, each set by the word that
carries it), shipped in ``data_small/control`` and ``data_small/matched``.
"""
import argparse
import collections
import pathlib
import random
import zlib
from dataclasses import dataclass

from .conllu_io import Sentence, write_conllu

DATA_SMALL_SEED = 1234   # the seed data_small/ (and its control) is generated from: its lexicon is Lexicon(1234)
MAX_LEN = 30  # source tokens, "." included; longer draws are rejected and redrawn

# ---- target morphology (fixed strings; stems are generated) -------------------------------------
GENDER_SUFFIX = ("a", "o", "i")                                  # adjective suffix by noun gender
PLURAL_SUFFIX = "en"                                             # target noun plural
VERB_SUFFIX = {("Pres", "Sing"): "a", ("Pres", "Plur"): "an",    # target verb tense + number
               ("Past", "Sing"): "u", ("Past", "Plur"): "un"}
N_VCLASS = 3                                                     # hidden verb classes (case particles)
ADV_SUFFIX = ("e", "ai", "oa")                                   # adverb suffix by its verb's class
SANDHI = ("k", "m", "t")                                         # ending by the NEXT source token's initial
SANDHI_GROUPS = ("abcdefgh", "ijklmnopq", "rstuvwxyz")           # initial letter -> sandhi class

# ---- source function words (English) ------------------------------------------------------------
DETS_SG = (("the", 0.5), ("a", 0.3), ("this", 0.08), ("that", 0.06), ("every", 0.06))
DETS_PL = (("the", 0.55), ("some", 0.15), ("these", 0.1), ("those", 0.1), ("many", 0.1))
PREPS = ("in", "on", "with", "near", "under", "behind", "from", "beside", "without", "across",
         "through", "above")
RELPRONS = (("that", 0.7), ("which", 0.3))

# ---- grammar probabilities (tuned for mean source length ~11-12 tokens) --------------------------
P = dict(transitive=0.6, past=0.45, adv=0.4, adv_before=0.5, obl=0.35, clause_coord=0.12,
         np_coord=0.06, name=0.08, rare_noun=0.06, plural=0.35, bare_plural=0.15, nmod=0.2,
         relcl=0.15, subj_relcl=0.6, synonym=0.15, synonym_first=0.6)
N_ADJ_WEIGHTS = (0.5, 0.32, 0.13, 0.05)  # 0, 1, 2 or 3 adjectives in a row
SIZES = dict(noun=120, verb_tr=40, verb_in=25, adj=60, adv=20, rare_noun=700, name=700)

# Syllable inventories: the source looks English-like, the target differently.
_SRC = (("b", "br", "c", "ch", "cl", "d", "dr", "f", "fl", "g", "gr", "h", "j", "l", "m", "n",
         "p", "pl", "r", "s", "sh", "sl", "sn", "st", "t", "tr", "v", "w"),
        ("a", "e", "i", "o", "u", "ee", "oo", "ea", "ai", "ou"),
        ("n", "t", "p", "ck", "m", "nd", "st", "ng", "rk", "ll", "b", "g", "mp", "lt"))
_TGT = (("k", "z", "v", "q", "zh", "ts", "r", "m", "n", "l", "d", "g", "b", "y", "kh"),
        ("a", "o", "u", "i", "e", "ai", "oa", "y"),
        ("r", "k", "z", "l", "n", "sh", "rd", "v", "x"))
_NAME = (("k", "m", "t", "r", "s", "l", "n", "d", "v", "j", "b", "f"),
         ("a", "i", "o", "e", "u", "ia", "eo"),
         ("n", "r", "l", "s"))


@dataclass
class Entry:
    """A lexeme: source forms, target stems (two when it has a synonym), lexical class."""
    kind: str            # noun, rare_noun, verb, adj, adv
    src: tuple           # noun (sg, pl); verb (base, 3sg, past); adj/adv (form,)
    tgt: tuple           # target stems; a second stem is a synonym
    gender: int = -1     # nouns: index into GENDER_SUFFIX
    vclass: int = -1     # verbs: 0, 1 or 2, hidden (selects the subject and object case particles)


@dataclass
class SynthPair:
    """One generated pair; ``align[k]`` is the source index the k-th target token comes from."""
    src: list
    tgt: list
    tree: Sentence
    align: list


class Lexicon:
    """All word forms of one seed, with lookups from source form to lexeme."""

    def __init__(self, seed):
        rng = random.Random(f"minihead-synth-lexicon-{seed}")
        self.used = set(w for w, _ in DETS_SG + DETS_PL + RELPRONS) | set(PREPS) | {"and", "."}
        gen = self._unique
        self.nouns = [self._noun(rng, _SRC, (1, 2), "noun") for _ in range(SIZES["noun"])]
        self.verbs_tr = [self._verb(rng, vclass=k % N_VCLASS) for k in range(SIZES["verb_tr"])]
        self.verbs_in = [self._verb(rng, vclass=k % N_VCLASS) for k in range(SIZES["verb_in"])]
        self.adjs = [Entry("adj", (gen(rng, _SRC, (1, 2)),), self._stems(rng, suffixes=GENDER_SUFFIX))
                     for _ in range(SIZES["adj"])]
        adv_inv = (_SRC[0], _SRC[1], tuple(c for c in _SRC[2] if "l" not in c))  # no "-llly"
        self.advs = [Entry("adv", (gen(rng, adv_inv, (2, 2), suffix="ly"),), self._stems(rng, suffixes=ADV_SUFFIX))
                     for _ in range(SIZES["adv"])]
        self.rare_nouns = [self._noun(rng, _SRC, (2, 3), "rare_noun") for _ in range(SIZES["rare_noun"])]
        self.names = [gen(rng, _NAME, (2, 3), final_coda=0.4) for _ in range(SIZES["name"])]
        # Target function words: short generated forms, one per source function word / role.
        f = lambda: gen(rng, _TGT, (1, 1), final_coda=0.0, min_len=2)  # noqa: E731
        self.det_tgt = {w: f() for w in sorted({w for w, _ in DETS_SG + DETS_PL})}
        self.prep_tgt = {p: f() for p in PREPS}
        self.case_tgt = tuple(f() for _ in range(N_VCLASS))       # object particle by verb class
        self.subj_case_tgt = tuple(f() for _ in range(N_VCLASS))  # subject particle by verb class
        self.rel_tgt = {"nsubj": f(), "obj": f()}  # relativizer by role of the pronoun
        self.and_tgt = f()
        self.by_form = {}
        for e in self.nouns + self.rare_nouns:
            self.by_form[e.src[0]] = (e, "Sing")
            self.by_form[e.src[1]] = (e, "Plur")
        for e in self.verbs_tr + self.verbs_in:
            self.by_form[e.src[0]] = (e, ("Pres", "Plur"))
            self.by_form[e.src[1]] = (e, ("Pres", "Sing"))
            self.by_form[e.src[2]] = (e, ("Past", None))
        for e in self.adjs + self.advs:
            self.by_form[e.src[0]] = (e, None)
        self._cum = {k: _zipf_cum(len(v), s) for k, v, s in (
            ("noun", self.nouns, 1.0), ("verb_tr", self.verbs_tr, 0.9), ("verb_in", self.verbs_in, 0.9),
            ("adj", self.adjs, 1.0), ("adv", self.advs, 0.8),
            ("rare_noun", self.rare_nouns, 0.3), ("name", self.names, 0.3))}

    # -- word shapes --
    def _unique(self, rng, inv, n_syll, final_coda=0.8, suffix="", min_len=3):
        """A fresh pronounceable form: n_syll onset+nucleus syllables, coda at the end w.p. final_coda."""
        onsets, nuclei, codas = inv
        while True:
            k = rng.randint(*n_syll)
            w = "".join(rng.choice(onsets) + rng.choice(nuclei) for _ in range(k))
            if rng.random() < final_coda:
                w += rng.choice(codas)
            w += suffix
            if w not in self.used and len(w) >= min_len:
                self.used.add(w)
                return w

    def _stems(self, rng, suffixes, n_syll=(1, 2)):
        """Target stems (a synonym w.p. P['synonym']) whose suffixed forms are all unused."""
        n = 2 if rng.random() < P["synonym"] else 1
        stems = []
        while len(stems) < n:
            s = self._unique(rng, _TGT, n_syll, final_coda=1.0)
            forms = [s + x for x in suffixes if x]
            if any(f in self.used for f in forms):
                continue
            self.used.update(forms)
            stems.append(s)
        return tuple(stems)

    def _noun(self, rng, inv, n_syll, kind):
        while True:
            sg = self._unique(rng, inv, n_syll)
            pl = _s_form(sg)
            if pl not in self.used:
                break
        self.used.add(pl)
        stems = self._stems(rng, ("", PLURAL_SUFFIX), n_syll) if kind == "noun" else \
            (self._stems_no_syn(rng, n_syll),)
        return Entry(kind, (sg, pl), stems, gender=rng.randrange(len(GENDER_SUFFIX)))

    def _stems_no_syn(self, rng, n_syll):
        while True:
            s = self._unique(rng, _TGT, n_syll, final_coda=1.0)
            if s + PLURAL_SUFFIX not in self.used:
                self.used.add(s + PLURAL_SUFFIX)
                return s

    def _verb(self, rng, vclass):
        while True:
            base = self._unique(rng, _SRC, (1, 2))
            s3, past = _s_form(base), base + ("d" if base.endswith("e") else "ed")
            if s3 not in self.used and past not in self.used and s3 != past:
                break
        self.used.update((s3, past))
        return Entry("verb", (base, s3, past), self._stems(rng, tuple(VERB_SUFFIX.values())),
                     vclass=vclass)

    # -- sampling --
    def pick(self, rng, kind):
        pool = {"noun": self.nouns, "verb_tr": self.verbs_tr, "verb_in": self.verbs_in,
                "adj": self.adjs, "adv": self.advs, "rare_noun": self.rare_nouns,
                "name": self.names}[kind]
        return rng.choices(pool, cum_weights=self._cum[kind])[0]


def _s_form(w):
    """English -s suffix (plural noun, 3rd person singular verb)."""
    return w + ("es" if w.endswith(("s", "x", "sh", "ch", "z")) else "s")


def _zipf_cum(n, s):
    """Cumulative Zipf weights 1 / (r + 1)^s over ranks r = 0..n-1."""
    out, tot = [], 0.0
    for r in range(n):
        tot += 1.0 / (r + 1) ** s
        out.append(tot)
    return out


def _weighted(rng, pairs):
    return rng.choices([w for w, _ in pairs], weights=[p for _, p in pairs])[0]


# ---- source grammar -------------------------------------------------------------------------------
class _Builder:
    """Accumulates source words in order; heads are 0-based indices here (-1 = root)."""

    def __init__(self, lex, rng):
        self.lex, self.rng = lex, rng
        self.forms, self.upos, self.lemmas, self.feats, self.heads, self.rels = [], [], [], [], [], []

    def tok(self, form, upos, lemma=None, feats="_"):
        self.forms.append(form)
        self.upos.append(upos)
        self.lemmas.append(lemma or form)
        self.feats.append(feats)
        self.heads.append(None)
        self.rels.append(None)
        return len(self.forms) - 1

    def arc(self, dep, head, rel):
        self.heads[dep], self.rels[dep] = head, rel

    # Sentence := Clause ["and" Clause] "."
    def sentence(self):
        v = self.clause()
        self.arc(v, -1, "root")
        if self.rng.random() < P["clause_coord"]:
            cc = self.tok("and", "CCONJ")
            v2 = self.clause()
            self.arc(v2, v, "conj")   # UD: later conjuncts attach to the first
            self.arc(cc, v2, "cc")    # UD v2: cc attaches to the conjunct it precedes
        self.arc(self.tok(".", "PUNCT"), v, "punct")

    def verb(self, transitive, number):
        """A verb token; present tense shows the subject's number, past tense does not."""
        e = self.lex.pick(self.rng, "verb_tr" if transitive else "verb_in")
        if self.rng.random() < P["past"]:
            return self.tok(e.src[2], "VERB", e.src[0], "Tense=Past|VerbForm=Fin")
        form = e.src[1] if number == "Sing" else e.src[0]
        return self.tok(form, "VERB", e.src[0], f"Number={number}|Tense=Pres|VerbForm=Fin")

    def adverb(self, verb_slot):
        a = self.tok(self.lex.pick(self.rng, "adv").src[0], "ADV")
        verb_slot.append(a)

    # Clause := Subj [Adv] Verb [Obj] [Adv] [PP]   (adverb and PP order varies)
    def clause(self):
        rng = self.rng
        subj, number = self.np(rel_ok=True, pp_ok=True, coord_ok=True)
        advs = []
        adv = rng.random() < P["adv"]
        before = rng.random() < P["adv_before"]
        if adv and before:
            self.adverb(advs)
        transitive = rng.random() < P["transitive"]
        v = self.verb(transitive, number)
        self.arc(subj, v, "nsubj")
        if transitive:
            obj, _ = self.np(rel_ok=True, pp_ok=True, coord_ok=True)
            self.arc(obj, v, "obj")
        adv_after = adv and not before
        if rng.random() < P["obl"]:
            if adv_after and rng.random() < 0.5:
                self.adverb(advs)
                adv_after = False
            self.arc(self.pp(), v, "obl")
        if adv_after:
            self.adverb(advs)
        for a in advs:
            self.arc(a, v, "advmod")
        return v

    # NP := Det Adj* Noun [PP] [RelClause] | Name | NP "and" NP
    def np(self, rel_ok, pp_ok, coord_ok):
        rng, lex = self.rng, self.lex
        if coord_ok and rng.random() < P["np_coord"]:
            first, _ = self.np(rel_ok=False, pp_ok=False, coord_ok=False)
            cc = self.tok("and", "CCONJ")
            second, _ = self.np(rel_ok=False, pp_ok=False, coord_ok=False)
            self.arc(second, first, "conj")
            self.arc(cc, second, "cc")
            return first, "Plur"  # coordinated subjects take plural agreement
        if rng.random() < P["name"]:
            name = lex.pick(rng, "name")
            return self.tok(name, "PROPN", name, "Number=Sing"), "Sing"
        number = "Plur" if rng.random() < P["plural"] else "Sing"
        e = lex.pick(rng, "rare_noun" if rng.random() < P["rare_noun"] else "noun")
        det = None
        if not (number == "Plur" and rng.random() < P["bare_plural"]):
            det = self.tok(_weighted(rng, DETS_SG if number == "Sing" else DETS_PL), "DET")
        n_adj = rng.choices(range(len(N_ADJ_WEIGHTS)), weights=N_ADJ_WEIGHTS)[0]
        forms = []
        while len(forms) < n_adj:  # distinct adjectives: "a big big dog" teaches nothing
            a = lex.pick(rng, "adj").src[0]
            if a not in forms:
                forms.append(a)
        adjs = [self.tok(a, "ADJ") for a in forms]
        noun = self.tok(e.src[0] if number == "Sing" else e.src[1], "NOUN", e.src[0],
                        f"Number={number}")
        if det is not None:
            self.arc(det, noun, "det")
        for a in adjs:
            self.arc(a, noun, "amod")
        if pp_ok and rng.random() < P["nmod"]:
            self.arc(self.pp(), noun, "nmod")
        if rel_ok and rng.random() < P["relcl"]:
            self.relcl(noun, number)
        return noun, number

    # PP := Prep NP(simple)
    def pp(self):
        prep = self.tok(self.rng.choice(PREPS), "ADP")
        noun, _ = self.np(rel_ok=False, pp_ok=False, coord_ok=False)
        self.arc(prep, noun, "case")
        return noun

    # RelClause := "that" [Adv] Verb [Obj]  |  "that" Subj Verb(transitive)
    def relcl(self, antecedent, number):
        rng = self.rng
        pron = self.tok(_weighted(rng, RELPRONS), "PRON", feats="PronType=Rel")
        if rng.random() < P["subj_relcl"]:
            advs = []
            if rng.random() < P["adv"] / 2:
                self.adverb(advs)
            transitive = rng.random() < P["transitive"]
            v = self.verb(transitive, number)  # agrees with the antecedent
            self.arc(pron, v, "nsubj")
            if transitive:
                obj, _ = self.np(rel_ok=False, pp_ok=False, coord_ok=False)
                self.arc(obj, v, "obj")
            for a in advs:
                self.arc(a, v, "advmod")
        else:
            subj, sub_number = self.np(rel_ok=False, pp_ok=False, coord_ok=False)
            v = self.verb(True, sub_number)
            self.arc(subj, v, "nsubj")
            self.arc(pron, v, "obj")
        self.arc(v, antecedent, "acl:relcl")

    def tree(self):
        return Sentence(tokens=list(self.forms), heads=[h + 1 for h in self.heads],
                        deprels=list(self.rels), upos=list(self.upos),
                        line_numbers=[], lemmas=list(self.lemmas), feats=list(self.feats))


# ---- target: a function of the tree -----------------------------------------------------------------
def sandhi_class(token):
    """Sandhi class of a source token: the group of ``SANDHI_GROUPS`` its first letter is in ("." -> 0)."""
    c = token[0]
    return next((k for k, g in enumerate(SANDHI_GROUPS) if c in g), 0)


def own_class(form, n):
    """A hidden class of a word of its OWN, in 0..n-1, for the matched control: a fixed function of the source
    form (CRC-32, stable across runs and machines), so like a noun's gender it is a lexical property the
    encoder can learn from the word alone, with no neighbour or relative to consult."""
    return zlib.crc32(form.encode("utf-8")) % n


def translate(tree, lex, rng, needs=True, particles=False, matched=False):
    """Target tokens and alignment for a source tree (see the module docstring for the rules).

    ``matched=True`` (with ``needs=False``) is the matched control: every suffix the needs language sets from
    ANOTHER word is set from the word itself, so the suffix inventory and the tokens that carry a suffix stay
    those of the needs language and only the non-locality goes: the sandhi ending by the word's own initial
    letter, the adjective's gender suffix and the adverb's class suffix by the word's :func:`own_class`, the case
    of a subject or object noun (or the particle after a name) by the noun's own class among all six case
    markers, whatever its verb or role (the particle is then aligned to the name).

    ``needs=False`` is the control language: the same words in the same order, but no form depends on
    a word other than the one it translates (no sandhi ending, no case on the subject and object nouns
    and one particle after a name whatever its role, no adverb class suffix, no adjective gender), so the
    encoder has nothing to fetch from a neighbour or a relative. (With ``particles=True`` the control has
    one subject and one object particle, as the earlier variant had.) ``rng`` (a ``random.Random``) only chooses between synonyms, and both variants draw from it
    identically. ``align[k]`` is the source word the k-th target token realises; a case particle is
    aligned to the verb that selects it.

    The case of the subject and the object (chosen by the verb's hidden class) is a suffix fused onto the
    head noun: the target token at the noun then depends on the noun AND its verb, so the encoder has to
    bring the verb's class to the noun (the need behind nsubj and obj heads). A name keeps its copied form
    and is followed by the case as a particle. ``particles=True`` writes the case as a separate particle
    token after every subject and object instead; the decoder can then read the class off the verb through
    its own cross-attention when it writes the particle, and with the emerge preset no nsubj or obj encoder
    head appeared (best obj margin +6 points over three seeds; README's experiment log).
    """
    if matched and (needs or particles):
        raise ValueError("matched=True is a control: it takes needs=False and fused cases (particles=False)")
    n = len(tree)
    kids = [[] for _ in range(n)]
    root = None
    for i, h in enumerate(tree.heads):
        if h == 0:
            root = i
        else:
            kids[h - 1].append(i)
    out, align = [], []

    def emit(word, i, sandhi=False):
        if sandhi and needs:   # the ending is chosen by the NEXT source token, which only the encoder sees
            word = f"{word}-{SANDHI[sandhi_class(tree.tokens[i + 1])]}"
        elif sandhi and matched:   # the matched control: by the word's OWN initial
            word = f"{word}-{SANDHI[sandhi_class(tree.tokens[i])]}"
        out.append(word)
        align.append(i)

    def child(i, rel):
        return [k for k in kids[i] if tree.deprels[k] == rel]

    all_cases = lex.subj_case_tgt + lex.case_tgt   # the matched control draws from all six case markers

    def class_suffix(table, other_class, word):
        """``table[other_class]`` (set by ANOTHER word) in the needs language, ``table[own_class(word)]`` in the
        matched control, no suffix in the control."""
        return table[other_class] if needs else table[own_class(word, len(table))] if matched else ""

    def stem(e):
        if len(e.tgt) > 1 and rng.random() >= P["synonym_first"]:
            return e.tgt[1]
        return e.tgt[0]

    def number_of(i):
        """Grammatical number of subject i: coordination is plural, a relative pronoun takes its
        antecedent's number (antecedent = head of the relative clause's verb)."""
        if child(i, "conj"):
            return "Plur"
        if tree.upos[i] == "PRON":
            return number_of_noun(tree.heads[tree.heads[i] - 1] - 1)
        return number_of_noun(i)

    def number_of_noun(i):
        if tree.upos[i] == "PROPN":
            return "Sing"
        return lex.by_form[tree.tokens[i]][1]

    def np(i, case=None):
        """Noun phrase i; ``case`` = (case marker, its verb), fused onto the head noun (after a name)."""
        for c in child(i, "cc"):
            emit(lex.and_tgt, c)
        if tree.upos[i] == "PROPN":
            emit(tree.tokens[i], i)  # names are copied
            if case is not None and matched:   # the name's own case marker, aligned to the name
                emit(all_cases[own_class(tree.tokens[i], len(all_cases))], i)
            elif case is not None:   # the control: one particle for both roles (no role or class to fetch)
                emit(case[0] if needs else lex.subj_case_tgt[0], case[1])
        else:
            e, number = lex.by_form[tree.tokens[i]]
            for d in child(i, "det"):
                emit(lex.det_tgt[tree.tokens[d]], d, sandhi=True)
            for a in child(i, "amod"):   # before the noun, agreeing with its gender (unseen in the source)
                emit(stem(lex.by_form[tree.tokens[a]][0]) + class_suffix(GENDER_SUFFIX, e.gender, tree.tokens[a]), a,
                     sandhi=True)
            fused = case[0] if case is not None and needs else ""    # the control's nouns carry no case
            if case is not None and matched:   # the noun's own case marker, by its singular form
                fused = all_cases[own_class(e.src[0], len(all_cases))]
            emit(stem(e) + (PLURAL_SUFFIX if number == "Plur" else "") + fused, i, sandhi=(e.kind == "noun"))
            for m in child(i, "nmod"):
                pp(m)
            for r in child(i, "acl:relcl"):
                clause(r)
        for c in child(i, "conj"):
            np(c)

    def argument(i, case):
        """Subject or object NP i with its ``case`` (marker, verb): fused onto the head noun, or with
        ``particles`` a particle token after the whole NP."""
        if particles:
            np(i)
            emit(*case)
        else:
            np(i, case=case)

    def pp(i):
        np(i)
        for c in child(i, "case"):
            emit(lex.prep_tgt[tree.tokens[c]], c)

    def clause(v):
        for c in child(v, "cc"):
            emit(lex.and_tgt, c)
        e, (tense, _) = lex.by_form[tree.tokens[v]]
        k_case = e.vclass if needs else 0   # the control has one subject and one object particle
        subj, obj = child(v, "nsubj")[0], child(v, "obj")
        for k in [subj] + obj:
            if tree.upos[k] == "PRON":
                emit(lex.rel_tgt[tree.deprels[k]], k)
        if tree.upos[subj] != "PRON":
            argument(subj, (lex.subj_case_tgt[k_case], v))   # ergative-like: the verb's class marks its subject
        for o in child(v, "obl"):
            pp(o)
        for o in obj:
            if tree.upos[o] != "PRON":
                argument(o, (lex.case_tgt[k_case], v))
        for a in child(v, "advmod"):
            emit(stem(lex.by_form[tree.tokens[a]][0]) + class_suffix(ADV_SUFFIX, e.vclass, tree.tokens[a]), a,
                 sandhi=True)
        emit(stem(e) + VERB_SUFFIX[(tense, number_of(subj))], v, sandhi=True)
        for c in child(v, "conj"):
            clause(c)

    clause(root)
    for p in child(root, "punct"):
        emit(tree.tokens[p], p)
    return out, align


# ---- corpus -----------------------------------------------------------------------------------------
def generate(n, seed, lexicon=None, needs=True, particles=False, matched=False):
    """``n`` distinct source sentences with trees and targets. The stream is prefix-stable:
    ``generate(m, seed)`` is the first m pairs of ``generate(n, seed)`` for m < n."""
    lex = lexicon or Lexicon(seed)
    rng = random.Random(f"minihead-synth-sentences-{seed}")
    seen, out = set(), []
    while len(out) < n:
        b = _Builder(lex, rng)
        b.sentence()
        key = " ".join(b.forms)
        if len(b.forms) > MAX_LEN or key in seen:
            continue
        seen.add(key)
        tree = b.tree()
        tgt, align = translate(tree, lex, rng, needs=needs, particles=particles, matched=matched)
        out.append(SynthPair(src=list(b.forms), tgt=tgt, tree=tree, align=align))
    return out


def write_split(out_dir, split, pairs, with_conllu=True):
    """Write ``split.src`` / ``split.tgt`` (one sentence a line, space-separated) and, if asked,
    ``split.conllu`` with ``sent_id = split-k`` and ``text``."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{split}.src").write_text("".join(" ".join(p.src) + "\n" for p in pairs), encoding="utf-8")
    (out_dir / f"{split}.tgt").write_text("".join(" ".join(p.tgt) + "\n" for p in pairs), encoding="utf-8")
    if with_conllu:
        trees = []
        for k, p in enumerate(pairs, start=1):
            t = p.tree
            trees.append(Sentence(t.tokens, t.heads, t.deprels, t.upos, [], t.lemmas, t.feats,
                                  {"sent_id": f"{split}-{k}", "text": " ".join(t.tokens)}))
        write_conllu(out_dir / f"{split}.conllu", trees)


def write_data_small(out, seed=DATA_SMALL_SEED, n_train=30000, n_dev=1000, n_test=1000, train_conllu=False, needs=True,
                     particles=False, matched=False):
    """Generate and write train / dev / test and README.md into ``out``; returns the splits.
    ``needs=False`` writes the control language (same sources and trees, no needs); with ``matched=True`` too,
    the matched control (every suffix kept, set by the word itself: :func:`translate`)."""
    lex = Lexicon(seed)
    pairs = generate(n_train + n_dev + n_test, seed, lex, needs=needs, particles=particles, matched=matched)
    splits = {"train": pairs[:n_train], "dev": pairs[n_train:n_train + n_dev],
              "test": pairs[n_train + n_dev:]}
    for name, ps in splits.items():
        write_split(out, name, ps, with_conllu=(name != "train" or train_conllu))
    (pathlib.Path(out) / "README.md").write_text(_readme(splits, lex, seed, needs, particles, matched),
                                                  encoding="utf-8")
    return splits


# ---- README -----------------------------------------------------------------------------------------
def _arcs_summary(tree):
    return " ".join(f"{tree.deprels[i]}({tree.tokens[tree.heads[i] - 1]}, {tree.tokens[i]})"
                    for i in range(len(tree)) if tree.heads[i] > 0 and tree.deprels[i] != "punct")


def _gloss(p):
    return " ".join(f"{t}={p.src[a]}" if t != p.src[a] else t for t, a in zip(p.tgt, p.align))


def _stats(splits):
    train_src = collections.Counter(t for p in splits["train"] for t in p.src)
    train_tgt = collections.Counter(t for p in splits["train"] for t in p.tgt)
    rels = {name: collections.Counter(r for p in ps for r in p.tree.deprels) for name, ps in splits.items()}
    nsubj = [(abs(i - (p.tree.heads[i] - 1))) for p in splits["train"] for i in range(len(p.src))
             if p.tree.deprels[i] == "nsubj"]
    rare = {t for t, c in train_src.items() if c <= 5}
    rank = {t: r for r, (t, _) in enumerate(sorted(train_src.items(), key=lambda tc: (-tc[1], tc[0])))}
    rarest_out = sum(max(rank.get(t, len(rank)) for t in p.src) >= 500 for p in splits["dev"])
    return dict(train_src=train_src, train_tgt=train_tgt, rels=rels, nsubj=nsubj, rare=rare,
                rarest_out=rarest_out / len(splits["dev"]),
                joint=len(set(train_src) | set(train_tgt)),
                rare_sent=sum(any(t in rare for t in p.src) for p in splits["train"]) / len(splits["train"]))


def _readme(splits, lex, seed, needs=True, particles=False, matched=False):
    st = _stats(splits)
    dev = splits["dev"]

    def first(cond):
        return next((p for p in dev if cond(p)), None)  # None: a tiny dev set may lack one

    def far_subj(p):
        return any(p.tree.deprels[i] == "nsubj" and p.tree.heads[i] - 1 - i > 3 for i in range(len(p.src)))
    examples = [
        ("Sandhi endings (set by the next source token) and adjectives before their noun, in its gender",
         first(lambda p: "PROPN" in p.tree.upos and len(p.src) <= 14
               and any(p.tree.heads[i] == p.tree.heads[i + 1] and p.tree.deprels[i] == "amod" == p.tree.deprels[i + 1]
                       for i in range(len(p.src) - 1)))),
        ("Subject and object case and the adverb suffix chosen by the verb's hidden class",
         first(lambda p: {"obj", "advmod", "obl"} <= set(p.tree.deprels) and len(p.src) <= 14)),
        ("A subject case chosen by a verb after a relative clause (past tense: the verb shows no number)",
         first(lambda p: "acl:relcl" in p.tree.deprels and far_subj(p) and len(p.src) <= 14
               and any(f.startswith("Tense=Past") for f in p.tree.feats))),
        ("Clause coordination (each clause verb-final) and a coordinated, plural subject",
         first(lambda p: len(p.src) <= 22 and any(
             p.tree.deprels[i] == "conj" and p.tree.upos[i] == "VERB" for i in range(len(p.src))) and any(
             p.tree.deprels[i] == "conj" and p.tree.deprels[p.tree.heads[i] - 1] == "nsubj"
             for i in range(len(p.src))))),
    ]
    L = []
    w = L.append
    if needs:
        w("# data_small: a synthetic language pair with gold syntax, whose translation needs the head functions\n")
        w(f"Generated by `python -m minihead.data.synth --out data_small --seed {seed}` "
          "(`minihead/data/synth.py`); every file here is regenerated byte for byte by that command "
          "(a test checks it). Do not edit by hand.\n")
    elif matched:
        w("# data_small/matched: the same language pair with every suffix set by the word itself (the matched "
          "control)\n")
        w(f"Generated by `python -m minihead.data.synth --out data_small/matched --seed {seed} --matched` "
          "(`minihead/data/synth.py`); every file here is regenerated byte for byte by that command "
          "(a test checks it). Do not edit by hand. Same lexicon, source sentences, trees, word order and sizes "
          "as `data_small/`, and the same suffixes on the same tokens, but each suffix is set by the word that "
          "carries it, never by another: the sandhi ending by the word's OWN first letter (not the next "
          "token's), the adjective's gender suffix and the adverb's class suffix by a hidden class of the "
          "adjective or adverb itself, the case of a subject or object noun (or the particle after a name) by "
          "the noun's own hidden class among all six case markers, whatever its verb or role. Only the "
          "non-locality differs from `data_small/`: the encoder has nothing to fetch from a neighbour or a "
          "relative (the verb's number agreement is kept, as in the control: the decoder can read it off the "
          "subject it has written). The rules below describe `data_small/`; read each *need* with that "
          "change.\n")
    else:
        w("# data_small/control: the same language pair without the needs (the control)\n")
        w(f"Generated by `python -m minihead.data.synth --out data_small/control --seed {seed} --control` "
          "(`minihead/data/synth.py`); every file here is regenerated byte for byte by that command "
          "(a test checks it). Do not edit by hand. Same lexicon, source sentences, trees, word order and sizes "
          "as `data_small/`; no target form depends on a source word other than the one it translates, "
          "except the verb's number agreement, which the decoder can read off the subject it has written.\n")
    w("## Files\n")
    w("| file | content |\n|---|---|")
    for name, ps in splits.items():
        w(f"| `{name}.src` / `{name}.tgt` | {len(ps)} pairs, one sentence a line, tokens separated by spaces |")
    w("| `dev.conllu` / `test.conllu` | gold UD v2 trees of the dev / test sources (`sent_id = dev-k`) |")
    w("\nNo train CoNLL-U is shipped (size); `--train-conllu` writes it on demand.\n")
    w("## Source grammar (English-like, lowercased)\n")
    w("```\nSentence  := Clause [\"and\" Clause] \".\"\n"
      "Clause    := Subj [Adv] Verb [Obj] [Adv] [PP]      (adverb before or after; PP and adverb in either order)\n"
      "NP        := [Det] Adj* Noun [PP] [RelClause] | Name | NP \"and\" NP\n"
      "PP        := Prep NP                              (simple NP: no PP, relative clause or coordination)\n"
      "RelClause := (\"that\"|\"which\") [Adv] Verb [Obj]     (subject relative)\n"
      "           | (\"that\"|\"which\") NP Verb             (object relative)\n```\n")
    w(f"Probabilities: {', '.join(f'{k}={v}' for k, v in P.items())}; adjectives in a row 0-3 with "
      f"weights {N_ADJ_WEIGHTS}; sentences longer than {MAX_LEN} tokens or repeated are redrawn, so "
      "train, dev and test share no source sentence.\n")
    w(f"Lexicon (generated from the seed): {SIZES['noun']} nouns, {SIZES['verb_tr']} transitive verbs "
      f"({N_VCLASS} hidden classes), {SIZES['verb_in']} intransitive verbs, {SIZES['adj']} adjectives, "
      f"{SIZES['adv']} adverbs, all Zipfian; a tail of {SIZES['rare_noun']} rare nouns and "
      f"{SIZES['name']} names (flat Zipf, exponent 0.3) that occur a handful of times each. Nouns are "
      "singular or plural (`-s`); verbs have a base form (present plural), `-s` (present singular) "
      "and `-ed` (past, no number). Function words are English: determiners "
      f"{', '.join(sorted({d for d, _ in DETS_SG + DETS_PL}))}; prepositions {', '.join(PREPS)}; "
      "`and`; relative pronouns `that`, `which`.\n")
    w("UD v2 conventions: det/amod -> noun; case -> the noun of its PP; the PP noun is `nmod` of a noun "
      "or `obl` of a verb; the relative-clause verb is `acl:relcl` of the modified noun and the "
      "relative pronoun (PRON) is its `nsubj` or `obj`; later conjuncts are `conj` of the first, "
      "`cc` attaches to the conjunct it precedes; `.` is `punct` of the root verb. FEATS give "
      "Number (nouns, present verbs) and Tense.\n")
    w("## Target rules (a function of the tree)\n")
    w("Every rule below that makes a target word depend on ANOTHER source word is a need: the decoder cannot "
      "read it off the words it has already written, so the encoder has to bring it to the word that needs it. "
      "The control language (`--control`, shipped in `control/`) has the same lexicon, trees, word order and "
      "sizes but none of these needs (marked *need* below).\n")
    subj_cases, obj_cases = (", ".join(f"`{x}`" for x in cases) for cases in (lex.subj_case_tgt, lex.case_tgt))
    if particles:
        w("- Clause, recursively: `[REL] subject SUBJ-CASE [obl PP] [object OBJ-CASE] [adverbs] verb`, then "
          "conjoined clauses `AND ...`, then `.`.\n"
          "- *Need (nsubj and obj, dependent -> verb; written with `--particles`, the earlier variant):* every "
          "verb has a hidden class (0, 1, 2; a lexical property the source never shows). The subject is followed "
          f"by a case particle chosen by its verb's class ({subj_cases}), the object by another ({obj_cases}), as "
          "in ergative languages; both are written before the verb. The particle is a token of its own, so the "
          "decoder can read the class off the verb itself while writing it. Control: one subject particle and "
          "one object particle.")
    else:
        w("- Clause, recursively: `[REL] subject-CASE [obl PP] [object-CASE] [adverbs] verb`, then conjoined "
          "clauses `AND ...`, then `.`.\n"
          "- *Need (nsubj and obj, dependent -> verb):* every verb has a hidden class (0, 1, 2; a lexical property "
          "the source never shows). The subject's head noun takes a case suffix chosen by its verb's class "
          f"({subj_cases}), the object's another ({obj_cases}), as in ergative languages, fused into the noun's "
          "token (`noun[-en][CASE]-sandhi`), so the encoder has to bring the verb's class to the noun; a name "
          "keeps its copied form and is followed by the case as a particle. Control: no case on the nouns, and "
          "one particle after a name whatever its role, so nothing depends on the verb or on the role. "
          "(`--particles` writes the case as a separate particle token instead; the decoder then "
          "fetches the class from the verb itself and no nsubj or obj encoder head appeared.)")
    w("- *Need (advmod, adverb -> verb):* adverbs move to just before the verb and take a suffix for the "
      f"verb's class ({', '.join(f'-{x}' for x in ADV_SUFFIX)}). Control: no suffix.\n"
      "- NP: `[det] adjective-GENDER* noun[-en if plural] [nmod PP] [relative clause]`, coordination `NP AND NP`. "
      "*Need (amod, adjective -> noun):* adjectives come before their noun and agree with its gender (suffix "
      f"{', '.join(f'-{x}' for x in GENDER_SUFFIX)} for genders 0, 1, 2; a lexical property of the noun, "
      "invisible on the source side). Control: no gender suffix.\n"
      "- *Need (positional, +1):* as in sandhi, a word's ending depends on its neighbour: every target word "
      "that translates a determiner, a frequent noun, an adjective, an adverb or a verb ends in "
      f"{', '.join(f'`-{x}`' for x in SANDHI)} for the group of the first letter of the NEXT source token "
      f"({', '.join(SANDHI_GROUPS)}; `.` counts as the first group). Names, rare nouns, particles and "
      "postpositions take no ending. Control: no ending.\n"
      "- Verb suffix by tense and the subject's number: "
      + ", ".join(f"{t} {n} `-{s}`" for (t, n), s in VERB_SUFFIX.items())
      + ". The number comes from the subject (coordination = plural; a relative pronoun takes its "
      "antecedent's number); the subject is written before the verb, so the decoder can read the number off "
      "its own output (in both languages).\n"
      "- PPs become postpositional phrases `NP POSTP`. Relative clauses follow their noun and start with a "
      f"relativizer for the pronoun's role (`{lex.rel_tgt['nsubj']}` subject, `{lex.rel_tgt['obj']}` object).\n"
      "- Target content words come from a different generated lexicon; names are copied unchanged; "
      "rare nouns translate to rare target nouns.\n"
      f"- Noise: {int(P['synonym'] * 100)}% of frequent content words have two target stems, the first "
      f"chosen with probability {P['synonym_first']} (seeded), so a perfect model does not reach BLEU 100.\n")
    w("## Worked examples (from dev)\n")
    w("Gloss: each target token `=` the source word it realises (a case particle after a name is glossed "
      "with the verb that selects it).\n")
    for title, p in (ex for ex in examples if ex[1] is not None):
        w(f"**{title}.**\n")
        w(f"- source: `{' '.join(p.src)}`")
        w(f"- tree: {_arcs_summary(p.tree)}")
        w(f"- target: `{' '.join(p.tgt)}`")
        w(f"- gloss: {_gloss(p)}\n")
    w("## Statistics\n")
    w("| split | pairs | mean src len | max src len | mean tgt len | max tgt len |\n|---|---|---|---|---|---|")
    for name, ps in splits.items():
        ls, lt = [len(p.src) for p in ps], [len(p.tgt) for p in ps]
        w(f"| {name} | {len(ps)} | {sum(ls) / len(ls):.2f} | {max(ls)} | {sum(lt) / len(lt):.2f} | {max(lt)} |")
    w(f"\nTrain vocabulary: {len(st['train_src'])} source types, {len(st['train_tgt'])} target types, "
      f"{st['joint']} joint (names are shared). Source types seen at most 5 times in train: "
      f"{len(st['rare'])}; {st['rare_sent']:.1%} of train sentences contain one. Dev sentences whose "
      f"rarest source token is outside the 500 most frequent train source types (the paper's "
      f"rare-word condition): {st['rarest_out']:.1%}.\n")
    far = sum(d > 3 for d in st["nsubj"]) / len(st["nsubj"])
    w(f"nsubj arcs with |dependent - head| > 3 (train): {far:.1%} of {len(st['nsubj'])}.\n")
    w("Relation counts:\n")
    w("| relation | train | dev | test |\n|---|---|---|---|")
    for r in sorted(st["rels"]["train"], key=lambda r: -st["rels"]["train"][r]):
        w(f"| {r} | {st['rels']['train'][r]} | {st['rels']['dev'][r]} | {st['rels']['test'][r]} |")
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="data_small")
    ap.add_argument("--seed", type=int, default=DATA_SMALL_SEED)
    ap.add_argument("--n-train", type=int, default=30000)
    ap.add_argument("--n-dev", type=int, default=1000)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--train-conllu", action="store_true", help="also write train.conllu (large)")
    language = ap.add_mutually_exclusive_group()
    language.add_argument("--control", action="store_true", help="write the control language (no needs)")
    language.add_argument("--matched", action="store_true",
                          help="write the matched control (every suffix kept, set by the word itself)")
    ap.add_argument("--particles", action="store_true",
                    help="the earlier variant: subject / object case as particle tokens, not fused suffixes")
    a = ap.parse_args(argv)
    write_data_small(a.out, a.seed, a.n_train, a.n_dev, a.n_test, a.train_conllu,
                     needs=not (a.control or a.matched), particles=a.particles, matched=a.matched)


if __name__ == "__main__":
    main()
