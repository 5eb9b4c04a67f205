#pragma once
// Module: owns Parameters and child modules under a hierarchical name. Layers
// implement forward/backward explicitly (no autograd): forward saves what
// backward needs, backward accumulates into the parameters' gradients and
// into the gradient of its input, then drops what forward saved.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiri/nn/parameter.h"
#include "kiri/tensor/allocator.h"

namespace kiri::nn {

// What a layer needs to allocate its activations and scratch.
struct Context {
  explicit Context(Allocator& a, bool train = true) : allocator(a), training(train) {}
  Allocator& allocator;
  // False for evaluation and sampling: layers save nothing for backward.
  bool training = true;
  // Called between the operations of backward: MPI advances outstanding
  // non-blocking collectives only when polled, so this is how DDP's
  // all-reduces make progress while backward computes.
  std::function<void()> poll;
  void progress() {
    if (poll) poll();
  }
  // Which micro-batch this forward or backward belongs to: pipeline
  // schedules keep several in flight, each with its own saved activations.
  int micro_batch = 0;
};

// What a layer's forward saves for its backward, one entry per micro-batch
// in flight (a pipeline stage runs several forwards before their backwards).
template <typename S>
class Saved {
 public:
  S& put(const Context& ctx) { return slots_[ctx.micro_batch]; }
  // Removes and returns the entry of ctx's micro-batch.
  S take(const Context& ctx, const char* layer) {
    auto it = slots_.find(ctx.micro_batch);
    KIRI_CHECK(it != slots_.end(), layer, ": backward of micro-batch ", ctx.micro_batch,
               " without its training forward");
    S s = std::move(it->second);
    slots_.erase(it);
    return s;
  }
  // The entry of ctx's micro-batch, left in place (a recompute reads it before backward takes it).
  const S& peek(const Context& ctx, const char* layer) const {
    auto it = slots_.find(ctx.micro_batch);
    KIRI_CHECK(it != slots_.end(), layer, ": recompute of micro-batch ", ctx.micro_batch,
               " without its training forward");
    return it->second;
  }
  bool has(const Context& ctx) const { return slots_.count(ctx.micro_batch) != 0; }
  size_t in_flight() const { return slots_.size(); }

 private:
  std::map<int, S> slots_;
};

class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }
  // This module's parameters and its children's, in registration order.
  std::vector<Parameter*> parameters();

 protected:
  // Registers "<name>.<local>" with the given shape.
  // With tensor parallelism, shape is this rank's part of `full`, cut as `tp` says.
  Parameter& add_parameter(const std::string& local, const Shape& shape, bool weight_decay,
                           InitSpec init, const Shape& full = Shape(), TpSplit tp = {});
  void add_child(Module& child) { children_.push_back(&child); }
  std::string child_name(const std::string& local) const {
    return name_.empty() ? local : name_ + "." + local;
  }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<Module*> children_;
};

// Allocates an activation tensor of the context's allocator.
Tensor activation(Context& ctx, const Shape& shape, DType dtype);
Tensor activation_zeros(Context& ctx, const Shape& shape, DType dtype);

}  // namespace kiri::nn
