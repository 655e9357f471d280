// Implements FieldLayout.
#include "sampling/snapshot.h"

#include "common/check.h"

namespace vigil {

FieldLayout::FieldLayout(std::vector<const FieldInfo*> fields) : fields_(std::move(fields)) {
  for (size_t i = 0; i < fields_.size(); ++i) {
    VIGIL_CHECK(index_.emplace(fields_[i]->id, i).second);
  }
}

std::optional<size_t> FieldLayout::IndexOf(FieldId id) const {
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

MigTable::MigTable(uint64_t generation, std::vector<MigState> states)
    : generation(generation), gpus(std::move(states)) {
  for (uint32_t gpu = 0; gpu < gpus.size(); ++gpu) {
    first_row.push_back(rows.size());
    for (size_t position = 0; position < gpus[gpu].instances.size(); ++position) {
      rows.push_back({gpu, position});
    }
  }
}

std::optional<size_t> MigTable::RowOf(uint32_t gpu, uint32_t gpu_instance_id) const {
  if (gpu >= gpus.size()) return std::nullopt;
  for (size_t position = 0; position < gpus[gpu].instances.size(); ++position) {
    if (gpus[gpu].instances[position].gpu_instance_id == gpu_instance_id) {
      return first_row[gpu] + position;
    }
  }
  return std::nullopt;
}

}  // namespace vigil
