#include "check.h"
#include "dlpack/dlpack.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/tensor.h"

using namespace xrt;

namespace {
// A producer-owned DLPack tensor whose deleter records that it ran.
struct Producer {
  std::vector<float> data = std::vector<float>(6, 1.0f);
  std::int64_t shape[2] = {2, 3};
  std::int64_t strides[2] = {3, 1};
  bool deleted = false;
  DLManagedTensor managed{};
  DLManagedTensor* make(DLDataType dtype = {kDLFloat, 32, 1}) {
    managed.dl_tensor = {data.data(), {kDLCPU, 0}, 2, dtype, shape, strides, 0};
    managed.manager_ctx = this;
    managed.deleter = [](DLManagedTensor* m) { static_cast<Producer*>(m->manager_ctx)->deleted = true; };
    return &managed;
  }
};
}  // namespace

XRT_TEST(import_is_zero_copy_and_releases_producer) {
  Producer p;
  {
    Tensor t = tensor_from_dlpack(p.make());
    CHECK(t.data == p.data.data());
    CHECK(t.shape == std::vector<std::int64_t>({2, 3}));
    CHECK(t.dtype == DType::F32);
    CHECK(!p.deleted);
  }
  CHECK(p.deleted);
}

XRT_TEST(export_round_trip_keeps_storage_alive) {
  Producer p;
  DLManagedTensor* out = nullptr;
  {
    Tensor t = tensor_from_dlpack(p.make());
    out = tensor_to_dlpack(t);
  }
  CHECK(!p.deleted);  // the exported view still holds the producer's tensor
  CHECK(out->dl_tensor.data == p.data.data());
  CHECK(out->dl_tensor.ndim == 2 && out->dl_tensor.shape[1] == 3);
  out->deleter(out);
  CHECK(p.deleted);
}

XRT_TEST(non_contiguous_and_bad_dtype_are_rejected) {
  Producer p;
  p.strides[0] = 6;  // every other row
  CHECK_THROWS(UnsupportedOperationError, tensor_from_dlpack(p.make()), "not contiguous");
  CHECK(p.deleted);  // released on the error path too
  Producer q;
  CHECK_THROWS(UnsupportedOperationError, tensor_from_dlpack(q.make({kDLComplex, 64, 1})),
               "complex64");
}

XRT_TEST(device_and_dtype_names_parse_or_explain) {
  CHECK(parse_device("cuda:3").index == 3);
  CHECK(parse_device("cpu").kind == DeviceKind::CPU);
  CHECK_THROWS(InvalidArgumentError, parse_device("gpu"), "expected 'cpu', 'cuda' or 'cuda:N'");
  CHECK(dtype_from_name("bfloat16") == DType::BF16);
  CHECK_THROWS(InvalidArgumentError, dtype_from_name("float23"), "did you mean 'float32'");
}

XRT_TEST_MAIN()
