"""tensorflow-datasets as an input source: TFDS datasets prepared offline from the local files
(TFDS's own builders parse them; manual_dir, no download) give the same examples as the tsv
readers, and run_classifier on --tfds_data_dir scores the same as on --data_dir."""
from __future__ import annotations

import gzip
import json

import pytest

from bert_tf.tasks import glue, tfds_sources

pytest.importorskip("tensorflow_datasets")


def _fields(examples):
    return [(e.text_a, e.text_b, e.label) for e in examples]


@pytest.fixture(scope="module")
def tfds_glue(tmp_path_factory, shared_data):
    """glue/mrpc and glue/rte prepared from ../shared/data/glue (the GLUE folder)."""
    root = tmp_path_factory.mktemp("tfds")
    for name in ("glue/mrpc", "glue/rte"):
        tfds_sources.prepare(name, str(root), str(shared_data / "glue"))
    return str(root)


@pytest.mark.long
@pytest.mark.parametrize("task,folder", [("mrpc", "MRPC"), ("rte", "RTE")])
def test_prepared_glue_equals_tsv_readers(tfds_glue, shared_data, task, folder):
    processor = glue.get_processor(task)
    data_dir = str(shared_data / "glue" / folder)
    source = tfds_sources.TfdsTaskSource(task, tfds_glue)
    assert _fields(source.get_train_examples()) == _fields(processor.get_train_examples(data_dir))
    tfds_dev, tsv_dev = source.get_dev_splits()[0], processor.get_dev_splits(data_dir)[0]
    assert tfds_dev.name == tsv_dev.name and _fields(tfds_dev.examples) == _fields(tsv_dev.examples)
    tfds_test, tsv_test = source.get_test_splits()[0], processor.get_test_splits(data_dir)[0]
    assert _fields(tfds_test.examples) == _fields(tsv_test.examples)
    assert [e.index for e in tfds_test.examples] == [e.index for e in tsv_test.examples]
    assert tfds_test.leaderboard_name == tsv_test.leaderboard_name
    assert all(e.label is None for e in tfds_test.examples)
    # TFDS's own class (not ours) reads the prepared data back.
    import tensorflow_datasets as tfds

    ds = tfds.load(tfds_sources.dataset_name(task), split="validation", data_dir=tfds_glue,
                   download=False)
    assert len(ds) == len(tsv_dev.examples)


def test_not_prepared_is_a_clear_error_and_never_downloads(tmp_path):
    with pytest.raises(tfds_sources.TfdsSourceError,
                       match=r"--tfds_data_dir=.*glue/cola is not prepared there"):
        tfds_sources.glue_examples("cola", "train", str(tmp_path))
    assert list(tmp_path.iterdir()) == [] or all(p.is_dir() for p in tmp_path.iterdir())
    with pytest.raises(tfds_sources.TfdsSourceError, match="--task_name=xnli: no TFDS dataset"):
        tfds_sources.dataset_name("xnli")


