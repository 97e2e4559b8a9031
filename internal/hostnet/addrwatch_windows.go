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

var (
	addrWatchers   = map[chan struct{}]struct{}{}
	addrWatchersMu sync.Mutex
	addrCallbacks  struct {
		once           sync.Once
		address, route uintptr
	}
)

// notifyAddrWatchers wakes every watcher, without blocking the system's thread.
func notifyAddrWatchers() {
	addrWatchersMu.Lock()
	defer addrWatchersMu.Unlock()
	for c := range addrWatchers {
		select {
		case c <- struct{}{}:
		default: // a value is pending: the watcher looks again anyway
		}
	}
}

func makeAddrCallbacks() {
	addrCallbacks.once.Do(func() {
		// PUNICAST_IPADDRESS_CHANGE_CALLBACK: every change of a unicast address counts.
		addrCallbacks.address = windows.NewCallback(func(_ uintptr, _ *windows.MibUnicastIpAddressRow, _ uint32) uintptr {
			notifyAddrWatchers()
			return 0
		})
		// PIPFORWARD_CHANGE_CALLBACK: only removed routes count (see Interface.WatchAddresses).
		addrCallbacks.route = windows.NewCallback(func(_ uintptr, _ *windows.MibIpForwardRow2, notificationType uint32) uintptr {
			if notificationType == windows.MibDeleteInstance {
				notifyAddrWatchers()
			}
			return 0
		})
	})
}

// WatchAddresses registers for iphlpapi's unicast address and route change notifications of both
// IP families (AF_UNSPEC) until ctx ends.
func (h *ipHelper) WatchAddresses(ctx context.Context) (<-chan struct{}, error) {
	makeAddrCallbacks()
	var addrHandle, routeHandle windows.Handle
	if err := windows.NotifyUnicastIpAddressChange(windows.AF_UNSPEC, addrCallbacks.address, nil, false, &addrHandle); err != nil {
		return nil, fmt.Errorf("watching addresses: NotifyUnicastIpAddressChange: %w", err)
	}
	if err := windows.NotifyRouteChange2(windows.AF_UNSPEC, addrCallbacks.route, nil, false, &routeHandle); err != nil {
		_ = windows.CancelMibChangeNotify2(addrHandle)
		return nil, fmt.Errorf("watching routes: NotifyRouteChange2: %w", err)
	}
	wake := make(chan struct{}, 1)
	addrWatchersMu.Lock()
	addrWatchers[wake] = struct{}{}
	addrWatchersMu.Unlock()
	changed := make(chan struct{}, 1)
	go func() {
		defer close(changed)
		defer func() {
			// CancelMibChangeNotify2 returns once no callback of the registration runs.
			_ = windows.CancelMibChangeNotify2(routeHandle)
			_ = windows.CancelMibChangeNotify2(addrHandle)
			addrWatchersMu.Lock()
			delete(addrWatchers, wake)
			addrWatchersMu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}
	}()
	return changed, nil
}
