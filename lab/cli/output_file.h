// Writing the tool's output files (snapshots, HTML reports) so that a
// failure is reported and never leaves a truncated file behind.
#pragma once

#include <string>
#include <string_view>

namespace cachealloc {

// Writes `bytes` to `path`, replacing it all at once: the bytes go to a new
// temporary file in the same directory, which is flushed (fsync), closed
// and checked, then renamed over `path`. Until the rename, an existing file
// at `path` is untouched; a new file gets the usual 0666 & ~umask mode, a
// replaced one keeps its mode. A symbolic link is followed: the file it
// names is replaced, the link stays.
//
// A `path` that exists and is not a regular file (/dev/stdout, /dev/full, a
// FIFO) cannot be replaced by renaming; it is opened and written in place,
// with every write and the close checked.
//
// Throws std::runtime_error "cannot write WHAT to PATH: <OS error>" (or
// "... : cannot create a temporary file in DIR: ..."), after removing the
// temporary file. `what` names the output ("snapshot", "HTML report").
void write_output_file(const std::string& path, std::string_view bytes, const std::string& what);

}  // namespace cachealloc
