"""Loads exported folders with transformers' from_pretrained and prints, as JSON on stdout, for each:
the model class and loading report (missing / unexpected / mismatched keys), the logits for the given
input ids (eval mode, float32) and AutoTokenizer's ids for the given texts — or the error
from_pretrained raised. One process for all folders: importing torch is the slow part.

usage: python transformers_check.py <request.json>
  request.json: [{"folder": "...", "kind": "gpt" | "bert", "input_ids": [[...], ...], "texts": ["...", ...],
                  optional: "trust_remote_code": true (model and tokenizer), "attention_mask": [[1/0, ...], ...] (default all 1),
                  "generate": {"prompt": [...], "max_new_tokens": n}  (greedy; result "generated": new ids, "generated_text";
                              and the same without the cache, use_cache=False: "uncached" {"generated", "logits_diff": the
                              largest difference of any step's logits}; per generate() the token counts each forward call
                              was given, "forward_lengths" / "uncached" "forward_lengths", and the elements of the cache's
                              state after the prompt and at the end, "cache_elements" [after prompt, at end]; with
                              "beams": true, whether beam search (3 beams, the prompt twice as a batch) gives the same
                              sequences with and without the cache, "beams_agree"),
                  "plain": "GPT2LMHeadModel" | "BertForMaskedLM"     (also load as that class; result "plain_error")}, ...]
"""

import json
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer


def error_text(error: Exception) -> str:
    return f'{type(error).__name__}: {error}'


def check(request: dict) -> dict:
    auto = AutoModelForCausalLM if request['kind'] == 'gpt' else AutoModelForMaskedLM
    result = {}
    if 'plain' in request:
        try:
            getattr(transformers, request['plain']).from_pretrained(request['folder'])
            result['plain_error'] = None
        except Exception as error:  # noqa: BLE001 - the message is the result
            result['plain_error'] = error_text(error)
    trust = request.get('trust_remote_code', False)
    try:
        model, info = auto.from_pretrained(request['folder'], output_loading_info=True, dtype=torch.float32, trust_remote_code=trust)
    except Exception as error:  # noqa: BLE001 - the message is the result
        return {**result, 'error': error_text(error)}
    model.eval()
    ids = torch.tensor(request['input_ids'], dtype=torch.long)
    mask = torch.tensor(request['attention_mask']) if 'attention_mask' in request else torch.ones_like(ids)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    tokenizer = AutoTokenizer.from_pretrained(request['folder'], trust_remote_code=trust)
    result.update(
        {
            'class': type(model).__name__,
            'loading': {k: sorted(str(x) for x in v) for k, v in info.items()},
            'logits': logits.tolist(),
            'token_ids': [tokenizer(t, add_special_tokens=False)['input_ids'] for t in request.get('texts', [])],
        }
    )
    if 'generate' in request:
        prompt = torch.tensor([request['generate']['prompt']], dtype=torch.long)
        cached, uncached = (greedy(model, prompt, request['generate']['max_new_tokens'], use_cache) for use_cache in (True, False))
        result['generated'] = cached['sequences'][0, prompt.shape[1] :].tolist()
        result['generated_text'] = tokenizer.decode(result['generated'])
        result['forward_lengths'] = cached['forward_lengths']
        result['cache_elements'] = cached['cache_elements']
        steps = min(len(cached['logits']), len(uncached['logits']))
        result['uncached'] = {
            'generated': uncached['sequences'][0, prompt.shape[1] :].tolist(),
            'forward_lengths': uncached['forward_lengths'],
            'logits_diff': max(float((a - b).abs().max()) for a, b in zip(cached['logits'][:steps], uncached['logits'][:steps])),
        }
        if request['generate'].get('beams'):
            batch = torch.cat([prompt, prompt.flip(1)])
            with torch.no_grad():
                beams = [
                    model.generate(
                        batch,
                        attention_mask=torch.ones_like(batch),
                        max_new_tokens=request['generate']['max_new_tokens'],
                        num_beams=3,
                        do_sample=False,
                        use_cache=use_cache,
                    )
                    for use_cache in (True, False)
                ]
            result['beams_agree'] = torch.equal(*beams)
    return result


def state_elements(cache) -> int:
    return sum(t.numel() for state in cache.layers if state is not None for t in state.values())


def greedy(model, prompt, max_new_tokens, use_cache) -> dict:
    """generate() with use_cache as given, recording each forward call's input length and the cache's size."""
    lengths, elements = [], []
    forward = model.forward

    def recording(*args, **kwargs):
        lengths.append(int(kwargs['input_ids'].shape[1]))
        out = forward(*args, **kwargs)
        if out.past_key_values is not None:
            elements.append(state_elements(out.past_key_values))
        return out

    model.forward = recording
    try:
        with torch.no_grad():
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                use_cache=use_cache,
                return_dict_in_generate=True,
                output_logits=True,
            )
    finally:
        del model.forward
    return {'sequences': out.sequences, 'logits': out.logits, 'forward_lengths': lengths, 'cache_elements': [elements[0], elements[-1]] if elements else None}


def main() -> None:
    with open(sys.argv[1], encoding='utf-8') as f:
        requests = json.load(f)
    print(json.dumps([check(r) for r in requests]))


if __name__ == '__main__':
    main()
