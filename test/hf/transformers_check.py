"""Loads exported folders with transformers' from_pretrained and prints, as JSON on stdout, for each:
the model class and loading report (missing / unexpected / mismatched keys), the logits for the given
input ids (eval mode, float32) and AutoTokenizer's ids for the given texts — or the error
from_pretrained raised. One process for all folders: importing torch is the slow part.

usage: python transformers_check.py <request.json>
  request.json: [{"folder": "...", "kind": "gpt" | "bert", "input_ids": [[...], ...], "texts": ["...", ...]}, ...]
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer


def check(request: dict) -> dict:
    auto = AutoModelForCausalLM if request["kind"] == "gpt" else AutoModelForMaskedLM
    try:
        model, info = auto.from_pretrained(request["folder"], output_loading_info=True, dtype=torch.float32)
    except Exception as error:  # noqa: BLE001 - the message is the result
        return {"error": f"{type(error).__name__}: {error}"}
    model.eval()
    ids = torch.tensor(request["input_ids"], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    tokenizer = AutoTokenizer.from_pretrained(request["folder"])
    return {
        "class": type(model).__name__,
        "loading": {k: sorted(str(x) for x in v) for k, v in info.items()},
        "logits": logits.tolist(),
        "token_ids": [tokenizer(t, add_special_tokens=False)["input_ids"] for t in request["texts"]],
    }


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        requests = json.load(f)
    print(json.dumps([check(r) for r in requests]))


if __name__ == "__main__":
    main()
