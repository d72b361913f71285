"""Send raw text to a BERT model served by TF Serving (REST or gRPC) and print the outputs.

  python tools/serving_client.py --server=localhost:8501 --model_name=sentiment \
    --text="a great movie" --text="dull and long"

The tool is `bert_tf.cli.serving_client` (console script `bert-tf-serving-client`); see docs/cli.md.
"""
from bert_tf.cli.serving_client import main

if __name__ == "__main__":
    main()
