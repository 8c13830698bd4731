// A non-owning reference to a callable, for calls that use it only before they return (the
// thread pool's jobs): built from a lambda in place, it stores two pointers and never allocates,
// where a std::function parameter copies a lambda of more than two pointers' captures to the heap
// (libstdc++ keeps 16 bytes in place), once per call on the per-token path.
#pragma once

#include <type_traits>
#include <utility>

namespace bg {

template <class Fn>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
public:
    // The callable must outlive every call through this reference.
    // (enable_if, not requires: CUDA translation units that include this are compiled as C++17.)
    template <class F, class = std::enable_if_t<!std::is_same_v<std::remove_cv_t<std::remove_reference_t<F>>, FunctionRef> &&
                                                std::is_invocable_r_v<R, F&, Args...>>>
    FunctionRef(F&& f) noexcept  // NOLINT: implicit, as a std::function parameter converts
        : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          call_([](void* o, Args... args) -> R {
              return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
          }) {}

    R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

private:
    void* obj_;
    R (*call_)(void*, Args...);
};

}  // namespace bg
