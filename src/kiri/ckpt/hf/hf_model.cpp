#include "kiri/ckpt/hf/hf_model.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "kiri/base/atomic_file.h"
#include "kiri/base/file_read.h"
#include "kiri/base/units.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/hf/gpt2_adapter.h"
#include "kiri/ckpt/hf/hf_config.h"
#include "kiri/ckpt/hf/llama_adapter.h"
#include "kiri/data/hf_tokenizer.h"

namespace kiri::ckpt::hf {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kWeightsName = "model.safetensors";
// config.json and the index are a few KiB (GPT-2 XL's index: 60 KiB).
constexpr uint64_t kMaxJsonBytes = uint64_t{64} << 20;

std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k, n);
  return buf;
}

// A JSON file of a model folder, parsed (bounded in size and nesting).
json read_json_file(const std::string& path, const std::string& what) {
  const std::string text = read_small_file(path, kMaxJsonBytes, ErrorKind::kCheckpoint, what);
  KIRI_CHECK_KIND(kCheckpoint, json_nesting_depth(text, 17) <= 16, path,
                  " nests deeper than 16 levels: not a ", what);
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    KIRI_RAISE(kCheckpoint, path, " is not valid JSON: ", quote_bounded(e.what(), 300));
  }
}

// The kiri name of a tensor stored as `name`, nullopt for a buffer to skip: the folder's
// architecture is not known yet, so a Llama's names (model.*) go through its adapter, the
// rest through GPT-2's; a buffer of either is skipped.
std::optional<std::string> kiri_name(const std::string& name) {
  const std::optional<std::string> gpt2 = Gpt2Adapter::from_hf(name);
  const std::optional<std::string> llama = LlamaAdapter::from_hf(name);
  if (!gpt2 || !llama) return std::nullopt;
  return name.rfind("model.", 0) == 0 ? llama : gpt2;
}

// Why an lm_head.weight that differs from the token embedding `name` is refused.
std::string untied_refusal(const std::string& name) {
  if (name == "transformer.wte.weight")
    return "kiri ties the LM head to the token embedding and cannot load an untied one";
  return "config.json's tie_word_embeddings is true, so the head is the embedding (an untied "
         "model says tie_word_embeddings false)";
}

}  // namespace

int64_t parse_max_shard_size(const std::string& text, const std::string& what) {
  int64_t bytes = 0;
  try {
    bytes = parse_bytes(text);
  } catch (const Error& e) {
    KIRI_RAISE(kConfig, what, ": ", e.what());
  }
  KIRI_CHECK_KIND(kConfig, bytes > 0, what, " must be a positive size (e.g. 5GB, 2GiB), got '",
                  quote_bounded(text, 80), "'");
  return bytes;
}

std::vector<std::string> write_hf_weights(const std::string& dir,
                                          const std::vector<ckpt::NamedTensor>& tensors,
                                          DType dtype, int64_t max_shard_bytes,
                                          const std::map<std::string, std::string>& metadata) {
  torch_dtype_name(dtype);  // refuses other dtypes
  Allocator alloc;
  std::vector<ckpt::NamedTensor> converted;
  for (const ckpt::NamedTensor& t : tensors) {
    if (t.tensor.dtype() == dtype) {
      converted.push_back(t);
      continue;
    }
    Tensor c = Tensor::empty(t.tensor.shape(), dtype, Category::kBuffers, alloc);
    c.copy_from(t.tensor);
    converted.push_back({t.name, c});
  }
  // transformers' cut: in order, a new shard when the next tensor would overflow this one.
  std::vector<std::vector<ckpt::NamedTensor>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const ckpt::NamedTensor& t : converted) {
    const auto bytes = static_cast<int64_t>(t.tensor.nbytes());
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += bytes;
    total += bytes;
  }
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";
  if (shards.size() == 1) {
    ckpt::save_safetensors(dir + "/" + kWeightsName, converted, meta, ckpt::Checksums::kXxh3);
    return {kWeightsName};
  }
  std::vector<std::string> names;
  json map = json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    names.push_back(shard_name(k + 1, shards.size()));
    ckpt::save_safetensors(dir + "/" + names.back(), shards[k], meta, ckpt::Checksums::kXxh3);
    for (const ckpt::NamedTensor& t : shards[k]) map[t.name] = names.back();
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
  write_file_atomic(dir + "/" + kIndexName, index.dump(2) + "\n");
  names.push_back(kIndexName);
  return names;
}

