package workspaces

// SetFlushFault makes FlushJobs fail with f's error (nil: no fault).
func SetFlushFault(f func(id string) error) { flushFault = f }
