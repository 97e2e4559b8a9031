package packettrace

// SetTagCount lowers the number of trace tags, for tests that run short of them.
func SetTagCount(r *Reconciler, n int32) { r.tagCount = n }
