//go:build windows && (amd64 || arm64)

package hostnet

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	ole "github.com/go-ole/go-ole"
	"github.com/go-ole/go-ole/oleutil"
)

// WMI is used only for what iphlpapi has no call for: renaming an interface (MSFT_NetAdapter.Rename),
// switching an interface's IPv4 configuration to DHCP (Win32_NetworkAdapterConfiguration.EnableDHCP)
// and, on Windows older than build 19041, which lacks SetInterfaceDnsSettings, setting its IPv4 DNS
// servers (Win32_NetworkAdapterConfiguration.SetDNSServerSearchOrder); and the host's NAT of its own
// NodePorts (MSFT_NetNat and MSFT_NetNatStaticMapping instances, nodeport_windows.go).
//
// It is called in process through COM rather than through PowerShell: the cmdlets that do the same
// (Rename-NetAdapter, Set-NetIPInterface -Dhcp, Set-DnsClientServerAddress) are themselves wrappers
// over these CIM classes, and going through them would cost a powershell.exe start per call (a second
// or more, far more on a loaded node), depend on the host's execution policy and module path, and turn
// the provider's typed errors into text to parse. DESIGN.md: "WMI only where iphlpapi has no call, never
// PowerShell".

// WMI namespaces of the classes used.
const (
	wmiStandardCimv2 = `root\StandardCimv2` // MSFT_NetAdapter, MSFT_NetNat, MSFT_NetNatStaticMapping
	wmiCimv2         = `root\cimv2`         // Win32_NetworkAdapterConfiguration
)

// HRESULTs CoInitializeEx answers for a thread COM is already initialised on.
const (
	hresultSFalse          = 0x00000001 // S_FALSE: initialised before, in the same apartment model
	hresultRPCEChangedMode = 0x80010106 // RPC_E_CHANGED_MODE: initialised before, as a single-threaded apartment
)

// wmiCall is a call of a WMI method on the instances of a class that a WQL condition selects.
type wmiCall struct {
	// Namespace is the WMI namespace of the class, such as root\StandardCimv2.
	Namespace string
	// Class is the WMI class, such as MSFT_NetAdapter.
	Class string
	// Where is the WQL condition selecting the instances, such as "InterfaceIndex = 12". Only
	// numbers are formatted into it: values the caller does not control go in Params.
	Where string
	// Method is the method to call on each instance.
	Method string
	// Params are the method's in-parameters; a method without parameters has none.
	Params []wmiParam
}

// wmiParam is a named in-parameter of a WMI method: a string, []string, bool or integer.
type wmiParam struct {
	Name  string
	Value any
}

func (c wmiCall) String() string {
	return fmt.Sprintf("%s.%s (WMI %s, where %s)", c.Class, c.Method, c.Namespace, c.Where)
}

// Invoke calls the method on every instance the condition selects and returns the ReturnValue
// of each, in the order WMI lists the instances. A condition that selects no instance is an
// error wrapping ErrNotFound.
//
// COM is initialised on a goroutine locked to its OS thread for the length of the call. A WMI
// call cannot be cancelled: a context that ends first returns its error at once and the call
// completes in the background.
func (c wmiCall) Invoke(ctx context.Context) ([]uint32, error) {
	type result struct {
		returns []uint32
		err     error
	}
	done := make(chan result, 1)
	go func() {
		returns, err := c.run()
		done <- result{returns: returns, err: err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("calling %s: %w", c, r.err)
		}
		return r.returns, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("calling %s: %w", c, ctx.Err())
	}
}

// run makes the call on the current goroutine (see withWMI).
func (c wmiCall) run() ([]uint32, error) {
	var returns []uint32
	err := withWMI(c.Namespace, func(services *ole.IDispatch) error {
		var err error
		returns, err = c.runOn(services)
		return err
	})
	return returns, err
}

// withWMI connects to a WMI namespace on the current goroutine, which it locks to its OS thread
// with COM initialised for the length of fn, and calls fn with the namespace's SWbemServices.
func withWMI(namespace string, fn func(services *ole.IDispatch) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := ole.CoInitializeEx(0, ole.COINIT_MULTITHREADED); err != nil {
		var oleErr *ole.OleError
		switch {
		case errors.As(err, &oleErr) && uint32(oleErr.Code()) == hresultSFalse:
			// Initialised before on this thread: the call still counts and is balanced.
			defer ole.CoUninitialize()
		case errors.As(err, &oleErr) && uint32(oleErr.Code()) == hresultRPCEChangedMode:
			// Someone made this thread a single-threaded apartment, which WMI also works in; the
			// initialisation is theirs to undo.
		default:
			return fmt.Errorf("initialising COM: %w", err)
		}
	} else {
		defer ole.CoUninitialize()
	}

	unknown, err := oleutil.CreateObject("WbemScripting.SWbemLocator")
	if err != nil {
		return fmt.Errorf("creating the SWbemLocator: %w", err)
	}
	defer unknown.Release()
	locator, err := unknown.QueryInterface(ole.IID_IDispatch)
	if err != nil {
		return fmt.Errorf("querying the SWbemLocator's IDispatch: %w", err)
	}
	defer locator.Release()
	services, err := toDispatch(oleutil.CallMethod(locator, "ConnectServer", ".", namespace))
	if err != nil {
		return fmt.Errorf("connecting to namespace %s: %w", namespace, err)
	}
	defer services.Release()
	return fn(services)
}

