"""Learn a WordPiece vocab from text files (one text per line) for `FullTokenizer`.

  python tools/build_vocab.py --input_file=corpus/*.txt --output_file=vocab.txt \
      --vocab_size=30522 --do_lower_case=True

The tool is `bert_tf.cli.build_vocab` (console script `bert-tf-build-vocab`); see docs/cli.md.
"""
from bert_tf.cli.build_vocab import main

if __name__ == "__main__":
    main()
