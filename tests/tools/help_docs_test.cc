// What psrun prints and what the docs say agree: every flag `psrun --help` lists has its row in
// docs/tools.md's psrun table and the other way round, and `psrun --help-env` and the table of
// docs/environment.md list the same variables with the same defaults and readers. A failure
// names each flag or variable and where it is missing, so that a new flag or variable without its
// documentation (or a documented one that is gone) is found at once.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Everything `command` writes to stdout, and its exit status.
std::pair<std::string, int> output_of(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return {out, -1};
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;)
    out.append(buf, n);
  return {out, ::pclose(p)};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The cells of a markdown table row ("| a | b |" -> {"a", "b"}), trimmed; empty for other lines.
// An escaped bar (\|) stays inside its cell.
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  if (line.size() < 2 || line[0] != '|') return cells;
  std::string cell;
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      const auto b = cell.find_first_not_of(' ');
      const auto e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

// The flags named in `text`: -x and --long-name, not inside a word.
std::set<std::string> flags_in(const std::string& text) {
  static const std::regex flag(R"((?:^|[^\w-])(--?[A-Za-z][A-Za-z0-9-]*))");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), flag); it != std::sregex_iterator();
       ++it)
    out.insert((*it)[1]);
  return out;
}

// The flags of `psrun --help`: the option lines ("  -n,--workers INT ...": two spaces, then the
// names before the first space). --help itself is left out.
std::set<std::string> help_flags() {
  auto [out, status] = output_of(PSRUN_PATH " --help");
  EXPECT_EQ(status, 0) << out;
  static const std::regex option(R"(^  (-[^ ]+))");
  std::set<std::string> flags;
  for (const auto& line : lines_of(out)) {
    std::smatch m;
    if (!std::regex_search(line, m, option)) continue;
    for (const auto& f : flags_in(m[1].str()))
      flags.insert(f);
  }
  flags.erase("-h");
  flags.erase("--help");
  return flags;
}

// The flags in the first column of the psrun table of docs/tools.md (the section "## psrun" up
// to the next "## ").
std::set<std::string> documented_flags() {
  const std::string doc = read_text(PSRT_SOURCE_DIR "/docs/tools.md");
  const auto begin = doc.find("\n## psrun\n");
  EXPECT_NE(begin, std::string::npos) << "docs/tools.md has no '## psrun' section";
  const auto end = doc.find("\n## ", begin + 1);
  std::set<std::string> flags;
  for (const auto& line : lines_of(doc.substr(begin, end - begin))) {
    const auto cells = cells_of(line);
    if (cells.size() < 3 || cells[0] == "flag" || cells[0].starts_with("---")) continue;
    for (const auto& f : flags_in(cells[0]))
      flags.insert(f);
  }
  return flags;
}

std::string list(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names)
    out += "  " + n + "\n";
  return out;
}

TEST(PsrunHelp, ListsTheFlagsOfDocsTools) {
  const auto help = help_flags();
  const auto docs = documented_flags();
  ASSERT_GT(help.size(), 30u) << "psrun --help was not parsed";
  ASSERT_GT(docs.size(), 30u) << "the psrun table of docs/tools.md was not parsed";
  std::set<std::string> undocumented, not_in_help;
  for (const auto& f : help)
    if (!docs.count(f)) undocumented.insert(f);
  for (const auto& f : docs)
    if (!help.count(f)) not_in_help.insert(f);
  EXPECT_TRUE(undocumented.empty())
      << "flags psrun --help lists without a row in the psrun table of docs/tools.md (add one, "
         "or a name to an existing row's first column):\n"
      << list(undocumented);
  EXPECT_TRUE(not_in_help.empty())
      << "flags docs/tools.md's psrun table names that psrun --help does not list (add the "
         "flag's help text in tools/psrun, or remove the row):\n"
      << list(not_in_help);
}

struct EnvRow {
  std::string fallback;  // "" = none
  std::string readers;
};

// `psrun --help-env`: "NAME DEFAULT READERS MEANING", DEFAULT "-" for none; READERS is matched
// as the text that follows DEFAULT (it may hold spaces), so it is kept whole with the meaning.
std::map<std::string, EnvRow> help_env() {
  auto [out, status] = output_of(PSRUN_PATH " --help-env");
  EXPECT_EQ(status, 0) << out;
  static const std::regex row(R"(^(PSRT_[A-Z0-9_]+) +([^ ]+) +(.*)$)");
  std::map<std::string, EnvRow> vars;
  for (const auto& line : lines_of(out)) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    vars[m[1]] = {m[2] == "-" ? "" : m[2].str(), m[3]};
  }
  return vars;
}

// The rows of docs/environment.md whose variable is one PSRT_* name in backquotes.
std::map<std::string, EnvRow> documented_env() {
  const std::string doc = read_text(PSRT_SOURCE_DIR "/docs/environment.md");
  static const std::regex name(R"(^`(PSRT_[A-Z0-9_]+)`$)");
  std::map<std::string, EnvRow> vars;
  for (const auto& line : lines_of(doc)) {
    const auto cells = cells_of(line);
    std::smatch m;
    if (cells.size() < 4 || !std::regex_match(cells[0], m, name)) continue;
    std::string fallback = cells[1];
    if (fallback.size() >= 2 && fallback.front() == '`' && fallback.back() == '`')
      fallback = fallback.substr(1, fallback.size() - 2);
    vars[m[1]] = {fallback, cells[2]};
  }
  return vars;
}

TEST(PsrunHelpEnv, AgreesWithDocsEnvironment) {
  const auto help = help_env();
  const auto docs = documented_env();
  ASSERT_GT(help.size(), 30u) << "psrun --help-env was not parsed";
  ASSERT_GT(docs.size(), 30u) << "the table of docs/environment.md was not parsed";
  std::set<std::string> undocumented, not_in_help;
  std::string differ;
  for (const auto& [var, row] : help) {
    auto d = docs.find(var);
    if (d == docs.end()) {
      undocumented.insert(var);
      continue;
    }
    if (d->second.fallback != row.fallback)
      differ += "  " + var + ": default '" + row.fallback + "' in psrun --help-env, '" +
                d->second.fallback + "' in docs/environment.md\n";
    if (!row.readers.starts_with(d->second.readers + " "))
      differ += "  " + var + ": read by '" + d->second.readers +
                "' in docs/environment.md, but psrun --help-env says '" + row.readers + "'\n";
  }
  for (const auto& [var, row] : docs)
    if (!help.count(var)) not_in_help.insert(var);
  EXPECT_TRUE(undocumented.empty())
      << "variables of psrun --help-env (runtime/env_contract.cc) without a row in "
         "docs/environment.md:\n"
      << list(undocumented);
  EXPECT_TRUE(not_in_help.empty())
      << "variables docs/environment.md lists that psrun --help-env does not (declare them in "
         "runtime/env_contract.cc, or remove the row):\n"
      << list(not_in_help);
  EXPECT_TRUE(differ.empty()) << "psrun --help-env and docs/environment.md disagree:\n" << differ;
}

}  // namespace
