#pragma once
// Hugging Face model folders: what transformers' GPT2LMHeadModel.save_pretrained writes and
// from_pretrained reads (docs/checkpoints.md, "Hugging Face model folders"):
//
//   config.json                        GPT2Config's keys
//   model.safetensors                  the weights, or above the shard size:
//   model-0000k-of-0000n.safetensors   with model.safetensors.index.json
//   vocab.json, merges.txt, ...        the tokenizer's files
//
// Every kiri checkpoint step folder is one; `kiri export` writes one in another dtype and
// shard size; `kiri train --init-from` reads one (HF's own or kiri's).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/ckpt/safetensors.h"
#include "kiri/config/gpt_config.h"
#include "kiri/data/tokenizer.h"
#include "kiri/tensor/tensor.h"

namespace kiri::ckpt::hf {

// transformers' save_pretrained default (max_shard_size="5GB").
inline constexpr const char* kDefaultMaxShardSize = "5GB";

// A shard size as transformers reads it: "5GB" = 5e9 bytes, "2GiB" = 2^31, "500MB", a bare
// number of bytes. kConfig naming `what` and the text unless it is a positive size.
int64_t parse_max_shard_size(const std::string& text, const std::string& what);

// transformers' name of a weights dtype: "float32", "bfloat16" or "float16" (kConfig for
// another).
const char* torch_dtype_name(DType dtype);

// config.json for `model`: GPT2Config's keys (kiri's GPT-2 has no dropout, biases
// everywhere, LayerNorm eps 1e-5, tanh GELU, a tied LM head), or a Llama's LlamaConfig's.
// `eot`: the tokenizer's end-of-text id (eos_token_id), -1 for none; `bos`: bos_token_id, -1
// for eot's; `tokenizer`: data.tokenizer, kept in the "kiri" block so that --init-from can
// default to it.
nlohmann::json hf_config_json(const kiri::GPTConfig& model, int32_t eot, DType dtype,
                              const std::string& tokenizer, int32_t bos = -1);

// A config.json's bos_token_id for `tokenizer`: a Hugging Face tokenizer's beginning-of-text
// token (Llama 3's <|begin_of_text|>) when it has one, else its end-of-text token (GPT-2's).
int32_t hf_bos_token(const data::Tokenizer& tokenizer);

// Writes into the existing folder `dir` the weights in `dtype` (F32, BF16 or F16): one
// model.safetensors, or model-0000k-of-0000n.safetensors + model.safetensors.index.json when
// they pass max_shard_bytes (as transformers cuts them: in order, a new shard when the next
// tensor would overflow the current one; a bigger tensor gets a shard of its own). Every
// file carries per-tensor checksums in its metadata (ckpt/safetensors.h), which transformers
// ignores. `metadata` goes into every file beside "format": "pt" and the checksums (a
// checkpoint's "kiri.step"). Returns the file names written.
std::vector<std::string> write_hf_weights(const std::string& dir,
                                          const std::vector<ckpt::NamedTensor>& tensors,
                                          DType dtype, int64_t max_shard_bytes,
                                          const std::map<std::string, std::string>& metadata = {});

// write_hf_weights with no tensor in memory: the same files byte for byte for tensors of
// these specs (their dtype is the file's), each tensor's bytes appended by fill(k, append),
// k counting over every shard in order. A checkpoint of any size needs only what fill holds.
// `metadata` goes into every file beside "format": "pt" and the checksums.
std::vector<std::string> write_hf_weights_streaming(
    const std::string& dir, const std::vector<ckpt::TensorSpec>& specs, int64_t max_shard_bytes,
    const ckpt::FillTensor& fill, const std::map<std::string, std::string>& metadata = {});

// Copies the tokenizer's files (Tokenizer::files(), under their HF names) into dir and, for
// a tokenizer with an end-of-text token, writes tokenizer_config.json and
// special_tokens_map.json unless its files hold them. The byte tokenizer has no files.
void write_hf_tokenizer(const std::string& dir, const data::Tokenizer& tokenizer,
                        int64_t model_max_length);

// config.json, weights and tokenizer files: a whole HF model folder in the existing dir.
void write_hf_folder(const std::string& dir, const kiri::GPTConfig& model,
                     const data::Tokenizer& tokenizer, const std::string& tokenizer_name,
                     const std::vector<ckpt::NamedTensor>& tensors, DType dtype,
                     int64_t max_shard_bytes);

// A folder's config.json read as kiri's model.
struct HfConfig {
  kiri::GPTConfig model;
  std::string tokenizer;           // the "kiri" block's data.tokenizer; "" when absent
  std::vector<std::string> notes;  // what kiri does differently (dropout), for the log
};
// Reads dir/config.json: a Llama's (model_type "llama"; llama_adapter.h says what it
// refuses), else a GPT-2's. kCheckpoint naming the key and value for what kiri's GPT-2 cannot
// be: a model_type other than gpt2 and llama, layer_norm_epsilon != 1e-5, an activation other
// than tanh GELU, n_inner != 4 n_embd, unscaled or layer-scaled attention, untied embeddings,
// cross-attention; a missing or malformed file.
HfConfig read_hf_config(const std::string& dir);

// The tokenizer a run started from the folder uses when data.tokenizer is not given: the
// "kiri" block's "byte" or "gpt2"; else the folder itself when it holds a Hugging Face
// tokenizer (tokenizer.json, or vocab.json + merges.txt; data.tokenizer takes such a path);
// else "" (the config's data.tokenizer).
std::string model_folder_tokenizer(const std::string& dir, const HfConfig& config);

// The weights of a model folder, whole or sharded, under kiri's parameter names: a Llama's
// (model.*, lm_head.weight) as they are; a GPT-2 name without the `transformer.` prefix is
// taken with it; the attention-mask buffers of old GPT-2 files (attn.bias, attn.masked_bias)
// are skipped; for a tied model, an lm_head.weight in the files must equal the token
// embedding. Shards are opened one at a time, when first needed.
class HfWeights {
 public:
  // kCheckpoint when dir holds neither model.safetensors nor model.safetensors.index.json, the
  // index is malformed or names a missing file.
  static HfWeights open(const std::string& dir);
  // kCheckpoint naming the tensor when the folder holds a tensor kiri's model has no place
  // for, or lacks one of `names`. `names` also say whether the model is tied: without
  // lm_head.weight, a stored lm_head.weight is checked against the token embedding
  // (transformer.wte.weight or model.embed_tokens.weight) as it is read; without a call,
  // against transformer.wte.weight (GPT-2's, always tied).
  void check_names(const std::vector<std::string>& names);
  // Reads tensor `name` (kiri's name) into dst, converting F32/BF16/F16 to dst's dtype; a
  // shape other than dst's is kCheckpoint naming the tensor and both shapes.
  void read(const std::string& name, Tensor& dst);
  // Elements [first, first + dst.numel()) of tensor `name` in its flat order, converting as
  // read(): a piece, so that loading never holds a whole tensor. The tied head's same
  // elements are checked against it. release() drops the pages of the tensor once read.
  void read_range(const std::string& name, int64_t first, Tensor& dst);
  // kCheckpoint naming the tensor and both shapes unless tensor `name` has `shape`.
  void check_shape(const std::string& name, const Shape& shape);
  void release(const std::string& name);
  const std::string& dir() const { return dir_; }
  // The file that holds tensor `name` (dir/model-00002-of-00003.safetensors), for messages.
  std::string path_of(const std::string& name) const;

 private:
  const ckpt::SafetensorsFile& file_of(const std::string& file);
  void check_tied_head(const Tensor& embedding);

  std::string dir_;
  std::map<std::string, std::string> stored_;       // kiri name -> name in the file
  std::map<std::string, std::string> file_;         // kiri name -> file in dir
  std::string head_file_;                           // lm_head.weight's file, "" when absent
  std::string tied_to_ = "transformer.wte.weight";  // what lm_head.weight must equal; "": own
  std::string open_name_;                           // the one shard kept open
  std::unique_ptr<ckpt::SafetensorsFile> open_;
  std::unique_ptr<ckpt::SafetensorsFile> head_open_;  // lm_head's file, for read_range's check
};

}  // namespace kiri::ckpt::hf
