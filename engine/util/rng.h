// Small deterministic generators for synthetic data (not for cryptography).
#pragma once

#include <cmath>
#include <cstdint>

namespace bg {

inline uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0) {
    uint64_t s = a * 0xD1B54A32D192ED03ull ^ (b + 0x8CB92BA72F3D8DD7ull);
    uint64_t x = splitmix64(s);
    s = x ^ (c * 0xAEF17502108EF2D9ull);
    return splitmix64(s);
}

class Rng {
public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next() { return splitmix64(state_); }
    // Uniform in [0, 1).
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    uint64_t below(uint64_t n) { return next() % n; }
    // Approximately standard normal: the sum of four 16-bit uniforms (Irwin-Hall), rescaled;
    // one 64-bit draw per value keeps generating gigabytes of weights cheap.
    float normal_fast() {
        const uint64_t r = next();
        const float s = static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
        // mean 4 * 32767.5, variance 4 * (65536^2 - 1) / 12
        return (s - 131070.0f) * (1.0f / 37837.2f);
    }
    double normal() {  // Box-Muller, for the few values that need a true normal
        double u1 = uniform(), u2 = uniform();
        if (u1 < 1e-300) u1 = 1e-300;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

private:
    uint64_t state_;
};

}  // namespace bg
