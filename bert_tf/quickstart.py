"""The main job on embedded data: corpus -> WordPiece vocab -> pretraining data -> a small BERT
pretrained for a few steps (MLM + NSP, the original optimizer) -> original-format checkpoint ->
features -> SavedModels (preprocessor on raw text + encoder), reloaded and run. Runs with no
download and no ../shared: the text is Python's own documentation topics.
"""
from __future__ import annotations

import json
import os
import time

import keras

from bert_tf import corpora, feature_extraction
from bert_tf.checkpoints import save_original_checkpoint
from bert_tf.io_utils import atomic_write_text
from bert_tf.modeling import BertConfig
from bert_tf.pretrained import load_bert
from bert_tf.pretraining_data import PretrainingDataOptions, create_pretraining_data
from bert_tf.tokenization import FullTokenizer

MARKER = ".bert_tf_quickstart"

SAMPLE_SENTENCES = [
    "The assert statement is a convenient way to insert debugging assertions into a program.",
    "A for loop iterates over the items of a sequence ||| The while loop repeats while a condition is true.",
    "Exceptions are raised when an error is detected during execution.",
]


def _prepare_output_dir(output_dir: str) -> None:
    """Creates `output_dir`; refuses a non-empty folder that a previous quickstart did not make."""
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        if not os.path.exists(os.path.join(output_dir, MARKER)):
            raise FileExistsError(
                f"{output_dir} is not empty and was not written by the quickstart; choose another "
                "--output_dir (nothing was changed)")
    os.makedirs(output_dir, exist_ok=True)
    atomic_write_text(os.path.join(output_dir, MARKER), "written by tools/quickstart.py\n")


def run_quickstart(output_dir: str, vocab_size: int = 4000, num_layers: int = 2,
                   hidden_size: int = 128, num_heads: int = 2, max_seq_length: int = 64,
                   seed: int = 12345, pretrain_steps: int = 100) -> dict:
    """Runs every stage on the embedded corpus and returns a summary dict (also written as
    `summary.json`). Files written to `output_dir`: corpus.txt, vocab.txt,
    pretraining_data.tfrecord, pretraining/ (training checkpoints, eval_results.txt, TensorBoard
    logs), bert_config.json, bert_model.ckpt.{index,data-*} (the pretrained weights, original
    names), input.txt, features.jsonl, export/preprocessor/1, export/encoder/1 (SavedModels)."""
    from bert_tf.tokenization import build_wordpiece_vocab

    _prepare_output_dir(output_dir)
    timings, t0 = {}, time.perf_counter()
    path = lambda name: os.path.join(output_dir, name)  # noqa: E731

    n_docs, n_sentences = corpora.write_pydoc_corpus(path("corpus.txt"))
    timings["corpus_s"] = time.perf_counter() - t0

    t = time.perf_counter()
    vocab = build_wordpiece_vocab([path("corpus.txt")], path("vocab.txt"), vocab_size=vocab_size,
                                  do_lower_case=True)
    timings["vocab_s"] = time.perf_counter() - t

    t = time.perf_counter()
    tokenizer = FullTokenizer(path("vocab.txt"), do_lower_case=True)
    data_options = PretrainingDataOptions(max_seq_length=max_seq_length,
                                          max_predictions_per_seq=round(0.15 * max_seq_length),
                                          dupe_factor=2, random_seed=seed)
    data = create_pretraining_data(path("corpus.txt"), path("pretraining_data.tfrecord"),
                                   tokenizer, data_options, log_examples=0,
                                   vocab_file=path("vocab.txt"))
    timings["pretraining_data_s"] = time.perf_counter() - t

    t = time.perf_counter()
    keras.utils.set_random_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden_size,
                        num_hidden_layers=num_layers, num_attention_heads=num_heads,
                        intermediate_size=4 * hidden_size, max_position_embeddings=512,
                        type_vocab_size=2)
    config.to_json_file(path("bert_config.json"))
    pretraining = _pretrain(config, path("pretraining_data.tfrecord"), path("pretraining"),
                            data_options, pretrain_steps, seed)
    model = pretraining.pop("model")
    save_original_checkpoint(model, path("bert_model.ckpt"), overwrite=True)
    timings["pretraining_s"] = time.perf_counter() - t

    t = time.perf_counter()
    _, tokenizer, encoder = load_bert(path("bert_config.json"), path("vocab.txt"),
                                      path("bert_model.ckpt"), do_lower_case=True)
    atomic_write_text(path("input.txt"), "\n".join(SAMPLE_SENTENCES) + "\n")
    examples = feature_extraction.read_examples(path("input.txt"))
    records = feature_extraction.extract_features(encoder, tokenizer, examples, [-1, -2],
                                                  max_seq_length=max_seq_length, batch_size=8)
    n_records = feature_extraction.write_features(records, path("features.jsonl"))
    timings["features_s"] = time.perf_counter() - t

    t = time.perf_counter()
    export = _export_and_reload(path, max_seq_length, SAMPLE_SENTENCES[0], tokenizer)
    timings["export_s"] = time.perf_counter() - t

    with open(path("features.jsonl"), encoding="utf-8") as f:
        first = json.loads(f.readline())
    summary = {
        "output_dir": os.path.abspath(output_dir),
        "corpus": {"documents": n_docs, "sentences": n_sentences},
        "vocab_size": len(vocab),
        "pretraining_data": {k: data[k] for k in ("documents", "instances") if k in data},
        "pretraining": pretraining,
        "model": {"layers": num_layers, "hidden": hidden_size, "heads": num_heads,
                  "parameters": int(sum(int(v.numpy().size) for v in model.trainable_variables))},
        "features": {"examples": n_records,
                     "first_example_tokens": [f["token"] for f in first["features"]]},
        "export": export,
        "seconds": {k: round(v, 2) for k, v in timings.items()},
    }
    atomic_write_text(path("summary.json"), json.dumps(summary, indent=2) + "\n")
    return summary


