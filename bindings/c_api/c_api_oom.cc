// The C API of the OOM flight recorder: the diagnosis of a snapshot
// (lab/oom_diagnosis.h), the request ring the what-if replays when history
// is off (bindings/runtime/request_ring.cc), and the note a framework's OOM
// hook leaves for the error message (the PyTorch glue appends it to
// native's text).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>

#include "bindings/c_api/c_api_internal.h"
#include "bindings/c_api/cachealloc.h"
#include "lab/oom_diagnosis.h"
#include "pickle/pickle_reader.h"
#include "pickle/pickle_writer.h"
#include "stats/request_ring.h"
#include "stats/snapshot.h"

namespace {

// Set by the OOM hook (an observer, on the thread that ran out of memory)
// and taken by the code that raises the error on that same thread.
thread_local std::string oom_note;

}  // namespace

extern "C" {

int cachealloc_diagnose_snapshot(const char* pickle, size_t length, int64_t memory_limit,
                                 int64_t budget_ms, const char* snapshot_path, char** out,
                                 size_t* out_length) {
  return cachealloc::c_api::guarded([&] {
    if (!pickle || !out || !out_length)
      throw std::invalid_argument("cachealloc_diagnose_snapshot: NULL argument");
    const cachealloc::PyValue snapshot = cachealloc::read_pickle(std::string_view(pickle, length));
    cachealloc::DiagnosisOptions options;
    if (memory_limit >= 0) options.memory_limit = static_cast<size_t>(memory_limit);
    if (budget_ms >= 0) options.budget = std::chrono::milliseconds(budget_ms);
    options.threads = 0;
    if (snapshot_path) options.snapshot_path = snapshot_path;
    cachealloc::c_api::copy_out(cachealloc::diagnose_oom(snapshot, options).text, out,
                                out_length, true);
  });
}

int cachealloc_record_requests(size_t bytes_per_device) {
  return cachealloc::c_api::guarded([&] {
    constexpr size_t kRecord = cachealloc::RequestRing::kRecordBytes;
    const size_t records =
        bytes_per_device == 0 ? 0 : std::max<size_t>(1, bytes_per_device / kRecord);
    cachealloc::Runtime::instance().record_requests(records);
  });
}

int cachealloc_requests_pickle(char** out, size_t* length) {
  return cachealloc::c_api::guarded([&] {
    if (!out || !length) throw std::invalid_argument("cachealloc_requests_pickle: NULL output");
    using cachealloc::PyValue;
    cachealloc::Runtime& runtime = cachealloc::Runtime::instance();
    PyValue traces = PyValue::list();
    PyValue wrapped = PyValue::list();
    cachealloc::SnapshotFrames frames;  // none: the ring keeps no frames
    for (const auto& ring : runtime.request_rings()) {
      PyValue list = PyValue::list();
      for (const cachealloc::TraceEntry& t : ring.entries)
        list.append(cachealloc::trace_entry_to_py(t, frames));
      traces.append(std::move(list));
      wrapped.append(PyValue::boolean(ring.wrapped));
    }
    PyValue d = PyValue::dict();
    d.set("record_bytes", PyValue::integer(cachealloc::RequestRing::kRecordBytes));
    d.set("records", PyValue::integer(static_cast<int64_t>(runtime.request_records())));
    d.set("device_traces", std::move(traces));
    d.set("wrapped", std::move(wrapped));
    cachealloc::c_api::copy_out(cachealloc::write_pickle(d), out, length);
  });
}

void cachealloc_set_oom_note(const char* text) { oom_note = text ? text : ""; }

const char* cachealloc_oom_note(void) { return oom_note.c_str(); }

}  // extern "C"
