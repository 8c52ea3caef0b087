#include "stats/snapshot_frames.h"

namespace cachealloc {

PyValue SnapshotFrames::list(const ContextPtr& context) {
  if (!context) return PyValue::list();
  if (auto it = lists_.find(context.get()); it != lists_.end()) return it->second.second;
  PyValue::List frames;
  frames.reserve(context->frames.size());
  for (const StackFrame& f : context->frames) frames.push_back(frame(f));
  PyValue list = PyValue::list(std::move(frames));
  lists_.emplace(context.get(), std::pair{context, list});
  return list;
}

PyValue SnapshotFrames::frame(const StackFrame& f) {
  const FrameKey key{&f.name.str(), &f.filename.str(), f.line};
  if (auto it = frames_.find(key); it != frames_.end()) return it->second;
  PyValue d = PyValue::dict();
  d.set("name", PyValue::str(f.name.box()));
  d.set("filename", PyValue::str(f.filename.box()));
  d.set("line", PyValue::integer(f.line));
  frames_.emplace(key, d);
  return d;
}

}  // namespace cachealloc
