"""Pretrain BERT (masked LM + next sentence) on TFRecords from create_pretraining_data.py.

  python tools/run_pretraining.py --input_file=/tmp/tf_examples.tfrecord \
    --output_dir=/tmp/pretraining_output --do_train=True --do_eval=True \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json --train_batch_size=32 \
    --max_seq_length=128 --max_predictions_per_seq=20 --num_train_steps=20 \
    --num_warmup_steps=10 --learning_rate=2e-5

A restart with the same --output_dir resumes exactly.

The tool is `bert_tf.cli.run_pretraining` (console script `bert-tf-run-pretraining`); see docs/cli.md.
"""
from bert_tf.cli.run_pretraining import main

if __name__ == "__main__":
    main()
