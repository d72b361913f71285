"""Drill: the bad-input table (docs/reliability.md). Every row is a real `python tools/<tool>.py`
command a user could type with one thing wrong; each must end with exit status != 0, exactly
one line `error: ...` on stderr that contains the row's fragments (the file/flag/line, record
number for TFRecords, and what was expected), no Python traceback, and nothing left in the row's
own working folder (no partial output under a final name, no temporary file).

The rows run two at a time (each is a fresh process importing TensorFlow); a row's test reports
that row only.
"""
from __future__ import annotations

import concurrent.futures
import json
import pathlib
import shutil

import pytest

from drill_tools import run_tool

pytestmark = pytest.mark.drills

# (id, tool, arguments, fragments the one error line must contain). Placeholders: {w} the row's
# own empty working folder, {i} the shared folder of prepared bad inputs, {vocab}, {config}
# (L2 H128 config), {ckpt} / {ckpt_config} (the original's fixture checkpoint), {records}
# (max_seq_length 128, 20 predictions), {records64} (64, 10), {text}, {mrpc}.
CPD = ["--input_file={text}", "--output_file={w}/out.tfrecord", "--vocab_file={vocab}"]
RP = ["--bert_config_file={config}", "--input_file={records}", "--output_dir={w}/out",
      "--do_train=True", "--train_batch_size=2", "--num_train_steps=1", "--num_warmup_steps=0"]
RC = ["--task_name=MRPC", "--do_train=True", "--data_dir={mrpc}", "--vocab_file={vocab}",
      "--bert_config_file={config}", "--output_dir={w}/out", "--num_train_epochs=0.01"]
SQUAD = ["--vocab_file={vocab}", "--bert_config_file={config}", "--output_dir={w}/out",
         "--do_train=True", "--train_file={i}/squad_tiny.json"]
NER = ["--vocab_file={vocab}", "--bert_config_file={config}", "--output_dir={w}/out",
       "--do_train=True"]
SWAG = ["--vocab_file={vocab}", "--bert_config_file={config}", "--output_dir={w}/out",
        "--do_train=True"]
EXPORT = ["--model_type=encoder", "--bert_config_file={ckpt_config}",
          "--init_checkpoint={ckpt}", "--export_dir={w}/export"]
EF = ["--input_file={i}/sentences.txt", "--output_file={w}/features.jsonl",
      "--vocab_file={vocab}", "--bert_config_file={ckpt_config}", "--init_checkpoint={ckpt}",
      "--layers=-1", "--max_seq_length=32"]


def _with(base, *changes):
    """`base` with the flags in `changes` replaced (same flag name) or added."""
    out = list(base)
    for change in changes:
        name = change.split("=", 1)[0]
        out = [a for a in out if a.split("=", 1)[0] != name]
        out.append(change)
    return out