std::vector<std::string> write_hf_weights_streaming(
    const std::string& dir, const std::vector<ckpt::TensorSpec>& specs, int64_t max_shard_bytes,
    const ckpt::FillTensor& fill, const std::map<std::string, std::string>& metadata) {
  for (const ckpt::TensorSpec& t : specs) torch_dtype_name(t.dtype);  // refuses other dtypes
  // write_hf_weights' cut: in order, a new shard when the next tensor would overflow this one.
  std::vector<std::vector<ckpt::TensorSpec>> shards(1);
  std::vector<size_t> first(1, 0);  // index in specs of each shard's first tensor
  int64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto bytes = static_cast<int64_t>(specs[i].nbytes());
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      first.push_back(i);
      in_shard = 0;
    }
    shards.back().push_back(specs[i]);
    in_shard += bytes;
    total += bytes;
  }
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";
  const auto write = [&](size_t k, const std::string& name) {
    ckpt::save_safetensors_streaming(
        dir + "/" + name, shards[k], meta,
        [&](size_t i, const ckpt::AppendBytes& append) { fill(first[k] + i, append); },
        ckpt::Checksums::kXxh3);
  };
  if (shards.size() == 1) {
    write(0, kWeightsName);
    return {kWeightsName};
  }
  std::vector<std::string> names;
  json map = json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    names.push_back(shard_name(k + 1, shards.size()));
    write(k, names.back());
    for (const ckpt::TensorSpec& t : shards[k]) map[t.name] = names.back();
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
  write_file_atomic(dir + "/" + kIndexName, index.dump(2) + "\n");
  names.push_back(kIndexName);
  return names;
}

void write_hf_tokenizer(const std::string& dir, const data::Tokenizer& tokenizer,
                        int64_t model_max_length) {
  bool has_config = false, has_map = false;
  for (const data::TokenizerFile& f : tokenizer.files()) {
    KIRI_CHECK_KIND(kData, f.hf_name.find('/') == std::string::npos, "tokenizer file name '",
                    f.hf_name, "' is not a plain name");
    write_file_atomic(dir + "/" + f.hf_name, read_small_file(f.path, uint64_t{1} << 30,
                                                             ErrorKind::kData, "tokenizer file"));
    has_config = has_config || f.hf_name == "tokenizer_config.json";
    has_map = has_map || f.hf_name == "special_tokens_map.json";
  }
  const int32_t eot = tokenizer.eot_token();
  if (eot < 0 || tokenizer.files().empty()) return;
  const std::string eot_text = tokenizer.decode(std::vector<int32_t>{eot});
  const json specials = {{"bos_token", eot_text}, {"eos_token", eot_text}, {"unk_token", eot_text}};
  if (!has_map) write_file_atomic(dir + "/special_tokens_map.json", specials.dump(2) + "\n");
  if (!has_config) {
    bool fast = false;  // a tokenizer.json alone loads as the fast tokenizer
    for (const data::TokenizerFile& f : tokenizer.files())
      fast = fast || f.hf_name == "tokenizer.json";
    json c = specials;
    c["model_max_length"] = model_max_length;
    c["add_prefix_space"] = false;
    c["tokenizer_class"] = fast ? "PreTrainedTokenizerFast" : "GPT2Tokenizer";
    write_file_atomic(dir + "/tokenizer_config.json", c.dump(2) + "\n");
  }
}

void write_hf_folder(const std::string& dir, const kiri::GPTConfig& model,
                     const data::Tokenizer& tokenizer, const std::string& tokenizer_name,
                     const std::vector<ckpt::NamedTensor>& tensors, DType dtype,
                     int64_t max_shard_bytes) {
  write_hf_weights(dir, tensors, dtype, max_shard_bytes);
  write_hf_tokenizer(dir, tokenizer, model.block_size);
  write_file_atomic(dir + "/config.json", hf_config_json(model, tokenizer.eot_token(), dtype,
                                                         tokenizer_name, hf_bos_token(tokenizer))
                                                  .dump(2) +
                                              "\n");
}

HfConfig read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const json c = read_json_file(path, "model config (config.json)");
  KIRI_CHECK_KIND(kCheckpoint, c.is_object(), path, " is not a JSON object");
  HfConfig out = LlamaAdapter::is_config(c) ? LlamaAdapter::from_hf_config(c, path)
                                            : Gpt2Adapter::from_hf_config(c, path);
  read_kiri_block(c, path, out);
  return out;
}

