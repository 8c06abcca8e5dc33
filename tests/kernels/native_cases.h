// What the native drivers (native_attention_driver.cpp, native_rescore_driver.cpp) share:
// reading a cases file's arrays in order, and failing with the driver's name.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

struct CaseReader {
  const std::vector<char>& bytes;
  size_t at = 0;
  template <class T>
  bool take(std::vector<T>* out, int64_t count) {
    out->resize(count);
    const size_t size = count * sizeof(T);
    if (at + size > bytes.size()) return false;
    std::copy(bytes.begin() + at, bytes.begin() + at + size, reinterpret_cast<char*>(out->data()));
    at += size;
    return true;
  }
};

inline int driver_failed(const char* driver, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", driver, message.c_str());
  return 1;
}
