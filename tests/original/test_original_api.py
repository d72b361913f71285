"""`from bert_tf.original import modeling, optimization, tokenization`: every public name of the
original's three modules (google-research/bert @ eedf571), with the original's parameters and
defaults (the table of docs/switching.md)."""
import inspect

import pytest

from bert_tf import tokenization as bert_tf_tokenization
from bert_tf.original import modeling, optimization, tokenization

E = inspect.Parameter.empty

# name -> [(parameter, default)], the original's signatures
MODELING = {
    "BertConfig": [("vocab_size", E), ("hidden_size", 768), ("num_hidden_layers", 12),
                   ("num_attention_heads", 12), ("intermediate_size", 3072),
                   ("hidden_act", "gelu"), ("hidden_dropout_prob", 0.1),
                   ("attention_probs_dropout_prob", 0.1), ("max_position_embeddings", 512),
                   ("type_vocab_size", 16), ("initializer_range", 0.02)],
    "BertModel": [("config", E), ("is_training", E), ("input_ids", E), ("input_mask", None),
                  ("token_type_ids", None), ("use_one_hot_embeddings", False), ("scope", None)],
    "gelu": [("x", E)],
    "get_activation": [("activation_string", E)],
    "get_assignment_map_from_checkpoint": [("tvars", E), ("init_checkpoint", E)],
    "dropout": [("input_tensor", E), ("dropout_prob", E)],
    "layer_norm": [("input_tensor", E), ("name", None)],
    "layer_norm_and_dropout": [("input_tensor", E), ("dropout_prob", E), ("name", None)],
    "create_initializer": [("initializer_range", 0.02)],
    "embedding_lookup": [("input_ids", E), ("vocab_size", E), ("embedding_size", 128),
                         ("initializer_range", 0.02), ("word_embedding_name", "word_embeddings"),
                         ("use_one_hot_embeddings", False)],
    "embedding_postprocessor": [
        ("input_tensor", E), ("use_token_type", False), ("token_type_ids", None),
        ("token_type_vocab_size", 16), ("token_type_embedding_name", "token_type_embeddings"),
        ("use_position_embeddings", True), ("position_embedding_name", "position_embeddings"),
        ("initializer_range", 0.02), ("max_position_embeddings", 512), ("dropout_prob", 0.1)],
    "create_attention_mask_from_input_mask": [("from_tensor", E), ("to_mask", E)],
    "attention_layer": [
        ("from_tensor", E), ("to_tensor", E), ("attention_mask", None),
        ("num_attention_heads", 1), ("size_per_head", 512), ("query_act", None),
        ("key_act", None), ("value_act", None), ("attention_probs_dropout_prob", 0.0),
        ("initializer_range", 0.02), ("do_return_2d_tensor", False), ("batch_size", None),
        ("from_seq_length", None), ("to_seq_length", None)],
    "transformer_model": [
        ("input_tensor", E), ("attention_mask", None), ("hidden_size", 768),
        ("num_hidden_layers", 12), ("num_attention_heads", 12), ("intermediate_size", 3072),
        ("intermediate_act_fn", modeling.gelu), ("hidden_dropout_prob", 0.1),
        ("attention_probs_dropout_prob", 0.1), ("initializer_range", 0.02),
        ("do_return_all_layers", False)],
    "get_shape_list": [("tensor", E), ("expected_rank", None), ("name", None)],
    "reshape_to_matrix": [("input_tensor", E)],
    "reshape_from_matrix": [("output_tensor", E), ("orig_shape_list", E)],
    "assert_rank": [("tensor", E), ("expected_rank", E), ("name", None)],
}
MODELING_METHODS = {
    "BertConfig": ["from_dict", "from_json_file", "to_dict", "to_json_string"],
    "BertModel": ["get_pooled_output", "get_sequence_output", "get_all_encoder_layers",
                  "get_embedding_output", "get_embedding_table"],
}
OPTIMIZATION = {
    "create_optimizer": [("loss", E), ("init_lr", E), ("num_train_steps", E),
                         ("num_warmup_steps", E), ("use_tpu", E)],
    "AdamWeightDecayOptimizer": [
        ("learning_rate", E), ("weight_decay_rate", 0.0), ("beta_1", 0.9), ("beta_2", 0.999),
        ("epsilon", 1e-6), ("exclude_from_weight_decay", None),
        ("name", "AdamWeightDecayOptimizer")],
}
TOKENIZATION = {
    "validate_case_matches_checkpoint": [("do_lower_case", E), ("init_checkpoint", E)],
    "convert_to_unicode": [("text", E)],
    "printable_text": [("text", E)],
    "load_vocab": [("vocab_file", E)],
    "convert_by_vocab": [("vocab", E), ("items", E)],
    "convert_tokens_to_ids": [("vocab", E), ("tokens", E)],
    "convert_ids_to_tokens": [("inv_vocab", E), ("ids", E)],
    "whitespace_tokenize": [("text", E)],
    "FullTokenizer": [("vocab_file", E), ("do_lower_case", True)],
    "BasicTokenizer": [("do_lower_case", True)],
    "WordpieceTokenizer": [("vocab", E), ("unk_token", "[UNK]"),
                           ("max_input_chars_per_word", 200)],
    "_is_whitespace": [("char", E)],
    "_is_control": [("char", E)],
    "_is_punctuation": [("char", E)],
}


