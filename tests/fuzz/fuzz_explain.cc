// Fuzz target: `cachealloc explain` (lab/oom_diagnosis.h) on any snapshot
// file: read_pickle_file, then diagnose_oom as the tool runs it (one
// what-if worker here, so that runs repeat; a search budget of 200 ms so
// that an execution stays well inside -timeout; the tool's own default is
// no budget, and its search is bounded by max_requests).
//
// Property: the snapshot is explained (some text), or refused with a
// documented error (fuzz_input.h).
#include <chrono>
#include <cstdint>
#include <cstdlib>

#include "lab/oom_diagnosis.h"
#include "tests/fuzz/fuzz_input.h"

using namespace cachealloc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const PyValue snapshot = fuzz::read_as_file(data, size);
    DiagnosisOptions options;
    options.threads = 1;
    options.budget = std::chrono::milliseconds(200);
    options.snapshot_path = "fuzz.pickle";
    const OomDiagnosis d = diagnose_oom(snapshot, options);
    if (d.text.empty()) {
      std::fprintf(stderr, "fuzz_explain: an empty explanation\n");
      std::abort();
    }
  } catch (const InvariantViolation& e) {
    std::fprintf(stderr, "fuzz_explain: engine invariant broken: %s\n", e.what());
    std::abort();
  } catch (const std::exception& e) {
    if (!fuzz::documented_refusal(e)) fuzz::undocumented(e);
  }
  return 0;
}
