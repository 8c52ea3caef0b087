// The fake device's CUDA device guard: registered in a process that has no
// usable CUDA (a CPU-only torch, or CUDA_VISIBLE_DEVICES= on a CUDA build),
// so that autograd, device guards and streams of tensors on device "cuda"
// work without a GPU. c10's FakeGuardImpl keeps a current device and stream
// per thread and touches no driver. Loaded (RTLD_GLOBAL) by guard.py; the
// static registrar below replaces whatever guard CUDA had (registration is a
// store into c10's per-device-type table).
#include <c10/core/impl/FakeGuardImpl.h>

namespace {
using FakeCudaGuard = c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>;
C10_REGISTER_GUARD_IMPL(CUDA, FakeCudaGuard);
}  // namespace

extern "C" int cachealloc_fake_cuda_guard_loaded() { return 1; }

// A CUDA build registers its real guard when libtorch_cuda loads, which is
// after this library: called once torch is imported, this puts the fake one
// back (the real guard would ask a driver that sees no GPU).
extern "C" int cachealloc_fake_cuda_guard_register() {
  static c10::impl::DeviceGuardImplRegistrar again(c10::DeviceType::CUDA, new FakeCudaGuard());
  return 1;
}

// CUDA hooks that say a CUDA device exists, so that at::getAccelerator()
// (which autograd's engine asks when a backward pass starts) names CUDA, as
// on a GPU. They report no primary context, so the engine asks the fake guard
// for nothing but default streams. Registered above the default priority so
// they win over a CUDA build's own hooks (CUDA_VISIBLE_DEVICES= on the GPU
// machine). ATen creates its CUDA hooks once, on first use: so this library
// must be loaded before `import torch` (guard.py checks that it took).
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/CPUGeneratorImpl.h>

namespace {
struct FakeCudaHooks final : public at::CUDAHooksInterface {
  explicit FakeCudaHooks(at::CUDAHooksArgs) {}
  bool hasCUDA() const override { return true; }
  bool isAvailable() const override { return true; }
  bool isBuilt() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return false; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  int getNumGPUs() const override { return 1; }
  c10::DeviceIndex current_device() const override { return 0; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex) const override {}
  void init() const override {}
  bool isPinnedPtr(const void*) const override { return false; }
  // Random ops on the fake device draw no numbers; a generator is still asked for.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
};
}  // namespace

namespace at {
C10_REGISTER_TYPED_CLASS_WITH_PRIORITY(CUDAHooksRegistry, "CUDAHooks", c10::REGISTRY_PREFERRED,
                                       FakeCudaHooks)
}  // namespace at

extern "C" int cachealloc_fake_cuda_hooks_active() { return at::detail::getCUDAHooks().hasCUDA() ? 1 : 0; }
