// StreamManager pieces: owned CUDA streams, timing events and CUDA graphs (capture/replay).
// In a CPU build or without a device every constructor raises CudaError naming the cause.
#pragma once

#include <cstdint>

namespace xrt {

class Stream {
 public:
  explicit Stream(int device, int priority = 0);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* handle() const { return stream_; }
  int device() const { return device_; }
  void synchronize();
  bool query();  // true when all work is done

 private:
  void* stream_ = nullptr;
  int device_ = 0;
};

class Event {
 public:
  explicit Event(bool enable_timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(void* stream);
  void synchronize();
  bool query();
  void wait(void* stream);  // make `stream` wait for this event
  float elapsed_ms(const Event& end) const;  // this is the start event
  void* handle() const { return event_; }

 private:
  void* event_ = nullptr;
  int device_ = 0;
  bool recorded_ = false;
};

// Captures the work issued on one stream between begin() and end(), then replays it.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void begin(void* stream);
  void end();
  void replay(void* stream);  // nullptr: the stream it was captured on
  bool captured() const { return exec_ != nullptr; }
  std::uint64_t replays() const { return replays_; }
  void reset();

 private:
  void* stream_ = nullptr;
  void* graph_ = nullptr;
  void* exec_ = nullptr;
  bool capturing_ = false;
  std::uint64_t replays_ = 0;
};

// True while `stream` is being captured into a graph (false in a CPU build).
bool stream_is_capturing(void* stream);

}  // namespace xrt
