// What every fuzz target shares: the input handed to the readers the way
// the command-line tool hands them a file, and the property that decides
// whether an exception is a finding.
//
// The property (docs/fuzzing.md): an input is either processed or refused
// with one of the documented errors below, whose message says what is
// wrong. Anything else that escapes (std::out_of_range from a stray
// .at(), std::length_error, std::bad_alloc, a bare std::runtime_error) is
// a finding: the target aborts, and libFuzzer saves the input. Crashes,
// leaks, over-reads and undefined behaviour are found by ASan and UBSan;
// memory past -rss_limit_mb / -malloc_limit_mb and time past -timeout by
// libFuzzer itself.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

#include "allocator/base/errors.h"
#include "pickle/pickle_reader.h"
#include "pickle/py_value.h"
#include "replay/trace.h"

namespace cachealloc::fuzz {

// Reads `data` as the tool reads a snapshot file (read_pickle_file: gunzipped
// on the fly when it starts with 1f 8b, its stored size known), through an
// in-memory file so that no disk is touched.
inline PyValue read_as_file(const uint8_t* data, size_t size) {
  static const int fd = [] {
    const int f = memfd_create("cachealloc-fuzz", 0);
    if (f < 0) std::perror("memfd_create"), std::abort();
    return f;
  }();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    std::perror("memfd write"), std::abort();
  return read_pickle_file("/proc/self/fd/" + std::to_string(fd));
}

// Whether `e` is one of the documented ways to refuse an input: a bad
// pickle (PickleError, pickle_reader.h), a pickle that is not a snapshot
// (TraceFormatError, trace.h; PyValueError, py_value.h, where a reader
// documents it), a config the rules refuse (ConfigError and its
// UnsupportedConfig, config.h), or an engine error the replay reports
// (CacheallocError). Each must carry a message.
inline bool documented_refusal(const std::exception& e) {
  const bool known = dynamic_cast<const PickleError*>(&e) ||
                     dynamic_cast<const TraceFormatError*>(&e) ||
                     dynamic_cast<const PyValueError*>(&e) ||
                     dynamic_cast<const CacheallocError*>(&e);
  return known && !dynamic_cast<const InvariantViolation*>(&e) && e.what() && *e.what();
}

// Aborts (a finding) on an exception that is not a documented refusal.
[[noreturn]] inline void undocumented(const std::exception& e) {
  std::fprintf(stderr, "fuzz: undocumented exception %s: %s\n", typeid(e).name(), e.what());
  std::abort();
}

}  // namespace cachealloc::fuzz
