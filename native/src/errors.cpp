#include "xpuruntime/errors.h"

#include <algorithm>
#include <cctype>

namespace xrt {

namespace {
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Same first letter and every letter of `name` in order in `choice`.
bool is_abbreviation(const std::string& name, const std::string& choice) {
  if (name.size() < 3 || name.size() >= choice.size()) return false;
  auto lower = [](char c) { return std::tolower(static_cast<unsigned char>(c)); };
  if (lower(name[0]) != lower(choice[0])) return false;
  std::size_t j = 0;
  for (char c : choice) {
    if (j < name.size() && lower(c) == lower(name[j])) ++j;
  }
  return j == name.size();
}
}  // namespace

std::string closest_name(const std::string& name, const std::vector<std::string>& choices) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, name.size() / 3) + 1;
  for (const auto& choice : choices) {
    // An abbreviation ("onnxrt" of "onnxruntime") is as good a hint as a one-letter typo.
    const std::size_t d = is_abbreviation(name, choice) ? 1 : edit_distance(name, choice);
    if (d < best_distance) {
      best_distance = d;
      best = choice;
    }
  }
  return best;
}

}  // namespace xrt
