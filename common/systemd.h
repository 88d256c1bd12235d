// Readiness and stopping for systemd's Type=notify units (deploy/systemd/): a no-op when the
// binary was not started by systemd (no $NOTIFY_SOCKET).
#ifndef PKB_COMMON_SYSTEMD_H_
#define PKB_COMMON_SYSTEMD_H_

#include <string>

namespace pkb {

// Sends `state` ("READY=1", "STOPPING=1", "STATUS=...") to the service manager.
void NotifySystemd(const std::string& state);

}  // namespace pkb

#endif  // PKB_COMMON_SYSTEMD_H_
