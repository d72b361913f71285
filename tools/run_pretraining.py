"""Pretrain BERT (masked LM + next sentence) on TFRecords from create_pretraining_data.py.

The original run_pretraining.py flags, plus --distribution_strategy, --mixed_precision,
--jit_compile, --optimizer, --export_dir. A restart with the same --output_dir resumes exactly.

  python tools/run_pretraining.py --input_file=/tmp/tf_examples.tfrecord --output_dir=/tmp/pretraining_output \
    --do_train=True --do_eval=True --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \
    --num_train_steps=20 --num_warmup_steps=10 --learning_rate=2e-5
"""
from absl import app, flags

from bert_tf.training.pretraining_run import PretrainingRun, run_pretraining

FLAGS = flags.FLAGS
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model to train.")
flags.DEFINE_string("input_file", None, "Input TFRecord files (comma-separated globs).")
flags.DEFINE_string("output_dir", None, "Where checkpoints, summaries and eval results go.")
flags.DEFINE_string("init_checkpoint", None, "Initial weights (original TF1 names).")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the TFRecords.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked-LM slots per sequence in the TFRecords.")
flags.DEFINE_bool("do_train", False, "Train.")
flags.DEFINE_bool("do_eval", False, "Evaluate on --input_file.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
flags.DEFINE_integer("eval_batch_size", 8, "Global eval batch size.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate for Adam.")
flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")
flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warm-up steps.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps.")
flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per host loop (and per progress line).")
flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval batches.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "Training checkpoints kept.")
flags.DEFINE_bool("use_tpu", False, "Same as --distribution_strategy=tpu.")
flags.DEFINE_string("tpu_name", None, "Cloud TPU name or grpc:// address.")
flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU.")
flags.DEFINE_string("gcp_project", None, "GCP project of the Cloud TPU.")
flags.DEFINE_string("master", None, "TensorFlow master URL (TPU).")
flags.DEFINE_integer("num_tpu_cores", 8, "Only with --use_tpu; the TPU system reports its cores.")
flags.DEFINE_enum("distribution_strategy", "one_device",
                  ["one_device", "mirrored", "multi_worker_mirrored", "tpu"], "tf.distribute strategy.")
flags.DEFINE_enum("mixed_precision", "float32", ["float32", "mixed_bfloat16", "mixed_float16"],
                  "Keras mixed-precision policy.")
flags.DEFINE_bool("jit_compile", False, "XLA-compile the train step.")
flags.DEFINE_bool("last_layer_at_predictions_only", True,
                  "Compute the last transformer block only at [CLS] and the masked positions "
                  "(same losses up to float rounding, +20% steps/s at L=4, seq 128); false = "
                  "every position, as the original.")
flags.DEFINE_bool("xla_gelu", True,
                  "While training, compute the FFN's GELU as two XLA-compiled elementwise kernels "
                  "(same values up to float rounding); false = TensorFlow's op-by-op GELU.")
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "adamw = the original's.")
flags.DEFINE_string("export_dir", None, "Also export the trained encoder as a SavedModel here.")
flags.DEFINE_integer("seed", 12345, "Seed for initialisation and input shuffling.")


def main(_):
    run = PretrainingRun(
        bert_config_file=FLAGS.bert_config_file, input_file=FLAGS.input_file,
        output_dir=FLAGS.output_dir, init_checkpoint=FLAGS.init_checkpoint,
        max_seq_length=FLAGS.max_seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        do_train=FLAGS.do_train, do_eval=FLAGS.do_eval, train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size, learning_rate=FLAGS.learning_rate,
        num_train_steps=FLAGS.num_train_steps, num_warmup_steps=FLAGS.num_warmup_steps,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        iterations_per_loop=FLAGS.iterations_per_loop, max_eval_steps=FLAGS.max_eval_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max,
        distribution_strategy="tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy,
        tpu_name=FLAGS.tpu_name, tpu_zone=FLAGS.tpu_zone, gcp_project=FLAGS.gcp_project,
        master=FLAGS.master, mixed_precision=FLAGS.mixed_precision, jit_compile=FLAGS.jit_compile,
        last_layer_at_predictions_only=FLAGS.last_layer_at_predictions_only,
        xla_gelu=FLAGS.xla_gelu,
        optimizer=FLAGS.optimizer, export_dir=FLAGS.export_dir, seed=FLAGS.seed)
    run_pretraining(run)


if __name__ == "__main__":
    flags.mark_flags_as_required(["bert_config_file", "input_file", "output_dir"])
    app.run(main)
