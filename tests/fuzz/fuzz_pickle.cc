// Fuzz target: the pickle reader (pickle/pickle_reader.h) on any bytes,
// plain or gzipped, read as the tool reads a file.
//
// Properties beyond "refused with a PickleError or read" (fuzz_input.h):
//   - a plain (not gzipped) input reads the same from memory (read_pickle)
//     as from a file (read_pickle_file): both refuse it, or both give the
//     same value;
//   - what was read writes back (write_pickle) and reads again to the same
//     value: the writer's output of it, read and written once more, is the
//     same bytes (bytes, not PyValue ==, so that NaN compares equal).
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "pickle/pickle_writer.h"
#include "tests/fuzz/fuzz_input.h"

using namespace cachealloc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<PyValue> from_file;
  try {
    from_file = fuzz::read_as_file(data, size);
  } catch (const PickleError&) {
  } catch (const std::exception& e) {
    fuzz::undocumented(e);  // the reader documents PickleError only
  }
  const bool gzipped = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (!gzipped) {
    std::optional<PyValue> from_memory;
    try {
      from_memory = read_pickle(std::string_view(reinterpret_cast<const char*>(data), size));
    } catch (const PickleError&) {
    } catch (const std::exception& e) {
      fuzz::undocumented(e);
    }
    if (from_file.has_value() != from_memory.has_value()) {
      std::fprintf(stderr, "fuzz_pickle: read from memory %s, from a file %s\n",
                   from_memory ? "succeeds" : "fails", from_file ? "succeeds" : "fails");
      std::abort();
    }
    if (from_file && write_pickle(*from_file) != write_pickle(*from_memory)) {
      std::fprintf(stderr, "fuzz_pickle: memory and file reads differ\n");
      std::abort();
    }
  }
  if (from_file) {
    const std::string once = write_pickle(*from_file);
    std::string twice;
    try {
      twice = write_pickle(read_pickle(once));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_pickle: the writer's own output is refused: %s\n", e.what());
      std::abort();
    }
    if (once != twice) {
      std::fprintf(stderr, "fuzz_pickle: write -> read -> write changes the bytes\n");
      std::abort();
    }
  }
  return 0;
}
