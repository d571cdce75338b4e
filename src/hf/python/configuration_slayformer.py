"""Configurations of the models slayformer exports for transformers' own classes to refuse (see
modeling_slayformer.py): config.json holds GPT2Config's or BertConfig's fields plus a `slayformer`
section (the attention's name and options, bias, normPosition, embeddingNorm, typeVocabSize), written
by `npm run export` (src/hf/config.ts).

Its `layer_types` entries name slayformer's attention. transformers >= 5 validates them against its own
list, so `GPT2LMHeadModel.from_pretrained` / `BertForMaskedLM.from_pretrained` of such a folder fail
instead of silently computing softmax attention; these classes accept them.
"""
from transformers import PretrainedConfig


class SlayformerGPT2Config(PretrainedConfig):
    """A causal model in GPT-2's layout: GPT2Config's field names."""

    model_type = "slayformer-gpt2"
    attribute_map = {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    }


class SlayformerBertConfig(PretrainedConfig):
    """A masked model in BERT's layout: BertConfig's field names."""

    model_type = "slayformer-bert"
