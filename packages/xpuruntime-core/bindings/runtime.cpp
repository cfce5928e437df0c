// Memory pool, streams/events/graphs, profiler, dispatcher log and kernel registry queries.
#include <pybind11/stl.h>

#include "bindings.h"
#include "xpuruntime/device.h"
#include "xpuruntime/dispatcher.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/microbench.h"
#include "xpuruntime/ops.h"
#include "xpuruntime/profiler.h"
#include "xpuruntime/stream.h"

namespace xrt_py {

namespace {
void* as_stream(std::uintptr_t handle) { return reinterpret_cast<void*>(handle); }
std::uintptr_t as_handle(void* p) { return reinterpret_cast<std::uintptr_t>(p); }

void bind_memory(py::module_& m) {
  auto& pool = xrt::CachingAllocator::instance();
  m.def("memory_stats", [&pool] {
    const xrt::MemoryStats s = pool.stats();
    py::dict d;
    d["allocated"] = s.allocated;
    d["reserved"] = s.reserved;
    d["peak"] = s.peak_allocated;
    d["peak_reserved"] = s.peak_reserved;
    d["cached"] = s.cached;
    d["driver_allocations"] = s.driver_allocations;
    d["driver_frees"] = s.driver_frees;
    d["allocations"] = s.allocations;
    d["cache_hits"] = s.cache_hits;
    d["live_blocks"] = s.live_blocks;
    d["cached_blocks"] = s.cached_blocks;
    d["segments"] = s.segments;
    d["fragmentation"] = s.fragmentation;
    d["pinned_reserved"] = s.pinned_reserved;
    d["pinned_allocated"] = s.pinned_allocated;
    return d;
  });
  m.def("empty_cache", [&pool] { pool.empty_cache(); }, py::call_guard<py::gil_scoped_release>());
  m.def("reset_peak_stats", [&pool] { pool.reset_peak(); });
  m.def("size_class_bytes", &xrt::size_class_bytes, py::arg("nbytes"));
  m.def("pinned_empty", [&pool](std::size_t nbytes) {
    void* p = pool.allocate_pinned(nbytes);
    xrt::Tensor t;
    t.holder = std::shared_ptr<void>(p, [](void* q) {
      xrt::CachingAllocator::instance().free_pinned(q);
    });
    t.data = p;
    t.shape = {static_cast<std::int64_t>(nbytes)};  // nbytes <= 2^62: checked by the pool
    t.strides = {1};
    t.dtype = xrt::DType::U8;
    t.device = {xrt::DeviceKind::CPU, 0};
    t.pinned = true;
    return t;
  }, py::arg("nbytes"));
}

void bind_streams(py::module_& m) {
  py::class_<xrt::Stream>(m, "Stream")
      .def(py::init<int, int>(), py::arg("device") = 0, py::arg("priority") = 0)
      .def_property_readonly("handle", [](const xrt::Stream& s) { return as_handle(s.handle()); })
      .def_property_readonly("device", &xrt::Stream::device)
      .def("synchronize", &xrt::Stream::synchronize, py::call_guard<py::gil_scoped_release>())
      .def("query", &xrt::Stream::query);

  py::class_<xrt::Event>(m, "Event")
      .def(py::init<bool>(), py::arg("enable_timing") = true)
      .def("record", [](xrt::Event& e, std::uintptr_t s) { e.record(as_stream(s)); },
           py::arg("stream") = 0)
      .def("synchronize", &xrt::Event::synchronize, py::call_guard<py::gil_scoped_release>())
      .def("query", &xrt::Event::query)
      .def("wait", [](xrt::Event& e, std::uintptr_t s) { e.wait(as_stream(s)); },
           py::arg("stream") = 0)
      .def("elapsed_ms", &xrt::Event::elapsed_ms, py::arg("end"));

  py::class_<xrt::Graph>(m, "Graph")
      .def(py::init<>())
      .def("begin", [](xrt::Graph& g, std::uintptr_t s) { g.begin(as_stream(s)); },
           py::arg("stream"))
      .def("end", &xrt::Graph::end)
      .def("replay", [](xrt::Graph& g, std::uintptr_t s) {
             py::gil_scoped_release release;
             g.replay(as_stream(s));
           }, py::arg("stream") = 0)
      .def("reset", &xrt::Graph::reset, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("captured", &xrt::Graph::captured)
      .def_property_readonly("replays", &xrt::Graph::replays);

  m.def("stream_is_capturing", [](std::uintptr_t s) { return xrt::stream_is_capturing(as_stream(s)); },
        py::arg("stream"));
}

void bind_profiler(py::module_& m) {
  auto& p = xrt::Profiler::instance();
  m.def("profiler_enable", [&p] { p.enable(); });
  m.def("profiler_disable", [&p] { p.disable(); });
  m.def("profiler_enabled", [&p] { return p.enabled(); });
  m.def("profiler_clear", [&p] { p.clear(); });
  m.def("profiler_capacity", [&p] { return p.capacity(); });
  m.def("profiler_dropped", [&p] { return p.dropped(); });
  m.def("profiler_now_us", [] { return static_cast<double>(xrt::Profiler::now_ns()) / 1000.0; });
  m.def("profiler_begin_range", [&p](const std::string& name) { return p.begin_range(name); },
        py::arg("name"));
  m.def("profiler_end_range",
        [&p](const std::string& name, const std::string& category, std::uint64_t start,
             const std::string& args_json) { p.end_range(name, category, start, args_json); },
        py::arg("name"), py::arg("category"), py::arg("start_ns"), py::arg("args_json") = "");
  m.def("profiler_instant",
        [&p](const std::string& name, const std::string& category, const std::string& args_json) {
          p.instant(name, category, args_json);
        },
        py::arg("name"), py::arg("category"), py::arg("args_json") = "");
  // (name, category, phase, ts_us, dur_us, pid, tid, args_json) tuples, oldest first.
  m.def("profiler_events", [&p] {
    py::list out;
    for (const auto& e : p.events()) {
      out.append(py::make_tuple(e.name, e.category, std::string(1, e.phase), e.ts_us, e.dur_us,
                                e.pid, e.tid, e.args_json));
    }
    return out;
  });
}

py::dict algorithm_dict(const xrt::AlgorithmConfig& algorithm) {
  py::dict d;
  for (const auto& [name, value] : algorithm) d[py::str(name)] = value;
  return d;
}

py::list candidate_list(const std::vector<xrt::TimedCandidate>& candidates) {
  py::list out;
  for (const auto& c : candidates) {
    py::dict item;
    if (c.algorithm.empty()) {
      item["kernel"] = c.kernel;
    } else {
      item["algorithm"] = algorithm_dict(c.algorithm);
      item["rank"] = c.rank;
    }
    item["ms"] = c.ms;
    out.append(item);
  }
  return out;
}

// Everything a decision holds, materialised only when read.
py::dict decision_dict(const xrt::Decision& x, const std::string& last_detail = "") {
  const xrt::DecisionNotes notes = x.notes();
  py::dict item;
  item["op"] = x.op;
  item["kernel"] = x.kernel;
  item["library"] = x.library;
  item["mode"] = x.mode;
  item["strategy"] = x.strategy;
  item["reason"] = x.reason;
  item["shape"] = x.shape;
  item["dims"] = x.query.shape;
  item["dtype"] = x.dtype;
  item["device"] = x.device;
  item["layout"] = x.layout;
  item["status"] = xrt::status_name(x.status());
  item["detail"] = notes.detail.empty() ? last_detail : notes.detail;
  item["algorithm"] = notes.algorithm.empty() ? py::object(py::none())
                                              : py::object(algorithm_dict(notes.algorithm));
  py::list candidates = candidate_list(x.candidates);
  for (auto c : candidate_list(notes.candidates)) candidates.append(c);
  item["candidates"] = candidates;
  return item;
}

py::dict problem_dict(const xrt::LockProblem& p) {
  py::dict d;
  d["op"] = p.signature.op;
  d["shape"] = p.signature.shape;
  d["dtype"] = xrt::dtype_name(p.signature.dtype);
  d["device"] = p.signature.device.str();
  d["layout"] = xrt::layout_text(p.signature.variant);
  d["kernel"] = p.kernel;
  d["reason"] = p.reason;
  return d;
}

xrt::LockEntry lock_entry(const py::handle& obj) {
  py::dict d = py::reinterpret_borrow<py::dict>(obj);
  auto need = [&d](const char* key) {
    if (!d.contains(key)) {
      throw xrt::InvalidArgumentError(std::string("lock entry lacks '") + key +
                                      "' (needs op, shape, dtype, device, layout, kernel)");
    }
    return d[key];
  };
  xrt::LockEntry e;
  e.signature.op = need("op").cast<std::string>();
  e.signature.shape = need("shape").cast<std::vector<std::int64_t>>();
  e.signature.dtype = xrt::dtype_from_name(need("dtype").cast<std::string>());
  e.signature.device = xrt::parse_device(need("device").cast<std::string>());
  e.signature.variant = xrt::layout_from_text(need("layout").cast<std::string>());
  e.kernel = need("kernel").cast<std::string>();
  if (d.contains("algorithm") && !d["algorithm"].is_none()) {
    for (auto item : py::reinterpret_borrow<py::dict>(d["algorithm"])) {
      e.algorithm.emplace_back(item.first.cast<std::string>(), item.second.cast<std::int64_t>());
    }
  }
  return e;
}

void bind_dispatcher(py::module_& m) {
  auto& d = xrt::Dispatcher::instance();
  m.def("dispatcher_decisions", [&d] {
    py::list out;
    for (const auto& x : d.decisions()) out.append(decision_dict(*x));
    return out;
  });
  m.def("export_decisions", [&d] {
    py::list out;
    for (const auto& x : d.cached()) out.append(decision_dict(*x));
    return out;
  });
  m.def("last_decision", [] () -> py::object {
    const xrt::LastCall& last = xrt::last_call();
    if (!last.decision) return py::none();
    return decision_dict(*last.decision, last.detail);
  });
  m.def("set_lock",
        [&d](const std::string& mode, py::object entries) {
          std::vector<xrt::LockEntry> parsed;
          if (!entries.is_none()) {
            for (auto e : entries) parsed.push_back(lock_entry(e));
          }
          const xrt::LockMode lock_mode = xrt::lock_mode_from_name(mode);
          std::vector<xrt::LockProblem> problems;
          {
            py::gil_scoped_release release;
            problems = d.set_lock(lock_mode, std::move(parsed));
          }
          py::list out;
          for (const auto& p : problems) out.append(problem_dict(p));
          return out;
        },
        py::arg("mode"), py::arg("entries"));
  m.def("lock_mode", [&d] { return xrt::lock_mode_name(d.lock_mode()); });
  m.def("lock_problems", [&d](bool take) {
    py::list out;
    for (const auto& p : take ? d.take_lock_problems() : d.lock_problems()) out.append(problem_dict(p));
    return out;
  }, py::arg("take") = false);
  m.def("dispatcher_clear", [&d] { d.clear(); }, py::call_guard<py::gil_scoped_release>());
  m.def("dispatcher_cache_hits", [&d] { return d.cache_hits(); });
  m.def("dispatcher_cache_size", [&d] { return d.cache_size(); });
  m.def("registered_ops", [] { return xrt::KernelRegistry::instance().ops(); });
  m.def("registered_kernels", [](const std::string& op) {
    py::list out;
    for (const auto& k : xrt::KernelRegistry::instance().kernels(op)) {
      py::dict item;
      item["op"] = k.op;
      item["name"] = k.name;
      item["library"] = k.library;
      item["timeable"] = static_cast<bool>(k.measure);
      out.append(item);
    }
    return out;
  }, py::arg("op"));
  m.def("kernel_unsupported_reason",
        [](const std::string& op, const std::string& kernel, const std::vector<std::int64_t>& shape,
           const std::string& dtype, const std::string& device, const std::string& layout) {
          const xrt::OpQuery q{op, shape, xrt::dtype_from_name(dtype), xrt::parse_device(device),
                               xrt::layout_from_text(layout)};
          return xrt::KernelRegistry::instance().find(op, kernel).unsupported_reason(q);
        },
        py::arg("op"), py::arg("kernel"), py::arg("shape"), py::arg("dtype"), py::arg("device"),
        py::arg("layout") = "");
}

void bind_microbench(py::module_& m) {
  m.def("bench_pool_alloc_free_ns", &xrt::pool_alloc_free_ns, py::arg("sizes"),
        py::arg("iterations"), py::arg("device") = 0, py::call_guard<py::gil_scoped_release>());
  m.def("bench_driver_alloc_free_ns", &xrt::driver_alloc_free_ns, py::arg("sizes"),
        py::arg("iterations"), py::arg("device") = 0, py::call_guard<py::gil_scoped_release>());
  m.def("bench_cached_resolve_ns",
        [](const std::string& op, const std::vector<std::int64_t>& shape, const std::string& dtype,
           const std::string& device, const std::string& kernel, const std::string& mode,
           const std::string& strategy, int iterations) {
          const xrt::OpQuery q{op, shape, xrt::dtype_from_name(dtype), xrt::parse_device(device)};
          py::gil_scoped_release release;
          return xrt::cached_resolve_ns(q, kernel, xrt::mode_from_name(mode),
                                        xrt::strategy_from_name(strategy), iterations);
        },
        py::arg("op"), py::arg("shape"), py::arg("dtype"), py::arg("device"), py::arg("kernel"),
        py::arg("mode"), py::arg("strategy"), py::arg("iterations"));
}
}  // namespace

void bind_runtime(py::module_& m) {
  bind_memory(m);
  bind_streams(m);
  bind_profiler(m);
  bind_dispatcher(m);
  bind_microbench(m);
}

}  // namespace xrt_py
