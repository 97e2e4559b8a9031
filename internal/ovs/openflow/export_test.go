package openflow

// Hold takes the bridge's lock, so that Syncs queue behind it, and returns its release.
func (b *Bridge) Hold() (release func()) {
	b.mu.Lock()
	return b.mu.Unlock
}

// BundleDials is the number of connections the bridge opened for bundles.
func (b *Bridge) BundleDials() uint64 { return b.bundleConns.dials.Load() }
