#include "lab/cli/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace cachealloc {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, const std::string& step,
                       int error) {
  throw std::runtime_error("cannot write " + what + " to " + path + ": " + step +
                           (step.empty() ? "" : ": ") + std::strerror(error));
}

// Writes all of `bytes` to fd, retrying short writes and EINTR. Returns 0
// or the errno of the failing write.
int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

// For paths rename cannot replace: devices, FIFOs.
void write_in_place(const std::string& path, std::string_view bytes, const std::string& what) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) fail(what, path, "", errno);
  if (const int error = write_all(fd, bytes)) {
    ::close(fd);
    fail(what, path, "", error);
  }
  if (::close(fd) != 0) fail(what, path, "", errno);
}

}  // namespace

void write_output_file(const std::string& path, std::string_view bytes, const std::string& what) {
  namespace fs = std::filesystem;
  struct stat existing;
  const bool exists = ::stat(path.c_str(), &existing) == 0;  // follows links
  if (exists && !S_ISREG(existing.st_mode)) return write_in_place(path, bytes, what);

  fs::path target = path;
  if (exists) {
    std::error_code ec;
    const fs::path resolved = fs::canonical(target, ec);
    if (!ec) target = resolved;
  }
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";

  // O_EXCL on a name of our own: the kernel applies the umask, and nothing
  // another process made is ever written to or removed.
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()) +
                  "." + std::to_string(attempt)))
              .string();
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt >= 100))
      fail(what, path, "cannot create a temporary file in " + dir.string(), errno);
  }
  int error = write_all(fd, bytes);
  if (!error && exists && ::fchmod(fd, existing.st_mode & 07777) != 0) error = errno;
  if (!error && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && !error) error = errno;
  if (!error && ::rename(tmp.c_str(), target.c_str()) != 0) error = errno;
  if (error) {
    ::unlink(tmp.c_str());
    fail(what, path, "", error);
  }
}

}  // namespace cachealloc
