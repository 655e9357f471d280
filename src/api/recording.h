// A flight recording: what one GPU did around the moment its verdict turned FAIL — every field's
// samples over the window before and the time after, the GPU's incidents and the engine's
// identity — as the engine writes it to its state dir and as `vigil recordings` and
// `vigil history --recording` read it back, with or without an engine (after the reboot).
//
// File format, version 1: a first line "VIGILREC 1 <header bytes> <header crc32> <body bytes>",
// then the header (JSON: identity, trigger, window, incidents — what a listing needs), then the
// body (gzip of JSON: the series), whose gzip trailer checks it. Anything cut short, changed or
// of another version is refused with what is wrong.
// Pure functions and plain structs; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fields/value.h"

namespace vigil {

inline constexpr std::string_view kRecordingSuffix = ".vrec";
inline constexpr int kRecordingVersion = 1;

struct RecordingSample {
  uint64_t seq = 0;
  int64_t time_us = 0;
  FieldValue value;
};

struct RecordingSeries {
  FieldId field = 0;
  std::string name;  // DCGM_FI_*
  FieldType type = FieldType::kInt64;
  std::vector<RecordingSample> samples;
};

struct RecordingIncident {
  std::string system, status, code, message, action;
  int64_t first_seen_us = 0, last_seen_us = 0;
  uint64_t count = 0;
  bool injected = false;
};

struct Recording {
  std::string id;  // "20261201T213512Z-gpu2-s901": the trigger's time, GPU and tick
  std::string node_name, engine_instance, engine_version, backend;
  uint32_t gpu = 0;
  std::string uuid, gpu_name, pci_bus_id, serial;
  uint64_t trigger_seq = 0;
  int64_t trigger_time_us = 0;
  std::string trigger_summary;  // why the verdict turned FAIL
  int64_t window_start_us = 0, window_end_us = 0;
  // False while the time after the trigger is still being recorded (or the engine stopped
  // before it ended): the file then holds the window before and what came after so far.
  bool complete = false;
  int64_t written_us = 0;
  std::vector<RecordingIncident> incidents;
  std::vector<RecordingSeries> series;  // empty when only the header was read
};

// The file's bytes.
std::string EncodeRecording(const Recording& recording);
// DataLoss (cut short, corrupted) or InvalidArgument (not a recording, another version), with
// what is wrong. `header_only`: the series are not read (a listing).
absl::StatusOr<Recording> DecodeRecording(std::string_view bytes, bool header_only = false);

// The id's time part: 20261201T213512Z.
std::string RecordingTimeId(int64_t time_us);

}  // namespace vigil