@pytest.mark.long
def test_run_classifier_on_tfds_scores_as_on_tsv(tmp_path, shared_data, original_fixtures):
    """RTE rows (24 train, 16 dev, 8 test, real) as tsv files and as a TFDS dataset prepared
    from them: the same losses, eval_results.txt and test predictions."""
    from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier

    glue_dir = tmp_path / "glue"
    (glue_dir / "RTE").mkdir(parents=True)
    for name, n in (("train.tsv", 25), ("dev.tsv", 17), ("test.tsv", 9)):
        with open(shared_data / "glue" / "RTE" / name, encoding="utf-8") as f:
            rows = [f.readline() for _ in range(n)]
        (glue_dir / "RTE" / name).write_text("".join(rows), encoding="utf-8")
    tfds_dir = tmp_path / "tfds"
    tfds_sources.prepare("glue/rte", str(tfds_dir), str(glue_dir))
    ckpt = original_fixtures / "checkpoint"
    results = {}
    for source, kwargs in (("tsv", {"data_dir": str(glue_dir / "RTE")}),
                           ("tfds", {"data_dir": None, "tfds_data_dir": str(tfds_dir)})):
        out = tmp_path / f"out_{source}"
        result = run_classifier(ClassifierRunOptions(
            task_name="RTE", bert_config_file=str(ckpt / "bert_config.json"),
            vocab_file=str(original_fixtures / "vocab_uncased.txt"),
            init_checkpoint=str(ckpt / "bert_model.ckpt"), output_dir=str(out), do_train=True,
            do_eval=True, do_predict=True, max_seq_length=32, train_batch_size=8,
            eval_batch_size=8, predict_batch_size=8, num_train_epochs=1.0, **kwargs))
        results[source] = (result["train"]["loss"], (out / "eval_results.txt").read_text(),
                           (out / "test_results.tsv").read_text(), (out / "RTE.tsv").read_text())
    assert results["tfds"] == results["tsv"]


