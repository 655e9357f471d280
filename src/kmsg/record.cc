// Implements the kernel log record parser and the splitter of saved logs. Hand-written scanning
// (no regular expressions): it runs on every line the kernel logs, and on garbage it must fail
// fast with a reason, not backtrack.
#include "kmsg/record.h"

#include "common/strings.h"
#include "fmt/format.h"

namespace vigil::kmsg {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Shown(std::string_view text) { return Printable(text.substr(0, 60)); }

}  // namespace

std::string Unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size() && text[i + 1] == 'x') {
      const int high = HexDigit(text[i + 2]), low = HexDigit(text[i + 3]);
      if (high >= 0 && low >= 0) {
        out += static_cast<char>(high * 16 + low);
        i += 3;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

absl::StatusOr<Record> ParseRecord(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  const size_t header_end = text.find('\n');
  const std::string_view first = text.substr(0, header_end);
  const size_t semicolon = first.find(';');
  if (semicolon == std::string_view::npos) {
    return absl::InvalidArgumentError(
        fmt::format("not a kernel log record (no ';' after the header): '{}'", Shown(first)));
  }
  const std::string_view header = first.substr(0, semicolon);
  std::string_view fields[4];
  size_t count = 0, start = 0;
  for (size_t i = 0; i <= header.size() && count < 4; ++i) {
    if (i == header.size() || header[i] == ',') {
      fields[count++] = header.substr(start, i - start);
      start = i + 1;
    }
  }
  const std::optional<uint64_t> priority = count == 4 ? ParseUint64(fields[0]) : std::nullopt;
  const std::optional<uint64_t> sequence = count == 4 ? ParseUint64(fields[1]) : std::nullopt;
  const std::optional<uint64_t> timestamp = count == 4 ? ParseUint64(fields[2]) : std::nullopt;
  if (!priority || !sequence || !timestamp || fields[3].empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "not a kernel log record (the header is not PRIORITY,SEQUENCE,TIMESTAMP,FLAGS): '{}'",
        Shown(header)));
  }
  if (*priority > 8 * 1024 || *timestamp > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(fmt::format(
        "not a kernel log record (priority or time out of range): '{}'", Shown(header)));
  }
  Record record;
  record.facility = static_cast<int>(*priority >> 3);
  record.level = static_cast<int>(*priority & 7);
  record.sequence = *sequence;
  record.monotonic_us = static_cast<int64_t>(*timestamp);
  record.continued = fields[3][0] == 'c';
  record.message = Unescape(first.substr(semicolon + 1));
  if (header_end == std::string_view::npos) return record;
  std::string_view rest = text.substr(header_end + 1);
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (line.empty() || line[0] != ' ') {
      return absl::InvalidArgumentError(
          fmt::format("a kernel log record's continuation line does not start with a space: '{}'",
                      Shown(line)));
    }
    const size_t equals = line.find('=');
    if (equals == std::string_view::npos) continue;  // not a dictionary entry: ignored
    record.dictionary.emplace_back(std::string(line.substr(1, equals - 1)),
                                   Unescape(line.substr(equals + 1)));
  }
  return record;
}

void Splitter::Flush() {
  if (!record_.empty()) on_record_(record_);
  record_.clear();
}

void Splitter::Feed(std::string_view data) {
  while (!data.empty()) {
    const size_t newline = data.find('\n');
    const bool ended = newline != std::string_view::npos;
    const std::string_view piece = data.substr(0, ended ? newline : data.size());
    data = ended ? data.substr(newline + 1) : std::string_view();
    if (partial_.size() + piece.size() > max_record_) {
      // A line longer than any record: pass on what fits and drop the rest of the line.
      partial_.append(piece.substr(0, max_record_ - std::min(max_record_, partial_.size())));
      if (!ended) continue;
    } else {
      partial_.append(piece);
      if (!ended) continue;
    }
    // A whole line: a continuation of the record, or the start of the next one.
    if (!partial_.empty() && partial_[0] == ' ' && !record_.empty()) {
      if (record_.size() + partial_.size() + 1 <= max_record_) record_ += "\n" + partial_;
    } else {
      Flush();
      record_ = std::move(partial_);
    }
    partial_.clear();
  }
}

void Splitter::Pause() { Flush(); }

void Splitter::Finish() {
  if (!partial_.empty()) Feed("\n");
  Flush();
}

}  // namespace vigil::kmsg
