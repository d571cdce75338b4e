"""Loads an exported folder with transformers' from_pretrained and prints, as JSON on stdout: the
loading report (missing / unexpected / mismatched keys), the logits for the given input ids (eval
mode, float32) and AutoTokenizer's ids for the given texts.

usage: python transformers_check.py <folder> <request.json>
  request.json: {"kind": "gpt" | "bert", "input_ids": [[...], ...], "texts": ["...", ...]}
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer


def main() -> None:
    folder, request_file = sys.argv[1], sys.argv[2]
    with open(request_file, encoding="utf-8") as f:
        request = json.load(f)
    auto = AutoModelForCausalLM if request["kind"] == "gpt" else AutoModelForMaskedLM
    model, info = auto.from_pretrained(folder, output_loading_info=True, dtype=torch.float32)
    model.eval()
    ids = torch.tensor(request["input_ids"], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    tokenizer = AutoTokenizer.from_pretrained(folder)
    print(json.dumps({
        "class": type(model).__name__,
        "loading": {k: sorted(str(x) for x in v) for k, v in info.items()},
        "logits": logits.tolist(),
        "token_ids": [tokenizer(t, add_special_tokens=False)["input_ids"] for t in request["texts"]],
    }))


if __name__ == "__main__":
    main()
