package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/winnet-io/winnet/internal/hostport"
)

// SupportedVersions are the CNI spec versions the shim accepts in a network configuration.
var SupportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// PluginVersionInfo returns the VERSION answer of the shim.
func PluginVersionInfo() version.PluginInfo {
	return version.PluginSupports(SupportedVersions...)
}

// ShimNetConf holds the fields of the network configuration the shim itself reads; the agent gets
// the whole configuration.
type ShimNetConf struct {
	CNIVersion string `json:"cniVersion"`
	// AgentSocket overrides the agent's unix socket (Linux) or named pipe (Windows) path.
	AgentSocket string `json:"agentSocket,omitempty"`
	// StateDir is the agent's state directory, where a retired node's record is (see Retire).
	StateDir string `json:"stateDir,omitempty"`
	// ConfDir is the directory of the conflist, which a retired node's last DEL removes by name.
	ConfDir string `json:"confDir,omitempty"`
	// RuntimeConfig holds the Pod's hostPorts as the runtime injects them (the conflist's
	// "portMappings" capability), which the shim checks on ADD before it calls the agent.
	RuntimeConfig struct {
		PortMappings []hostport.PortMapping `json:"portMappings,omitempty"`
	} `json:"runtimeConfig"`
}

// ShimOptions configures a Shim.
type ShimOptions struct {
	// Stdout receives the CNI result of ADD.
	Stdout io.Writer
	// Stderr receives what the shim logs for the runtime's log (a retirement record it skipped).
	Stderr io.Writer
	// Executable is the shim's own binary (os.Executable), which a retired node's last DEL
	// removes when the retirement names it; empty never removes it.
	Executable string
	// DefaultAddress is used when the configuration has no agentSocket; empty means DefaultAddress.
	DefaultAddress string
	// DialTimeout and RequestTimeout configure the Client; zero selects the defaults.
	DialTimeout    time.Duration
	RequestTimeout time.Duration
	// Server is the Client's check of the agent's end (ClientOptions.Server); nil selects the
	// platform's (peertrust.NewVerifier).
	Server ServerVerifier
}

// Shim is the CNI plugin side of winnet: it forwards every CNI command to the agent and reports the
// agent's answer the way the CNI spec requires. It answers VERSION itself (through skel).
type Shim struct {
	opts ShimOptions
}

// NewShim returns a Shim.
func NewShim(opts ShimOptions) *Shim {
	if opts.DefaultAddress == "" {
		opts.DefaultAddress = DefaultAddress
	}
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	return &Shim{opts: opts}
}

// Funcs returns the skel callbacks of the shim; ctx bounds every call to the agent.
func (s *Shim) Funcs(ctx context.Context) skel.CNIFuncs {
	call := func(cmd Command) func(*skel.CmdArgs) error {
		return func(args *skel.CmdArgs) error { return s.Run(ctx, cmd, args) }
	}
	return skel.CNIFuncs{
		Add:    call(CommandAdd),
		Del:    call(CommandDel),
		Check:  call(CommandCheck),
		Status: call(CommandStatus),
		GC:     call(CommandGC),
	}
}

