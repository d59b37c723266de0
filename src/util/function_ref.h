#pragma once
// A non-owning reference to a callable: calls it through one function pointer, never allocates. For callbacks on
// hot paths (an admission test per appended KV entry) where std::function would allocate its capture on the heap.
#include <type_traits>
#include <utility>

namespace kvsieve {

template <class Signature>
class FunctionRef;

/// Refers to a callable `f` with the call signature R(Args...) without copying it. The callable must outlive
/// the FunctionRef: pass a lambda as a temporary argument (it lives until the end of the full expression) or
/// keep it in a named variable.
template <class R, class... Args>
class FunctionRef<R(Args...)> {
public:
    template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                                std::is_invocable_r_v<R, F&, Args...>>>
    FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): converts like std::function
        : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))), call_([](void* o, Args... a) -> R {
              return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...);
          }) {}

    R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

private:
    void* obj_;
    R (*call_)(void*, Args...);
};

}  // namespace kvsieve
