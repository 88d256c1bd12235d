#include "common/systemd.h"

#include <systemd/sd-daemon.h>

namespace pkb {

void NotifySystemd(const std::string& state) { sd_notify(/*unset_environment=*/0, state.c_str()); }

}  // namespace pkb
