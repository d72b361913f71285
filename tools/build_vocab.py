"""Learn a WordPiece vocab from text files (one text per line) for `FullTokenizer`.

  python tools/build_vocab.py --input_file=corpus/*.txt --output_file=vocab.txt \
      --vocab_size=30522 --do_lower_case=True

Flags and the library call: `bert_tf.cli.build_vocab` (also the console script
`bert-tf-build-vocab`); `--help` lists them, `--verbose` shows TensorFlow's start-up
log and the traceback of an input error.
"""
from bert_tf.cli.build_vocab import main

if __name__ == "__main__":
    main()
