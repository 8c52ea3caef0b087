// The C API of the OOM flight recorder: the diagnosis of a snapshot
// (lab/oom_diagnosis.h), and the note a framework's OOM hook leaves for the
// error message (the PyTorch glue appends it to native's text).
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

#include "bindings/c_api/c_api_internal.h"
#include "bindings/c_api/cachealloc.h"
#include "lab/oom_diagnosis.h"
#include "pickle/pickle_reader.h"

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
    const std::string text = cachealloc::diagnose_oom(snapshot, options).text;
    char* buf = static_cast<char*>(std::malloc(text.size() + 1));
    if (!buf) throw std::bad_alloc();
    std::memcpy(buf, text.c_str(), text.size() + 1);
    *out = buf;
    *out_length = text.size();
  });
}

void cachealloc_set_oom_note(const char* text) { oom_note = text ? text : ""; }

const char* cachealloc_oom_note(void) { return oom_note.c_str(); }

}  // extern "C"
