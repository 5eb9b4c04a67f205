// What both architectures' config.json readers share: the keys any config.json may hold, the
// "kiri" block, and the tokenizer a folder names.
#include "kiri/ckpt/hf/hf_config.h"

#include <filesystem>
#include <utility>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"  // quote_bounded

namespace kiri::ckpt::hf {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void refuse(const std::string& path, const std::string& key, const json& value,
                         const std::string& why) {
  KIRI_RAISE(kCheckpoint, path, ": ", key, " = ", quote_bounded(value.dump(), 80),
             " is not supported: ", why);
}

// What any config.json may hold that leaves the model's function unchanged: transformers'
// bookkeeping, the special token ids, and generation defaults (generate()'s, not the
// model's; kiri sample takes its own flags).
constexpr const char* kBookkeeping[] = {"_name_or_path",
                                        "_commit_hash",
                                        "_attn_implementation_autoset",
                                        "transformers_version",
                                        "architectures",
                                        "model_type",
                                        "bos_token_id",
                                        "eos_token_id",
                                        "pad_token_id",
                                        "sep_token_id",
                                        "decoder_start_token_id",
                                        "use_cache",
                                        "initializer_range",
                                        "output_attentions",
                                        "output_hidden_states",
                                        "return_dict",
                                        "torchscript",
                                        "use_bfloat16",
                                        "tf_legacy_loss",
                                        "id2label",
                                        "label2id",
                                        "problem_type",
                                        "finetuning_task",
                                        "tokenizer_class",
                                        "prefix",
                                        "task_specific_params",
                                        "is_decoder",
                                        "chunk_size_feed_forward",
                                        "cross_attention_hidden_size",
                                        "max_length",
                                        "min_length",
                                        "do_sample",
                                        "early_stopping",
                                        "num_beams",
                                        "num_beam_groups",
                                        "diversity_penalty",
                                        "temperature",
                                        "top_k",
                                        "top_p",
                                        "typical_p",
                                        "repetition_penalty",
                                        "length_penalty",
                                        "no_repeat_ngram_size",
                                        "encoder_no_repeat_ngram_size",
                                        "bad_words_ids",
                                        "num_return_sequences",
                                        "output_scores",
                                        "return_dict_in_generate",
                                        "forced_bos_token_id",
                                        "forced_eos_token_id",
                                        "remove_invalid_values",
                                        "exponential_decay_length_penalty",
                                        "suppress_tokens",
                                        "begin_suppress_tokens",
                                        "kiri",
                                        "dtype",
                                        "torch_dtype"};

// Keys that would make another kind of model unless they hold transformers' default.
const std::pair<const char*, json> kDefaultOnly[] = {{"is_encoder_decoder", false},
                                                     {"tie_encoder_decoder", false},
                                                     {"add_cross_attention", false},
                                                     {"pruned_heads", json::object()}};

bool listed(const std::string& key, std::span<const char* const> keys) {
  for (const char* k : keys)
    if (key == k) return true;
  return false;
}

}  // namespace

void check_config_keys(const json& c, const std::string& path, std::span<const char* const> read) {
  for (const auto& [key, value] : c.items()) {
    if (listed(key, read) || listed(key, kBookkeeping)) continue;
    bool default_only = false;
    for (const auto& [k, fallback] : kDefaultOnly)
      if (key == k) {
        default_only = true;
        if (!value.is_null() && value != fallback)
          refuse(path, key, value, str("kiri's models hold only the default, ", fallback.dump()));
      }
    if (!default_only)
      refuse(path, key, value,
             "kiri does not know this key, so it cannot build the model it describes "
             "(docs/checkpoints.md lists the keys kiri reads)");
  }
  // torch_dtype (transformers 4) and dtype (5): the weights' dtype, which the files say
  // again; a dtype kiri's reader has no conversion from is named here.
  std::string seen;
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!c.contains(key) || c[key].is_null()) continue;
    const json& v = c[key];
    if (v != "float32" && v != "bfloat16" && v != "float16" && v != "auto")
      refuse(path, key, v, "kiri reads float32, bfloat16 and float16 weights");
    if (!seen.empty() && v != seen && v != "auto" && seen != "auto")
      KIRI_RAISE(kCheckpoint, path, ": torch_dtype = \"", c["torch_dtype"].get<std::string>(),
                 "\" contradicts dtype = \"", v.get<std::string>(),
                 "\": transformers 4 reads the one, transformers 5 the other");
    seen = v.get<std::string>();
  }
}

// The "kiri" block kiri writes: {"format_version": 1, "tokenizer": data.tokenizer}. A block
// kiri did not write is named rather than ignored (its tokenizer would otherwise fall back
// to the config's, and the error blame the vocabulary's size).
void read_kiri_block(const json& c, const std::string& path, HfConfig& out) {
  if (!c.contains("kiri")) return;
  const json& k = c["kiri"];
  KIRI_CHECK_KIND(kCheckpoint, k.is_object(), path, ": 'kiri' must be an object, got ",
                  quote_bounded(k.dump(), 80));
  for (const auto& [key, value] : k.items()) {
    if (key == "format_version")
      KIRI_CHECK_KIND(kCheckpoint, value == 1, path,
                      ": kiri.format_version = ", quote_bounded(value.dump(), 80),
                      " is not supported: this kiri reads format 1");
    else if (key == "tokenizer")
      KIRI_CHECK_KIND(kCheckpoint, value.is_string() && !value.get<std::string>().empty(), path,
                      ": kiri.tokenizer = ", quote_bounded(value.dump(), 80),
                      " is not a tokenizer: \"byte\", \"gpt2\" or the path of a Hugging Face "
                      "tokenizer");
    else
      KIRI_RAISE(kCheckpoint, path, ": kiri.", quote_bounded(key, 80), " = ",
                 quote_bounded(value.dump(), 80),
                 " is not a key kiri writes (format_version, tokenizer)");
  }
  if (k.contains("tokenizer")) out.tokenizer = k["tokenizer"].get<std::string>();
}

std::string model_folder_tokenizer(const std::string& dir, const HfConfig& config) {
  if (config.tokenizer == "byte" || config.tokenizer == "gpt2") return config.tokenizer;
  std::error_code ec;
  if (fs::exists(dir + "/tokenizer.json", ec) ||
      (fs::exists(dir + "/vocab.json", ec) && fs::exists(dir + "/merges.txt", ec)))
    return dir;
  if (config.tokenizer.empty()) return "";
  // The path of the Hugging Face tokenizer the model was trained with, whose files the folder
  // lacks: that path when it still holds them, else named.
  KIRI_CHECK_KIND(
      kCheckpoint, fs::exists(config.tokenizer, ec), dir, "/config.json: kiri.tokenizer = \"",
      quote_bounded(config.tokenizer, 200),
      "\" is neither \"byte\" nor \"gpt2\" nor an existing path, and the folder holds no "
      "tokenizer files (tokenizer.json, or vocab.json + merges.txt): give "
      "--set data.tokenizer= the tokenizer it was trained with");
  return config.tokenizer;
}

}  // namespace kiri::ckpt::hf
