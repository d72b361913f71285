"""`bert_tf.BertQuestionAnswerer` (issue 30): raw question + context in, answer text, character
span and score out. Its windows and merging against `bert_tf.tasks.squad`'s own pipeline on the
same token-id model (bit-identical answers), the character spans, the input forms, `.keras`
round trips, a short fit, bad input; (long) real SQuAD dev questions, a fresh-process reload
and the export."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests.tasks.test_text_models import tiny_vocab, write_google_folder

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SEQ, STRIDE, QUERY = 48, 16, 12  # several windows per context below
# Logits from Python vs an export (TF and the C API): the same float32 graph, only the summation
# order may differ; 1e-5 is the bound tests/export/test_loader_harness.py and
# test_text_models.py use.
ATOL = 1e-5

CONTEXT = ("The Huguenots (French Protestants) arrived at the Cape in 1685,  fleeing persecution "
           "after the revocation of the Edict of Nantes.\nThey settled near Franschhoek, where "
           "they planted vineyards; their descendants (the \"Cape Huguenots\") kept French names "
           "for generations. In 1688, about 180 more came by ship.\t The Dutch East India "
           "Company's governor, Simon van der Stel, gave them farms along the Berg River valley "
           "in 1694.")
QUESTIONS = ["When did the Huguenots arrive at the Cape?", "Who were the Huguenots?",
             "Where did they settle?", "What did they plant?",
             "Who gave them farms along the river?", "How many more came in 1688?"]
ANSWERS = [("1685", CONTEXT.index("1685")), ("French Protestants", CONTEXT.index("French")),
           ("near Franschhoek", CONTEXT.index("near Franschhoek")),
           ("vineyards", CONTEXT.index("vineyards")),
           ("Simon van der Stel", CONTEXT.index("Simon")), ("about 180", CONTEXT.index("about"))]

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def google_folder(tmp_path_factory) -> pathlib.Path:
    return write_google_folder(tmp_path_factory.mktemp("qa_google"),
                               tiny_vocab([CONTEXT, *QUESTIONS]), seed=5)


@pytest.fixture(scope="module")
def answerer(google_folder):
    import bert_tf

    return bert_tf.BertQuestionAnswerer.from_pretrained(
        str(google_folder), sequence_length=SEQ, doc_stride=STRIDE, max_query_length=QUERY)


def squad_pipeline(folder, model, questions, contexts, v2: bool, max_answer_length: int = 30):
    """The run_squad.py path on the same token-id model: FullTokenizer(vocab.txt), SQuAD json
    examples, doc_stride features, predict_logits, compute_predictions."""
    from bert_tf.tasks import squad
    from bert_tf.tokenization import FullTokenizer

    data = [{"paragraphs": [{"context": c, "qas": [{"id": f"q{i}", "question": q}]}]}
            for i, (q, c) in enumerate(zip(questions, contexts))]
    examples = squad.examples_from_squad_data(data, is_training=False)
    features = squad.convert_examples_to_features(
        examples, FullTokenizer(str(folder / "vocab.txt"), do_lower_case=True), SEQ, STRIDE,
        QUERY, is_training=False, log_examples=0)
    results = squad.predict_logits(model, features, 32, progress=False)
    preds = squad.compute_predictions(examples, features, results, 20, max_answer_length, True,
                                      version_2_with_negative=v2)
    return features, preds


def normalized(text: str) -> str:
    return " ".join(text.split())


def check_spans(answers: list[dict], contexts: list[str]) -> None:
    for out, context in zip(answers, contexts):
        if out["answer"]:
            assert 0 <= out["start"] < out["end"] <= len(context), out
            assert normalized(context[out["start"]:out["end"]]) == out["answer"], out
        else:
            assert (out["start"], out["end"]) == (-1, -1), out


@pytest.mark.parametrize("v2", [False, True])
def test_windows_and_merging_equal_the_squad_pipeline(answerer, google_folder, v2):
    """A context of many doc_stride windows: the answers, their n-best logits and (v2.0) the
    null odds are the tasks/squad pipeline's exactly; each answer is context[start:end]."""
    from bert_tf.tasks.text_models.question_answerer import BertQuestionAnswerer

    qa = answerer if not v2 else BertQuestionAnswerer(
        answerer.backbone, answerer.preprocessor, doc_stride=STRIDE, max_query_length=QUERY,
        version_2_with_negative=True)
    contexts = [CONTEXT] * len(QUESTIONS)
    got = qa.predict(QUESTIONS, contexts, max_answer_length=10)
    features, preds = squad_pipeline(google_folder, qa.backbone, QUESTIONS, contexts, v2, 10)
    assert len(features) >= 4 * len(QUESTIONS)  # the merging across windows is exercised
    assert [g["answer"] for g in got] == list(preds.predictions.values())
    for g, qid in zip(got, preds.predictions):
        entry = next(e for e in preds.nbest[qid] if e["text"] == g["answer"])
        assert (g["start_logit"], g["end_logit"], g["score"]) == (
            entry["start_logit"], entry["end_logit"], entry["probability"])
        if v2:
            assert g["null_score_diff"] == preds.null_odds[qid]
    check_spans(got, contexts)
    assert any(g["answer"] for g in got)


