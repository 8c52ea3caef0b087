#include "bindings/runtime/python_frames.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "allocator/base/strong_hash.h"

namespace cachealloc {
namespace {

// The few CPython entry points we need, all in the stable ABI (3.10+).
struct CPython {
  using Obj = void*;
  int (*is_initialized)() = nullptr;               // Py_IsInitialized
  int (*is_finalizing)() = nullptr;                // Py_IsFinalizing / _Py_IsFinalizing
  int (*gil_ensure)() = nullptr;                   // PyGILState_Ensure
  void (*gil_release)(int) = nullptr;              // PyGILState_Release
  Obj (*get_frame)() = nullptr;                    // PyEval_GetFrame (borrowed)
  Obj (*frame_code)(Obj) = nullptr;                // PyFrame_GetCode (new ref)
  Obj (*frame_back)(Obj) = nullptr;                // PyFrame_GetBack (new ref)
  int (*frame_line)(Obj) = nullptr;                // PyFrame_GetLineNumber
  Obj (*get_attr)(Obj, const char*) = nullptr;     // PyObject_GetAttrString
  const char* (*as_utf8)(Obj) = nullptr;           // PyUnicode_AsUTF8
  void (*decref)(Obj) = nullptr;                   // Py_DecRef
  void (*err_clear)() = nullptr;                   // PyErr_Clear
  bool ok = false;

  CPython() {
    auto sym = [](const char* name) { return dlsym(RTLD_DEFAULT, name); };
    is_initialized = reinterpret_cast<int (*)()>(sym("Py_IsInitialized"));
    is_finalizing = reinterpret_cast<int (*)()>(sym("Py_IsFinalizing"));
    if (!is_finalizing) is_finalizing = reinterpret_cast<int (*)()>(sym("_Py_IsFinalizing"));
    gil_ensure = reinterpret_cast<int (*)()>(sym("PyGILState_Ensure"));
    gil_release = reinterpret_cast<void (*)(int)>(sym("PyGILState_Release"));
    get_frame = reinterpret_cast<Obj (*)()>(sym("PyEval_GetFrame"));
    frame_code = reinterpret_cast<Obj (*)(Obj)>(sym("PyFrame_GetCode"));
    frame_back = reinterpret_cast<Obj (*)(Obj)>(sym("PyFrame_GetBack"));
    frame_line = reinterpret_cast<int (*)(Obj)>(sym("PyFrame_GetLineNumber"));
    get_attr = reinterpret_cast<Obj (*)(Obj, const char*)>(sym("PyObject_GetAttrString"));
    as_utf8 = reinterpret_cast<const char* (*)(Obj)>(sym("PyUnicode_AsUTF8"));
    decref = reinterpret_cast<void (*)(Obj)>(sym("Py_DecRef"));
    err_clear = reinterpret_cast<void (*)()>(sym("PyErr_Clear"));
    ok = is_initialized && is_finalizing && gil_ensure && gil_release && get_frame && frame_code && frame_back && frame_line && get_attr &&
         as_utf8 && decref && err_clear;
  }
};

const CPython& cpython() {
  static const CPython api;
  return api;
}

// Shared with every frame captured from the code object: a frame costs two
// reference counts, not copies of its names.
struct CodeNames {
  SharedString filename;
  SharedString name;
};

// Code object -> names. Guarded by the GIL (capture runs holding it);
// the extra reference keeps each cached code object alive, so that its
// address cannot be reused by another code object while cached. A
// StrongHashMap: a capture may run out of host memory while it grows.
StrongHashMap<void*, CodeNames>& code_cache() {
  static auto* cache = new StrongHashMap<void*, CodeNames>();
  return *cache;
}

// A program that keeps compiling code (exec, generated kernels' wrappers)
// would otherwise keep every code object it ever allocated from alive:
// past this many entries the cache is emptied (its references dropped) and
// refilled. Real programs allocate from a few thousand places at most.
constexpr size_t kMaxCachedCodeObjects = 16384;

void trim_code_cache(const CPython& py) {
  auto& cache = code_cache();
  if (cache.size() < kMaxCachedCodeObjects) return;
  // Emptied before any reference is dropped: dropping the last one can run
  // Python code (weakref callbacks), which can free a tensor and capture a
  // stack, re-entering here; it must find an empty cache, not this one
  // half released.
  auto old = std::move(cache);
  cache.clear();
  for (auto& [code, names] : old) py.decref(code);
}

std::string attr_string(const CPython& py, void* obj, const char* attr) {
  void* v = py.get_attr(obj, attr);
  if (!v) {
    py.err_clear();
    return "";
  }
  const char* s = py.as_utf8(v);
  std::string out = s ? s : "";
  if (!s) py.err_clear();
  py.decref(v);
  return out;
}

}  // namespace

ContextPtr walk_frames(const CPython& py, int max_depth);

bool python_frames_available() { return cpython().ok; }

ContextPtr capture_python_frames(int max_depth) {
  const CPython& py = cpython();
  if (!py.ok || !py.is_initialized() || py.is_finalizing()) return nullptr;
  // PyTorch releases the GIL around its operators, so allocations arrive
  // without it: take it (this thread's own thread state is reused, so its
  // frames are visible). Callers must not hold the allocator's lock here.
  const int gil = py.gil_ensure();
  ContextPtr ctx;
  try {
    ctx = walk_frames(py, max_depth);
  } catch (...) {
    py.gil_release(gil);  // std::bad_alloc: the GIL must not stay held
    throw;
  }
  py.gil_release(gil);
  return ctx;
}

ContextPtr walk_frames(const CPython& py, int max_depth) {
  void* frame = py.get_frame();
  if (!frame) return nullptr;
  trim_code_cache(py);
  void* owned = nullptr;  // frames from frame_back are new references
  // On std::bad_alloc part way, the references this walk holds are dropped
  // and the cache keeps only complete entries.
  try {
    auto ctx = std::make_shared<CallContext>();
    for (int depth = 0; frame && depth < max_depth; ++depth) {
      void* code = py.frame_code(frame);
      auto it = code_cache().find(code);
      if (it == code_cache().end()) {
        try {
          CodeNames names;
          names.filename = attr_string(py, code, "co_filename");
          names.name = attr_string(py, code, "co_name");
          it = code_cache().emplace(code, std::move(names)).first;  // keeps the reference
        } catch (...) {
          py.decref(code);
          throw;
        }
      } else {
        py.decref(code);  // the cache already holds one reference
      }
      ctx->frames.push_back(StackFrame{it->second.name, it->second.filename, py.frame_line(frame)});
      void* back = py.frame_back(frame);
      if (owned) py.decref(owned);
      owned = back;
      frame = back;
    }
    if (owned) py.decref(owned);
    return ctx;
  } catch (...) {
    if (owned) py.decref(owned);
    throw;
  }
}

}  // namespace cachealloc
