"""Configurations of the models slayformer exports for transformers' own classes to refuse (see
modeling_slayformer.py): config.json holds GPT2Config's or BertConfig's fields plus a `slayformer`
section (the attention's name and options, bias, normPosition, embeddingNorm, typeVocabSize, and the
Transformer++ options positional, ropeTheta, mlp, norm), written
by `npm run export` (src/hf/config.ts).

Its `layer_types` entries name slayformer's attention. transformers >= 5 validates them against its own
list, so `GPT2LMHeadModel.from_pretrained` / `BertForMaskedLM.from_pretrained` of such a folder fail
instead of silently computing softmax attention; these classes accept them.

Every size config.json sets is held to slayformer's bounds table (src/core/bounds.ts, docs/bounds.md) when
the configuration is read, before any tensor is allocated, with the messages of slayformer's own loader
(src/hf/config.ts, the attention option specs of src/model/attention/): a config.json edited apart from
these files (`n_layer: 100000`, SLAY's `quadratureNodes: 20000`) fails at once instead of allocating for
minutes. test/hf/python-bounds.test.ts keeps the tables below equal to the TypeScript ones.
"""

import json
import math
import os
from decimal import Decimal

from transformers import PretrainedConfig

# src/core/bounds.ts BOUNDS: the largest value of each size, and why (the whole table, kept equal by a test).
BOUNDS = {
    'layers': {'max': 1024, 'why': "over 10× GPT-3's 96 layers"},
    'heads': {'max': 4096, 'why': "over 40× GPT-3's 96 heads"},
    'width': {'max': 65536, 'why': "over 5× GPT-3's 12,288"},
    'mlpRatio': {'max': 64, 'why': '16× the usual 4'},
    'positions': {'max': 2**20, 'why': "1,024× GPT-2's 1,024 positions; the position table and the activations grow with it"},
    'embeddingRows': {'max': 2**20, 'why': 'over 4× the largest vocabularies in use (256k tokens)'},
    'features': {'max': 65536, 'why': "4× the most the tests use (16,384 PRF features per head in SLAY's convergence tests)"},
    'quadratureNodes': {'max': 64, 'why': 'the nodes come from an O(R³) eigen-solve, and beyond ~25 nodes the last weights (≈ e^(−4R)) are below float32'},
    'sweepRuns': {'max': 10000, 'why': "each run is a recipe validated up front and a Slurm array task (Slurm's default MaxArraySize allows 1,001)"},
    'parquetRowGroupBytes': {
        'max': 2**28,
        'why': '2× the 128 MB row groups of Spark and parquet-mr; a row group is decoded whole and its text held at ~3× its size',
    },
}

_POSITIONS = BOUNDS['positions']['max']
_CHUNKING = {
    'chunkSize': {'kind': 'int', 'default': 64, 'min': 1, 'max': _POSITIONS},
    'segmentLength': {'kind': 'int', 'default': 0, 'min': 0, 'max': _POSITIONS},
}
_DELTA = {'kind': 'number', 'default': 1e-6, 'min': 0}
_EPSILON = {'kind': 'number', 'default': 0.001, 'exclusiveMin': 0}
_RANDOM_FEATURES = {
    'features': {'kind': 'int', 'default': 64, 'min': 1, 'max': BOUNDS['features']['max']},
    'orthogonal': {'kind': 'bool', 'default': True},
    'redrawInterval': {'kind': 'int', 'default': 0, 'min': 0, 'max': None},
    **_CHUNKING,
    'delta': _DELTA,
    'dataInit': {'kind': 'enum', 'default': 'none', 'values': ['none', 'variance-optimal']},
}

