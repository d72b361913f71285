"""Run the BERT paper's learning-rate grid for a fine-tuning config and keep the best dev score.

  python tools/sweep_learning_rate.py --script=run_classifier --output_dir=/tmp/mrpc_sweep -- \
    --flagfile=official_configs/tasks/mrpc.flags --data_dir=$GLUE_DIR/MRPC \
    --vocab_file=$BERT_DIR/vocab.txt --bert_config_file=$BERT_DIR/bert_config.json

Flags and the library call: `bert_tf.cli.sweep_learning_rate` (also the console script
`bert-tf-sweep-learning-rate`); `--help` lists them, `--verbose` shows TensorFlow's start-up
log and the traceback of an input error.
"""
from bert_tf.cli.sweep_learning_rate import main

if __name__ == "__main__":
    main()
