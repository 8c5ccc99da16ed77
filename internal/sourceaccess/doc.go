// Package sourceaccess is what the driver may read and what an admin runs when it may not: the
// driver's service accounts as --service-account names them (DriverAccount, checked by
// ParseDriverAccount) and the command that grants them read on one source (GrantReadHint), which
// every message about a source the driver may not read ends in.
//
// The contract: everything here is pure: it builds text from what it is given and asks no API
// server. It imports internal/share (a source's key, kind and resource), and nothing else of the
// driver's. The root and internal/sharestatus import it: the node plugin, the status controller
// and the admin's commands build one grant, so their messages never disagree.
package sourceaccess