def _pretrain(config: BertConfig, data_file: str, output_dir: str,
              data_options: PretrainingDataOptions, steps: int, seed: int) -> dict:
    """A few steps of MLM + NSP pretraining with the original optimizer; evaluates on the same
    file (this is a smoke run, not a benchmark). Returns losses, eval metrics and the model."""
    from bert_tf.pretraining_data.tfrecord_reader import pretraining_dataset
    from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions

    if os.path.isdir(output_dir):  # a re-run starts over instead of resuming a finished run
        import shutil

        shutil.rmtree(output_dir)
    trainer = PretrainingTrainer(config, TrainerOptions(
        output_dir=output_dir, train_batch_size=16, eval_batch_size=16, learning_rate=1e-3,
        num_train_steps=steps, num_warmup_steps=max(1, steps // 10),
        save_checkpoints_steps=steps, iterations_per_loop=max(1, steps // 4),
        max_eval_steps=20))
    seq, preds = data_options.max_seq_length, data_options.max_predictions_per_seq
    records = trainer.train(lambda ctx: pretraining_dataset(
        data_file, seq, preds, 16, True, input_context=ctx, seed=seed))
    metrics = trainer.evaluate(lambda ctx: pretraining_dataset(
        data_file, seq, preds, 16, False, input_context=ctx))
    return {"steps": len(records), "first_loss": round(records[0]["loss"], 4),
            "last_loss": round(records[-1]["loss"], 4),
            "eval": {k: v if k == "global_step" else round(float(v), 4) for k, v in metrics.items()},
            "model": trainer.model}


def _export_and_reload(path, seq_length: int, text: str, tokenizer) -> dict:
    """Exports the preprocessor and the encoder as SavedModels, reloads both and runs `text`
    through them (raw text -> ids -> pooled output); checks the ids against `tokenizer`."""
    import numpy as np
    import tensorflow as tf

    from bert_tf.export.exporter import ExportOptions, export_savedmodel
    from bert_tf.tasks.packing import pack_tokens

    dirs = {}
    for model_type in ("preprocessor", "encoder"):
        dirs[model_type] = export_savedmodel(ExportOptions(
            model_type=model_type, export_dir=path(os.path.join("export", model_type)),
            version=1, bert_config_file=path("bert_config.json"),
            init_checkpoint=path("bert_model.ckpt"), vocab_file=path("vocab.txt"),
            seq_length=seq_length, overwrite=True))
    preprocessor = tf.saved_model.load(dirs["preprocessor"])
    encoder = tf.saved_model.load(dirs["encoder"])
    ids = preprocessor.signatures["serving_default"](text=tf.constant([text]))
    out = encoder.signatures["serving_default"](**ids)
    expected = pack_tokens(tokenizer.tokenize(text), None, seq_length, tokenizer.vocab).input_ids
    got = ids["input_word_ids"].numpy()[0].tolist()
    if got != expected:
        raise AssertionError(f"exported preprocessor ids {got} differ from FullTokenizer's {expected}")
    return {"dirs": {k: os.path.relpath(v, path("")) for k, v in dirs.items()},
            "raw_text_pooled_output_shape": list(out["pooled_output"].shape),
            "ids_equal_full_tokenizer": True,
            "pooled_norm": round(float(np.linalg.norm(out["pooled_output"].numpy())), 4)}