ROWS = [
    # create_pretraining_data
    ("cpd_input_missing", "create_pretraining_data",
     _with(CPD, "--input_file={w}/missing.txt"), ["missing.txt"]),
    ("cpd_output_file_is_a_folder", "create_pretraining_data",
     _with(CPD, "--output_file={w}"), ["--output_file", "is a folder"]),
    ("cpd_vocab_missing", "create_pretraining_data",
     _with(CPD, "--vocab_file={w}/vocab.txt"), ["vocab.txt"]),
    ("cpd_vocab_without_mask", "create_pretraining_data",
     _with(CPD, "--vocab_file={i}/vocab_no_mask.txt"), ["vocab_no_mask.txt", "[MASK]"]),
    ("cpd_max_seq_length_3", "create_pretraining_data",
     _with(CPD, "--max_seq_length=3"), ["--max_seq_length"]),
    ("cpd_masked_lm_prob_1_5", "create_pretraining_data",
     _with(CPD, "--masked_lm_prob=1.5"), ["--masked_lm_prob"]),
    ("cpd_dupe_factor_0", "create_pretraining_data",
     _with(CPD, "--dupe_factor=0"), ["--dupe_factor"]),
    ("cpd_faithful_with_workers", "create_pretraining_data",
     _with(CPD, "--mode=faithful", "--num_workers=2"), ["--num_workers=2", "faithful"]),
    ("cpd_num_workers_0", "create_pretraining_data",
     _with(CPD, "--mode=scalable", "--num_workers=0"), ["--num_workers"]),
    ("cpd_invalid_utf8_line", "create_pretraining_data",
     _with(CPD, "--input_file={i}/latin1.txt"), ["latin1.txt:2"]),
    ("cpd_unknown_mode", "create_pretraining_data",
     _with(CPD, "--mode=fast"), ["--mode"]),
    ("cpd_short_seq_prob_2", "create_pretraining_data",
     _with(CPD, "--short_seq_prob=2"), ["--short_seq_prob"]),
    # run_pretraining
    ("rp_config_not_json", "run_pretraining",
     _with(RP, "--bert_config_file={i}/bad_json.json"), ["bad_json.json"]),
    ("rp_config_missing", "run_pretraining",
     _with(RP, "--bert_config_file={w}/bert_config.json"), ["bert_config.json"]),
    ("rp_config_without_vocab_size", "run_pretraining",
     _with(RP, "--bert_config_file={i}/config_no_vocab_size.json"),
     ["config_no_vocab_size.json", "vocab_size"]),
    ("rp_config_heads_do_not_divide_hidden", "run_pretraining",
     _with(RP, "--bert_config_file={i}/config_3_heads.json"),
     ["config_3_heads.json", "num_attention_heads"]),
    # A near miss of a field name (issue 31): before, a warning, then 12 layers were built and
    # the checkpoint was blamed; now the config's error comes first.
    ("rp_config_field_typo", "run_pretraining",
     _with(RP, "--bert_config_file={i}/config_typo.json", "--init_checkpoint={ckpt}"),
     ["config_typo.json", "unknown field 'num_hidden_layer'",
      "did you mean 'num_hidden_layers'?"]),
    ("rp_input_matches_nothing", "run_pretraining",
     _with(RP, "--input_file={w}/*.tfrecord"), ["--input_file", "*.tfrecord"]),
    ("rp_records_of_other_max_seq_length", "run_pretraining",
     _with(RP, "--input_file={records64}"), ["run2.tfrecord", "record 0", "--max_seq_length=128"]),
    ("rp_max_predictions_10_on_20", "run_pretraining",
     _with(RP, "--max_predictions_per_seq=10"),
     ["run1.tfrecord", "record 0", "--max_predictions_per_seq=10"]),
    ("rp_truncated_tfrecord", "run_pretraining",
     _with(RP, "--input_file={i}/truncated.tfrecord"),
     ["truncated.tfrecord", "record 6", "truncated"]),
    ("rp_text_file_as_tfrecord", "run_pretraining",
     _with(RP, "--input_file={i}/notes.tfrecord"), ["notes.tfrecord", "record 0"]),
    ("rp_empty_tfrecord", "run_pretraining",
     _with(RP, "--input_file={i}/empty.tfrecord"), ["empty.tfrecord", "no records"]),
    ("rp_neither_train_nor_eval", "run_pretraining",
     _with(RP, "--do_train=False"), ["--do_train", "--do_eval"]),
    ("rp_train_batch_size_0", "run_pretraining",
     _with(RP, "--train_batch_size=0"), ["--train_batch_size"]),
    ("rp_max_seq_length_over_positions", "run_pretraining",
     _with(RP, "--max_seq_length=1024"), ["--max_seq_length=1024", "max_position_embeddings"]),
    ("rp_init_checkpoint_missing", "run_pretraining",
     _with(RP, "--init_checkpoint={w}/none/bert_model.ckpt"), ["bert_model.ckpt"]),
    ("rp_output_dir_is_a_file", "run_pretraining",
     _with(RP, "--output_dir={i}/a_file"), ["a_file"]),
    ("rp_num_train_steps_negative", "run_pretraining",
     _with(RP, "--num_train_steps=-1"), ["--num_train_steps"]),
    ("rp_unknown_strategy", "run_pretraining",
     _with(RP, "--distribution_strategy=gpu"), ["--distribution_strategy"]),
    # run_classifier
    ("rc_unknown_task", "run_classifier", _with(RC, "--task_name=rtee"), ["rtee"]),
    ("rc_data_dir_missing", "run_classifier", _with(RC, "--data_dir={w}/glue"), ["glue"]),
    ("rc_vocab_missing", "run_classifier", _with(RC, "--vocab_file={w}/vocab.txt"),
     ["vocab.txt"]),
    ("rc_max_seq_length_over_positions", "run_classifier", _with(RC, "--max_seq_length=1024"),
     ["max_position_embeddings"]),
    ("rc_neither_train_eval_predict", "run_classifier", _with(RC, "--do_train=False"),
     ["do_train"]),
    # A typo of a field whose default looks harmless (issue 31): before, only a warning, and
    # training ran with initializer_range 0.02 instead of the file's value.
    ("rc_config_harmless_field_typo", "run_classifier",
     _with(RC, "--bert_config_file={i}/config_harmless_typo.json"),
     ["config_harmless_typo.json", "unknown field 'initializer_rnage'",
      "did you mean 'initializer_range'?"]),
    # run_squad
    ("squad_train_file_missing", "run_squad", _with(SQUAD, "--train_file={w}/train.json"),
     ["train.json"]),
    ("squad_train_file_not_json", "run_squad", _with(SQUAD, "--train_file={i}/not_json.json"),
     ["not_json.json"]),
    ("squad_max_seq_length_not_above_query", "run_squad",
     _with(SQUAD, "--max_seq_length=64", "--max_query_length=64"),
     ["max_seq_length (64)", "max_query_length (64)"]),
    ("squad_predict_file_missing", "run_squad",
     _with(SQUAD, "--do_train=False", "--do_predict=True", "--predict_file={w}/dev.json"),
     ["dev.json"]),
    # run_ner
    ("ner_unknown_tag", "run_ner", _with(NER, "--train_file={i}/ner_bad_tag.txt"),
     ["ner_bad_tag.txt:4", "unknown tag 'B-FOO'"]),
    ("ner_wrong_column_count", "run_ner", _with(NER, "--train_file={i}/ner_bad_columns.txt"),
     ["ner_bad_columns.txt:2"]),
    # run_swag
    ("swag_data_dir_missing", "run_swag", _with(SWAG, "--data_dir={w}/swag"), ["swag"]),
    ("swag_train_file_not_swag_csv", "run_swag", _with(SWAG, "--train_file={i}/not_swag.csv"),
     ["not_swag.csv"]),
    # export_savedmodel
    ("export_dir_is_a_file", "export_savedmodel", _with(EXPORT, "--export_dir={i}/a_file"),
     ["--export_dir", "a_file"]),
    ("export_checkpoint_has_no_head", "export_savedmodel",
     _with(EXPORT, "--model_type=classifier", "--vocab_file={vocab}", "--num_labels=2"),
     ["bert_model.ckpt", "head"]),
    ("export_version_0", "export_savedmodel", _with(EXPORT, "--version=0"), ["version"]),
    ("export_unknown_model_type", "export_savedmodel", _with(EXPORT, "--model_type=regressor"),
     ["--model_type"]),
    ("export_version_exists", "export_savedmodel",
     _with(EXPORT, "--export_dir={i}/existing_export"), ["already exists", "--overwrite"]),
    ("export_config_missing", "export_savedmodel",
     _with(EXPORT, "--bert_config_file={w}/c.json"), ["c.json"]),
    # extract_features
    ("ef_input_missing", "extract_features", _with(EF, "--input_file={w}/in.txt"), ["in.txt"]),
    ("ef_layer_out_of_range", "extract_features", _with(EF, "--layers=-9"), ["--layers"]),
    ("ef_output_file_is_a_folder", "extract_features", _with(EF, "--output_file={w}"),
     ["--output_file"]),
    # convert_checkpoint
    ("cc_input_missing", "convert_checkpoint",
     ["--input={w}/hf_model", "--output={w}/out/bert_model.ckpt"], ["hf_model"]),
    ("cc_unknown_direction", "convert_checkpoint",
     ["--input={ckpt}", "--output={w}/out/bert_model.ckpt", "--direction=sideways"],
     ["--direction"]),
]


