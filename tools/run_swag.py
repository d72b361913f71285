"""Fine-tune BERT on SWAG (four-way multiple choice).

  python tools/run_swag.py --data_dir=$SWAG_DIR --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --do_train=True --do_eval=True \
    --output_dir=/tmp/swag_base/

See docs/ner_swag.md.

The tool is `bert_tf.cli.run_swag` (console script `bert-tf-run-swag`); see docs/cli.md.
"""
from bert_tf.cli.run_swag import main

if __name__ == "__main__":
    main()
