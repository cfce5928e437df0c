// EngineRegistry: inference engines (ONNX Runtime, TensorRT, OpenVINO, QNN plugins) register
// here with their capabilities, so the control plane can ask which engines can run what.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace xrt {

// capability name -> values, e.g. {"devices": ["cpu", "cuda"], "precisions": ["fp32", "fp16"]}
using Capabilities = std::map<std::string, std::vector<std::string>>;

struct EngineEntry {
  std::string name;
  Capabilities capabilities;
};

class EngineRegistry {
 public:
  static EngineRegistry& instance();
  void add(const std::string& name, Capabilities capabilities);  // replaces a same-named one
  bool remove(const std::string& name);
  EngineEntry get(const std::string& name) const;  // InvalidArgumentError, did-you-mean
  std::vector<EngineEntry> list() const;            // in registration order
  // Engines whose every required capability lists every required value.
  std::vector<std::string> find(const Capabilities& required) const;

 private:
  EngineRegistry() = default;
  mutable std::mutex mutex_;
  std::vector<EngineEntry> engines_;
};

}  // namespace xrt
