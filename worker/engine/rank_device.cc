#include "worker/engine/rank_device.h"

#include <utility>

namespace pkb {
namespace {

class HostMoves : public RankDevice::StagedMoves {
 public:
  explicit HostMoves(std::vector<PackedMove> packed) : packed_(std::move(packed)) {}
  absl::Status Run() override {
    RunPackedOnHost(packed_);
    return absl::OkStatus();
  }

 private:
  std::vector<PackedMove> packed_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RankDevice::StagedMoves>> RankDevice::StageMoves(
    const std::vector<ByteMove>& moves) {
  PKB_ASSIGN_OR_RETURN(std::vector<PackedMove> packed, PackMoves(moves));
  return std::make_unique<HostMoves>(std::move(packed));
}

}  // namespace pkb
