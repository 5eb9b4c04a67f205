#pragma once
// Module: owns Parameters and child modules under a hierarchical name. Layers
// implement forward/backward explicitly (no autograd): forward saves what
// backward needs, backward accumulates into the parameters' gradients and
// into the gradient of its input, then drops what forward saved.
#include <functional>
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
  Parameter& add_parameter(const std::string& local, const Shape& shape, bool weight_decay,
                           InitSpec init);
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
