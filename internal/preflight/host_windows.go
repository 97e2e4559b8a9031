//go:build windows

package preflight

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/Microsoft/go-winio"
	ole "github.com/go-ole/go-ole"
	"github.com/go-ole/go-ole/oleutil"
	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/registry"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"

	"github.com/winnet-io/winnet/internal/hns"
)

// hostSource is empty on Windows: the node's own APIs answer.
const hostSource = ""

// DefaultContainerdConfig is where containerd for Windows reads its configuration.
const DefaultContainerdConfig = `C:\Program Files\containerd\config.toml`

// Registry keys the adapters read.
const (
	currentVersionKey = `SOFTWARE\Microsoft\Windows NT\CurrentVersion`
	controlKey        = `SYSTEM\CurrentControlSet\Control`
)

func platformName(Options) string { return "windows" }

// containerdDefaults are containerd's CNI directories on Windows without a configuration.
func containerdDefaults() (confDir, binDir string, ok bool) {
	return `C:\Program Files\containerd\cni\conf`, `C:\Program Files\containerd\cni\bin`, true
}

func defaultContainerdConfig(Options) (path, unavailable string) { return DefaultContainerdConfig, "" }

// gatherOS reads the build from the registry (HKLM\SOFTWARE\Microsoft\Windows NT\CurrentVersion:
// CurrentBuildNumber, UBR, ProductName, DisplayVersion or ReleaseId).
func gatherOS(context.Context) Fact[OSInfo] {
	info, err := ReadOSInfo()
	if err != nil {
		return Failed[OSInfo](err, hostSource)
	}
	return Known(info, hostSource)
}

// ReadOSInfo reads the Windows build from the registry.
func ReadOSInfo() (OSInfo, error) {
	k, err := registry.OpenKey(registry.LOCAL_MACHINE, currentVersionKey, registry.QUERY_VALUE)
	if err != nil {
		return OSInfo{}, fmt.Errorf(`opening HKLM\%s: %w`, currentVersionKey, err)
	}
	defer k.Close()
	var info OSInfo
	build, _, err := k.GetStringValue("CurrentBuildNumber")
	if err != nil {
		return OSInfo{}, fmt.Errorf(`reading HKLM\%s\CurrentBuildNumber: %w`, currentVersionKey, err)
	}
	if info.Build, err = strconv.Atoi(strings.TrimSpace(build)); err != nil {
		return OSInfo{}, fmt.Errorf(`HKLM\%s\CurrentBuildNumber is %q: %w`, currentVersionKey, build, err)
	}
	if ubr, _, err := k.GetIntegerValue("UBR"); err == nil {
		info.UBR = int(ubr)
	}
	info.ProductName, _, _ = k.GetStringValue("ProductName")
	if info.DisplayVersion, _, err = k.GetStringValue("DisplayVersion"); err != nil {
		info.DisplayVersion, _, _ = k.GetStringValue("ReleaseId") // before 20H2
	}
	return info, nil
}

// gatherFeatures asks WMI (root\cimv2 Win32_OptionalFeature, what Get-WindowsOptionalFeature
// reads) whether Containers and Microsoft-Hyper-V are enabled (InstallState 1).
func gatherFeatures(ctx context.Context) Fact[map[string]bool] {
	// A WMI call cannot be cancelled: past this, its answer is dropped.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	type result struct {
		m   map[string]bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := optionalFeatures([]string{ContainersFeature, HyperVFeature})
		done <- result{m, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return Failed[map[string]bool](r.err, hostSource)
		}
		return Known(r.m, hostSource)
	case <-ctx.Done():
		return Failed[map[string]bool](fmt.Errorf("WMI Win32_OptionalFeature: %w", ctx.Err()), hostSource)
	}
}

func optionalFeatures(names []string) (map[string]bool, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := ole.CoInitializeEx(0, ole.COINIT_MULTITHREADED); err == nil {
		defer ole.CoUninitialize()
	} else {
		var oleErr *ole.OleError
		if !errors.As(err, &oleErr) || (uint32(oleErr.Code()) != 0x00000001 && uint32(oleErr.Code()) != 0x80010106) {
			return nil, fmt.Errorf("initialising COM: %w", err)
		}
		if uint32(oleErr.Code()) == 0x00000001 {
			defer ole.CoUninitialize()
		}
	}
	unknown, err := oleutil.CreateObject("WbemScripting.SWbemLocator")
	if err != nil {
		return nil, fmt.Errorf("creating the SWbemLocator: %w", err)
	}
	defer unknown.Release()
	locator, err := unknown.QueryInterface(ole.IID_IDispatch)
	if err != nil {
		return nil, err
	}
	defer locator.Release()
	sv, err := oleutil.CallMethod(locator, "ConnectServer", ".", `root\cimv2`)
	if err != nil {
		return nil, fmt.Errorf(`connecting to WMI root\cimv2: %w`, err)
	}
	services := sv.ToIDispatch()
	defer services.Release()
	var where []string
	for _, n := range names {
		where = append(where, "Name = '"+n+"'") // constants, never input
	}
	rs, err := oleutil.CallMethod(services, "ExecQuery", "SELECT Name, InstallState FROM Win32_OptionalFeature WHERE "+strings.Join(where, " OR "))
	if err != nil {
		return nil, fmt.Errorf("querying Win32_OptionalFeature: %w", err)
	}
	set := rs.ToIDispatch()
	defer set.Release()
	out := map[string]bool{}
	for _, n := range names {
		out[n] = false
	}
	err = oleutil.ForEach(set, func(v *ole.VARIANT) error {
		item := v.ToIDispatch()
		defer item.Release()
		name, err := oleutil.GetProperty(item, "Name")
		if err != nil {
			return err
		}
		state, err := oleutil.GetProperty(item, "InstallState")
		if err != nil {
			return err
		}
		n, _ := state.Value().(int32)
		out[name.ToString()] = n == 1 // 1: Enabled
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading Win32_OptionalFeature: %w", err)
	}
	return out, nil
}

// gatherServices asks the service control manager for Open vSwitch's services.
func gatherServices(context.Context, Options) Fact[map[string]ServiceState] {
	out := map[string]ServiceState{}
	for _, name := range []string{OVSDBService, OVSVswitchdService} {
		s, err := QueryService(name)
		if err != nil {
			return Failed[map[string]ServiceState](err, hostSource)
		}
		out[name] = s
	}
	return Known(out, hostSource)
}

// QueryService asks the service control manager (OpenSCManager with SC_MANAGER_CONNECT,
// OpenService with SERVICE_QUERY_STATUS: no more than querying needs) for a service or driver.
func QueryService(name string) (ServiceState, error) {
	h, err := windows.OpenSCManager(nil, nil, windows.SC_MANAGER_CONNECT)
	if err != nil {
		return ServiceState{}, fmt.Errorf("connecting to the service control manager: %w", err)
	}
	defer windows.CloseServiceHandle(h)
	n, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return ServiceState{}, err
	}
	sh, err := windows.OpenService(h, n, windows.SERVICE_QUERY_STATUS)
	if errors.Is(err, windows.ERROR_SERVICE_DOES_NOT_EXIST) {
		return ServiceState{}, nil
	} else if err != nil {
		return ServiceState{}, fmt.Errorf("opening service %s: %w", name, err)
	}
	s := &mgr.Service{Name: name, Handle: sh}
	defer s.Close()
	st, err := s.Query()
	if err != nil {
		return ServiceState{}, fmt.Errorf("querying service %s: %w", name, err)
	}
	return ServiceState{Present: true, Running: st.State == svc.Running, State: stateName(st.State)}, nil
}

