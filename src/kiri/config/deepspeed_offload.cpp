// DeepSpeed's offload keys (zero_optimization.offload_optimizer, offload_param, the old
// cpu_offload, cpu_offload_params) and aio, onto kiri's offload.* keys (docs/deepspeed.md,
// docs/offload.md). `cpu` is where kiri's states live already (host RAM): kiri's `none`,
// with a note; `nvme` maps to `nvme`.
#include <cmath>
#include <string>

#include "kiri/config/deepspeed_mapper.h"

namespace kiri::deepspeed_detail {

namespace {

bool is_count(const json& v) {
  return v.is_number() && v.get<double>() >= 1 && v.get<double>() == std::floor(v.get<double>()) &&
         v.get<double>() <= 1e15;
}

const char* const kNotNvme = "the device is not nvme: no swap files";
const char* const kPinned =
    "on the CPU backend no copy between device and host is pinned for; kiri's staging buffers "
    "are page-aligned for O_DIRECT";

}  // namespace

void Mapper::set_shared(const std::string& path, const std::string& key, const json& value,
                        const json& as_given) {
  const json given = as_given.is_null() ? value : as_given;
  if (auto it = shared_.find(key); it != shared_.end()) {
    if (it->second.value != value)
      problems_.push_back(str(path, " = ", shown(given), " maps to ", key, ", as ", it->second.path,
                              " = ", shown(it->second.as_given), " does: kiri has one ", key,
                              " for both, make them agree"));
    return;
  }
  shared_[key] = {path, value, given};
  set(path, key, value);
}

void Mapper::cpu_offload(const std::string& path, const json& v, const char* key) {
  if (!v.is_boolean())
    problems_.push_back(str(path, " must be true or false, got ", shown(v)));
  else if (v.get<bool>())
    host_offload(path, key, v);
  else
    no_effect(path, "false: nothing offloaded");
}

void Mapper::host_offload(const std::string& path, const char* key, const json& as_given) {
  const std::string what =
      std::string(key) == "offload.parameters" ? "parameters" : "optimizer states";
  if (given_.count(key) && get_key(cfg_, key) != "none") {
    problems_.push_back(str(path, " = ", shown(as_given), " keeps the ", what,
                            " in host RAM, but kiri's config or --set gives ", key, " = ",
                            get_key(cfg_, key).get<std::string>(),
                            ": drop one, or make them agree"));
    return;
  }
  set_shared(path, key, "none", as_given);
  no_effect(path, "\"cpu\": on the CPU backend the " + what + " already live in host RAM");
}

void Mapper::offload(const std::string& path, const json& o, bool param) {
  if (!is_object(path, o)) return;
  const char* key = param ? "offload.parameters" : "offload.optimizer";
  const json device = o.value("device", json("none"));
  bool nvme = false;
  if (is_auto(device)) {
    nvme = get_key(cfg_, key) == "nvme";
  } else if (device == "cpu") {
    host_offload(path + ".device", key, device);
  } else if (device == "none" || device == "nvme") {
    set_shared(path + ".device", key, device);
    nvme = device == "nvme";
  } else {
    problems_.push_back(
        str(path, ".device must be \"none\", \"cpu\" or \"nvme\", got ", shown(device)));
  }
  for (auto it = o.begin(); it != o.end(); ++it)
    if (it.key() != "device" && !is_auto(*it))
      offload_key(path + "." + it.key(), it.key(), *it, param, nvme);
}

// A key with no effect in kiri still has DeepSpeed's type.
void Mapper::typed_no_effect(const std::string& path, const json& v, bool typed, const char* type,
                             const std::string& why) {
  if (typed)
    no_effect(path, why);
  else
    problems_.push_back(str(path, " must be ", type, ", got ", shown(v)));
}

void Mapper::offload_key(const std::string& path, const std::string& k, const json& v, bool param,
                         bool nvme) {
  if (k == "nvme_path") {
    if (!nvme)
      no_effect(path, kNotNvme);
    else if (!v.is_string() || v.get<std::string>().empty())
      problems_.push_back(str(path, " must be a folder's path, got ", shown(v)));
    else
      set_shared(path, "offload.path", v);  // both sections' paths: one folder in kiri
  } else if (k == "pin_memory") {
    typed_no_effect(path, v, v.is_boolean(), "true or false", kPinned);
  } else if (param) {
    param_key(path, k, v);
  } else {
    optimizer_key(path, k, v, nvme);
  }
}

void Mapper::optimizer_key(const std::string& path, const std::string& k, const json& v,
                           bool nvme) {
  if (k == "buffer_count") {
    if (!nvme)
      no_effect(path, "the device is not nvme: no staging buffers");
    else
      set(path, "offload.buffer_count", v);
  } else if (k == "pipeline_read" || k == "pipeline_write" || k == "pipeline") {
    typed_no_effect(path, v, v.is_boolean(), "true or false",
                    "kiri always pipelines the offloaded step: from offload.buffer_count = 3 up, "
                    "the next chunks are read and the last one written while one is updated");
  } else if (k == "fast_init") {
    typed_no_effect(path, v, v.is_boolean(), "true or false",
                    "kiri writes the zero states into the swap files once at start, so every "
                    "block has its checksum before its first read");
  } else if (k == "ratio") {
    if (auto r = number(path, v)) {
      if (*r == 1)
        no_effect(path, "the whole update runs on the CPU");
      else
        unsupported(path, v,
                    "ZeRO-Offload++ splits the update between the GPU and the CPU by this ratio, "
                    "and kiri computes all of it on the CPU");
    }
  } else {
    unsupported(path, v, "not an offload_optimizer key kiri maps");
  }
}

void Mapper::param_key(const std::string& path, const std::string& k, const json& v) {
  if (k == "buffer_count") {
    typed_no_effect(path, v, is_count(v), "a positive integer",
                    "kiri reads each unit's parameter shard one unit ahead of its all-gather, so "
                    "the buffers in flight follow the sharding units (parallel.wrap_blocks), not "
                    "a pool of parameter buffers");
  } else if (k == "buffer_size") {
    typed_no_effect(path, v, is_count(v), "a positive integer",
                    "DeepSpeed's buffers of that many 16-bit elements must each hold the largest "
                    "parameter; kiri's parameter reads are sized by the sharding units, and "
                    "offload.buffer_mb (MiB per staging buffer of the optimizer states) is "
                    "another quantity");
  } else if (k == "max_in_cpu") {
    typed_no_effect(path, v, v.is_number() && v.get<double>() >= 0, "a count of elements",
                    "kiri caches no offloaded parameters in RAM: with offload.parameters = nvme "
                    "every shard lives on NVMe, where DeepSpeed keeps up to max_in_cpu elements "
                    "in host memory");
  } else {
    unsupported(path, v, "not an offload_param key kiri maps");
  }
}

void Mapper::aio(const std::string& path, const json& a) {
  if (!is_object(path, a)) return;
  for (auto it = a.begin(); it != a.end(); ++it) {
    const std::string p = path + "." + it.key();
    const std::string& k = it.key();
    const json& v = *it;
    if (is_auto(v)) continue;
    if (k == "block_size") {
      if (is_count(v))  // bytes; the schema checks the 4 KiB multiple
        set(p, "offload.block_size", std::to_string(static_cast<int64_t>(v.get<double>())));
      else
        problems_.push_back(str(p, " must be a positive integer (bytes), got ", shown(v)));
    } else if (k == "queue_depth") {
      set(p, "offload.queue_depth", v);
    } else if (k == "thread_count" || k == "intra_op_parallelism") {
      if (!is_count(v))
        problems_.push_back(str(p, " must be a positive integer, got ", shown(v)));
      else
        no_effect(p,
                  "kiri keeps offload.queue_depth pieces of offload.block_size bytes in flight "
                  "per rank (the threads engine: one worker per slot), so queue_depth sets the "
                  "parallelism");
    } else if (k == "single_submit" || k == "overlap_events") {
      if (!v.is_boolean())
        problems_.push_back(str(p, " must be true or false, got ", shown(v)));
      else
        no_effect(p,
                  "kiri submits each block_size piece as a slot of the queue frees, without "
                  "waiting for the earlier ones");
    } else if (k == "use_gds") {
      only(p, v, false, "no GPUDirect Storage",
           "GPUDirect Storage moves data between NVMe and a GPU; kiri computes on the CPU");
    } else {
      unsupported(p, v,
                  "not an aio key kiri maps (block_size, queue_depth, thread_count, "
                  "single_submit, overlap_events)");
    }
  }
}

}  // namespace kiri::deepspeed_detail