def _parameters(obj):
    params = inspect.signature(obj).parameters.values()
    return [(p.name, p.default) for p in params if p.name != "self"]


@pytest.mark.parametrize("module, table", [(modeling, MODELING), (optimization, OPTIMIZATION),
                                           (tokenization, TOKENIZATION)],
                         ids=["modeling", "optimization", "tokenization"])
def test_every_original_name_with_its_signature(module, table):
    for name, expected in table.items():
        assert _parameters(getattr(module, name)) == expected, name


def test_methods():
    for cls, methods in MODELING_METHODS.items():
        for method in methods:
            assert callable(getattr(getattr(modeling, cls), method)), (cls, method)
    assert _parameters(optimization.AdamWeightDecayOptimizer.apply_gradients) == [
        ("grads_and_vars", E), ("global_step", None), ("name", None)]
    for method in ("_do_use_weight_decay", "_get_variable_name", "minimize",
                   "compute_gradients"):
        assert callable(getattr(optimization.AdamWeightDecayOptimizer, method))
    for cls, methods in {"FullTokenizer": ["tokenize", "convert_tokens_to_ids",
                                           "convert_ids_to_tokens"],
                         "BasicTokenizer": ["tokenize", "_run_strip_accents",
                                            "_run_split_on_punc", "_tokenize_chinese_chars",
                                            "_is_chinese_char", "_clean_text"],
                         "WordpieceTokenizer": ["tokenize"]}.items():
        for method in methods:
            assert callable(getattr(getattr(tokenization, cls), method)), (cls, method)


def test_tokenization_is_bert_tfs_tokenizer():
    for name in bert_tf_tokenization.__all__:
        if hasattr(tokenization, name):
            assert getattr(tokenization, name) is getattr(bert_tf_tokenization, name), name
    assert set(tokenization.__all__) <= set(bert_tf_tokenization.__all__)
    for name in ("_is_whitespace", "_is_control", "_is_punctuation"):
        assert getattr(tokenization, name) is getattr(bert_tf_tokenization, name)


def test_switching_page_lists_every_public_name():
    """docs/switching.md's table names every public name of the three modules, module level and
    methods (same / alias / not provided and why)."""
    import pathlib
    import re

    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "switching.md").read_text()
    start = page.index("## The original's Python modules: `bert_tf.original`")
    table = re.sub(r"```.*?```", "", page[start:page.index("\n## ", start + 1)], flags=re.S)
    quoted = " ".join(re.findall(r"`([^`]+)`", table))
    names = [*MODELING, *OPTIMIZATION, *TOKENIZATION]
    names += [m for methods in MODELING_METHODS.values() for m in methods]
    names += ["apply_gradients", "_do_use_weight_decay", "_get_variable_name",
              "tokenize", "convert_tokens_to_ids", "convert_ids_to_tokens",
              "_run_strip_accents", "_run_split_on_punc", "_tokenize_chinese_chars",
              "_is_chinese_char", "_clean_text"]
    missing = [n for n in names if not re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", quoted)]
    assert not missing, missing
