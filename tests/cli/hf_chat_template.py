"""transformers' apply_chat_template for chat_template_hf_test.cpp: reads conversations (a JSON
list of message lists), writes {"texts": [...], "ids": [[...]]}: each rendered by the
tokenizer's own chat template, and its ids as tokenizer(text, add_special_tokens=False)."""
import json
import sys

from transformers import AutoTokenizer

tok_dir, conv_path, out_path = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(tok_dir)
convs = json.load(open(conv_path))
texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=False) for c in convs]
ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
json.dump({"texts": texts, "ids": ids}, open(out_path, "w"))
