// Writing safetensors files: the header (in the tensors' order, metadata first, as Python's
// safetensors writes it), whole tensors, or tensors streamed piece by piece with their
// checksums filled in after each tensor.
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/ckpt/safetensors.h"

namespace kiri::ckpt {

namespace {

// Writing keeps the order of the tensors given.
using OrderedJson = nlohmann::ordered_json;

// The metadata with the checksum keys: sums[i] for specs[i], or placeholders (zeros) for a
// streaming writer to overwrite.
std::map<std::string, std::string> with_checksums(const std::vector<TensorSpec>& specs,
                                                  std::map<std::string, std::string> metadata,
                                                  const std::vector<uint64_t>& sums) {
  metadata[kChecksumKey] = kChecksumAlgorithm;
  for (size_t i = 0; i < specs.size(); ++i)
    metadata[kChecksumPrefix + specs[i].name] = checksum_hex(i < sums.size() ? sums[i] : 0);
  return metadata;
}

// Where in `header` (prefix included) the value of tensor `name`'s checksum key begins. The
// quoted key followed by :" occurs once: a tensor's own key is followed by :{, and inside a
// JSON string every quote is escaped.
size_t checksum_value_offset(const std::string& header, const std::string& name) {
  const std::string needle = OrderedJson(kChecksumPrefix + name).dump() + ":\"";
  const size_t at = header.find(needle);
  KIRI_CHECK(at != std::string::npos && header.find(needle, at + 1) == std::string::npos,
             "the checksum of tensor '", name, "' is not once in the header");
  return at + needle.size();
}

}  // namespace

std::string safetensors_header(const std::vector<TensorSpec>& specs,
                               const std::map<std::string, std::string>& metadata) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[kMetadataKey] = meta;  // first, as Python's safetensors writes it
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorSpec& t : specs) {
    if (t.name == kMetadataKey)
      KIRI_RAISE(kCheckpoint, "cannot save a tensor named '", kMetadataKey, "': reserved");
    if (!seen.insert(t.name).second)
      KIRI_RAISE(kCheckpoint, "cannot save tensor '", t.name, "' twice in one file");
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = dtype_name(t.dtype);
    entry["shape"] = t.shape.dims();
    entry["data_offsets"] = {offset, offset + t.nbytes()};
    header[t.name] = entry;
    offset += t.nbytes();
  }
  std::string json;
  try {
    json = header.dump();  // compact, like serde_json
  } catch (const OrderedJson::exception& e) {
    KIRI_RAISE(kCheckpoint, "cannot encode the safetensors header: ", e.what());
  }
  json.append((8 - json.size() % 8) % 8, ' ');
  uint64_t n = json.size();
  char prefix[8];
  std::memcpy(prefix, &n, 8);
  return std::string(prefix, 8) + json;
}

std::string safetensors_header(const std::vector<NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const NamedTensor& nt : tensors) {
    if (!nt.tensor.defined())
      KIRI_RAISE(kCheckpoint, "cannot save tensor '", nt.name, "': it is undefined");
    specs.push_back({nt.name, nt.tensor.dtype(), nt.tensor.shape()});
  }
  return safetensors_header(specs, metadata);
}

// The tensors' memory written as it is: the reference the streaming writer is tested against.
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata, Checksums checksums) {
  std::string header;
  if (checksums == Checksums::kNone) {
    header = safetensors_header(tensors, metadata);
  } else {
    std::vector<TensorSpec> specs;
    std::vector<uint64_t> sums;
    for (const NamedTensor& nt : tensors) {
      if (!nt.tensor.defined())
        KIRI_RAISE(kCheckpoint, "cannot save tensor '", nt.name, "': it is undefined");
      specs.push_back({nt.name, nt.tensor.dtype(), nt.tensor.shape()});
      sums.push_back(checksum_of(nt.tensor.raw(), nt.tensor.nbytes()));
    }
    header = safetensors_header(specs, with_checksums(specs, metadata, sums));
  }
  write_file_atomic(path, [&](FileWriter& w) {
    w.write(header);
    for (const NamedTensor& nt : tensors)
      if (nt.tensor.nbytes() > 0) w.write(nt.tensor.raw(), nt.tensor.nbytes());
  });
}

void save_safetensors_streaming(const std::string& path, const std::vector<TensorSpec>& specs,
                                const std::map<std::string, std::string>& metadata,
                                const FillTensor& fill, Checksums checksums) {
  const bool sum = checksums != Checksums::kNone;
  const std::string header =
      safetensors_header(specs, sum ? with_checksums(specs, metadata, {}) : metadata);
  write_file_atomic(path, [&](FileWriter& w) {
    w.write(header);
    XXH3_state_t* state = sum ? XXH3_createState() : nullptr;
    struct Free {
      XXH3_state_t* s;
      ~Free() { XXH3_freeState(s); }
    } free_state{state};
    for (size_t i = 0; i < specs.size(); ++i) {
      const uint64_t want = specs[i].nbytes();
      uint64_t got = 0;
      if (state) XXH3_64bits_reset(state);
      // Checked before the write: a fill that overruns never shifts the next tensor's bytes.
      fill(i, [&](const void* data, size_t bytes) {
        if (bytes > want - got)
          KIRI_RAISE(kCheckpoint, path, ": tensor '", specs[i].name, "' is ", want,
                     " bytes, but its writer appended ", got + bytes);
        if (bytes > 0) w.write(data, bytes);
        if (state && bytes > 0) XXH3_64bits_update(state, data, bytes);
        got += bytes;
      });
      KIRI_CHECK_KIND(kCheckpoint, got == want, path, ": tensor '", specs[i].name, "' is ", want,
                      " bytes, but its writer appended only ", got);
      if (state) {
        const std::string value = checksum_hex(XXH3_64bits_digest(state));
        w.write_at(checksum_value_offset(header, specs[i].name), value.data(), value.size());
      }
    }
  });
}

}  // namespace kiri::ckpt
