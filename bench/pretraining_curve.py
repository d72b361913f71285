"""A short real pretraining run on CPU: IMDb unlabeled reviews (../shared/data/pretrain) ->
WordPiece vocab -> pretraining TFRecords -> tiny BERT trained a few hundred steps, evaluated on
held-out documents every `--eval_every` steps. Prints one JSON object with the curve.

  python bench/pretraining_curve.py --num_docs=30000 --num_train_steps=20000 --eval_every=2000
"""
import gzip
import json
import os
import tempfile
import time

import keras
from absl import app, flags

from bert_tf.modeling import BertConfig
from bert_tf.pretraining_data.faithful import create_pretraining_data
from bert_tf.pretraining_data.options import PretrainingDataOptions
from bert_tf.tokenization import FullTokenizer, build_wordpiece_vocab
from bert_tf.pretraining_data.tfrecord_reader import pretraining_dataset
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                                           "pretrain", "imdb_unsup_corpus.txt.gz"), "Corpus (.gz).")
flags.DEFINE_integer("num_docs", 3000, "Documents used (the last 10% are held out for eval).")
flags.DEFINE_integer("vocab_size", 8000, "WordPiece vocab size learned from the training docs.")
flags.DEFINE_integer("num_train_steps", 400, "Training steps.")
flags.DEFINE_integer("eval_every", 100, "Evaluate every this many steps.")
flags.DEFINE_integer("batch_size", 32, "Global batch.")
flags.DEFINE_float("learning_rate", 1e-3, "Peak learning rate.")
flags.DEFINE_integer("seed", 0, "Seed of the input pipeline and the initial weights.")
flags.DEFINE_string("work_dir", None, "Where to write (default: a temporary folder).")


def _split_corpus(path, num_docs, train_file, eval_file):
    docs, current = [], []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                current.append(line)
            elif current:
                docs.append(current)
                current = []
                if len(docs) >= num_docs:
                    break
    n_eval = max(1, num_docs // 10)
    for name, part in ((train_file, docs[:-n_eval]), (eval_file, docs[-n_eval:])):
        with open(name, "w", encoding="utf-8") as f:
            f.write("\n\n".join("\n".join(d) for d in part) + "\n")
    return len(docs) - n_eval, n_eval


def main(_):
    if not os.path.exists(FLAGS.corpus):
        raise SystemExit(f"needs {FLAGS.corpus} (../shared/data); it is absent")
    work = FLAGS.work_dir or tempfile.mkdtemp(prefix="bert_tf_curve_")
    os.makedirs(work, exist_ok=True)
    t0 = time.perf_counter()
    train_txt, eval_txt = os.path.join(work, "train.txt"), os.path.join(work, "eval.txt")
    n_train, n_eval = _split_corpus(FLAGS.corpus, FLAGS.num_docs, train_txt, eval_txt)
    vocab_file = os.path.join(work, "vocab.txt")
    vocab = build_wordpiece_vocab([train_txt], vocab_file, vocab_size=FLAGS.vocab_size)
    tokenizer = FullTokenizer(vocab_file, do_lower_case=True)
    options = PretrainingDataOptions(max_seq_length=128, max_predictions_per_seq=20, dupe_factor=2)
    data = {}
    for name, txt in (("train", train_txt), ("eval", eval_txt)):
        data[name] = create_pretraining_data(txt, os.path.join(work, f"{name}.tfrecord"), tokenizer,
                                             options, log_examples=0, vocab_file=vocab_file)
    config = BertConfig(vocab_size=len(vocab), hidden_size=128, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=512, max_position_embeddings=128,
                        type_vocab_size=2)
    config_file = os.path.join(work, "bert_config.json")
    config.to_json_file(config_file)
    prep_s = time.perf_counter() - t0
    keras.utils.set_random_seed(FLAGS.seed)
    trainer = PretrainingTrainer(config, TrainerOptions(
        output_dir=os.path.join(work, "model"), train_batch_size=FLAGS.batch_size,
        learning_rate=FLAGS.learning_rate, num_train_steps=FLAGS.num_train_steps,
        num_warmup_steps=FLAGS.num_train_steps // 10, save_checkpoints_steps=FLAGS.eval_every,
        iterations_per_loop=FLAGS.eval_every))
    train_input = lambda ctx: pretraining_dataset(  # noqa: E731
        os.path.join(work, "train.tfrecord"), 128, 20, FLAGS.batch_size, True,
        input_context=ctx, seed=FLAGS.seed)
    eval_input = lambda ctx: pretraining_dataset(  # noqa: E731
        os.path.join(work, "eval.tfrecord"), 128, 20, 32, False, input_context=ctx, repeat=False)
    # Step 0 (the initial weights) first: the curve starts from chance.
    curve = [_point(0, None, trainer.evaluate(eval_input, max_eval_steps=1000), 0.0)]
    print(json.dumps(curve[-1]), flush=True)
    for step in range(FLAGS.eval_every, FLAGS.num_train_steps + 1, FLAGS.eval_every):
        t = time.perf_counter()
        records = trainer.train(train_input, stop_after_step=step)  # continues the same run
        curve.append(_point(step, records[-1]["loss"],
                            trainer.evaluate(eval_input, max_eval_steps=1000),
                            time.perf_counter() - t))
        print(json.dumps(curve[-1]), flush=True)
    print(json.dumps({"work_dir": work, "train_docs": n_train, "eval_docs": n_eval,
                      "vocab_size": len(vocab), "train_instances": data["train"]["instances"],
                      "eval_instances": data["eval"]["instances"],
                      "config": {"L": 2, "H": 128, "A": 2, "I": 512, "seq": 128, "batch":
                                 FLAGS.batch_size, "lr": FLAGS.learning_rate},
                      "chance": {"masked_lm_accuracy": round(1 / len(vocab), 5),
                                 "next_sentence_accuracy": 0.5},
                      "prep_seconds": round(prep_s, 1), "curve": curve}))


def _point(step: int, train_loss, ev: dict, seconds: float) -> dict:
    """One point of the curve: held-out metrics after `step` training steps."""
    return {"step": step, "train_loss": None if train_loss is None else round(train_loss, 4),
            "eval_masked_lm_accuracy": round(ev["masked_lm_accuracy"], 4),
            "eval_next_sentence_accuracy": round(ev["next_sentence_accuracy"], 4),
            "eval_masked_lm_loss": round(ev["masked_lm_loss"], 4),
            "eval_next_sentence_loss": round(ev["next_sentence_loss"], 4),
            "seconds": round(seconds, 1)}


if __name__ == "__main__":
    app.run(main)