// Run forwards one CNI command to the agent. Every error it returns is a *types.Error:
//   - the configuration is larger than MaxConfigSize: ErrInvalidNetworkConfig naming the limit;
//   - the container ID is too long or a reserved name (ValidateContainerID): ErrInvalidEnvironmentVariables;
//   - the configuration cannot be decoded: ErrDecodingFailure, before contacting the agent;
//   - ADD with malformed runtimeConfig.portMappings (hostport.Parse): ErrInvalidNetworkConfig naming
//     the entry, before contacting the agent;
//   - the agent cannot be reached or does not answer in time: ErrTryAgainLater, naming the address;
//   - the agent's answer violates the protocol or ADD yields no valid result: ErrInternal;
//   - the agent reports a CNI error: that error, unchanged.
//
// For ADD the agent's result is converted to the configuration's cniVersion and printed to Stdout.
// DEL on a retired node (the node network is gone for good, see Retire) is answered from the
// node's state directory without the agent: an unreachable agent is then gone, not restarting.
func (s *Shim) Run(ctx context.Context, cmd Command, args *skel.CmdArgs) error {
	if len(args.StdinData) > MaxConfigSize {
		return ConfigTooLarge(len(args.StdinData))
	}
	if cmd == CommandAdd || cmd == CommandDel || cmd == CommandCheck {
		if err := ValidateContainerID("CNI_CONTAINERID", args.ContainerID); err != nil {
			return err
		}
	}
	var conf ShimNetConf
	if err := json.Unmarshal(args.StdinData, &conf); err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding network configuration: %v", err), "")
	}
	if cmd == CommandAdd {
		// Malformed hostPorts are refused here too, whatever the agent's release: an agent of 0.1.0
		// ignores portMappings (it serves no hostPort), a later one refuses them the same way.
		if _, err := hostport.Parse(conf.RuntimeConfig.PortMappings); err != nil {
			return err
		}
	}
	if cmd == CommandDel && conf.StateDir != "" {
		node := RetiredNode{StateDir: conf.StateDir, ConfDir: conf.ConfDir, Self: s.opts.Executable}
		handled, skipped, err := node.DelRetired(args.ContainerID)
		switch {
		case err != nil:
			return types.NewError(types.ErrIOFailure, "deleting a sandbox of a node winnet left", err.Error())
		case handled:
			return nil
		case skipped != nil:
			// Not trusted: not acted upon, and DEL goes to the agent as on a node not retired.
			fmt.Fprintf(s.opts.Stderr, "winnet-cni: DEL of %s: skipping the retirement record: %v\n", args.ContainerID, skipped)
		}
	}
	client := NewClient(ClientOptions{
		Address:        s.address(conf),
		DialTimeout:    s.opts.DialTimeout,
		RequestTimeout: s.opts.RequestTimeout,
		Server:         s.opts.Server,
	})
	resp, err := client.Do(ctx, Request{
		Command:     cmd,
		ContainerID: args.ContainerID,
		Netns:       args.Netns,
		IfName:      args.IfName,
		Args:        args.Args,
		Path:        args.Path,
		StdinData:   args.StdinData,
	})
	switch {
	case errors.Is(err, ErrMessageTooLarge):
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("the request for the winnet agent is larger than the protocol's limit of %d bytes", MaxMessageSize), err.Error())
	case errors.Is(err, ErrAgentUnreachable):
		return types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("winnet agent is not reachable at %q; is winnet-agent running on this node?", client.Address()), err.Error())
	case errors.Is(err, ErrProtocol):
		return types.NewError(types.ErrInternal,
			fmt.Sprintf("invalid answer from winnet agent at %q", client.Address()), err.Error())
	case err != nil:
		return types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("no answer from winnet agent at %q", client.Address()), err.Error())
	}
	if resp.Error != nil {
		return resp.Error
	}
	if cmd != CommandAdd {
		return nil
	}
	return s.printResult(conf.CNIVersion, resp.Result)
}

// printResult converts the agent's ADD result to cniVersion and prints it.
func (s *Shim) printResult(cniVersion string, raw []byte) error {
	if len(raw) == 0 {
		return types.NewError(types.ErrInternal, "winnet agent returned no result for ADD", "")
	}
	result, err := create.CreateFromBytes(raw)
	if err != nil {
		return types.NewError(types.ErrInternal, "winnet agent returned an invalid CNI result", err.Error())
	}
	converted, err := result.GetAsVersion(cniVersion)
	if err != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion,
			fmt.Sprintf("converting the winnet agent's result to CNI version %q", cniVersion), err.Error())
	}
	if err := converted.PrintTo(s.opts.Stdout); err != nil {
		return types.NewError(types.ErrIOFailure, "writing the CNI result", err.Error())
	}
	return nil
}

func (s *Shim) address(conf ShimNetConf) string {
	if conf.AgentSocket != "" {
		return conf.AgentSocket
	}
	return s.opts.DefaultAddress
}