HfWeights HfWeights::open(const std::string& dir) {
  HfWeights w;
  w.dir_ = dir;
  std::map<std::string, std::string> stored_file;  // stored name -> file
  // transformers loads model.safetensors when there is one and ignores the index
  // (modeling_utils' order): loading the shards would make one folder two models.
  KIRI_CHECK_KIND(kCheckpoint,
                  !(fs::exists(dir + "/" + kIndexName) && fs::exists(dir + "/" + kWeightsName)),
                  dir, " holds both ", kWeightsName, " and ", kIndexName,
                  ": transformers loads the first and ignores the shards, kiri would load the "
                  "shards; remove the one that is not the model");
  if (fs::exists(dir + "/" + kIndexName)) {
    const std::string path = dir + "/" + kIndexName;
    const json index = read_json_file(path, "safetensors index");
    KIRI_CHECK_KIND(
        kCheckpoint,
        index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), path,
        " has no 'weight_map' object");
    for (const auto& [name, file] : index["weight_map"].items()) {
      KIRI_CHECK_KIND(kCheckpoint,
                      file.is_string() && !file.get<std::string>().empty() &&
                          file.get<std::string>().find('/') == std::string::npos &&
                          file.get<std::string>() != "." && file.get<std::string>() != "..",
                      path, ": tensor '", quote_bounded(name, 200), "' maps to ",
                      quote_bounded(file.dump(), 80), ", not a file name");
      const std::string f = file.get<std::string>();
      KIRI_CHECK_KIND(kCheckpoint, fs::exists(dir + "/" + f), path, " names ", f, " (for tensor ",
                      name, ") but the file is missing");
      stored_file[name] = f;
    }
  } else {
    KIRI_CHECK_KIND(kCheckpoint, fs::exists(dir + "/" + kWeightsName), dir, " holds neither ",
                    kWeightsName, " nor ", kIndexName, ": not a model folder");
    // Kept open: the reads that follow use it.
    w.open_ = std::make_unique<ckpt::SafetensorsFile>(
        ckpt::SafetensorsFile::map(dir + "/" + kWeightsName));
    w.open_name_ = kWeightsName;
    for (const std::string& name : w.open_->names()) stored_file[name] = kWeightsName;
  }
  for (const auto& [name, file] : stored_file) {
    const std::optional<std::string> mapped = kiri_name(name);
    if (!mapped) continue;
    const std::string& k = *mapped;
    // lm_head.weight: an untied head's weights, or (GPT-2) a copy of the tied embedding that
    // reading wte checks.
    if (k == "lm_head.weight") w.head_file_ = file;
    KIRI_CHECK_KIND(kCheckpoint, !w.stored_.count(k), dir, " holds both '", w.stored_[k], "' and '",
                    name, "': one tensor under two names");
    w.stored_[k] = name;
    w.file_[k] = file;
  }
  return w;
}

void HfWeights::check_names(const std::vector<std::string>& names) {
  std::map<std::string, bool> wanted;
  for (const std::string& n : names) wanted[n] = true;
  tied_to_ = wanted.count("lm_head.weight")              ? ""
             : wanted.count("model.embed_tokens.weight") ? "model.embed_tokens.weight"
                                                         : "transformer.wte.weight";
  for (const auto& [k, stored] : stored_)
    KIRI_CHECK_KIND(kCheckpoint, wanted.count(k) || k == "lm_head.weight", dir_, ": tensor '",
                    quote_bounded(stored, 200), "' (", file_.at(k),
                    ") has no place in kiri's model of this config");
  for (const std::string& n : names)
    KIRI_CHECK_KIND(kCheckpoint, stored_.count(n), dir_, ": the model's tensor '", n,
                    "' is missing",
                    n == "lm_head.weight" ? " (config.json's tie_word_embeddings is false: the "
                                            "LM head is a tensor of its own)"
                                          : "");
}

const ckpt::SafetensorsFile& HfWeights::file_of(const std::string& file) {
  if (!open_ || open_name_ != file) {
    open_.reset();  // one shard in memory at a time
    open_ = std::make_unique<ckpt::SafetensorsFile>(ckpt::SafetensorsFile::map(dir_ + "/" + file));
    open_name_ = file;
  }
  return *open_;
}