# Each mechanism's options in slayformer's order (src/model/attention/<name>.ts), without their docs.
OPTION_SPECS = {
    'softmax': {},
    'yat-spherical': {'epsilon': _EPSILON, 'delta': _DELTA},
    'slay': {
        'epsilon': _EPSILON,
        'delta': _DELTA,
        'quadratureNodes': {'kind': 'int', 'default': 2, 'min': 1, 'max': BOUNDS['quadratureNodes']['max']},
        'prfFeatures': {'kind': 'int', 'default': 16, 'min': 1, 'max': BOUNDS['features']['max']},
        'anchors': {'kind': 'int', 'default': 8, 'min': 1, 'max': BOUNDS['features']['max']},
        'poly': {'kind': 'enum', 'default': 'anchor', 'values': ['anchor', 'exact', 'random-maclaurin', 'tensorsketch', 'nystrom', 'laplace-only', 'hadamard']},
        **_CHUNKING,
    },
    'performer': _RANDOM_FEATURES,
    'darkformer': {
        **_RANDOM_FEATURES,
        'rank': {'kind': 'int', 'default': 0, 'min': 0, 'max': BOUNDS['width']['max']},
        'init': {'kind': 'enum', 'default': 'identity', 'values': ['identity', 'whitening']},
    },
    'schoenbat': {
        'kernel': {'kind': 'enum', 'default': 'exp', 'values': ['exp', 'inverse', 'logi', 'trigh', 'sqrt']},
        'features': {'kind': 'int', 'default': 128, 'min': 2, 'max': BOUNDS['features']['max']},
        'maxDegree': {'kind': 'int', 'default': 20, 'min': 1, 'max': 40},
        'denominatorClamp': {'kind': 'enum', 'default': 'kernel-min', 'values': ['kernel-min', 'reference']},
        **_CHUNKING,
    },
    'linear-elu': {'delta': _DELTA, **_CHUNKING},
    'cosformer': {'reweightLength': {'kind': 'int', 'default': 0, 'min': 0, 'max': _POSITIONS}, 'delta': _DELTA, **_CHUNKING},
    'gla': {
        'gateRank': {'kind': 'int', 'default': 16, 'min': 1, 'max': BOUNDS['width']['max']},
        'gateNormalizer': {'kind': 'number', 'default': 16, 'exclusiveMin': 0},
        'chunkSize': {'kind': 'int', 'default': 16, 'min': 1, 'max': _POSITIONS},
        'segmentLength': _CHUNKING['segmentLength'],
    },
}

SECTION = 'slayformer'


def _js_number(x):
    """A number as JavaScript writes it (String(x), JSON.stringify(x)): the messages are slayformer's."""
    if isinstance(x, int):
        return str(x)
    if math.isnan(x) or math.isinf(x):
        return 'null'
    if x == int(x) and abs(x) < 1e21:
        return str(int(x))
    if 1e-6 <= abs(x) < 1e21:
        return format(Decimal(repr(x)), 'f')
    mantissa, exponent = repr(x).split('e')
    return f'{mantissa}e{"+" if int(exponent) > 0 else "-"}{abs(int(exponent))}'


def _js_json(value):
    """JSON.stringify(value) (undefined for a missing value)."""
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (int, float)):
        return _js_number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return '[' + ','.join(_js_json(v) for v in value) + ']'
    if isinstance(value, dict):
        return '{' + ','.join(f'{json.dumps(str(k), ensure_ascii=False)}:{_js_json(v)}' for k, v in value.items()) + '}'
    return json.dumps(str(value))


def _show_value(value):
    """src/core/bounds.ts showValue: JSON cut to 120 characters."""
    return _js_json(value)[:120]


