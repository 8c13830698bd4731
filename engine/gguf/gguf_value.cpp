#include "gguf/gguf.h"

#include <utility>

namespace bg::gguf {

uint64_t scalar_bytes(ValueType t) {
    switch (t) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::BOOL: return 1;
        case ValueType::UINT16:
        case ValueType::INT16: return 2;
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::FLOAT32: return 4;
        case ValueType::UINT64:
        case ValueType::INT64:
        case ValueType::FLOAT64: return 8;
        case ValueType::STRING:
        case ValueType::ARRAY: break;
    }
    return 0;
}

const char* value_type_name(ValueType t) {
    switch (t) {
        case ValueType::UINT8: return "uint8";
        case ValueType::INT8: return "int8";
        case ValueType::UINT16: return "uint16";
        case ValueType::INT16: return "int16";
        case ValueType::UINT32: return "uint32";
        case ValueType::INT32: return "int32";
        case ValueType::FLOAT32: return "float32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::UINT64: return "uint64";
        case ValueType::INT64: return "int64";
        case ValueType::FLOAT64: return "float64";
    }
    return "unknown";
}

static Value unsigned_value(ValueType t, uint64_t v) {
    Value out;
    out.type = t;
    out.u = v;
    return out;
}

static Value signed_value(ValueType t, int64_t v) {
    Value out;
    out.type = t;
    out.i = v;
    return out;
}

static Value float_value(ValueType t, double v) {
    Value out;
    out.type = t;
    out.f = v;
    return out;
}

Value Value::u8(uint8_t v) { return unsigned_value(ValueType::UINT8, v); }
Value Value::u16(uint16_t v) { return unsigned_value(ValueType::UINT16, v); }
Value Value::u32(uint32_t v) { return unsigned_value(ValueType::UINT32, v); }
Value Value::u64(uint64_t v) { return unsigned_value(ValueType::UINT64, v); }
Value Value::i8(int8_t v) { return signed_value(ValueType::INT8, v); }
Value Value::i16(int16_t v) { return signed_value(ValueType::INT16, v); }
Value Value::i32(int32_t v) { return signed_value(ValueType::INT32, v); }
Value Value::i64(int64_t v) { return signed_value(ValueType::INT64, v); }
Value Value::f32(float v) { return float_value(ValueType::FLOAT32, v); }
Value Value::f64(double v) { return float_value(ValueType::FLOAT64, v); }
Value Value::boolean(bool v) { return unsigned_value(ValueType::BOOL, v ? 1 : 0); }

Value Value::str(std::string v) {
    Value out;
    out.type = ValueType::STRING;
    out.s = std::move(v);
    return out;
}

Value Value::array(ValueType elem_type, std::vector<Value> items) {
    Value out;
    out.type = ValueType::ARRAY;
    out.elem_type = elem_type;
    out.items = std::move(items);
    return out;
}

template <class T, class Make>
static Value array_of(ValueType elem_type, const std::vector<T>& v, Make make) {
    std::vector<Value> items;
    items.reserve(v.size());
    for (const T& x : v) items.push_back(make(x));
    return Value::array(elem_type, std::move(items));
}

Value Value::array_u64(const std::vector<uint64_t>& v) {
    return array_of(ValueType::UINT64, v, [](uint64_t x) { return Value::u64(x); });
}
Value Value::array_u32(const std::vector<uint32_t>& v) {
    return array_of(ValueType::UINT32, v, [](uint32_t x) { return Value::u32(x); });
}
Value Value::array_i32(const std::vector<int32_t>& v) {
    return array_of(ValueType::INT32, v, [](int32_t x) { return Value::i32(x); });
}
Value Value::array_f32(const std::vector<float>& v) {
    return array_of(ValueType::FLOAT32, v, [](float x) { return Value::f32(x); });
}
Value Value::array_str(const std::vector<std::string>& v) {
    return array_of(ValueType::STRING, v, [](const std::string& x) { return Value::str(x); });
}

// Only the field that the type uses takes part, so two values that differ in a stale unused
// field (e.g. a leftover `s` on an integer) still compare equal.
bool Value::operator==(const Value& o) const {
    if (type != o.type) return false;
    switch (type) {
        case ValueType::UINT8:
        case ValueType::UINT16:
        case ValueType::UINT32:
        case ValueType::UINT64:
        case ValueType::BOOL: return u == o.u;
        case ValueType::INT8:
        case ValueType::INT16:
        case ValueType::INT32:
        case ValueType::INT64: return i == o.i;
        case ValueType::FLOAT32:
        case ValueType::FLOAT64: return f == o.f;
        case ValueType::STRING: return s == o.s;
        case ValueType::ARRAY: return elem_type == o.elem_type && items == o.items;
    }
    return false;
}

}  // namespace bg::gguf
