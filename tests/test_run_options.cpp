// Options that name a choice (--prefill, --backend, --swiglu-clamp, --matmul, --routing, --io,
// --decode-experts)
// are parsed once, at the command line, into enums (util/named_enum.h): every name maps to one
// value and back, a wrong word is refused with the choices, and what a run records in its
// metrics is the name it was given.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "model_fixture.h"
#include "runtime/run_config.h"
#include "temp_dir.h"

namespace {

template <class E>
void expect_names_round_trip(size_t n_values) {
    std::set<std::string> names;
    std::set<int> values;
    for (const bg::NamedValue<E>& n : bg::EnumNames<E>::kNames) {
        names.insert(n.name);
        values.insert(static_cast<int>(n.value));
        EXPECT_EQ(bg::parse_enum<E>(n.name), n.value) << n.name;
        EXPECT_STREQ(bg::enum_name(n.value), n.name);
    }
    EXPECT_EQ(names.size(), n_values) << bg::EnumNames<E>::kWhat << ": names must be distinct";
    EXPECT_EQ(values.size(), n_values) << bg::EnumNames<E>::kWhat << ": every value named once";
    E v{};
    EXPECT_FALSE(bg::try_parse_enum<E>("", &v));
    EXPECT_FALSE(bg::try_parse_enum<E>(std::string(bg::EnumNames<E>::kNames[0].name) + " ", &v));
}

TEST(RunOptions, EveryNameParsesToOneValueAndBack) {
    expect_names_round_trip<bg::PrefillOrder>(2);
    expect_names_round_trip<bg::BackendChoice>(3);
    expect_names_round_trip<bg::SwigluClamp>(2);
    expect_names_round_trip<bg::MatmulMode>(2);
    expect_names_round_trip<bg::RoutingPolicy>(4);
    expect_names_round_trip<bg::io::IoEngine>(2);
    expect_names_round_trip<bg::DecodeExperts>(4);
}

TEST(RunOptions, AWrongWordNamesTheFlagAndTheChoices) {
    try {
        (void)bg::parse_enum<bg::RoutingPolicy>("resident");
        ADD_FAILURE() << "'resident' parsed";
    } catch (const bg::Error& e) {
        EXPECT_STREQ(e.what(), "--routing must be one of exact | pinned-top1 | resident-only | hot-pool, got 'resident'");
    }
    const bgtest::Exit r = bgtest::run_cli({"run", "--model", bgtest::tiny_model(), "--io", "mmap"});
    ASSERT_TRUE(WIFEXITED(r.status)) << r.err;
    EXPECT_NE(WEXITSTATUS(r.status), 0);
    EXPECT_NE(r.err.find("--io"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("uring"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("pread"), std::string::npos) << r.err;
}

// The six choice options of a config as it prints them, in one order: prefill, backend,
// swiglu_clamp, matmul, routing, io.
void expect_choices(const nlohmann::json& config, const std::vector<std::string>& want) {
    const char* keys[] = {"prefill", "backend", "swiglu_clamp", "matmul", "routing", "io"};
    ASSERT_EQ(want.size(), std::size(keys));
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(config.at(keys[i]), want[i]) << keys[i];
}

TEST(RunOptions, DefaultsAreTheDocumentedOnes) {
    expect_choices(bg::RunConfig{}.to_json(), {"layer-major", "auto", "deepseek", "fast", "exact", "uring"});
}

// A run given every choice but the defaults records each by its name (the backend as the one it
// resolved to).
TEST(RunOptions, ARunRecordsTheNamesItWasGiven) {
    bgtest::TempDir tmp("run-options");
    const std::string metrics = tmp.file("metrics.json");
    const bgtest::Exit r = bgtest::run_cli({"run", "--model", bgtest::tiny_model(), "--prompt-tokens", "8", "--gen", "2",
                                            "--prefill", "token-major", "--backend", "cpu", "--swiglu-clamp", "llamacpp",
                                            "--matmul", "precise", "--routing", "pinned-top1", "--io", "pread",
                                            "--metrics-json", metrics});
    ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.err;
    std::ifstream f(metrics);
    const nlohmann::json j = nlohmann::json::parse(f);
    expect_choices(j.at("config"), {"token-major", "cpu", "llamacpp", "precise", "pinned-top1", "pread"});
    EXPECT_EQ(j.at("engine")["io_engine"], "pread (buffered)");
    // --decode-experts left at auto: on the CPU backend it becomes gpu (no second processor).
    EXPECT_EQ(j.at("config")["decode_experts"], "gpu");
    EXPECT_EQ(j.at("engine")["decode_experts"], "gpu");
}

// --decode-experts cpu on the CPU backend: the start-up line says what each path costs, the
// metrics what the CPU took, and a wrong word is refused with the choices.
TEST(RunOptions, DecodeExpertsReachTheRun) {
    bgtest::TempDir tmp("run-options-decode");
    const std::string metrics = tmp.file("metrics.json");
    const bgtest::Exit r = bgtest::run_cli({"run", "--model", bgtest::tiny_model(), "--prompt-tokens", "8", "--gen", "4",
                                            "--ignore-eos", "--backend", "cpu", "--routing", "resident-only",
                                            "--decode-experts", "cpu", "--metrics-json", metrics});
    ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.err;
    EXPECT_NE(r.err.find("decode experts: cpu; per host-resident expert"), std::string::npos) << r.err;
    std::ifstream f(metrics);
    const nlohmann::json j = nlohmann::json::parse(f);
    EXPECT_EQ(j.at("config")["decode_experts"], "cpu");
    EXPECT_GT(j.at("decode")["host_experts"]["cpu_experts"].get<uint64_t>(), 0u);
    const bgtest::Exit bad = bgtest::run_cli({"run", "--model", bgtest::tiny_model(), "--decode-experts", "both"});
    ASSERT_TRUE(WIFEXITED(bad.status)) << bad.err;
    EXPECT_NE(WEXITSTATUS(bad.status), 0);
    EXPECT_NE(bad.err.find("--decode-experts"), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("hybrid"), std::string::npos) << bad.err;
}

// On the CPU backend the host-resident experts of a decode step go through the device ops one at
// a time (gpu) or through the host ops, a batch as one pool job (cpu, hybrid): the same CPU
// arithmetic either way, so the very same greedy tokens.
TEST(RunOptions, DecodeExpertsOnEveryPathGiveTheSameTokensOnTheCpuBackend) {
    bgtest::TempDir tmp("run-options-decode-paths");
    std::vector<nlohmann::json> generated;
    for (const char* mode : {"gpu", "cpu", "hybrid"}) {
        const std::string metrics = tmp.file(std::string(mode) + ".json");
        const bgtest::Exit r = bgtest::run_cli({"run", "--model", bgtest::tiny_model(), "--prompt-tokens", "12", "--gen",
                                                "8", "--ignore-eos", "--backend", "cpu", "--threads", "3", "--routing",
                                                "resident-only", "--decode-experts", mode, "--metrics-json", metrics});
        ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << mode << ": " << r.err;
        std::ifstream f(metrics);
        const nlohmann::json j = nlohmann::json::parse(f);
        EXPECT_EQ(j.at("generated").size(), 8u) << mode;
        if (std::string(mode) == "cpu") {
            EXPECT_GT(j.at("decode")["host_experts"]["cpu_experts"].get<uint64_t>(), 0u);
        }
        generated.push_back(j.at("generated"));
    }
    EXPECT_EQ(generated[0], generated[1]) << "gpu against cpu";
    EXPECT_EQ(generated[0], generated[2]) << "gpu against hybrid";
}

// --slots max and --hot max: with the tiny model every expert fits the default budgets, so S is
// every expert of a layer, and with --preload no pass or decode step reads the disk under exact
// routing. A host budget that holds nothing but the rest is a clear error naming the flag.
TEST(RunOptions, SlotsMaxHoldsWhatTheBudgetHolds) {
    bgtest::TempDir tmp("run-options-max");
    const std::string metrics = tmp.file("metrics.json");
    const bgtest::Exit r = bgtest::run_cli({"run", "--model", bgtest::tiny_model(), "--prompt-tokens", "8", "--gen", "3",
                                            "--backend", "cpu", "--routing", "exact", "--slots", "max", "--hot", "2",
                                            "--preload", "--metrics-json", metrics});
    ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.err;
    std::ifstream f(metrics);
    const nlohmann::json j = nlohmann::json::parse(f);
    const int64_t n_expert = j.at("model").at("n_expert").get<int64_t>();
    EXPECT_EQ(j.at("residency").at("slots").get<int64_t>(), n_expert);
    EXPECT_EQ(j.at("residency").at("hot").get<int64_t>(), 2);
    EXPECT_EQ(j.at("config").at("slots").get<int64_t>(), n_expert);
    EXPECT_NE(j.at("config").at("residency_defaults").get<std::string>().find("--slots max: S = " + std::to_string(n_expert)),
              std::string::npos);
    EXPECT_NE(r.err.find("--slots max"), std::string::npos);  // the start-up table shows it
    EXPECT_EQ(j.at("preload").at("experts").get<int64_t>(), n_expert * j.at("model").at("n_layer").get<int64_t>());
    for (const auto& p : j.at("passes")) EXPECT_EQ(p.at("experts").at("disk_bytes").get<uint64_t>(), 0u);
    EXPECT_EQ(j.at("decode").at("disk_read_pct").get<double>(), 0.0);

    const bgtest::Exit small = bgtest::run_cli({"run", "--model", bgtest::tiny_model(), "--prompt-tokens", "8", "--gen", "1",
                                                "--backend", "cpu", "--slots", "max", "--host-budget", "1"});
    EXPECT_TRUE(WIFEXITED(small.status) && WEXITSTATUS(small.status) != 0);
    EXPECT_NE(small.err.find("--slots max: the host budget of 1 MiB"), std::string::npos) << small.err;
}

}  // namespace
