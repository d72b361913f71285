"""Export BERT as a SavedModel for fine-tuning (encoder) or TF Serving.

  python tools/export_savedmodel.py --model_type=classifier \
    --bert_config_file=$MODEL/bert_config.json --init_checkpoint=$OUT/model.ckpt-1000 \
    --vocab_file=$MODEL/vocab.txt --seq_length=128 --label_list=negative,positive \
    --export_dir=/models/sentiment --version=1

See docs/serving.md.

Flags and the library call: `bert_tf.cli.export_savedmodel` (also the console script
`bert-tf-export-savedmodel`); `--help` lists them, `--verbose` shows TensorFlow's start-up
log and the traceback of an input error.
"""
from bert_tf.cli.export_savedmodel import main

if __name__ == "__main__":
    main()