def test_char_spans_through_get_final_text(answerer):
    """Spans inside words with punctuation and irregular whitespace map back to the context."""
    from bert_tf.tasks.text_models.question_answerer import answer_char_span
    from bert_tf.tasks import squad

    context = "Born  (1895-1943).\nThen\tmore: 1895 again"
    example = squad.SquadExample("0", "when?", squad.split_paragraph(context)[0])
    feature = squad.InputFeatures(
        unique_id=7, example_index=0, doc_span_index=0,
        tokens=["[CLS]", "when", "?", "[SEP]", "born", "(", "1895", "-", "1943", ")", "."],
        token_to_orig_map={4: 0, 5: 1, 6: 1, 7: 1, 8: 1, 9: 1, 10: 1},
        token_is_max_context={p: True for p in range(4, 11)}, input_ids=[], input_mask=[],
        segment_ids=[])
    start_logits, end_logits = [0.0] * 11, [0.0] * 11
    start_logits[6], end_logits[8] = 2.5, 1.5
    results = {7: squad.RawResult(7, start_logits, end_logits)}
    entry = {"text": "1895-1943", "start_logit": 2.5, "end_logit": 1.5}
    start, end = answer_char_span(context, example, [feature], results, entry, 30)
    assert context[start:end] == "1895-1943" and start == context.index("1895")
    entry = {"text": "", "start_logit": 0.0, "end_logit": 0.0}
    assert answer_char_span(context, example, [feature], results, entry, 30) == (-1, -1)


def test_input_forms_give_the_same_windows(answerer):
    import tensorflow as tf

    qs, cs = QUESTIONS[:3], [CONTEXT, CONTEXT[:120], CONTEXT[50:]]
    reference = answerer.examples(list(zip(qs, cs)))
    forms = [{"question": qs, "context": cs}, np.array(list(zip(qs, cs)), dtype=object),
             [{"question": q, "context": c} for q, c in zip(qs, cs)],
             tf.data.Dataset.from_tensor_slices((qs, cs)),
             tf.data.Dataset.from_tensor_slices((qs, cs)).batch(2),
             tf.data.Dataset.from_tensor_slices({"question": qs, "context": cs}).batch(2)]
    for form in forms:
        examples, contexts = answerer.examples(form)
        assert contexts == reference[1]
        assert [(e.question_text, e.doc_tokens) for e in examples] == [
            (e.question_text, e.doc_tokens) for e in reference[0]]

    rows = [(q, CONTEXT, a, s) for q, (a, s) in zip(QUESTIONS, ANSWERS)]
    labelled = [
        rows, [dict(zip(("question", "context", "answer_text", "answer_start"), r)) for r in rows],
        {k: [r[i] for r in rows] for i, k in enumerate(
            ("question", "context", "answer_text", "answer_start"))},
        tf.data.Dataset.from_tensor_slices(tuple([r[i] for r in rows] for i in range(4))).batch(4),
    ]
    first = None
    for form in labelled:
        ds = answerer.text_dataset(form, labelled=True, batch_size=1000)
        x, y = next(iter(ds))
        arrays = [x["input_word_ids"].numpy(), y["start_logits"].numpy(), y["end_logits"].numpy()]
        if first is None:
            first = arrays
        for a, b in zip(arrays, first):
            np.testing.assert_array_equal(a, b)
    pairs_and_answers = answerer.text_dataset([r[:2] for r in rows], [r[2:] for r in rows],
                                              labelled=True, batch_size=1000)
    np.testing.assert_array_equal(next(iter(pairs_and_answers))[1]["start_logits"], first[1])
    # Windows without the whole answer are trained towards [CLS] (position 0), the others not.
    assert (first[1] == 0).any() and (first[1] > 0).sum() >= len(rows)
    # v2.0: an unanswerable question (answer_text "") is trained towards [CLS] in every window.
    from bert_tf.tasks.text_models.question_answerer import BertQuestionAnswerer

    v2 = BertQuestionAnswerer(answerer.backbone, answerer.preprocessor, doc_stride=STRIDE,
                              max_query_length=QUERY, version_2_with_negative=True)
    _, y = next(iter(v2.text_dataset([(QUESTIONS[0], CONTEXT, "", -1)], labelled=True)))
    assert y["start_logits"].shape[0] > 1 and not y["start_logits"].numpy().any()
    assert answerer.predict([], []) == []


