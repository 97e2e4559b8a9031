package openflow

// Hold takes the bridge's lock, so that Syncs queue behind it, and returns its release.
func (b *Bridge) Hold() (release func()) {
	b.mu.Lock()
	return b.mu.Unlock
}

// Queued is the number of Syncs waiting for the bridge's lock.
func (b *Bridge) Queued() int { return b.syncs.Len() }

// Bundles is the number of bundles the switch committed.
func (b *Bridge) Bundles() uint64 { return b.bundles.Load() }

// BundleDials is the number of connections the bridge opened for bundles.
func (b *Bridge) BundleDials() uint64 { return b.bundleConns.dials.Load() }