def _is_integer(value):
    """Number.isInteger: JSON's 20000.0 is the integer 20000 to JavaScript."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value == int(value)


def _is_safe_integer(value):
    return _is_integer(value) and abs(value) <= 2**53 - 1


class _FieldReader:
    """src/hf/config.ts FieldReader's size checks, collecting problems in the same words."""

    def __init__(self, fields):
        self.fields = fields
        self.problems = []

    def int(self, key, fallback, minimum, bound=None):
        value = self.fields.get(key)
        value = fallback if value is None else value
        maximum = BOUNDS[bound]['max'] if bound else 2**53 - 1
        if _is_safe_integer(value) and minimum <= value <= maximum:
            return int(value)
        range_text = f'an integer ≥ {minimum}, ≤ {maximum}' if bound else f'an integer ≥ {minimum}'
        why = f'; the bound: {BOUNDS[bound]["why"]}' if bound and isinstance(value, (int, float)) and not isinstance(value, bool) and value > maximum else ''
        self.problems.append(f'{key} must be {range_text} (got {_show_value(value)}{why})')
        return fallback

    def ratio(self, key, inner, width, width_key):
        bound = BOUNDS['mlpRatio']
        if inner <= bound['max'] * width:
            return
        self.problems.append(f'{key} ({_js_number(inner)}) must be ≤ {bound["max"]} × {width_key} ({_js_number(width)}) (the bound: {bound["why"]})')


def _option_problem(name, options):
    """src/model/attention/registry.ts resolveOptions: the first problem of a mechanism's options, or None."""
    specs = OPTION_SPECS[name]
    if not isinstance(options, dict):
        options = {}
    for key, value in options.items():
        if value is not None and key not in specs:
            allowed = ', '.join(['numHeads', 'headDim', 'causal', 'seed', *specs])
            return f"attention '{name}': unknown option '{key}'; allowed: {allowed}"
    for key, spec in specs.items():
        value = options.get(key)
        value = spec['default'] if value is None else value
        expected = _option_expected(spec, value)
        if expected:
            return f"attention '{name}': option '{key}' must be {expected} (got {_js_json(value)})"
    return None


def _option_expected(spec, value):
    """What the value should have been (registry.ts checkOption), or None when it is right."""
    kind = spec['kind']
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == 'int':
        if not _is_integer(value):
            return 'an integer'
        if 'min' in spec and value < spec['min']:
            return f'an integer ≥ {_js_number(spec["min"])}'
        if spec['max'] is not None and value > spec['max']:
            return f'an integer ≤ {_js_number(spec["max"])}'
    elif kind == 'number':
        if not (number and math.isfinite(value)):
            return 'a finite number'
        if 'min' in spec and value < spec['min']:
            return f'a number ≥ {_js_number(spec["min"])}'
        if 'exclusiveMin' in spec and value <= spec['exclusiveMin']:
            return f'a number > {_js_number(spec["exclusiveMin"])}'
        if 'max' in spec and value > spec['max']:
            return f'a number ≤ {_js_number(spec["max"])}'
    elif kind == 'enum':
        if not (isinstance(value, str) and value in spec['values']):
            return f'one of {", ".join(spec["values"])}'
    elif not isinstance(value, bool):
        return 'true or false'
    return None


