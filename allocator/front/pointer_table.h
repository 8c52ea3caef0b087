// Address -> Block* for the blocks a device has handed out: how free(ptr)
// finds its block.
//
// Why not absl::flat_hash_map: this table is on every allocate and free, and
// its keys are special: non-zero, multiples of 512 (kMinBlockSize), unique.
// That allows a plain linear-probing table with a multiplicative hash of
// address / 512, zero as the empty marker and deletion by backward shift (no
// tombstones, so probe runs never degrade). An insert+find+erase cycle costs
// about 40 instructions instead of about 150 (callgrind).
//
// Invariants:
//   - capacity_ is a power of two (or 0 before the first insert) and
//     size_ <= capacity_ / 2 after every insert, so probe runs stay short
//     and an empty slot always exists.
//   - Every stored key k sits at the end of an unbroken run of occupied
//     slots starting at home(k): lookups stop at the first empty slot.
//
// Not thread-safe (the device lock guards it). Memory: 16 bytes per slot,
// 2 to 4 slots per block at the high-water mark of live blocks (the table
// grows and never shrinks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cachealloc {

struct Block;

class PointerTable {
 public:
  PointerTable() = default;
  PointerTable(const PointerTable&) = delete;
  PointerTable& operator=(const PointerTable&) = delete;

  size_t size() const { return size_; }

  // Records `block` under `address` (non-zero, not already present). May
  // throw std::bad_alloc when growing; the table is unchanged then.
  void insert(uintptr_t address, Block* block) {
    reserve_one();
    insert_reserved(address, block);
  }
  // Makes room for one more entry: the next insert_reserved cannot fail.
  // For a caller that must record a block once it has one (allocate takes
  // the room before the engine hands the block out). May throw
  // std::bad_alloc when growing; the table is unchanged then.
  void reserve_one() {
    if ((size_ + 1) * 2 > capacity_) grow();
  }
  // insert() without growing. Precondition: reserve_one() since the last
  // insert, or an erase since then (an erase leaves room for one). Never
  // throws.
  void insert_reserved(uintptr_t address, Block* block) noexcept {
    place(address, block);
    ++size_;
  }

  // The block under `address`, or nullptr.
  Block* find(uintptr_t address) const {
    const size_t i = slot_of(address);
    return i == kAbsent ? nullptr : slots_[i].block;
  }

  // Removes `address` and returns its block, or nullptr if absent (the
  // table is unchanged then).
  Block* erase(uintptr_t address) {
    size_t i = slot_of(address);
    if (i == kAbsent) return nullptr;
    Block* const found = slots_[i].block;
    // Backward shift: pull later entries of the run into the hole when the
    // hole lies on their probe path (between their home and their slot).
    for (size_t j = (i + 1) & mask();; j = (j + 1) & mask()) {
      if (slots_[j].address == 0) break;
      const size_t h = home(slots_[j].address);
      const bool hole_on_path = i <= j ? (h <= i || h > j) : (h <= i && h > j);
      if (hole_on_path) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --size_;
    return found;
  }

 private:
  struct Slot {
    uintptr_t address = 0;  // 0: empty
    Block* block = nullptr;
  };

  static constexpr size_t kAbsent = ~size_t{0};
  // Index of the slot holding `address`, or kAbsent.
  size_t slot_of(uintptr_t address) const {
    if (capacity_ == 0) return kAbsent;
    for (size_t i = home(address);; i = (i + 1) & mask()) {
      if (slots_[i].address == address) return i;
      if (slots_[i].address == 0) return kAbsent;
    }
  }
  size_t mask() const { return capacity_ - 1; }
  // Fibonacci hashing of address / 512: consecutive blocks spread out.
  size_t home(uintptr_t address) const {
    return static_cast<size_t>(((address >> 9) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void place(uintptr_t address, Block* block) {
    size_t i = home(address);
    while (slots_[i].address != 0) i = (i + 1) & mask();
    slots_[i] = Slot{address, block};
  }
  void grow() {
    const size_t new_capacity = capacity_ == 0 ? 64 : capacity_ * 2;
    auto fresh = std::make_unique<Slot[]>(new_capacity);  // throws before any change
    std::unique_ptr<Slot[]> old = std::move(slots_);
    const size_t old_capacity = capacity_;
    slots_ = std::move(fresh);
    capacity_ = new_capacity;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(new_capacity));
    for (size_t i = 0; i < old_capacity; ++i)
      if (old[i].address != 0) place(old[i].address, old[i].block);
  }

  std::unique_ptr<Slot[]> slots_;
  size_t capacity_ = 0;
  size_t size_ = 0;
  unsigned shift_ = 64;  // 64 - log2(capacity_)
};

}  // namespace cachealloc