void HfWeights::read(const std::string& name, Tensor& dst) {
  const auto it = stored_.find(name);
  KIRI_CHECK_KIND(kCheckpoint, it != stored_.end(), dir_, ": the model's tensor '", name,
                  "' is missing");
  check_shape(name, dst.shape());
  const ckpt::SafetensorsFile& f = file_of(file_.at(name));
  f.read_into_converting(it->second, dst);
  if (name == tied_to_ && !head_file_.empty()) check_tied_head(dst);
}

void HfWeights::check_shape(const std::string& name, const Shape& shape) {
  const auto it = stored_.find(name);
  KIRI_CHECK_KIND(kCheckpoint, it != stored_.end(), dir_, ": the model's tensor '", name,
                  "' is missing");
  const ckpt::SafetensorsFile& f = file_of(file_.at(name));
  const ckpt::TensorInfo& info = f.info(it->second);
  KIRI_CHECK_KIND(kCheckpoint, info.shape == shape, f.path(), ": tensor '", it->second,
                  "' has shape ", info.shape.str(), ", the model's ", name, " is ", shape.str());
}

void HfWeights::read_range(const std::string& name, int64_t first, Tensor& dst) {
  const auto it = stored_.find(name);
  KIRI_CHECK_KIND(kCheckpoint, it != stored_.end(), dir_, ": the model's tensor '", name,
                  "' is missing");
  const ckpt::SafetensorsFile& f = file_of(file_.at(name));
  f.read_range(it->second, first, dst);
  if (name != tied_to_ || head_file_.empty()) return;
  if (!head_open_)
    head_open_ = std::make_unique<ckpt::SafetensorsFile>(
        ckpt::SafetensorsFile::map(dir_ + "/" + head_file_));
  KIRI_CHECK_KIND(kCheckpoint, head_open_->info("lm_head.weight").shape == f.info(it->second).shape,
                  head_open_->path(), ": lm_head.weight has shape ",
                  head_open_->info("lm_head.weight").shape.str(), ", the token embedding ",
                  f.info(it->second).shape.str(), ": the model's LM head is tied to it");
  Allocator alloc;
  Tensor head = Tensor::empty(dst.shape(), dst.dtype(), Category::kBuffers, alloc);
  head_open_->read_range("lm_head.weight", first, head);
  const auto* a = static_cast<const unsigned char*>(head.raw());
  const auto* b = static_cast<const unsigned char*>(dst.raw());
  for (size_t i = 0; i < head.nbytes(); ++i)
    if (a[i] != b[i]) {
      const int64_t e = static_cast<int64_t>(i / dtype_size(dst.dtype()));
      KIRI_RAISE(kCheckpoint, head_open_->path(), ": lm_head.weight differs from ", name,
                 " at element ", first + e, " (", head.item(e), " against ", dst.item(e),
                 "): ", untied_refusal(name));
    }
}

void HfWeights::release(const std::string& name) {
  const auto it = stored_.find(name);
  if (it == stored_.end()) return;
  file_of(file_.at(name)).release(it->second);
  if (name == tied_to_ && head_open_) head_open_->release("lm_head.weight");
}

std::string HfWeights::path_of(const std::string& name) const {
  const auto it = file_.find(name);
  return it == file_.end() ? dir_ : dir_ + "/" + it->second;
}

void HfWeights::check_tied_head(const Tensor& embedding) {
  const ckpt::SafetensorsFile& f = file_of(head_file_);
  const ckpt::TensorInfo& info = f.info("lm_head.weight");
  KIRI_CHECK_KIND(kCheckpoint, info.shape == embedding.shape(), f.path(),
                  ": lm_head.weight has shape ", info.shape.str(), ", the token embedding ",
                  embedding.shape().str(), ": the model's LM head is tied to it");
  Allocator alloc;
  Tensor head = Tensor::empty(embedding.shape(), embedding.dtype(), Category::kBuffers, alloc);
  f.read_into_converting("lm_head.weight", head);
  const auto* a = static_cast<const unsigned char*>(head.raw());
  const auto* b = static_cast<const unsigned char*>(embedding.raw());
  for (size_t i = 0; i < head.nbytes(); ++i)
    if (a[i] != b[i]) {
      const int64_t e = static_cast<int64_t>(i / dtype_size(embedding.dtype()));
      KIRI_RAISE(kCheckpoint, f.path(), ": lm_head.weight differs from ", tied_to_, " at element ",
                 e, " (", head.item(e), " against ", embedding.item(e),
                 "): ", untied_refusal(tied_to_));
    }
}

}  // namespace kiri::ckpt::hf
