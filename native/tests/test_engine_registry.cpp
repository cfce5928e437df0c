#include "check.h"
#include "xpuruntime/engine_registry.h"
#include "xpuruntime/errors.h"

using namespace xrt;

XRT_TEST(register_find_and_suggest) {
  auto& r = EngineRegistry::instance();
  r.add("onnxruntime", {{"devices", {"cpu", "cuda"}}, {"precisions", {"fp32", "fp16"}}});
  r.add("openvino", {{"devices", {"cpu", "npu"}}, {"precisions", {"fp32", "int8"}}});
  CHECK(r.find({{"devices", {"cuda"}}}) == std::vector<std::string>{"onnxruntime"});
  CHECK(r.find({{"devices", {"cpu"}}, {"precisions", {"int8"}}}) ==
        std::vector<std::string>{"openvino"});
  CHECK(r.find({{"missing", {"x"}}}).empty());
  CHECK_THROWS(InvalidArgumentError, r.get("onnxrt"), "did you mean 'onnxruntime'");
  r.add("openvino", {{"devices", {"cpu"}}});  // replaces
  CHECK(r.list().size() == 2 && r.get("openvino").capabilities.at("devices").size() == 1);
  CHECK(r.remove("openvino") && !r.remove("openvino"));
}

XRT_TEST_MAIN()