def size_problems(fields):
    """The problems of config.json's sizes, in the order and words of src/hf/config.ts parseHfConfig; [] when
    every size is within its bound. Only sizes and the attention options are checked here."""
    reader = _FieldReader(fields)
    if fields.get('model_type') == SlayformerBertConfig.model_type:
        width = reader.int('hidden_size', 768, 1, 'width')
        reader.int('vocab_size', 30522, 1, 'embeddingRows')
        reader.int('max_position_embeddings', 512, 1, 'positions')
        layers = reader.int('num_hidden_layers', 12, 1, 'layers')
        heads = reader.int('num_attention_heads', 12, 1, 'heads')
        reader.ratio('intermediate_size', reader.int('intermediate_size', 3072, 1), width, 'hidden_size')
        reader.int('type_vocab_size', 2, 0, 'embeddingRows')
    else:
        width = reader.int('n_embd', 768, 1, 'width')
        inner = 4 * width if fields.get('n_inner') is None else reader.int('n_inner', 4 * width, 1)
        reader.int('vocab_size', 50257, 1, 'embeddingRows')
        reader.int('n_positions', 1024, 1, 'positions')
        layers = reader.int('n_layer', 12, 1, 'layers')
        heads = reader.int('n_head', 12, 1, 'heads')
        reader.ratio('n_inner', inner, width, 'n_embd')
    problems = reader.problems
    section = fields.get(SECTION)
    if not isinstance(section, dict):
        shown = _js_json(section) if SECTION in fields else 'undefined'
        problems.append(f"{SECTION} must be an object with the settings of this project's export (got {shown})")
        return problems
    attention = section.get('attention')
    name = attention.get('name') if isinstance(attention, dict) else None
    if not isinstance(name, str) or name not in OPTION_SPECS:
        problems.append(f'{SECTION}.attention.name must be one of {", ".join(OPTION_SPECS)} (got {_js_json(name)})')
    else:
        problem = _option_problem(name, attention.get('options') or {})
        if problem:
            problems.append(f'{SECTION}.attention.options: {problem}')
        elif name == 'schoenbat':
            problems.extend(_degree_problems(section.get('layers'), layers, attention.get('options') or {}))
    section_reader = _FieldReader(section)
    section_reader.int('typeVocabSize', 0, 0, 'embeddingRows')
    problems.extend(f'{SECTION}.{p}' for p in section_reader.problems)
    if width % heads != 0:
        problems.append(f'the model width ({width}) must be divisible by the number of heads ({heads})')
    return problems


def _degree_problems(layers, num_layers, options):
    """SchoenbAt's feature degrees, which this implementation reads from config.json (slayformer's draws them
    from the seed): per layer, features - 1 integers from maxDegree down to 1."""
    features = options.get('features') or OPTION_SPECS['schoenbat']['features']['default']
    max_degree = options.get('maxDegree') or OPTION_SPECS['schoenbat']['maxDegree']['default']
    if not isinstance(layers, list) or len(layers) != num_layers:
        return []  # modeling_slayformer.py create_mechanism names the missing list
    for index, layer in enumerate(layers):
        degrees = layer.get('maclaurinDegrees') if isinstance(layer, dict) else None
        if degrees is None:
            continue
        ordered = isinstance(degrees, list) and all(_is_integer(n) and 1 <= n <= max_degree for n in degrees)
        if not ordered or len(degrees) != features - 1 or any(a < b for a, b in zip(degrees, degrees[1:])):
            return [
                f'{SECTION}.layers[{index}].maclaurinDegrees must be {features - 1} integers from {max_degree} down to 1, highest first (got {_show_value(degrees)})'
            ]
    return []


def check_sizes(fields, file='config.json'):
    """Raises ValueError naming `file` and every size out of its bound (the words of slayformer's loader)."""
    problems = size_problems(fields)
    if problems:
        raise ValueError(f'{file}: ' + '\n  '.join(problems))


class _BoundedConfig(PretrainedConfig):
    """Checks config.json's sizes when it is read (naming the file) and when a configuration is built from
    fields (a config without fields, transformers' defaults, has none to check)."""

    def __init__(self, **kwargs):
        if SECTION in kwargs:
            check_sizes({'model_type': self.model_type, **kwargs})
        super().__init__(**kwargs)

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs):
        config_dict, rest = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        path = os.fspath(pretrained_model_name_or_path)
        check_sizes(config_dict, os.path.join(path, 'config.json') if os.path.isdir(path) else path)
        return config_dict, rest


class SlayformerGPT2Config(_BoundedConfig):
    """A causal model in GPT-2's layout: GPT2Config's field names."""

    model_type = 'slayformer-gpt2'
    attribute_map = {
        'hidden_size': 'n_embd',
        'max_position_embeddings': 'n_positions',
        'num_attention_heads': 'n_head',
        'num_hidden_layers': 'n_layer',
    }


class SlayformerBertConfig(_BoundedConfig):
    """A masked model in BERT's layout: BertConfig's field names."""

    model_type = 'slayformer-bert'
