// The Engram n-gram hash (model semantics, DSV41.md): a hand-worked example, 2^64 wrapping, and
// agreement with the reference on fresh random inputs.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "model/dsv41_forward.h"
#include "ops_reference.h"
#include "random_inputs.h"

using bg::dsv41::engram_hash;
using bgtest::fresh_rng;

TEST(EngramHash, HandExample) {
    // c = {3, 5, 7, 11}, mult = {2, 3, 5, 7}, two heads.
    //   h = 3*2 = 6
    //   k=1: h ^= 5*3 = 15 -> 0b0110 ^ 0b1111 = 9;  rows 9 % 13 + 0 = 9,  9 % 17 + 100 = 109
    //   k=2: h ^= 7*5 = 35 -> 9 ^ 35 = 42;          rows 42 % 19 + 200 = 204, 42 % 23 + 300 = 319
    //   k=3: h ^= 11*7 = 77 -> 42 ^ 77 = 103;       rows 103 % 29 + 400 = 416, 103 % 31 + 500 = 510
    const uint64_t c[4] = {3, 5, 7, 11}, mult[4] = {2, 3, 5, 7};
    const uint64_t primes[6] = {13, 17, 19, 23, 29, 31};
    const uint64_t offsets[6] = {0, 100, 200, 300, 400, 500};
    uint64_t rows[6];
    engram_hash(c, mult, primes, offsets, 2, rows);
    const uint64_t want[6] = {9, 109, 204, 319, 416, 510};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(rows[i], want[i]) << i;

    // Wrapping: (2^63 + 1) * 3 = 2^64 + 2^63 + 3 -> 2^63 + 3 (mod 2^64). 2^63 = (2^3)^21 = 1
    // (mod 7), so h mod 7 = 4 at every k (the other products are 0).
    const uint64_t c2[4] = {(uint64_t{1} << 63) + 1, 0, 0, 0}, mult2[4] = {3, 1, 1, 1};
    const uint64_t p7[3] = {7, 7, 7}, off[3] = {0, 10, 20};
    uint64_t rows2[3];
    engram_hash(c2, mult2, p7, off, 1, rows2);
    EXPECT_EQ(rows2[0], 4u);
    EXPECT_EQ(rows2[1], 14u);
    EXPECT_EQ(rows2[2], 24u);
}

TEST(EngramHash, Random) {
    std::mt19937 rng = fresh_rng();
    std::mt19937_64 r64(rng());
    const int n_head = 8;
    for (int rep = 0; rep < 1000; ++rep) {
        uint64_t c[4], mult[4], primes[3 * n_head], offsets[3 * n_head], rows[3 * n_head];
        for (int i = 0; i < 4; ++i) {
            c[i] = r64() % 200000;
            mult[i] = r64() | 1;
        }
        for (int i = 0; i < 3 * n_head; ++i) {
            primes[i] = 1000 + r64() % 1000000;
            offsets[i] = r64() % 10000000;
        }
        engram_hash(c, mult, primes, offsets, n_head, rows);
        const auto want = ref::engram_hash(c, mult, primes, offsets, n_head);
        for (int i = 0; i < 3 * n_head; ++i) ASSERT_EQ(rows[i], want[i]);
    }
}
