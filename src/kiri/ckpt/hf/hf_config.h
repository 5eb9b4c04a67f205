#pragma once
// What both architectures' config.json readers (gpt2_adapter.h, llama_adapter.h) share: the
// keys every config.json may hold, and the "kiri" block.
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "kiri/ckpt/hf/hf_model.h"

namespace kiri::ckpt::hf {

// Every key of config.json `c` is one its reader maps (`read`), bookkeeping that leaves the
// model's function unchanged (docs/checkpoints.md lists it: transformers_version, the token
// ids, generation defaults, ...), or a key that must hold transformers' default
// (is_encoder_decoder, pruned_heads, ...): kCheckpoint naming `path`, the key and its value
// otherwise. torch_dtype / dtype must be float32, bfloat16 or float16 and agree.
void check_config_keys(const nlohmann::json& c, const std::string& path,
                       std::span<const char* const> read);

// The "kiri" block kiri writes ({"format_version": 1, "tokenizer": data.tokenizer}) into
// out.tokenizer; kCheckpoint naming `path`, the key and its value for anything else.
void read_kiri_block(const nlohmann::json& c, const std::string& path, HfConfig& out);

}  // namespace kiri::ckpt::hf