@pytest.fixture(scope="module")
def bad_inputs(original_fixtures, shared_data, tmp_path_factory) -> dict:
    """The prepared inputs of the table, and the placeholder values."""
    i = tmp_path_factory.mktemp("bad_inputs")
    fx = original_fixtures
    config = json.loads((fx / "optimizer" / "bert_config_no_dropout.json").read_text())
    config.update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    (i / "bert_config.json").write_text(json.dumps(config))
    no_vocab_size = dict(config)
    del no_vocab_size["vocab_size"]  # the original has no default for it (hidden_size has)
    (i / "config_no_vocab_size.json").write_text(json.dumps(no_vocab_size))
    (i / "config_3_heads.json").write_text(json.dumps(dict(config, num_attention_heads=3)))
    typo = {("num_hidden_layer" if k == "num_hidden_layers" else k): v for k, v in config.items()}
    (i / "config_typo.json").write_text(json.dumps(typo))
    harmless = {k: v for k, v in config.items() if k != "initializer_range"}
    (i / "config_harmless_typo.json").write_text(json.dumps(dict(harmless,
                                                                 initializer_rnage=0.05)))
    (i / "bad_json.json").write_text('{"hidden_size": 128,')
    vocab = (fx / "vocab_uncased.txt").read_text(encoding="utf-8").splitlines()
    (i / "vocab_no_mask.txt").write_text("\n".join(t for t in vocab if t != "[MASK]") + "\n")
    (i / "latin1.txt").write_bytes(b"A first line.\nCaf\xe9 au lait.\n\nAnother document.\n")
    records = (fx / "pretraining_data" / "run1.tfrecord").read_bytes()
    (i / "truncated.tfrecord").write_bytes(records[:5000])
    (i / "empty.tfrecord").write_bytes(b"")
    (i / "notes.tfrecord").write_text("not a TFRecord file\n" * 20)
    (i / "a_file").write_text("a plain file\n")
    (i / "not_json.json").write_text("this is not JSON\n")
    (i / "squad_tiny.json").write_text(json.dumps({"version": "1.1", "data": [{
        "title": "t", "paragraphs": [{"context": "The cat sat on the mat.", "qas": [{
            "id": "q1", "question": "Where did the cat sit?",
            "answers": [{"text": "on the mat", "answer_start": 12}]}]}]}]}))
    (i / "ner_bad_tag.txt").write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n"
                                       "rejects VBZ B-VP B-FOO\n\n")
    (i / "ner_bad_columns.txt").write_text("EU NNP B-NP B-ORG\nrejects B-VP O\n\n")
    (i / "not_swag.csv").write_text("a,b\n1,2\n")
    (i / "sentences.txt").write_text("Hello world.\nThe cat sat. ||| It was happy.\n")
    (i / "existing_export" / "1").mkdir(parents=True)
    (i / "existing_export" / "1" / "saved_model.pb").write_bytes(b"")
    return {
        "i": str(i), "vocab": str(fx / "vocab_uncased.txt"), "config": str(i / "bert_config.json"),
        "ckpt": str(fx / "checkpoint" / "bert_model.ckpt"),
        "ckpt_config": str(fx / "checkpoint" / "bert_config.json"),
        "records": str(fx / "pretraining_data" / "run1.tfrecord"),
        "records64": str(fx / "pretraining_data" / "run2.tfrecord"),
        "text": str(fx / "sample_text.txt"), "mrpc": str(shared_data / "glue" / "MRPC"),
    }


