//go:build !linux && !windows

package openflow

// DefaultAddress is empty where winnet does not run; pass Options.Address.
func DefaultAddress(string) string { return "" }
