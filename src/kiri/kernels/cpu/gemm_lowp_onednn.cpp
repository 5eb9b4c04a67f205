// The oneDNN matmul implementation of gemm_lowp (gemm_lowp.cpp dispatches).
// oneDNN exposes no bf16/f16 "gemm" call with BLAS semantics in the C++ API that
// handles every transpose and leading dimension, so this builds a matmul
// primitive whose memory descriptors carry the transposes as strides. Creating
// a primitive costs far more than a small GEMM (JIT code generation), hence
// the LRU cache keyed by everything the primitive bakes in.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/kernels/cpu/gemm_lowp.h"

namespace kiri::kernels::cpu::detail {
namespace {

using dnnl::memory;

// What a primitive depends on. alpha is passed at run time (runtime output
// scales), so only whether it is applied matters; beta is the sum post-op's
// scale, fixed at creation in oneDNN 2.x. oneDNN's OpenMP build decides its
// thread split at creation, so the thread count is part of the key too.
struct GemmKey {
  DType ab, c_dtype;
  bool trans_a, trans_b, scaled;
  int threads;
  float beta;
  int64_t M, N, K, lda, ldb, ldc;

  bool operator==(const GemmKey& o) const {
    return ab == o.ab && c_dtype == o.c_dtype && trans_a == o.trans_a && trans_b == o.trans_b &&
           scaled == o.scaled && threads == o.threads &&
           std::memcmp(&beta, &o.beta, sizeof beta) == 0 && M == o.M && N == o.N && K == o.K &&
           lda == o.lda && ldb == o.ldb && ldc == o.ldc;
  }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    uint32_t beta_bits;
    std::memcpy(&beta_bits, &k.beta, sizeof beta_bits);
    uint64_t h = (uint64_t(k.ab) << 8) | (uint64_t(k.c_dtype) << 4) | (uint64_t(k.trans_a) << 2) |
                 (uint64_t(k.trans_b) << 1) | uint64_t(k.scaled);
    for (uint64_t v : {uint64_t(k.threads), uint64_t(beta_bits), uint64_t(k.M), uint64_t(k.N),
                       uint64_t(k.K), uint64_t(k.lda), uint64_t(k.ldb), uint64_t(k.ldc)})
      h = (h ^ v) * 0x100000001b3ull + (h >> 29);
    return static_cast<size_t>(h);
  }
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Row-major op(X)[rows, cols] stored with leading dimension ld: a transpose
// swaps the strides instead of moving data.
memory::desc strided_desc(int64_t rows, int64_t cols, int64_t ld, bool trans,
                          memory::data_type dt) {
  const memory::dims strides = trans ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, dt, strides);
}

memory::data_type dnnl_type(DType d) {
  using dt = memory::data_type;
  return d == DType::kF32 ? dt::f32 : d == DType::kBF16 ? dt::bf16 : dt::f16;
}

// Empty when oneDNN has no implementation (e.g. f16 without avx512_fp16
// support in this oneDNN): the caller falls back to the fp32 path.
std::optional<dnnl::matmul::primitive_desc> create_pd(const GemmKey& k) {
  const memory::desc a = strided_desc(k.M, k.K, k.lda, k.trans_a, dnnl_type(k.ab));
  const memory::desc b = strided_desc(k.K, k.N, k.ldb, k.trans_b, dnnl_type(k.ab));
  const memory::desc c = strided_desc(k.M, k.N, k.ldc, false, dnnl_type(k.c_dtype));
  dnnl::primitive_attr attr;
  // A primitive is shared by every thread that calls with its key, and in
  // oneDNN's default (library) scratchpad mode a primitive may only run on
  // the thread that created it: two rank threads then share its scratchpad
  // and corrupt each other's results. Each call passes its thread's own.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.scaled) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  if (k.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(k.beta);  // dst = alpha * A @ B + beta * dst
    attr.set_post_ops(ops);
  }
  try {
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return std::nullopt;
    throw;
  }
}

// A primitive and the scratchpad it needs on each execution.
struct Primitive {
  dnnl::matmul matmul;
  memory::desc scratchpad;
};

std::shared_ptr<const Primitive> create_primitive(const GemmKey& k) {
  const std::optional<dnnl::matmul::primitive_desc> pd = create_pd(k);
  if (!pd) return nullptr;
  return std::make_shared<const Primitive>(Primitive{dnnl::matmul(*pd), pd->scratchpad_desc()});
}

// A small LRU map of primitives. shared_ptr, so a primitive evicted by one
// thread stays alive while another thread still executes it (with a user
// scratchpad, oneDNN allows concurrent executions of one primitive).
class PrimitiveCache {
 public:
  static constexpr size_t kCapacity = 128;

