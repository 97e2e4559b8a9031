//go:build windows && (amd64 || arm64)

package hostnet

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sys/windows"
)

// Windows tells of address and route changes through iphlpapi's change notifications: the
// callback registered with NotifyUnicastIpAddressChange or NotifyRouteChange2 runs on a thread of
// the system's pool for every change, with the row and the kind of change (MibAddInstance,
// MibDeleteInstance, MibParameterNotification), until CancelMibChangeNotify2.
//
// windows.NewCallback makes a callback that lives as long as the process, and a process has a
// bounded number of them: the two callbacks are made once and tell every watcher of the process
// (callerContext stays nil: Go memory is not handed to the system to keep).

// addrWatcher is one WatchAddresses registration: wake receives a value for a change on one of
// its links.
type addrWatcher struct {
	links func() []int
	wake  chan struct{}
}

var (
	addrWatchers   = map[*addrWatcher]struct{}{}
	addrWatchersMu sync.Mutex
	addrCallbacks  struct {
		once           sync.Once
		address, route uintptr
	}
)

// notifyAddrWatchers wakes every watcher of the link (0: not known), without blocking the
// system's thread.
func notifyAddrWatchers(index uint32) {
	addrWatchersMu.Lock()
	defer addrWatchersMu.Unlock()
	for w := range addrWatchers {
		if !watchedLink(w.links, int(index)) {
			continue
		}
		select {
		case w.wake <- struct{}{}:
		default: // a value is pending: the watcher looks again anyway
		}
	}
}

func makeAddrCallbacks() {
	addrCallbacks.once.Do(func() {
		// PUNICAST_IPADDRESS_CHANGE_CALLBACK: every change of a unicast address counts.
		// The row is nil for MibInitialNotification.
		addrCallbacks.address = windows.NewCallback(func(_ uintptr, row *windows.MibUnicastIpAddressRow, _ uint32) uintptr {
			var index uint32
			if row != nil {
				index = row.InterfaceIndex
			}
			notifyAddrWatchers(index)
			return 0
		})
		// PIPFORWARD_CHANGE_CALLBACK: only removed routes count (see Interface.WatchAddresses).
		addrCallbacks.route = windows.NewCallback(func(_ uintptr, row *windows.MibIpForwardRow2, notificationType uint32) uintptr {
			if notificationType == windows.MibDeleteInstance {
				var index uint32
				if row != nil {
					index = row.InterfaceIndex
				}
				notifyAddrWatchers(index)
			}
			return 0
		})
	})
}

// WatchAddresses registers for iphlpapi's unicast address and route change notifications of both
// IP families (AF_UNSPEC) until ctx ends.
func (h *ipHelper) WatchAddresses(ctx context.Context, links func() []int) (<-chan struct{}, error) {
	makeAddrCallbacks()
	var addrHandle, routeHandle windows.Handle
	if err := windows.NotifyUnicastIpAddressChange(windows.AF_UNSPEC, addrCallbacks.address, nil, false, &addrHandle); err != nil {
		return nil, fmt.Errorf("watching addresses: NotifyUnicastIpAddressChange: %w", err)
	}
	if err := windows.NotifyRouteChange2(windows.AF_UNSPEC, addrCallbacks.route, nil, false, &routeHandle); err != nil {
		_ = windows.CancelMibChangeNotify2(addrHandle)
		return nil, fmt.Errorf("watching routes: NotifyRouteChange2: %w", err)
	}
	w := &addrWatcher{links: links, wake: make(chan struct{}, 1)}
	addrWatchersMu.Lock()
	addrWatchers[w] = struct{}{}
	addrWatchersMu.Unlock()
	changed := make(chan struct{}, 1)
	go func() {
		defer close(changed)
		defer func() {
			// CancelMibChangeNotify2 returns once no callback of the registration runs.
			_ = windows.CancelMibChangeNotify2(routeHandle)
			_ = windows.CancelMibChangeNotify2(addrHandle)
			addrWatchersMu.Lock()
			delete(addrWatchers, w)
			addrWatchersMu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}
	}()
	return changed, nil
}
