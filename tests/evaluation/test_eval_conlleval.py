"""conlleval: a hand-counted IOB1 example, IOB1/IOB2 equivalence, real CoNLL-2003 data."""
from __future__ import annotations

import random

import pytest

from bert_tf.evaluation import conlleval

# (gold, predicted) per token. Chunks are written [first..last token] (1-based in the sentence).
HAND = [
    # S1: I- at sentence start; B- splitting two adjacent PER chunks.
    [("I-PER", "I-PER"),   # gold G1 PER[1..2] opens (I after the boundary); pred P1 PER opens
     ("I-PER", "I-PER"),
     ("B-PER", "I-PER"),   # gold: B after I-PER closes G1, opens G2 PER[3..4]; pred continues
     ("I-PER", "I-PER"),   # pred P1 PER[1..4] matches neither G1 nor G2
     ("O", "O")],
    # S2: type change inside an I- run; a wrong-type prediction; a boundary error.
    [("I-ORG", "I-ORG"),   # G3 ORG[1..2] = P2 ORG[1..2]              -> correct (ORG)
     ("I-ORG", "I-ORG"),
     ("I-LOC", "I-LOC"),   # type change opens G4 LOC[3] = P3 LOC[3]  -> correct (LOC)
     ("O", "O"),
     ("I-MISC", "I-PER"),  # G5 MISC[5] vs P4 PER[5]: wrong type     -> no credit
     ("O", "O"),
     ("I-LOC", "I-LOC"),   # G6 LOC[7..8] vs P5 LOC[7]: boundary error -> no credit
     ("I-LOC", "O")],
    # S3: a chunk ending with the sentence.
    [("O", "O"),
     ("I-PER", "I-PER")],  # G7 PER[2] = P6 PER[2]                    -> correct (PER)
    # S4: I-PER right after the boundary is a new chunk, not a continuation of S3's; IOB2-style
    # B- tags; a spurious prediction; a missed chunk.
    [("I-PER", "I-PER"),   # G8 PER[1] = P7 PER[1]                    -> correct (PER)
     ("O", "B-MISC"),      # spurious P8 MISC[2] (B after O opens a chunk)
     ("B-MISC", "B-MISC"), # G9 MISC[3..4]; pred: B after B-MISC closes P8, opens P9 MISC[3..4]
     ("I-MISC", "I-MISC"), #                                           -> correct (MISC)
     ("I-ORG", "O")],      # G10 ORG[5] missed
]
# Gold chunks: G1-G10 = 10 (PER 4: G1 G2 G7 G8; ORG 2: G3 G10; LOC 2: G4 G6; MISC 2: G5 G9).
# Predicted: P1-P9 = 9 (PER 4: P1 P4 P6 P7; ORG 1: P2; LOC 2: P3 P5; MISC 2: P8 P9).
# Correct: P2 P3 P6 P7 P9 = 5 (PER 2, ORG 1, LOC 1, MISC 1).
# Tokens 5 + 8 + 2 + 5 = 20; tags equal on all but S1 t3, S2 t5, S2 t8, S4 t2, S4 t5 -> 15.
HAND_REPORT = (
    "processed 20 tokens with 10 phrases; found: 9 phrases; correct: 5.\n"
    "accuracy:  75.00%; precision:  55.56%; recall:  50.00%; FB1:  52.63\n"
    "              LOC: precision:  50.00%; recall:  50.00%; FB1:  50.00  2\n"
    "             MISC: precision:  50.00%; recall:  50.00%; FB1:  50.00  2\n"
    "              ORG: precision: 100.00%; recall:  50.00%; FB1:  66.67  1\n"
    "              PER: precision:  50.00%; recall:  50.00%; FB1:  50.00  4\n"
)


