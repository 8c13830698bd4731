// A replacement of the global operator new and delete (every replaceable form) that counts the
// allocations, every thread's:
// for tests that check a path allocates nothing. It replaces operator new for the whole program,
// so include it in one translation unit of a test executable only.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace bgtest {

inline std::atomic<uint64_t> g_allocations{0};

// Calls of operator new so far.
inline uint64_t allocations() { return g_allocations.load(std::memory_order_relaxed); }

inline void* counted_new_nothrow(std::size_t n, std::size_t align = 0) noexcept {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (n == 0) n = 1;
    return align ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
}

inline void* counted_new(std::size_t n, std::size_t align = 0) {
    if (void* p = counted_new_nothrow(n, align)) return p;
    throw std::bad_alloc();
}

}  // namespace bgtest

void* operator new(std::size_t n) { return bgtest::counted_new(n); }
void* operator new[](std::size_t n) { return bgtest::counted_new(n); }
void* operator new(std::size_t n, std::align_val_t a) { return bgtest::counted_new(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return bgtest::counted_new(n, static_cast<std::size_t>(a)); }
// The nothrow forms too (libstdc++'s std::get_temporary_buffer uses them): every form allocates
// with malloc and every delete frees, or a sanitizer sees one runtime's new and another's delete.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return bgtest::counted_new_nothrow(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return bgtest::counted_new_nothrow(n); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    return bgtest::counted_new_nothrow(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    return bgtest::counted_new_nothrow(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
