package remotemcp

import "github.com/enclave-mcp/enclave/storage"

// RefreshSoon is refreshSoon, for tests: what a remote's
// notifications/tools/list_changed starts.
func (s *Service) RefreshSoon(o storage.Owner, server string) { s.refreshSoon(o, server) }
