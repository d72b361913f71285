"""Export BERT as a SavedModel for fine-tuning (encoder) or TF Serving.

  python tools/export_savedmodel.py --model_type=classifier \
    --bert_config_file=$MODEL/bert_config.json --init_checkpoint=$OUT/model.ckpt-1000 \
    --vocab_file=$MODEL/vocab.txt --seq_length=128 --label_list=negative,positive \
    --export_dir=/models/sentiment --version=1

See docs/serving.md.

The tool is `bert_tf.cli.export_savedmodel` (console script `bert-tf-export-savedmodel`); see docs/cli.md.
"""
from bert_tf.cli.export_savedmodel import main

if __name__ == "__main__":
    main()
