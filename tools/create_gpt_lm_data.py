"""Create GPT-1 LM pretraining TFRecords (contiguous n_ctx-token windows); see
bert_tf/cli/create_gpt_lm_data.py and docs/gpt_tokenization.md."""
from bert_tf.cli.create_gpt_lm_data import main

if __name__ == "__main__":
    main()
