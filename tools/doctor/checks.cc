#include "tools/doctor/checks.h"

#include <cstdio>

namespace osprey::tools::doctor {

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kOk: return "ok";
    case Verdict::kWarn: return "warn";
    case Verdict::kFail: return "fail";
    case Verdict::kSkip: return "skip";
  }
  return "?";
}

void DoctorReport::Add(std::string group, std::string name, Verdict v, std::string found,
                       std::string fix) {
  checks_.push_back({std::move(group), std::move(name), v, std::move(found), std::move(fix)});
  details_.emplace_back();
}

void DoctorReport::AddDetail(std::string line) {
  if (details_.empty()) return;
  details_.back().push_back(std::move(line));
}

int DoctorReport::failures() const {
  int n = 0;
  for (const Check& c : checks_) n += c.verdict == Verdict::kFail;
  return n;
}

std::string DoctorReport::Text() const {
  std::string out, group;
  int counts[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < checks_.size(); ++i) {
    const Check& c = checks_[i];
    ++counts[static_cast<int>(c.verdict)];
    if (c.group != group) {
      group = c.group;
      out += group + ":\n";
    }
    char buf[96];
    std::snprintf(buf, sizeof(buf), "  [%-4s] %-24s ", VerdictName(c.verdict), c.name.c_str());
    out += buf + c.found + "\n";
    for (const std::string& d : details_[i]) out += "           " + d + "\n";
    if (!c.fix.empty() && c.verdict != Verdict::kOk) out += "           fix: " + c.fix + "\n";
  }
  char buf[128];
  std::snprintf(buf, sizeof(buf), "summary: %d ok, %d warn, %d fail, %d skipped\n", counts[0],
                counts[1], counts[2], counts[3]);
  return out + buf;
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

std::string DoctorReport::Json() const {
  std::string out = "{\"checks\": [";
  int counts[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < checks_.size(); ++i) {
    const Check& c = checks_[i];
    ++counts[static_cast<int>(c.verdict)];
    out += std::string(i == 0 ? "" : ", ") + "{\"group\": \"" + JsonEscape(c.group) +
           "\", \"name\": \"" + JsonEscape(c.name) + "\", \"verdict\": \"" +
           VerdictName(c.verdict) + "\", \"found\": \"" + JsonEscape(c.found) + "\", \"fix\": \"" +
           JsonEscape(c.fix) + "\", \"details\": [";
    for (size_t j = 0; j < details_[i].size(); ++j) {
      out += std::string(j == 0 ? "" : ", ") + "\"" + JsonEscape(details_[i][j]) + "\"";
    }
    out += "]}";
  }
  out += "], \"summary\": {\"ok\": " + std::to_string(counts[0]) + ", \"warn\": " +
         std::to_string(counts[1]) + ", \"fail\": " + std::to_string(counts[2]) +
         ", \"skip\": " + std::to_string(counts[3]) + "}";
  if (!network_json_.empty()) out += ", \"network\": " + network_json_;
  return out + "}\n";
}

}  // namespace osprey::tools::doctor
