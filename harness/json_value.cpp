#include "json_value.h"

#include <nlohmann/json.hpp>

namespace bgh {

JsonValue::JsonValue() : p_(std::make_unique<nlohmann::json>()) {}
JsonValue::JsonValue(const nlohmann::json& j) : p_(std::make_unique<nlohmann::json>(j)) {}
JsonValue::JsonValue(const JsonValue& o) : p_(std::make_unique<nlohmann::json>(*o.p_)) {}
JsonValue& JsonValue::operator=(const JsonValue& o) {
    *p_ = *o.p_;
    return *this;
}
JsonValue::~JsonValue() = default;

}  // namespace bgh
