// Fuzz target: the deepseek41 model validator on an in-memory image of a whole file: the GGUF
// reader, then the hyper-parameters, then the tensor table checked against them.
//
// Operating errors are bg::Error with one line starting "gguf: " or "model: "; anything else —
// another exception, a sanitizer report, an accepted file whose table breaks what the
// validator promises — is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_common.h"
#include "gguf/gguf.h"
#include "model/dsv41.h"
#include "util/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const bg::gguf::Reader r = bg::gguf::Reader::parse(data, size);
        const bg::dsv41::HParams hp = bg::dsv41::read_hparams(r);
        const std::vector<bg::dsv41::LayerRoles> roles = bg::dsv41::validate_tensors(hp, r);
        if (static_cast<int64_t>(roles.size()) != hp.n_layer) bgfuzz::finding("roles", "one per layer expected");
        // Accepted: every expected tensor is present with its shape and an allowed type.
        for (const bg::dsv41::TensorSpec& s : bg::dsv41::tensor_specs(hp, roles)) {
            const bg::gguf::TensorInfo* t = r.tensor(s.name);
            if (!t || t->ne != s.ne || !bg::dsv41::type_allowed(s.cls, t->type))
                bgfuzz::finding("accepted table breaks its spec", s.name.c_str());
        }
        if (std::getenv("BG_FUZZ_VERBOSE")) std::fprintf(stderr, "accepted: %lld layers\n", (long long)hp.n_layer);
    } catch (const bg::Error& e) {
        bgfuzz::check_error_message(e.what(), "gguf: ", "model: ");
    }
    return 0;
}
