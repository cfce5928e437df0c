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

XRT_TEST(strided_views_keep_their_strides_both_ways) {
  Producer p;
  p.shape[0] = 3;
  p.shape[1] = 2;
  p.strides[0] = 1;  // the transpose of a contiguous [2, 3]
  p.strides[1] = 3;
  Tensor t = tensor_from_dlpack(p.make());
  CHECK(!t.is_contiguous());
  CHECK(t.strides == std::vector<std::int64_t>({1, 3}));
  DLManagedTensor* out = tensor_to_dlpack(t);
  CHECK(out->dl_tensor.strides[0] == 1 && out->dl_tensor.strides[1] == 3);
  out->deleter(out);
}

XRT_TEST(bad_dtype_is_rejected_and_released) {
  Producer q;
  CHECK_THROWS(UnsupportedOperationError, tensor_from_dlpack(q.make({kDLComplex, 64, 1})),
               "complex64");
  CHECK(q.deleted);  // released on the error path too
}

XRT_TEST(malformed_dlpack_sizes_are_invalid_arguments) {
  Producer a;
  a.shape[0] = -1;
  CHECK_THROWS(InvalidArgumentError, tensor_from_dlpack(a.make()), "negative dimension");
  CHECK(a.deleted);
  Producer b;
  b.shape[0] = std::int64_t{1} << 40;
  b.shape[1] = std::int64_t{1} << 40;
  CHECK_THROWS(InvalidArgumentError, tensor_from_dlpack(b.make()), "more than 2^63 - 1 elements");
  Producer c;
  c.shape[0] = std::int64_t{1} << 61;
  c.shape[1] = 1;
  CHECK_THROWS(InvalidArgumentError, tensor_from_dlpack(c.make()), "2^62-byte limit");
  Producer d;
  d.strides[0] = std::int64_t{1} << 62;  // reach overflows
  d.shape[0] = 4;
  CHECK_THROWS(InvalidArgumentError, tensor_from_dlpack(d.make()), "overflows");
  Producer e;
  DLManagedTensor* m = e.make();
  m->dl_tensor.byte_offset = ~std::uint64_t{0};
  CHECK_THROWS(InvalidArgumentError, tensor_from_dlpack(m), "byte_offset");
  Producer f;
  m = f.make();
  m->dl_tensor.ndim = 100;
  CHECK_THROWS(InvalidArgumentError, tensor_from_dlpack(m), "ndim 100");
  Producer g;
  m = g.make();
  m->dl_tensor.data = nullptr;
  CHECK_THROWS(InvalidArgumentError, tensor_from_dlpack(m), "null data pointer");
  Producer h;
  m = h.make();
  m->dl_tensor.byte_offset = 2;  // inside a float
  CHECK_THROWS(UnsupportedOperationError, tensor_from_dlpack(m), "not aligned");
}

XRT_TEST(empty_checks_sizes_before_allocating) {
  const DeviceRef cpu{DeviceKind::CPU, 0};
  CHECK_THROWS(InvalidArgumentError, Tensor::empty({std::int64_t{1} << 62}, DType::F32, cpu),
               "2^62-byte limit");
  CHECK_THROWS(InvalidArgumentError,
               Tensor::empty({std::int64_t{1} << 40, std::int64_t{1} << 40}, DType::F32, cpu),
               "more than 2^63 - 1 elements");
  CHECK_THROWS(InvalidArgumentError, Tensor::empty({2, -3}, DType::F32, cpu), "negative");
  Tensor zero = Tensor::empty({std::int64_t{1} << 62, 0}, DType::F32, cpu);
  CHECK(zero.numel() == 0 && zero.nbytes() == 0);
  Tensor t = Tensor::empty({2, 3}, DType::F64, cpu);
  CHECK(t.nbytes() == 48 && t.is_contiguous() && t.strides == std::vector<std::int64_t>({3, 1}));
}

XRT_TEST(device_and_dtype_names_parse_or_explain) {
  CHECK(parse_device("cuda:3").index == 3);
  CHECK(parse_device("cpu").kind == DeviceKind::CPU);
  CHECK_THROWS(InvalidArgumentError, parse_device("gpu"), "expected 'cpu', 'cuda' or 'cuda:N'");
  CHECK(dtype_from_name("bfloat16") == DType::BF16);
  CHECK_THROWS(InvalidArgumentError, dtype_from_name("float23"), "did you mean 'float32'");
}

XRT_TEST_MAIN()