def _files(folder: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())


@pytest.fixture(scope="module")
def results(request, bad_inputs, tmp_path_factory) -> dict:
    """Runs the selected rows, two processes at a time: id -> (CompletedProcess, files left)."""
    selected = {item.callspec.params["row"][0] for item in request.session.items
                if getattr(item, "originalname", "") == "test_bad_input"
                and hasattr(item, "callspec")}
    root = tmp_path_factory.mktemp("rows")

    def run(row):
        row_id, tool, args, _ = row
        work = root / row_id
        work.mkdir()
        values = dict(bad_inputs, w=str(work))
        proc = run_tool(tool, *[a.format(**values) for a in args], timeout=300)
        return row_id, (proc, _files(work), values)

    prepared = pathlib.Path(bad_inputs["i"])
    before = _contents(prepared)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = dict(pool.map(run, [r for r in ROWS if r[0] in selected]))
    # The rows whose output path is a prepared input ({i}/a_file, {i}/existing_export) must not
    # have changed or added anything there either.
    done["(prepared inputs)"] = (before, _contents(prepared))
    yield done
    shutil.rmtree(root, ignore_errors=True)


def _contents(folder: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<folder>"
            for p in sorted(folder.rglob("*"))}


def test_table_has_at_least_40_rows():
    assert len(ROWS) >= 40 and len({r[0] for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input(row, results):
    row_id, tool, _, fragments = row
    proc, left, values = results[row_id]
    stderr = proc.stderr
    assert proc.returncode != 0, f"exit 0; stderr:\n{stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, f"expected one 'error:' line, got {len(errors)}:\n{stderr[-2000:]}"
    for fragment in fragments:
        assert fragment.format(**values) in errors[0], (fragment, errors[0])
    assert left == [], f"{tool} left files in its working folder: {left}"


# ---- the Python API's silent-wrong cases (issue 31; docs/reliability.md, second table) -------
# Library calls, not tools: each row runs in this process and checks what happens now.


def _silent_encoder_token_type_ids():
    import numpy as np
    import tensorflow as tf

    from bert_tf.modeling import BertConfig, BertEncoder

    encoder = BertEncoder(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=16,
                                     type_vocab_size=2)).build_from_config_shapes()
    ids, types = tf.constant([[1, 2, 3, 4]]), tf.constant([[0, 0, 1, 1]])
    hub = encoder({"input_word_ids": ids, "input_type_ids": types})["pooled_output"]
    original = encoder({"input_ids": ids, "token_type_ids": types})["pooled_output"]
    zeros = encoder({"input_ids": ids})["pooled_output"]
    np.testing.assert_array_equal(original, hub)
    assert np.abs(np.asarray(zeros) - np.asarray(hub)).max() > 0


def _silent_unknown_input_key():
    import tensorflow as tf

    from bert_tf.modeling import BertClassifier, BertConfig, ModelInputError

    model = BertClassifier(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=16), 2)
    model.build_from_config_shapes()
    ids = tf.constant([[1, 2, 3]])
    with pytest.raises(ModelInputError) as e:
        model({"input_ids": ids, "segmnet_ids": ids})
    assert "\n" not in str(e.value)
    assert "unknown key 'segmnet_ids' (did you mean 'segment_ids'?)" in str(e.value)
    assert "accepted keys: input_word_ids, input_mask, input_type_ids" in str(e.value)


