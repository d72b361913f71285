"""Perplexity of a text file under GPT-1.

  python tools/score.py --model=finetune-transformer-lm/model --input_file=story.txt

The file is cut into consecutive windows of n_ctx tokens (--per_line: one text per line). The
summary gives the perplexity under the original LM loss's softmax over the whole table
(perplexity_full_table) and over tokens + specials / tokens only.
Flags and the library call: `bert_tf.cli.score`; `--help` lists them.
"""
from bert_tf.cli.score import main

if __name__ == "__main__":
    main()