def test_bad_input_is_one_line(answerer):
    from bert_tf.errors import UserInputError

    cases = [
        (lambda: answerer.predict(QUESTIONS[:2], [CONTEXT]), "2 questions but 1 contexts"),
        (lambda: answerer.predict([QUESTIONS[0], QUESTIONS[1]], [CONTEXT, None]),
         "question 1 has no context"),
        (lambda: answerer.predict([(QUESTIONS[0], "  \n")]), "question 0 has an empty context"),
        (lambda: answerer.text_dataset([(QUESTIONS[0], CONTEXT, "1685", 4000)], labelled=True),
         "question 0: answer '1685' at answer_start=4000 does not lie inside the context"),
        (lambda: answerer.text_dataset([(QUESTIONS[0], CONTEXT, "1685", 0)], labelled=True),
         "does not match the context span"),
        (lambda: answerer.text_dataset([(QUESTIONS[0], CONTEXT, "", -1)], labelled=True),
         "need version_2_with_negative=True"),
        (lambda: answerer.text_dataset([(QUESTIONS[0], CONTEXT, "1685", "12")], labelled=True),
         "answer_start must be the answer's character offset"),
        (lambda: answerer.text_dataset([{"question": "q", "context": CONTEXT}], labelled=True),
         "example 0 lacks ['answer_text', 'answer_start']"),
    ]
    for call, expected in cases:
        with pytest.raises(UserInputError) as e:
            call()
        message = str(e.value)
        assert expected in message and "\n" not in message, message


def test_keras_round_trip_in_process(answerer, tmp_path):
    import keras

    path = tmp_path / "qa.keras"
    answerer.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded).__name__ == "BertQuestionAnswerer"
    assert loaded.get_config()["doc_stride"] == STRIDE
    assert loaded.preprocessor.vocabulary == answerer.preprocessor.vocabulary
    contexts = [CONTEXT] * 3
    expected = answerer.predict(QUESTIONS[:3], contexts)
    assert loaded.predict(QUESTIONS[:3], contexts) == expected
    again = type(answerer).from_pretrained(path)  # a saved answerer is returned as saved
    assert again.doc_stride == STRIDE and again.predict(QUESTIONS[:3], contexts) == expected


