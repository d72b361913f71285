"""Send raw text to a BERT model served by TF Serving (REST or gRPC) and print the outputs.

  python tools/serving_client.py --server=localhost:8501 --model_name=sentiment \
    --text="a great movie" --text="dull and long"

Flags and the library call: `bert_tf.cli.serving_client` (also the console script
`bert-tf-serving-client`); `--help` lists them, `--verbose` shows TensorFlow's start-up
log and the traceback of an input error.
"""
from bert_tf.cli.serving_client import main

if __name__ == "__main__":
    main()
