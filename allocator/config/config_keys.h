// Which PYTORCH_CUDA_ALLOC_CONF keys a PyTorch release accepts.
//
// Allocator decisions follow torch 2.11 whatever the release; what a user
// sees of the settings language follows the release that is installed: a
// key that release does not know is refused with its own words
// ("Unrecognized key 'K' in Accelerator allocator config."), and a key it
// added is accepted. The key sets are read from each release's wheel
// (c10/core/AllocatorConfig.h and c10/cuda/CUDAAllocatorConfig.h getKeys();
// from 2.13 the device-generic set moved into libc10, whose strings give it)
// by scripts/torch_release_facts.py; tests/data/torch_releases/ holds the
// lists and config_release_test compares this table with them.
//
// The release in force is process-wide, as the environment is: the Python
// layer sets it from torch.__version__ before the first parse
// (cachealloc_set_torch_version); until then it is 2.11.
#pragma once

#include <optional>
#include <string_view>

namespace cachealloc {

// A PyTorch release whose settings language differs from the one before it.
// Releases in between (2.14.1 after 2.14.0) use their minor release's set.
enum class TorchRelease { k2_11, k2_12, k2_13, k2_14 };

// The release `version` ("2.12.0", "2.13.0+cu130", "2.14.1") belongs to.
// Releases before 2.11 give 2.11 (the reference); releases after the newest
// known one give the newest known one (a newer release's keys then read as
// unknown until added here). nullopt when `version` does not start with
// MAJOR.MINOR.
std::optional<TorchRelease> torch_release_of(std::string_view version);

// "2.11", "2.12", ... for messages.
std::string_view torch_release_name(TorchRelease release);

// Whether `release`'s allocator config accepts `key` (device-generic and
// CUDA keys alike; the ROCm spellings native also accepts on CUDA builds
// included).
bool release_accepts_key(TorchRelease release, std::string_view key);

// The release parse() follows when none is given. Thread-safe.
TorchRelease process_torch_release();
void set_process_torch_release(TorchRelease release);

}  // namespace cachealloc