def _silent_config_typo():
    from bert_tf.modeling import BertConfig, ConfigError

    with pytest.raises(ConfigError, match=r"c.json: unknown field 'num_hidden_layer' — did you "
                                          r"mean 'num_hidden_layers'\?"):
        BertConfig.from_dict({"vocab_size": 10, "num_hidden_layer": 2}, source="c.json")
    with pytest.warns(UserWarning, match="my_note"):  # not a near miss: kept, as before
        assert BertConfig.from_dict({"vocab_size": 10, "my_note": 1}).extra_fields == {
            "my_note": 1}


def _silent_adam_weight_decay():
    import tensorflow as tf

    from bert_tf.original import optimization
    from bert_tf.training import AdamWeightDecay

    original = optimization.AdamWeightDecayOptimizer(0.2)
    assert original.weight_decay_rate == 0.0 and original.exclude_from_weight_decay is None
    w = tf.Variable([0.1, -0.2], name="w")
    AdamWeightDecay(0.2).apply_gradients([(tf.constant([1.0, 1.0]), w)])  # no `.path` crash
    assert float(w[0]) < 0.1


def _silent_wordpiece_cache(tmp_path):
    from bert_tf.tokenization import FullTokenizer

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[UNK]\nwant\n##ed\n", encoding="utf-8")
    tokenizer = FullTokenizer(str(vocab))
    assert tokenizer.tokenize("wanter") == ["[UNK]"]
    tokenizer.vocab["##er"] = tokenizer.vocab.pop("##ed")  # same size
    assert tokenizer.tokenize("wanter") == ["want", "##er"]


def _silent_vocab_blank_line(tmp_path):
    from bert_tf.tokenization import load_vocab

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[UNK]\n\nhello\nhello\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"vocab.txt: line 2 is blank; line 4 repeats the "
                                         r"'hello' token of line 3"):
        assert dict(load_vocab(str(vocab))) == {"[UNK]": 0, "": 1, "hello": 3}


def _silent_test_results_float32(tmp_path):
    import numpy as np

    from bert_tf.tasks import classifier, glue

    split = glue.EvalSplit("test", [glue.InputExample("t-0", "a", "b", None, "0")], None)
    logits = np.array([[0.0, np.log(0.6110786341881865 / 0.38892136581181347)]])
    classifier.write_test_outputs(str(tmp_path), glue.get_processor("mrpc"), split, logits, None)
    assert (tmp_path / "test_results.tsv").read_text() == "0.38892138\t0.6110786\n"


SILENT_ROWS = [
    ("encoder_token_type_ids", _silent_encoder_token_type_ids),
    ("unknown_input_key", _silent_unknown_input_key),
    ("config_field_typo", _silent_config_typo),
    ("adam_weight_decay_defaults_and_tf_variable", _silent_adam_weight_decay),
    ("wordpiece_in_place_vocab_edit", _silent_wordpiece_cache),
    ("vocab_blank_line_and_repeated_token", _silent_vocab_blank_line),
    ("test_results_float32", _silent_test_results_float32),
]


@pytest.mark.parametrize("row", SILENT_ROWS, ids=[r[0] for r in SILENT_ROWS])
def test_silent_wrong_case(row, tmp_path):
    _, check = row
    if "tmp_path" in check.__code__.co_varnames[:check.__code__.co_argcount]:
        check(tmp_path)
    else:
        check()


def test_no_row_touched_the_prepared_inputs(results):
    before, after = results["(prepared inputs)"]
    assert sorted(after) == sorted(before)
    assert after == before
