"""Create masked-LM / next-sentence pretraining TFRecords from raw text (the original's flags).

  python tools/create_pretraining_data.py --input_file=sample_text.txt \
    --output_file=/tmp/tf_examples.tfrecord --vocab_file=vocab.txt --do_lower_case=True \
    --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15 \
    --random_seed=12345 --dupe_factor=5

`--mode=scalable --num_workers=8` writes resumable shards. See docs/pretraining_data.md.

The tool is `bert_tf.cli.create_pretraining_data` (console script `bert-tf-create-pretraining-data`); see docs/cli.md.
"""
from bert_tf.cli.create_pretraining_data import main

if __name__ == "__main__":
    main()
