"""Run the BERT paper's learning-rate grid for a fine-tuning config and keep the best dev score.

  python tools/sweep_learning_rate.py --script=run_classifier --output_dir=/tmp/mrpc_sweep -- \
    --flagfile=official_configs/tasks/mrpc.flags --data_dir=$GLUE_DIR/MRPC \
    --vocab_file=$BERT_DIR/vocab.txt --bert_config_file=$BERT_DIR/bert_config.json

The tool is `bert_tf.cli.sweep_learning_rate` (console script `bert-tf-sweep-learning-rate`); see docs/cli.md.
"""
from bert_tf.cli.sweep_learning_rate import main

if __name__ == "__main__":
    main()
