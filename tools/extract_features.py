"""Extract fixed contextual features (chosen encoder layers) for each input line.

  python tools/extract_features.py --input_file=in.txt --output_file=out.jsonl \
    --vocab_file=vocab.txt --bert_config_file=bert_config.json \
    --init_checkpoint=bert_model.ckpt --layers=-1,-2,-3,-4 --max_seq_length=128 --batch_size=8

The tool is `bert_tf.cli.extract_features` (console script `bert-tf-extract-features`); see docs/cli.md.
"""
from bert_tf.cli.extract_features import main

if __name__ == "__main__":
    main()
