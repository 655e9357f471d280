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

}  // namespace vigil