func stateName(s svc.State) string {
	switch s {
	case svc.Stopped:
		return "stopped"
	case svc.StartPending:
		return "starting"
	case svc.StopPending:
		return "stopping"
	case svc.Running:
		return "running"
	case svc.Paused:
		return "paused"
	}
	return fmt.Sprintf("state %d", s)
}

// gatherDriver asks the service control manager for the extension's driver (ovsext) and reads the
// boot's options (HKLM\SYSTEM\CurrentControlSet\Control SystemStartOptions) for TESTSIGNING.
func gatherDriver(context.Context) Fact[DriverInfo] {
	s, err := QueryService(OVSExtDriverService)
	if err != nil {
		return Failed[DriverInfo](err, hostSource)
	}
	ts, err := TestSigning()
	if err != nil {
		return Failed[DriverInfo](err, hostSource)
	}
	return Known(DriverInfo{Installed: s.Present, TestSigning: ts}, hostSource)
}

// TestSigning reports whether the running boot allows test-signed drivers: the boot loader's
// options the kernel records in HKLM\SYSTEM\CurrentControlSet\Control SystemStartOptions.
func TestSigning() (bool, error) {
	k, err := registry.OpenKey(registry.LOCAL_MACHINE, controlKey, registry.QUERY_VALUE)
	if err != nil {
		return false, fmt.Errorf(`opening HKLM\%s: %w`, controlKey, err)
	}
	defer k.Close()
	opts, _, err := k.GetStringValue("SystemStartOptions")
	if errors.Is(err, registry.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf(`reading HKLM\%s\SystemStartOptions: %w`, controlKey, err)
	}
	return strings.Contains(strings.ToUpper(opts), "TESTSIGNING"), nil
}

// gatherHNS asks HNS for winnet's network, the extension on its switch, HNS's version and its load
// balancers.
func gatherHNS(ctx context.Context, opts Options) Fact[HNSInfo] {
	info, err := hns.Inspect(ctx)
	if err != nil {
		return Failed[HNSInfo](err, hostSource)
	}
	h, err := hns.New(hns.Options{})
	if err != nil {
		return Failed[HNSInfo](err, hostSource)
	}
	out := HNSInfo{Version: info.Version, LoadBalancers: info.LoadBalancers}
	n, err := h.GetNetworkByName(ctx, opts.HNSNetwork)
	if errors.Is(err, hns.ErrNotFound) {
		return Known(out, hostSource)
	} else if err != nil {
		return Failed[HNSInfo](err, hostSource)
	}
	out.Network = n
	if out.ExtensionEnabled, err = h.OVSExtensionEnabled(ctx, n.ID); err != nil {
		return Failed[HNSInfo](err, hostSource)
	}
	return Known(out, hostSource)
}

// DefaultOVSRunDir is OVS for Windows' run directory.
const DefaultOVSRunDir = `C:\openvswitch\var\run\openvswitch`

// dialVswitchd connects to ovs-vswitchd's control pipe: OVS for Windows names it after the Unix
// socket's path "<rundir>/ovs-vswitchd.ctl" without its slashes, under \\.\pipe\
// (lib/stream-windows.c), as the agent derives the bridges' OpenFlow pipes.
func dialVswitchd(ctx context.Context, opts Options) (net.Conn, error) {
	dir := opts.OVSRunDir
	if dir == "" {
		dir = DefaultOVSRunDir
	}
	pipe := `\\.\pipe\` + strings.NewReplacer(`\`, "", "/", "").Replace(dir+"/"+OVSVswitchdService+".ctl")
	c, err := winio.DialPipeContext(ctx, pipe)
	if err != nil {
		return nil, fmt.Errorf("connecting to ovs-vswitchd's control pipe %s: %w", pipe, err)
	}
	return c, nil
}
