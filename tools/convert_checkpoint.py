"""Convert BERT weights between formats.

  # Hugging Face (model.safetensors + config.json [+ vocab.txt]) -> original TF1 checkpoint
  python tools/convert_checkpoint.py --direction=hf_to_original \
      --input=path/to/hf_model_dir --output=out/bert_model.ckpt

  # any original-format checkpoint -> a re-written original checkpoint of the encoder (+ heads),
  # e.g. to strip optimizer slots from a training checkpoint
  python tools/convert_checkpoint.py --direction=original_to_original \
      --bert_config_file=bert_config.json --input=model.ckpt-10000 --output=out/bert_model.ckpt
"""
from absl import app, flags, logging

from bert_tf.checkpoints import (convert_huggingface_to_original, load_original_checkpoint,
                                 save_original_checkpoint)
from bert_tf.modeling import BertConfig, BertPretrainer

FLAGS = flags.FLAGS
flags.DEFINE_enum("direction", "hf_to_original", ["hf_to_original", "original_to_original"],
                  "What to convert.")
flags.DEFINE_string("input", None, "Source: HF model folder / .safetensors file, or a checkpoint.")
flags.DEFINE_string("output", None, "Checkpoint prefix to write, e.g. out/bert_model.ckpt.")
flags.DEFINE_string("bert_config_file", None, "bert_config.json (original_to_original only).")
flags.DEFINE_bool("overwrite", False, "Replace an existing checkpoint at --output.")


def main(_):
    if FLAGS.direction == "hf_to_original":
        prefix, config = convert_huggingface_to_original(FLAGS.input, FLAGS.output,
                                                         overwrite=FLAGS.overwrite)
        logging.info("Wrote %s (+ bert_config.json): L=%d H=%d A=%d", prefix,
                     config.num_hidden_layers, config.hidden_size, config.num_attention_heads)
    else:
        if not FLAGS.bert_config_file:
            raise app.UsageError("--bert_config_file is required for original_to_original")
        config = BertConfig.from_json_file(FLAGS.bert_config_file)
        model = BertPretrainer(config).build_from_config_shapes()
        report = load_original_checkpoint(model, FLAGS.input)
        save_original_checkpoint(model, FLAGS.output, overwrite=FLAGS.overwrite)
        logging.info("Wrote %s with %d variables (%d newly initialised head variables)",
                     FLAGS.output, len(report["loaded"]) + len(report["initialized"]),
                     len(report["initialized"]))


if __name__ == "__main__":
    flags.mark_flags_as_required(["input", "output"])
    app.run(main)