def test_hand_counted_example():
    result = conlleval.evaluate_sentences(HAND)
    assert (result.tokens, result.correct_tags) == (20, 15)
    o = result.overall
    assert (o.found_gold, o.found_guessed, o.correct) == (10, 9, 5)
    counts = {t: (c.found_gold, c.found_guessed, c.correct) for t, c in result.by_type.items()}
    assert counts == {"PER": (4, 4, 2), "ORG": (2, 1, 1), "LOC": (2, 2, 1), "MISC": (2, 2, 1)}
    assert result.accuracy == pytest.approx(75.0)
    assert result.precision == pytest.approx(500 / 9)
    assert result.recall == pytest.approx(50.0)
    assert result.f1 == pytest.approx(2 * (500 / 9) * 50 / (500 / 9 + 50))
    assert result.by_type["ORG"].f1 == pytest.approx(200 / 3)
    assert conlleval.format_report(result) == HAND_REPORT
    d = result.as_dict()
    assert d["correct"] == 5 and d["by_type"]["ORG"]["recall"] == pytest.approx(50.0)


def test_parallel_sequences_api_and_file(tmp_path):
    gold = [[g for g, _ in s] for s in HAND]
    pred = [[p for _, p in s] for s in HAND]
    assert conlleval.format_report(conlleval.evaluate(gold, pred)) == HAND_REPORT
    # The same data as a conlleval input file (token POS gold pred), -X- as one separator.
    lines = []
    for i, sentence in enumerate(HAND):
        lines += [f"w{i}{j} NN {g} {p}" for j, (g, p) in enumerate(sentence)]
        lines.append("-X- -X- O O" if i == 1 else "")
    path = tmp_path / "output.txt"
    path.write_text("\n".join(lines) + "\n")
    assert conlleval.read_conlleval_file(path) == HAND
    with pytest.raises(ValueError, match="sentence 0: 5 gold tags but 4"):
        conlleval.evaluate(gold, [pred[0][:4]] + pred[1:])
    path.write_text("a NN O O\nb NN O\n")
    with pytest.raises(conlleval.ConllFileError, match=r"output.txt:2: unexpected number"):
        conlleval.read_conlleval_file(path)


def test_tag_rules():
    assert conlleval.split_tag("B-PER") == ("B", "PER")
    assert conlleval.split_tag("I-ORG-X") == ("I", "ORG-X")
    assert conlleval.split_tag("O") == ("O", "")
    # I-X after B-X continues; B-X after I-X splits; type change splits.
    assert not conlleval.start_of_chunk("B", "I", "PER", "PER")
    assert conlleval.start_of_chunk("I", "B", "PER", "PER")
    assert conlleval.end_of_chunk("I", "B", "PER", "PER")
    assert conlleval.start_of_chunk("I", "I", "PER", "LOC")
    assert conlleval.end_of_chunk("I", "I", "PER", "LOC")
    assert not conlleval.end_of_chunk("O", "I", "", "PER")
    # An empty input is not a division by zero.
    empty = conlleval.evaluate([], [])
    assert empty.f1 == 0.0 and conlleval.format_report(empty) == (
        "processed 0 tokens with 0 phrases; found: 0 phrases; correct: 0.\n")


# ------------------------------------------------------------------------------------------
# Independent chunk extraction (spans), IOB1 and IOB2
# ------------------------------------------------------------------------------------------
def _spans(tags):
    """Chunks of one sentence as (start, end, type): a chunk opens at a B- tag, or at an I- tag
    whose predecessor is O, absent or of another type; it runs while I- tags of its type
    follow."""
    spans, start, ctype = [], None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, t = tag.partition("-")
        continues = prefix == "I" and start is not None and t == ctype
        if not continues:
            if start is not None:
                spans.append((start, i - 1, ctype))
            start, ctype = (i, t) if prefix in ("B", "I") else (None, None)
    return spans


def _independent_counts(gold_sents, pred_sents):
    gold = {(k,) + s for k, tags in enumerate(gold_sents) for s in _spans(tags)}
    pred = {(k,) + s for k, tags in enumerate(pred_sents) for s in _spans(tags)}
    return len(gold), len(pred), len(gold & pred)


def _to_iob2(tags):
    """IOB1 -> IOB2: every chunk opens with B-."""
    out = list(tags)
    for start, _, t in _spans(tags):
        out[start] = f"B-{t}"
    return out


