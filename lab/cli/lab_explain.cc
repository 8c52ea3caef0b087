// cachealloc explain: the OOM diagnosis (lab/oom_diagnosis.h) of any
// snapshot, offline: the one cachealloc writes at an OOM, a snapshot native
// dumped in an OOM observer, or any other (its final state).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "lab/cli/command_line.h"
#include "lab/cli/lab_args.h"
#include "lab/cli/lab_commands.h"
#include "lab/cli/lab_options.h"
#include "lab/oom_diagnosis.h"
#include "pickle/pickle_reader.h"

namespace cachealloc {
namespace {

constexpr const char* kExplainUsage =
    "usage: cachealloc explain SNAPSHOT [--memory-limit BYTES] [--device N]\n"
    "                          [--budget-ms MS] [--max-requests N]\n"
    "\n"
    "Explains the out-of-memory error recorded in SNAPSHOT (a snapshot pickle,\n"
    ".pickle or .pickle.gz: the one cachealloc writes at an OOM, or one PyTorch\n"
    "wrote with torch.cuda.memory._dump_snapshot, e.g. from an OOM observer):\n"
    "the failed request, memory reserved but unallocated, the largest free\n"
    "block, the segments live blocks split and pin, the allocation sites that\n"
    "pin the most, and which settings would have run the recorded history\n"
    "without the OOM (a what-if replay, as `cachealloc advise`). The same text\n"
    "follows PyTorch's message at an OOM when the flight recorder is on.\n"
    "\n"
    "  --memory-limit B   the limit the OOM happened under (default: the one\n"
    "                     cachealloc recorded; for native snapshots, reserved\n"
    "                     plus the device's free bytes at the OOM)\n"
    "  --device N         which device (default: the OOM's)\n"
    "  --budget-ms MS     stop the what-if search after MS ms (default: none)\n"
    "  --max-requests N   replay histories of at most N requests (default: no limit)\n"
    "\n"
    "exit status: 0 done, 2 bad input (usage, unreadable snapshot)\n";

}  // namespace

int explain_main(const std::vector<std::string>& args) {
  return run_lab_command("explain", kExplainUsage, args, [&args] {
    CLI::App app{"", "explain"};
    configure_command_line(app);
    std::optional<size_t> limit, budget_ms, max_requests;
    std::optional<std::string> device;
    Positional snapshot;
    add_bytes_option(app, "--memory-limit", limit);
    add_text_option(app, "--device", device);
    add_count_option(app, "--budget-ms", budget_ms);
    add_count_option(app, "--max-requests", max_requests);
    add_trace_positional(app, snapshot);
    parse_command_line(app, args);
    DiagnosisOptions options;
    if (device) options.device = parse_lab_device("--device", *device);
    options.memory_limit = limit;
    if (budget_ms) options.budget = std::chrono::milliseconds(*budget_ms);
    options.max_requests = max_requests.value_or(SIZE_MAX);
    options.threads = 0;
    options.snapshot_path = snapshot.only_trace();
    set_activity("reading " + snapshot.only_trace());
    const PyValue snap = read_pickle_file(snapshot.only_trace());
    set_activity("explaining " + snapshot.only_trace());
    const OomDiagnosis d = diagnose_oom(snap, options);
    const OomRequest& r = d.state.request;
    if (!r.message.empty()) std::printf("%s\n\n", r.message.c_str());
    std::fputs(d.text.c_str(), stdout);
    return 0;
  });
}

}  // namespace cachealloc
