"""transformers itself (the test venv's 5.x, scripts/test-venv.sh, or 4.46 with its
--transformers4; "save" needs 5) on the other side of kiri's Hugging Face folders, for
tests/cli/hf_transformers_test.cpp. One process runs a list of operations (torch's import is
the slow part), given as JSON on the command line:

  {"op": "save", "arch": "llama"|"gpt2", "config": {...}, "seed": 7, "dtype": "float32",
   "max_shard_size": "50KB", "out": DIR}
      a random-weight LlamaForCausalLM / GPT2LMHeadModel of that config, save_pretrained()
  {"op": "logits", "folder": DIR, "ids": [...], "out": FILE}
      from_pretrained(dtype=float32), the logits after each prefix of ids: [T, V] float32
  {"op": "generate", "folder": DIR, "ids": [...], "tokens": N, "out": FILE}
      greedy generate(); FILE gets the new ids, space-separated, without the eos that ended it
  {"op": "resave", "folder": DIR, "out": DIR2}
      from_pretrained then save_pretrained again (transformers' own spelling of the config)
"""

import json
import sys

import torch
import transformers


def model_class(arch):
    return {"llama": transformers.LlamaForCausalLM, "gpt2": transformers.GPT2LMHeadModel}[arch]


def config_class(arch):
    return {"llama": transformers.LlamaConfig, "gpt2": transformers.GPT2Config}[arch]


def save(op):
    torch.manual_seed(op["seed"])
    config = config_class(op["arch"])(**op["config"])
    model = model_class(op["arch"])(config)
    # Weights far from the default init (std 0.02, norms at 1): logits of a few units, so that
    # 1e-5 of the largest logit compares something.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or ".ln_" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    model = model.to(getattr(torch, op.get("dtype", "float32")))
    model.save_pretrained(op["out"], max_shard_size=op.get("max_shard_size", "5GB"))


def load(folder):
    # transformers 4 (scripts/test-venv.sh --transformers4) names the argument torch_dtype.
    four = transformers.__version__.startswith("4.")
    kw = {"torch_dtype" if four else "dtype": torch.float32}
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, **kw)
    model.eval()
    return model


def logits(op):
    model = load(op["folder"])
    ids = torch.tensor([op["ids"]])
    with torch.no_grad():
        out = model(ids).logits[0].to(torch.float32).contiguous()
    with open(op["out"], "wb") as f:
        f.write(out.numpy().tobytes())


def generate(op):
    model = load(op["folder"])
    eos = model.config.eos_token_id
    ids = torch.tensor([op["ids"]])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=op["tokens"], do_sample=False,
                             eos_token_id=eos, pad_token_id=eos if eos is not None else 0)
    new = out[0, len(op["ids"]):].tolist()
    if new and new[-1] == eos:
        new.pop()
    with open(op["out"], "w") as f:
        f.write(" ".join(str(i) for i in new) + "\n")


def resave(op):
    model = transformers.AutoModelForCausalLM.from_pretrained(op["folder"])
    model.save_pretrained(op["out"])


def main():
    ops = json.loads(sys.argv[1])
    for op in ops:
        {"save": save, "logits": logits, "generate": generate, "resave": resave}[op["op"]](op)


if __name__ == "__main__":
    transformers.logging.set_verbosity_error()
    main()
