"""The bounds of the exported PyTorch code (src/hf/python/configuration_slayformer.py), printed as JSON on stdout.

usage: python bounds_check.py tables             → {"bounds": BOUNDS, "options": OPTION_SPECS}
       python bounds_check.py load <request.json> → per request {"folder", "kind": "gpt" | "bert"}: {"error": the
              message from_pretrained(folder, trust_remote_code=True) raised, or null, "peak_growth_mb": how far the
              process's peak resident memory rose while it ran}; with "set": {field: value}, the folder's configuration
              is loaded, those fields set on it, and the model built with from_config instead
"""

import json
import os
import resource
import sys


def tables():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'src', 'hf', 'python'))
    import configuration_slayformer as configuration

    return {'bounds': configuration.BOUNDS, 'options': configuration.OPTION_SPECS}


def load(request):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForCausalLM if request['kind'] == 'gpt' else AutoModelForMaskedLM
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        if 'set' in request:
            config = AutoConfig.from_pretrained(request['folder'], trust_remote_code=True)
            for key, value in request['set'].items():
                setattr(config, key, value)
            auto.from_config(config, trust_remote_code=True)
        else:
            auto.from_pretrained(request['folder'], trust_remote_code=True)
        error = None
    except ValueError as e:
        error = str(e)
    return {'error': error, 'peak_growth_mb': (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024}


def main():
    if sys.argv[1] == 'tables':
        print(json.dumps(tables()))
        return
    # Imported before measuring, so that their own memory does not count.
    import torch  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM  # noqa: F401

    with open(sys.argv[2], encoding='utf-8') as f:
        print(json.dumps([load(r) for r in json.load(f)]))


if __name__ == '__main__':
    main()
