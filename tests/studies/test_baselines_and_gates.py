"""The studies' trivial baselines and gates on tiny synthetic splits (bert_tf/studies/
baselines.py, gates.py): each baseline scores what it should, truncation is the models', the
pretraining gate reads the recorded loss curve. No training: about a second."""
from __future__ import annotations

import math

import pytest

from bert_tf.studies import baselines, gates
from bert_tf.studies.data import NerTaskData, SpanTaskData, TaskData, TaskExample
from bert_tf.tasks.ner.reading import NerSentence
from bert_tf.tasks.squad.reading import SquadExample


def _sentiment():
    train = [TaskExample(t, None, y) for t, y in
             [("good great fun", "1"), ("great film", "1"), ("good acting", "1"),
              ("bad boring", "0"), ("awful bad plot", "0")] * 4]
    held = [TaskExample("great fun", None, "1"), TaskExample("boring awful", None, "0"),
            TaskExample("good", None, "1"), TaskExample("bad", None, "0")]
    return TaskData("SST-2", ["0", "1"], train, held, pair=False)


def test_majority_and_naive_bayes_on_the_models_tokens():
    task = _sentiment()
    got = baselines.task_baselines(task, "accuracy", tokenize=str.split, max_seq_length=8)
    assert got["baselines"] == {"majority class": 50.0, "Naive Bayes": 100.0}
    assert got["gate"] == "Naive Bayes" and got["value"] == 100.0
    assert got["per_example"]["values"] == [1, 1, 1, 1]
    # The BERT budget: [CLS] a [SEP] -> max_seq_length - 2 tokens; a pair's longer side loses
    # its last tokens first, b's tokens are features of their own.
    assert baselines.model_tokens(str.split, "a b c d e", None, 5) == ["a", "b", "c"]
    assert baselines.model_tokens(str.split, "a b c d", "x y", 7) == ["a", "b", "b:x", "b:y"]


def test_majority_of_a_matthews_task_is_zero_and_regression_is_the_mean():
    assert baselines.majority([0, 0, 1], [1, 0, 1], "mcc")["value"] == 0.0
    assert baselines.majority([0, 0, 1], [1, 0, 1], "accuracy")["value"] == pytest.approx(33.33)
    assert baselines.majority([1.0, 3.0], [1.0, 2.0], "pearson")["value"] == 0.0


def test_jaccard_overlap_for_sts_b():
    task = TaskData("STS-B", [], [TaskExample("a b", "a b", "5.0")] * 2,
                    [TaskExample("the cat sat", "the cat sat", "5.0"),
                     TaskExample("the cat sat", "a dog ran", "0.2"),
                     TaskExample("the cat", "the dog", "2.5")], pair=True, regression=True)
    got = baselines.task_baselines(task, "pearson")
    assert got["gate"] == "word overlap (Jaccard)" and got["value"] > 95


def _sentence(words, labels):
    return NerSentence(words.split(), labels.split(), list(range(len(words.split()))))


def test_entity_lexicon_keeps_unambiguous_training_entities():
    train = [_sentence("Paris is in France", "I-LOC O O I-LOC"),
             _sentence("Jordan won", "I-PER O"), _sentence("Jordan is a country", "I-LOC O O O"),
             _sentence("New York Times", "I-ORG I-ORG I-ORG")]
    lexicon = baselines.entity_lexicon(train)
    assert lexicon == {("Paris",): "LOC", ("France",): "LOC", ("New", "York", "Times"): "ORG"}
    held = [_sentence("France and Jordan", "I-LOC O I-LOC"),
            _sentence("the New York Times said", "O I-ORG I-ORG I-ORG O")]
    assert baselines.lexicon_tags(held[1].words, lexicon) == ["O", "B-ORG", "I-ORG", "I-ORG",
                                                              "O"]
    got = baselines.task_baselines(NerTaskData("conll2003", [], train, held), "f1")
    # 2 correct of 2 guessed, 3 gold: F1 = 2*2/(2+3)
    assert got["value"] == pytest.approx(80.0)
    assert got["per_example"]["counts"] == [[1, 1, 2], [1, 1, 1]]


def test_sliding_window_answers_near_the_question_words():
    doc = "The tower was built in 1889 by Gustave Eiffel for the fair .".split()
    # The nearest span to the question words that holds none and starts with no stop word.
    assert baselines.sliding_window_answer(doc, "When was the tower built?") == "1889"
    articles = [{"title": "t", "paragraphs": [{"context": " ".join(doc), "qas": [
        {"id": "q1", "question": "When was the tower built by Eiffel", "answers": [
            {"text": "1889", "answer_start": 22}]}]}]}]
    task = SpanTaskData("SQuAD", [], [SquadExample("q1", "When was the tower built by Eiffel",
                                                   doc)], articles)
    got = baselines.task_baselines(task, "f1")
    assert got["gate"] == "sliding window" and 0 <= got["value"] <= 100
    assert len(got["per_example"]["values"]) == 1


def test_pretraining_gate_reads_the_early_curve():
    gate = gates.PretrainingGate(bert_perplexity=200.0, gpt_perplexity=250.0)
    plateau = [[s, 5.9] for s in range(100, 8001, 100)]
    left = [[s, 5.9 if s < 1000 else 5.0] for s in range(100, 8001, 100)]
    late = [[s, 5.9 if s < 4000 else 5.0] for s in range(100, 8001, 100)]
    assert not gates.pretraining_gate(gate, "bert", plateau, 8000)["gate_passed"]
    got = gates.pretraining_gate(gate, "bert", left, 8000)
    assert got["gate_passed"] and got["reached_at"] == 1000 and got["by_step"] == 1600
    assert not gates.pretraining_gate(gate, "bert", late, 8000)["gate_passed"]
    assert gates.pretraining_gate(gate, "gpt", [[100, math.log(240)]], 8000)["gate_passed"]
    assert gates.pretraining_gate(None, "bert", [], 10)["gate_passed"]
    assert gates.task_gate(75.6, 75.5) and not gates.task_gate(75.5, 75.5)
    assert not gates.task_gate(float("nan"), 0.0)