// runOn makes the call through the namespace's SWbemServices.
func (c wmiCall) runOn(services *ole.IDispatch) ([]uint32, error) {
	set, err := toDispatch(oleutil.CallMethod(services, "ExecQuery", "SELECT * FROM "+c.Class+" WHERE "+c.Where))
	if err != nil {
		return nil, fmt.Errorf("querying the instances: %w", err)
	}
	defer set.Release()
	countVar, err := oleutil.GetProperty(set, "Count")
	if err != nil {
		return nil, fmt.Errorf("counting the instances: %w", err)
	}
	count, ok := toUint32(countVar.Value())
	_ = countVar.Clear()
	if !ok {
		return nil, fmt.Errorf("counting the instances: unexpected Count of VARIANT type %d", countVar.VT)
	}
	if count == 0 {
		return nil, fmt.Errorf("no instance: %w", ErrNotFound)
	}

	var in *ole.IDispatch
	if len(c.Params) > 0 {
		if in, err = c.inParameters(services); err != nil {
			return nil, err
		}
		defer in.Release()
	}
	returns := make([]uint32, 0, count)
	for i := range count {
		rv, err := c.execOn(set, int32(i), in)
		if err != nil {
			return nil, err
		}
		returns = append(returns, rv)
	}
	return returns, nil
}

// inParameters spawns an instance of the method's in-parameters class and sets c.Params on it.
func (c wmiCall) inParameters(services *ole.IDispatch) (*ole.IDispatch, error) {
	class, err := toDispatch(oleutil.CallMethod(services, "Get", c.Class))
	if err != nil {
		return nil, fmt.Errorf("getting the class definition: %w", err)
	}
	defer class.Release()
	methods, err := toDispatch(oleutil.GetProperty(class, "Methods_"))
	if err != nil {
		return nil, fmt.Errorf("listing the class's methods: %w", err)
	}
	defer methods.Release()
	method, err := toDispatch(oleutil.CallMethod(methods, "Item", c.Method))
	if err != nil {
		return nil, fmt.Errorf("looking up the method: %w", err)
	}
	defer method.Release()
	definition, err := toDispatch(oleutil.GetProperty(method, "InParameters"))
	if err != nil {
		return nil, fmt.Errorf("reading the method's in-parameters: %w", err)
	}
	defer definition.Release()
	in, err := toDispatch(oleutil.CallMethod(definition, "SpawnInstance_"))
	if err != nil {
		return nil, fmt.Errorf("spawning the in-parameters: %w", err)
	}
	for _, p := range c.Params {
		v, err := oleutil.PutProperty(in, p.Name, p.Value)
		if err != nil {
			in.Release()
			return nil, fmt.Errorf("setting in-parameter %s: %w", p.Name, err)
		}
		_ = v.Clear()
	}
	return in, nil
}

// execOn calls the method on the set's instance i with the in-parameters in (nil: none) and
// returns its ReturnValue.
func (c wmiCall) execOn(set *ole.IDispatch, i int32, in *ole.IDispatch) (uint32, error) {
	instance, err := toDispatch(oleutil.CallMethod(set, "ItemIndex", i))
	if err != nil {
		return 0, fmt.Errorf("reading instance %d: %w", i, err)
	}
	defer instance.Release()
	args := []any{c.Method}
	if in != nil {
		args = append(args, in)
	}
	out, err := toDispatch(oleutil.CallMethod(instance, "ExecMethod_", args...))
	if err != nil {
		return 0, fmt.Errorf("instance %d: %w", i, err)
	}
	defer out.Release()
	rv, err := oleutil.GetProperty(out, "ReturnValue")
	if err != nil {
		return 0, fmt.Errorf("instance %d: reading the return value: %w", i, err)
	}
	defer func() { _ = rv.Clear() }()
	code, ok := toUint32(rv.Value())
	if !ok {
		return 0, fmt.Errorf("instance %d: unexpected return value of VARIANT type %d", i, rv.VT)
	}
	return code, nil
}

// toDispatch takes the object a COM call returned; the caller releases it.
func toDispatch(v *ole.VARIANT, err error) (*ole.IDispatch, error) {
	if err != nil {
		return nil, err
	}
	d := v.ToIDispatch()
	if d == nil {
		vt := v.VT
		_ = v.Clear()
		return nil, fmt.Errorf("expected an object, got a VARIANT of type %d", vt)
	}
	return d, nil
}

// toUint32 converts the integer a VARIANT holds: WMI hands uint32 values to automation as VT_I4.
func toUint32(v any) (uint32, bool) {
	switch n := v.(type) {
	case int8:
		return uint32(n), true
	case uint8:
		return uint32(n), true
	case int16:
		return uint32(n), true
	case uint16:
		return uint32(n), true
	case int32:
		return uint32(n), true
	case uint32:
		return n, true
	case int64:
		return uint32(n), true
	case uint64:
		return uint32(n), true
	}
	return 0, false
}