def test_iob1_and_iob2_give_the_same_counts():
    gold = [[g for g, _ in s] for s in HAND]
    pred = [[p for _, p in s] for s in HAND]
    iob1 = conlleval.evaluate(gold, pred)
    iob2 = conlleval.evaluate([_to_iob2(s) for s in gold], [_to_iob2(s) for s in pred])
    assert iob2.overall == iob1.overall and iob2.by_type == iob1.by_type
    assert _independent_counts(gold, pred) == (10, 9, 5)
    assert _to_iob2(gold[0]) == ["B-PER", "I-PER", "B-PER", "I-PER", "O"]


# ------------------------------------------------------------------------------------------
# Real CoNLL-2003 data
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def testa(shared_data):
    """eng.testa sentences as NER tag lists (IOB1), -DOCSTART- lines dropped."""
    sentences, current = [], []
    path = shared_data / "conll2003" / "eng.testa"
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if not fields:
            if current:
                sentences.append(current)
                current = []
        elif fields[0] != "-DOCSTART-":
            current.append(fields[-1])
    if current:
        sentences.append(current)
    return sentences


def _perturb(sentences, seed, rate):
    """Deterministic prediction errors with well-formed IOB tags: missed/spurious tokens, type
    swaps, B-/I- swaps."""
    rng = random.Random(seed)
    types = ["PER", "LOC", "ORG", "MISC"]
    out = []
    for tags in sentences:
        pred = []
        for tag in tags:
            if rng.random() < rate:
                choice = rng.random()
                if tag == "O":
                    tag = f"{rng.choice('IB')}-{rng.choice(types)}"
                elif choice < 0.3:
                    tag = "O"
                elif choice < 0.7:
                    tag = f"{tag[0]}-{rng.choice(types)}"
                else:
                    tag = ("B" if tag[0] == "I" else "I") + tag[1:]
            pred.append(tag)
        out.append(pred)
    return out


def test_real_conll_gold_against_itself(testa):
    result = conlleval.evaluate(testa, testa)
    # Published CoNLL-2003 English development-set statistics: 3,250 sentences, 51,362 tokens,
    # 5,942 entities (LOC 1,837, MISC 922, ORG 1,341, PER 1,842).
    assert len(testa) == 3250 and result.tokens == 51362
    assert result.overall.found_gold == result.overall.correct == 5942
    assert {t: c.found_gold for t, c in result.by_type.items()} == {
        "LOC": 1837, "MISC": 922, "ORG": 1341, "PER": 1842}
    assert result.f1 == 100.0 and result.accuracy == 100.0
    assert _independent_counts(testa, testa) == (5942, 5942, 5942)
    # The raw file is IOB1: B- tags only occur between two adjacent chunks of one type.
    assert any(tag.startswith("B-") for s in testa for tag in s)
    iob2 = conlleval.evaluate([_to_iob2(s) for s in testa], [_to_iob2(s) for s in testa])
    assert iob2.overall == result.overall


@pytest.mark.long
@pytest.mark.parametrize("seed, rate", [(0, 0.05), (1, 0.2)])
def test_real_conll_perturbed(testa, seed, rate):
    pred = _perturb(testa, seed, rate)
    result = conlleval.evaluate(testa, pred)
    gold_n, pred_n, correct_n = _independent_counts(testa, pred)
    assert (result.overall.found_gold, result.overall.found_guessed,
            result.overall.correct) == (gold_n, pred_n, correct_n)
    assert result.overall.found_gold == 5942 and pred_n != 5942 and correct_n < 5942
    for t in ["PER", "LOC", "ORG", "MISC"]:
        g = [[tag if tag.endswith(t) else "O" for tag in s] for s in testa]
        p = [[tag if tag.endswith(t) else "O" for tag in s] for s in pred]
        c = result.by_type[t]
        assert (c.found_gold, c.found_guessed, c.correct) == _independent_counts(g, p)
    equal = sum(a == b for gs, ps in zip(testa, pred) for a, b in zip(gs, ps))
    assert result.correct_tags == equal
    # IOB2 versions of both sides are scored identically.
    iob2 = conlleval.evaluate([_to_iob2(s) for s in testa], [_to_iob2(s) for s in pred])
    assert iob2.overall == result.overall and iob2.by_type == result.by_type
    assert 0.0 < result.f1 < 100.0
