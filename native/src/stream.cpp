#include "xpuruntime/stream.h"

#include <string>

#include "xpuruntime/device.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/memory.h"

#if XPURUNTIME_WITH_CUDA
#include "cuda/cuda_check.h"
#endif

namespace xrt {

#if XPURUNTIME_WITH_CUDA

namespace {
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

// Runs `body` with `device` current, restoring the caller's device afterwards.
template <typename F>
void on_device(int device, F body) {
  int previous = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) XRT_CUDA_CHECK(cudaSetDevice(device));
  try {
    body();
  } catch (...) {
    if (previous != device) cudaSetDevice(previous);
    throw;
  }
  if (previous != device) cudaSetDevice(previous);
}
}  // namespace

Stream::Stream(int device, int priority) : device_(device) {
  DeviceManager::instance().check_device({DeviceKind::CUDA, device});
  on_device(device, [&] {
    cudaStream_t s = nullptr;
    XRT_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
    stream_ = s;
  });
}

Stream::~Stream() {
  if (stream_ == nullptr) return;
  // Finish queued work first: the pool keys cached blocks by stream handle, and a later
  // stream may be given the same handle value.
  cudaStreamSynchronize(as_stream(stream_));
  cudaStreamDestroy(as_stream(stream_));
  cudaGetLastError();
}

void Stream::synchronize() { XRT_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_))); }

bool Stream::query() {
  const cudaError_t s = cudaStreamQuery(as_stream(stream_));
  if (s == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  XRT_CUDA_CHECK(s);
  return true;
}

Event::Event(bool enable_timing) {
  DeviceManager& dm = DeviceManager::instance();
  device_ = dm.current_device();
  cudaEvent_t e = nullptr;
  XRT_CUDA_CHECK(cudaEventCreateWithFlags(&e, enable_timing ? cudaEventDefault
                                                            : cudaEventDisableTiming));
  event_ = e;
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(as_event(event_));
}

void Event::record(void* stream) {
  XRT_CUDA_CHECK(cudaEventRecord(as_event(event_), as_stream(stream)));
  recorded_ = true;
}

void Event::synchronize() { XRT_CUDA_CHECK(cudaEventSynchronize(as_event(event_))); }

bool Event::query() {
  const cudaError_t s = cudaEventQuery(as_event(event_));
  if (s == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  XRT_CUDA_CHECK(s);
  return true;
}

void Event::wait(void* stream) {
  XRT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream), as_event(event_), 0));
}

float Event::elapsed_ms(const Event& end) const {
  if (!recorded_ || !end.recorded_) {
    throw InvalidArgumentError("elapsed_ms needs both events recorded: call record() on each");
  }
  float ms = 0;
  XRT_CUDA_CHECK(cudaEventElapsedTime(&ms, as_event(event_), as_event(end.event_)));
  return ms;
}

Graph::~Graph() {
  try {
    reset();
  } catch (...) {  // destructors must not throw; the CUDA error is already cleared
  }
}

void Graph::begin(void* stream) {
  if (capturing_) throw InvalidArgumentError("graph capture already in progress");
  if (stream == nullptr) {
    throw InvalidArgumentError(
        "graph capture needs a created stream (rt.Stream()), not the legacy default stream");
  }
  reset();
  CachingAllocator::instance().begin_capture(stream, this);
  const cudaError_t status =
      cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeRelaxed);
  if (status != cudaSuccess) {
    CachingAllocator::instance().end_capture(stream);
    XRT_CUDA_CHECK(status);
  }
  stream_ = stream;
  capturing_ = true;
}

void Graph::end() {
  if (!capturing_) throw InvalidArgumentError("end() without begin(): no capture in progress");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(as_stream(stream_), &graph);
  CachingAllocator::instance().end_capture(stream_);
  XRT_CUDA_CHECK(status);
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  XRT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  exec_ = exec;
}

void Graph::replay(void* stream) {
  if (exec_ == nullptr) throw InvalidArgumentError("replay() before a capture finished");
  XRT_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                 as_stream(stream != nullptr ? stream : stream_)));
  ++replays_;
}

void Graph::reset() {
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  if (exec_ != nullptr || graph_ != nullptr) {
    // Replays may still be queued; the held blocks become reusable once they finished.
    // (The device, not the capture stream: that stream may already be destroyed.)
    cudaDeviceSynchronize();
    cudaGetLastError();
    CachingAllocator::instance().release_graph_blocks(this);
  }
  exec_ = nullptr;
  graph_ = nullptr;
  replays_ = 0;
}

bool stream_is_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(as_stream(stream), &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusActive;
}

#else  // CPU-only build

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw CudaError(std::string(what) +
                  " need CUDA, but xpuruntime-core was built without it (XPURUNTIME_CUDA=OFF or "
                  "no nvcc at build time). Install a CUDA build of xpuruntime-core.");
}
}  // namespace

Stream::Stream(int device, int) : device_(device) {
  DeviceManager::instance().check_device({DeviceKind::CUDA, device});
  no_cuda("streams");
}
Stream::~Stream() = default;
void Stream::synchronize() {}
bool Stream::query() { return true; }
Event::Event(bool) { no_cuda("events"); }
Event::~Event() = default;
void Event::record(void*) {}
void Event::synchronize() {}
bool Event::query() { return true; }
void Event::wait(void*) {}
float Event::elapsed_ms(const Event&) const { return 0; }
Graph::~Graph() = default;
void Graph::begin(void*) { no_cuda("CUDA graphs"); }
void Graph::end() { no_cuda("CUDA graphs"); }
void Graph::replay(void*) { no_cuda("CUDA graphs"); }
void Graph::reset() {}
bool stream_is_capturing(void*) { return false; }

#endif

}  // namespace xrt
