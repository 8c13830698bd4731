// A nlohmann::json kept behind a pointer, so that a header can hold one as a member with only
// <nlohmann/json_fwd.hpp> (json.hpp costs every file that includes it seconds of compile time).
// It copies deeply, like the json itself, and is never empty: a new one holds null. Read it
// with * and -> in .cpp files that include <nlohmann/json.hpp>.
#pragma once

#include <memory>

#include <nlohmann/json_fwd.hpp>

namespace bgh {

class JsonValue {
public:
    JsonValue();
    JsonValue(const nlohmann::json& j);  // NOLINT: implicit, as assigning a json is
    JsonValue(const JsonValue& o);
    JsonValue& operator=(const JsonValue& o);
    ~JsonValue();

    nlohmann::json& operator*() { return *p_; }
    const nlohmann::json& operator*() const { return *p_; }
    nlohmann::json* operator->() { return p_.get(); }
    const nlohmann::json* operator->() const { return p_.get(); }

private:
    std::unique_ptr<nlohmann::json> p_;
};

}  // namespace bgh
