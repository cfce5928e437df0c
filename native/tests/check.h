// A minimal test harness: CHECK records failures and keeps going, each test binary returns
// non-zero when any check failed. (No test framework is available offline.)
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace xrt_test {

inline int& failures() {
  static int n = 0;
  return n;
}

inline std::vector<std::pair<std::string, std::function<void()>>>& registry() {
  static std::vector<std::pair<std::string, std::function<void()>>> tests;
  return tests;
}

struct Register {
  Register(const char* name, std::function<void()> fn) { registry().emplace_back(name, fn); }
};

inline int run_all() {
  for (auto& [name, fn] : registry()) {
    const int before = failures();
    try {
      fn();
    } catch (const std::exception& e) {
      std::printf("  unexpected exception: %s\n", e.what());
      ++failures();
    }
    std::printf("%s %s\n", failures() == before ? "PASS" : "FAIL", name.c_str());
  }
  return failures() == 0 ? 0 : 1;
}

}  // namespace xrt_test

#define XRT_TEST(name)                                              \
  static void name();                                               \
  static ::xrt_test::Register name##_registration(#name, name);     \
  static void name()

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);   \
      ++::xrt_test::failures();                                                \
    }                                                                          \
  } while (0)

// Checks that `expr` throws `Type` whose message contains `fragment`.
#define CHECK_THROWS(Type, expr, fragment)                                                  \
  do {                                                                                      \
    bool xrt_thrown_ = false;                                                               \
    try {                                                                                   \
      (void)(expr);                                                                         \
    } catch (const Type& e) {                                                               \
      xrt_thrown_ = std::string(e.what()).find(fragment) != std::string::npos;              \
      if (!xrt_thrown_) std::printf("  message lacks '%s': %s\n", fragment, e.what());      \
    }                                                                                       \
    if (!xrt_thrown_) {                                                                     \
      std::printf("  %s:%d: %s did not throw " #Type "\n", __FILE__, __LINE__, #expr);      \
      ++::xrt_test::failures();                                                             \
    }                                                                                       \
  } while (0)

#define XRT_TEST_MAIN() \
  int main() { return ::xrt_test::run_all(); }
