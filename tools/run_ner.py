"""Fine-tune BERT for CoNLL-2003 NER (or the paper's feature-based BiLSTM tagger).

  python tools/run_ner.py --data_dir=$CONLL_DIR --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --do_lower_case=False \
    --do_train=True --do_eval=True --output_dir=/tmp/ner_base/

See docs/ner_swag.md.

The tool is `bert_tf.cli.run_ner` (console script `bert-tf-run-ner`); see docs/cli.md.
"""
from bert_tf.cli.run_ner import main

if __name__ == "__main__":
    main()
