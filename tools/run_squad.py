"""Fine-tune BERT on SQuAD v1.1 / v2.0 and write predictions: the original run_squad.py.

  python tools/run_squad.py --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --do_train=True \
    --train_file=$SQUAD_DIR/train-v1.1.json --do_predict=True \
    --predict_file=$SQUAD_DIR/dev-v1.1.json --train_batch_size=12 --learning_rate=3e-5 \
    --num_train_epochs=2.0 --max_seq_length=384 --doc_stride=128 --output_dir=/tmp/squad_base/

Writes predictions.json, nbest_predictions.json, null_odds.json (--version_2_with_negative) and,
when the predict file has answers, eval_results.json. See docs/squad.md.

The tool is `bert_tf.cli.run_squad` (console script `bert-tf-run-squad`); see docs/cli.md.
"""
from bert_tf.cli.run_squad import main

if __name__ == "__main__":
    main()