  std::shared_ptr<const Primitive> get(const GemmKey& key) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
      }
    }
    // Created outside the lock: JIT compilation takes milliseconds. Two
    // threads racing on one key both create; the second insert wins.
    std::shared_ptr<const Primitive> prim = create_primitive(key);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      order_.erase(it->second);
      map_.erase(it);
    }
    order_.emplace_front(key, prim);
    map_[key] = order_.begin();
    if (order_.size() > kCapacity) {
      map_.erase(order_.back().first);
      order_.pop_back();
    }
    return prim;
  }

 private:
  using Entry = std::pair<GemmKey, std::shared_ptr<const Primitive>>;
  std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<GemmKey, std::list<Entry>::iterator, GemmKeyHash> map_;
};

PrimitiveCache& primitive_cache() {
  static PrimitiveCache cache;
  return cache;
}

// The calling thread's scratchpad, at least `bytes` long, 64-byte aligned
// (grows to the largest seen, never shrinks).
void* scratchpad(size_t bytes) {
  constexpr size_t kAlign = 64;
  thread_local std::vector<char> buf;
  if (buf.size() < bytes + kAlign) buf.resize(bytes + kAlign);
  const auto p = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + (kAlign - p % kAlign) % kAlign;
}

bool execute(const GemmKey& key, float alpha, const void* A, const void* B, void* C) {
  const std::shared_ptr<const Primitive> prim = primitive_cache().get(key);
  if (!prim) return false;
  dnnl::engine& eng = cpu_engine();
  // The descriptors are fully given by strides, so the primitive uses exactly
  // these (no "any" formats to query). oneDNN takes void* but only reads A, B.
  memory a(strided_desc(key.M, key.K, key.lda, key.trans_a, dnnl_type(key.ab)), eng,
           const_cast<void*>(A));
  memory b(strided_desc(key.K, key.N, key.ldb, key.trans_b, dnnl_type(key.ab)), eng,
           const_cast<void*>(B));
  memory c(strided_desc(key.M, key.N, key.ldc, false, dnnl_type(key.c_dtype)), eng, C);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
  if (key.scaled) {
    const memory::desc scale_md({1}, memory::data_type::f32, memory::format_tag::a);
    args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES, memory(scale_md, eng, &alpha));
  }
  if (const size_t bytes = prim->scratchpad.get_size(); bytes > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(prim->scratchpad, eng, scratchpad(bytes)));
  // One stream per calling thread: a stream must not be used by two threads
  // at once, and creating one per call would cost an allocation each time.
  thread_local dnnl::stream stream(eng);
  prim->matmul.execute(stream, args);
  stream.wait();
  return true;
}

}  // namespace

const std::string& onednn_lowp_kernel(DType ab) {
  // A 256^3 product: at 16^3 oneDNN 2.6 picks brg:avx512_core_bf16 on a CPU with AMX, while
  // the step's GEMMs (hundreds of rows and columns) run brg:avx512_core_amx_bf16.
  auto probe = [](DType dt) {
    const GemmKey k{dt, DType::kF32, false, false, false, 1, 0.0f, 256, 256, 256, 256, 256, 256};
    const std::optional<dnnl::matmul::primitive_desc> pd = create_pd(k);
    return pd ? std::string(pd->impl_info_str()) : std::string();
  };
  static const std::string bf16 = probe(DType::kBF16), f16 = probe(DType::kF16);
  return ab == DType::kBF16 ? bf16 : f16;
}

bool gemm_lowp_onednn(const LowpGemmArgs& g) {
  const GemmKey key{g.ab,   g.c_dtype, g.trans_a, g.trans_b, g.alpha != 1.0f, omp_get_max_threads(),
                    g.beta, g.M,       g.N,       g.K,       g.lda,           g.ldb,
                    g.ldc};
  try {
    return execute(key, g.alpha, g.A, g.B, g.C);
  } catch (const dnnl::error& e) {
    KIRI_RAISE(kInternal, "gemm_lowp: oneDNN matmul failed (", e.what(), ", status ",
               static_cast<int>(e.status), ") for ", dtype_name(g.ab), " M=", g.M, " N=", g.N,
               " K=", g.K, " trans_a=", g.trans_a, " trans_b=", g.trans_b, " lda=", g.lda,
               " ldb=", g.ldb, " ldc=", g.ldc, " C ", dtype_name(g.c_dtype));
  }
}

}  // namespace kiri::kernels::cpu::detail