@pytest.mark.long
def test_other_builders_prepare_offline(tmp_path, shared_data):
    """imdb_reviews, squad/v1.1, conll2003 and the pretraining-text builder from local files."""
    import tensorflow_datasets as tfds

    # IMDb: 40 real reviews.
    imdb_dir = tmp_path / "imdb"
    imdb_dir.mkdir()
    with gzip.open(shared_data / "imdb" / "train.tsv.gz", "rt", encoding="utf-8") as f:
        rows = [f.readline() for _ in range(41)]
    with gzip.open(imdb_dir / "train.tsv.gz", "wt", encoding="utf-8") as f:
        f.write("".join(rows))
    tfds_dir = str(tmp_path / "tfds")
    tfds_sources.prepare("imdb_reviews", tfds_dir, str(imdb_dir))
    got = sorted((r["text"].decode(), int(r["label"])) for r in tfds.as_numpy(
        tfds.load("imdb_reviews", split="train", data_dir=tfds_dir, download=False)))
    want = sorted((r.rstrip("\n").split("\t")[3], int(r.split("\t")[2])) for r in rows[1:])
    assert got == want

    # SQuAD v1.1 dev (TFDS's parser): every question of the json.
    squad_dir = tmp_path / "squad"
    squad_dir.mkdir()
    (squad_dir / "dev-v1.1.json").write_bytes((shared_data / "squad" / "dev-v1.1.json").read_bytes())
    tfds_sources.prepare("squad/v1.1", tfds_dir, str(squad_dir))
    ids = {r["id"].decode() for r in tfds.as_numpy(
        tfds.load("squad/v1.1", split="validation", data_dir=tfds_dir, download=False))}
    data = json.loads((squad_dir / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    assert ids == {qa["id"] for a in data for p in a["paragraphs"] for qa in p["qas"]}

    # CoNLL-2003 (TFDS's parser): the sentences of eng.testa, as bert_tf's CoNLL reader reads
    # them (TFDS adds one empty record at the end of the file, which conll_sentences drops).
    from bert_tf.tasks.ner import read_conll_file

    conll_dir = tmp_path / "conll"
    conll_dir.mkdir()
    (conll_dir / "eng.testa").write_bytes((shared_data / "conll2003" / "eng.testa").read_bytes())
    tfds_sources.prepare("conll2003", tfds_dir, str(conll_dir))
    got = sorted((tuple(s.words), tuple(s.labels))
                 for s in tfds_sources.conll_sentences("dev", tfds_dir))
    want = sorted((tuple(s.words), tuple(s.labels))
                  for s in read_conll_file(conll_dir / "eng.testa"))
    assert len(want) == 3250 and got == want

    # Pretraining text: one record per document, in order.
    text_dir = tmp_path / "text"
    text_dir.mkdir()
    (text_dir / "sample_text.txt").write_bytes(
        (shared_data / "pretrain" / "sample_text.txt").read_bytes())
    tfds_sources.prepare("bert_pretraining_text", tfds_dir, str(text_dir))
    builder = tfds.builder_from_directory(str(tmp_path / "tfds" / "bert_pretraining_text" / "1.0.0"))
    docs = [r["text"].decode() for r in tfds.as_numpy(builder.as_dataset(split="train"))]
    raw = (text_dir / "sample_text.txt").read_text(encoding="utf-8")
    want_docs = ["\n".join(l.strip() for l in d.split("\n") if l.strip())
                 for d in raw.split("\n\n") if d.strip()]
    assert docs == want_docs


def test_squad_from_tfds_scores_as_the_json(tmp_path, shared_data):
    """SQuAD v1.1 dev prepared by TFDS's squad builder from the json, turned back into SQuAD
    json: the same questions for bert_tf's reader, and the official metrics give the golden
    scores of a real leaderboard prediction file (86.206 / 92.196, data README)."""
    from bert_tf.evaluation import squad as squad_eval
    from bert_tf.tasks.squad.reading import examples_from_squad_data, read_squad_examples

    squad_dir = tmp_path / "squad"
    squad_dir.mkdir()
    (squad_dir / "dev-v1.1.json").write_bytes((shared_data / "squad" / "dev-v1.1.json").read_bytes())
    tfds_dir = str(tmp_path / "tfds")
    tfds_sources.prepare("squad/v1.1", tfds_dir, str(squad_dir))
    data = tfds_sources.squad_data("validation", tfds_dir)
    rebuilt = tfds_sources.write_squad_json(data, str(tmp_path / "dev_from_tfds.json"))

    def key(e):
        return (e.qas_id, e.question_text, tuple(e.doc_tokens))

    assert (sorted(map(key, examples_from_squad_data(data, is_training=False)))
            == sorted(map(key, read_squad_examples(squad_dir / "dev-v1.1.json", False))))
    predictions = shared_data / "squad" / "reference_predictions" / "v1.1" / "bert_ensemble_google.json"
    scores = squad_eval.evaluate_files(rebuilt, str(predictions))
    assert round(scores["exact_match"], 3) == 86.206 and round(scores["f1"], 3) == 92.196


def test_run_squad_on_tfds_predicts_as_on_json(tmp_path, shared_data, original_fixtures):
    """run_squad --do_predict with --tfds_data_dir (squad/v1.1 prepared from a dev subset) writes
    the same predictions as with --predict_file on that json."""
    from bert_tf.tasks.squad.run import SquadRunOptions, run_squad

    data = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    article = dict(data["data"][0], paragraphs=data["data"][0]["paragraphs"][:2])
    squad_dir = tmp_path / "squad"
    squad_dir.mkdir()
    (squad_dir / "dev-v1.1.json").write_text(json.dumps({"version": "1.1", "data": [article]}),
                                             encoding="utf-8")
    tfds_dir = str(tmp_path / "tfds")
    tfds_sources.prepare("squad/v1.1", tfds_dir, str(squad_dir))
    ckpt = original_fixtures / "checkpoint"
    predictions = {}
    for source, kwargs in (("json", {"predict_file": str(squad_dir / "dev-v1.1.json")}),
                           ("tfds", {"tfds_data_dir": tfds_dir})):
        out = tmp_path / f"out_{source}"
        run_squad(SquadRunOptions(
            bert_config_file=str(ckpt / "bert_config.json"),
            vocab_file=str(original_fixtures / "vocab_uncased.txt"),
            init_checkpoint=str(ckpt / "bert_model.ckpt"), output_dir=str(out), do_predict=True,
            max_seq_length=128, doc_stride=64, predict_batch_size=8, **kwargs))
        predictions[source] = json.loads((out / "predictions.json").read_text(encoding="utf-8"))
    assert predictions["tfds"] == predictions["json"] and len(predictions["json"]) > 5
