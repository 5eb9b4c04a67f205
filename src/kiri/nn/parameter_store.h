#pragma once
// Lays a list of Parameters out in one flat value buffer (category
// parameters) and one flat gradient buffer (category gradients), binds each
// Parameter's value and grad to its slice, and initialises the values.
//
// Initialisation is counter-based: element i of parameter "name" is drawn
// from (seed, hash(name), i), so the values do not depend on the layout, and
// a shard can later draw just its slice.
#include <cstdint>
#include <vector>

#include "kiri/nn/parameter.h"

namespace kiri::nn {

class ParameterStore {
 public:
  ParameterStore(std::vector<Parameter*> params, DType dtype, Allocator& allocator);

  void initialize(uint64_t seed);
  void zero_grad() { grads_.zero_(); }

  const std::vector<Parameter*>& parameters() const { return params_; }
  Parameter* find(const std::string& name) const;  // nullptr when absent
  int64_t numel() const { return values_.numel(); }
  DType dtype() const { return values_.dtype(); }
  Tensor& values() { return values_; }
  Tensor& grads() { return grads_; }

 private:
  std::vector<Parameter*> params_;
  Tensor values_;  // [numel] all parameters, in order
  Tensor grads_;   // [numel]
};

// Fills t (F32 or F64) with element i = value of `spec` at (seed, hash(name), first_index + i).
void init_values(Tensor& t, const InitSpec& spec, uint64_t seed, const std::string& name,
                 int64_t first_index = 0);

}  // namespace kiri::nn
