// libFuzzer target: a Hugging Face model folder's config.json and
// model.safetensors.index.json, as --init-from and `kiri export`'s readers see them. The bytes
// up to the first NUL are config.json; the bytes after it, when there is a NUL, are the index
// (else the folder holds model.safetensors). Both are written into one folder per process
// that also holds two tiny valid weight files (model.safetensors and
// model-00001-of-00002.safetensors, each with transformer.wte.weight, 2x2 F32), so an index
// may name a file that exists. Then read_hf_config, model_folder_tokenizer and
// HfWeights::open, check_names and check_shape, as loading does.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_util.h"
#include "kiri/ckpt/hf/hf_model.h"

namespace {

// A safetensors file holding transformer.wte.weight, F32 [2, 2].
std::string tiny_weights() {
  const std::string header =
      R"({"transformer.wte.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + std::string(16, '\0');
}

void write(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

// Never destroyed (a static string would be gone before the atexit handler that removes the
// folder runs); reachable, so not a leak.
const std::string& folder() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/kiri_fuzz_hf_config.XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    const auto* d = new std::string(tmpl);
    std::atexit([] { std::filesystem::remove_all(folder()); });  // one per fuzzing process
    write(*d + "/model.safetensors", tiny_weights());
    write(*d + "/model-00001-of-00002.safetensors", tiny_weights());
    return d;
  }();
  return *dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all = kiri::fuzz::as_text(data, size);
  const size_t nul = all.find('\0');
  const std::string& dir = folder();
  write(dir + "/config.json", all.substr(0, nul));
  const std::string index = dir + "/model.safetensors.index.json";
  if (nul == std::string_view::npos)
    ::unlink(index.c_str());
  else
    write(index, all.substr(nul + 1));
  kiri::fuzz::refuse_by_name([&] {
    const kiri::ckpt::hf::HfConfig c = kiri::ckpt::hf::read_hf_config(dir);
    if (c.model.n_layer < 1 || c.model.n_embd < 1 || c.model.vocab_size < 1) __builtin_trap();
    (void)kiri::ckpt::hf::model_folder_tokenizer(dir, c);
  });
  kiri::fuzz::refuse_by_name([&] {
    kiri::ckpt::hf::HfWeights w = kiri::ckpt::hf::HfWeights::open(dir);
    w.check_names({"transformer.wte.weight", "transformer.wpe.weight"});
    w.check_shape("transformer.wte.weight", kiri::Shape{2, 2});
    (void)w.path_of("transformer.wte.weight");
  });
  return 0;
}
