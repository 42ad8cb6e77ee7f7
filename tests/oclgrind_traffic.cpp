// An oclgrind plugin that counts the bytes each kernel loads from and stores
// to global memory, through every path (plain loads, vloadN/vload_half
// builtins, async copies, atomics), and prints them when the kernel ends:
//   Global traffic for kernel '?': load N bytes, store N bytes
// Loaded with `oclgrind --plugins` by tests/oclgrind_run.py. (oclgrind's own
// --inst-counts counts only load/store instructions, so vector builtins,
// which most of our kernels use, were missing from its byte totals.)
#include <oclgrind/Context.h>
#include <oclgrind/Memory.h>
#include <oclgrind/Plugin.h>

#include <atomic>
#include <cstdio>

namespace
{
class Traffic : public oclgrind::Plugin
{
public:
  Traffic(const oclgrind::Context* c) : oclgrind::Plugin(c) {}
  bool isThreadSafe() const override { return true; }
  void kernelBegin(const oclgrind::KernelInvocation*) override
  {
    loads = 0;
    stores = 0;
  }
  void kernelEnd(const oclgrind::KernelInvocation* k) override
  {
    // (Kernel.h, which names the kernel, needs LLVM's headers; not needed.)
    (void)k;
    std::printf("Global traffic for kernel '?': load %llu bytes, store %llu bytes\n",
                (unsigned long long)loads.load(),
                (unsigned long long)stores.load());
    std::fflush(stdout);
  }
  void memoryLoad(const oclgrind::Memory* m, const oclgrind::WorkItem*, size_t,
                  size_t size) override
  {
    count(m, size, loads);
  }
  void memoryLoad(const oclgrind::Memory* m, const oclgrind::WorkGroup*, size_t,
                  size_t size) override
  {
    count(m, size, loads);
  }
  void memoryStore(const oclgrind::Memory* m, const oclgrind::WorkItem*, size_t, size_t size,
                   const uint8_t*) override
  {
    count(m, size, stores);
  }
  void memoryStore(const oclgrind::Memory* m, const oclgrind::WorkGroup*, size_t, size_t size,
                   const uint8_t*) override
  {
    count(m, size, stores);
  }
  void memoryAtomicLoad(const oclgrind::Memory* m, const oclgrind::WorkItem*,
                        oclgrind::AtomicOp, size_t, size_t size) override
  {
    count(m, size, loads);
  }
  void memoryAtomicStore(const oclgrind::Memory* m, const oclgrind::WorkItem*,
                         oclgrind::AtomicOp, size_t, size_t size) override
  {
    count(m, size, stores);
  }

private:
  static void count(const oclgrind::Memory* m, size_t size, std::atomic<unsigned long long>& n)
  {
    if (m->getAddressSpace() == oclgrind::AddrSpaceGlobal)
      n += size;
  }
  std::atomic<unsigned long long> loads{0}, stores{0};
};
Traffic* plugin;
} // namespace

extern "C" void initializePlugins(oclgrind::Context* context)
{
  plugin = new Traffic(context);
  context->registerPlugin(plugin);
}

extern "C" void releasePlugins(oclgrind::Context* context)
{
  context->unregisterPlugin(plugin);
  delete plugin;
  plugin = nullptr;
}
