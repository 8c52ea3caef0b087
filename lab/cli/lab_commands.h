// The subcommands of the `cachealloc` tool: replay and the fragmentation
// lab's. Each takes the arguments after its name, prints its own usage on
// a usage error, and returns the exit status (0 done, 2 bad input). Other errors (unreadable
// trace, bad config) propagate as exceptions for main() to report with 2.
#pragma once

#include <string>
#include <vector>

namespace cachealloc {

// cachealloc replay TRACE [--json] ... (lab_replay.cc): 0 clean replay, 1
// divergence, 2 bad input.
int replay_main(const std::vector<std::string>& args);
// cachealloc compare TRACE --conf A --conf B ... (lab_compare.cc)
int compare_main(const std::vector<std::string>& args);
// cachealloc min-memory TRACE --conf A ... (lab_min_memory.cc)
int min_memory_main(const std::vector<std::string>& args);
// cachealloc advise TRACE [--memory-limit BYTES] ... (lab_advise.cc)
int advise_main(const std::vector<std::string>& args);
// cachealloc explain SNAPSHOT [--memory-limit BYTES] ... (lab_explain.cc)
int explain_main(const std::vector<std::string>& args);

}  // namespace cachealloc