def test_short_fit_lowers_the_loss(google_folder):
    """The default compile (the original optimizer; loss = (start CE + end CE) / 2, the original
    squad loss) on all windows of six questions about the long context."""
    import keras

    import bert_tf
    from bert_tf.tasks.squad import squad_loss

    keras.utils.set_random_seed(1)
    qa = bert_tf.BertQuestionAnswerer.from_pretrained(
        str(google_folder), sequence_length=SEQ, doc_stride=STRIDE, max_query_length=QUERY)
    examples = {"question": QUESTIONS, "context": [CONTEXT] * len(QUESTIONS),
                "answer_text": [a for a, _ in ANSWERS], "answer_start": [s for _, s in ANSWERS]}
    qa.compile(learning_rate=1e-3, jit_compile=False)
    x, y = next(iter(qa.text_dataset(examples, labelled=True, batch_size=1000)))

    def loss():
        out = qa(x, training=False)
        return out, float(squad_loss(out["start_logits"], out["end_logits"], y["start_logits"],
                                     y["end_logits"]))

    out, before = loss()
    np.testing.assert_allclose(float(qa.compute_loss(x, y, out, training=False)), before,
                               rtol=1e-5)
    history = qa.fit(examples, batch_size=16, epochs=4, verbose=0)
    windows = int(x["input_word_ids"].shape[0])
    assert int(qa.optimizer.iterations.numpy()) == 4 * -(-windows // 16)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert loss()[1] < before


# ---- long: real SQuAD dev questions, a fresh process, the export -----------------------------

FRESH_PREDICT = """
import json, sys
import bert_tf
import keras
model = keras.models.load_model(sys.argv[1])
questions, contexts = json.loads(open(sys.argv[2]).read())
print(json.dumps([type(model).__name__, model.predict(questions, contexts)]))
"""


def read_squad_dev(shared_data: pathlib.Path, n: int) -> tuple[list[str], list[str], list]:
    """The first `n` questions of SQuAD v1.1 dev: questions, contexts, the first gold answer
    (text, answer_start)."""
    data = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    qs, cs, answers = [], [], []
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qs.append(qa["question"])
                cs.append(paragraph["context"])
                answers.append((qa["answers"][0]["text"], qa["answers"][0]["answer_start"]))
                if len(qs) == n:
                    return qs, cs, answers
    return qs, cs, answers


@pytest.mark.long
def test_real_squad_dev_round_trip(shared_data, tmp_path, harness):
    """12 SQuAD v1.1 dev questions (real contexts, several windows at length 48): fit, answers
    equal the tasks/squad pipeline's, spans are context[start:end]; the .keras file reloaded in
    a fresh process after `import bert_tf` answers the same; the export's first-window logits
    are Python's within 1e-5, and TF Serving's C-API loader gives the export's."""
    import keras

    import bert_tf
    from bert_tf.tasks import squad

    qs, cs, answers = read_squad_dev(shared_data, 12)
    folder = write_google_folder(tmp_path / "google", tiny_vocab(qs + cs), seed=2)
    keras.utils.set_random_seed(4)
    qa = bert_tf.BertQuestionAnswerer.from_pretrained(
        str(folder), sequence_length=SEQ, doc_stride=STRIDE, max_query_length=QUERY)
    qa.compile(jit_compile=False)
    qa.fit(list(zip(qs, cs, [a for a, _ in answers], [s for _, s in answers])), batch_size=16,
           epochs=1, verbose=0)
    got = qa.predict(qs, cs)
    _, preds = squad_pipeline(folder, qa.backbone, qs, cs, v2=False)
    assert [g["answer"] for g in got] == list(preds.predictions.values())
    check_spans(got, cs)

    path = tmp_path / "qa.keras"
    qa.save(path)
    (tmp_path / "inputs.json").write_text(json.dumps([qs, cs]))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = subprocess.run([sys.executable, "-c", FRESH_PREDICT, str(path),
                          str(tmp_path / "inputs.json")], cwd=PROJECT_ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    name, fresh = json.loads(run.stdout.strip().splitlines()[-1])
    assert name == "BertQuestionAnswerer"
    assert [(f["answer"], f["start"], f["end"]) for f in fresh] == [
        (g["answer"], g["start"], g["end"]) for g in got]
    np.testing.assert_allclose([f["start_logit"] for f in fresh],
                               [g["start_logit"] for g in got], atol=ATOL, rtol=0)

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's ops)

    export = qa.export(tmp_path / "serving")
    served = tf.saved_model.load(export).signatures["serving_default"](
        question=tf.constant(qs), context=tf.constant(cs))
    examples, _, features, results = qa.predict_logits(qs, cs)
    first = {f.example_index: (f, r) for f, r in zip(features, results)
             if f.doc_span_index == 0}
    for i in range(len(qs)):
        feature, result = first[i]
        n = sum(feature.input_mask)
        np.testing.assert_array_equal(served["input_word_ids"][i].numpy()[:n],
                                      feature.input_ids[:n])
        np.testing.assert_allclose(served["start_logits"][i].numpy()[:n],
                                   result.start_logits[:n], atol=ATOL, rtol=0)
    from bert_tf.export import loader_harness as lh

    responses, proc = lh.run_signature(harness, export, [{
        "question": np.array(qs, object), "context": np.array(cs, object)}])
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(responses[0]["start_logits"], served["start_logits"].numpy(),
                               atol=ATOL, rtol=0)
    np.testing.assert_array_equal(responses[0]["end_index"], served["end_index"].numpy())
