//go:build !linux && !windows

package preflight

import (
	"context"
	"errors"
	"net"
)

const hostSource = ""

// DefaultContainerdConfig is containerd's configuration elsewhere.
const DefaultContainerdConfig = "/etc/containerd/config.toml"

func platformName(Options) string { return "unsupported platform" }

func containerdDefaults() (string, string, bool) { return "", "", false }

const notHere = "winnet runs on Windows (and simulated on Linux)"

func gatherOS(context.Context) Fact[OSInfo] { return NotOnPlatform[OSInfo](notHere) }
func gatherFeatures(context.Context) Fact[map[string]bool] {
	return NotOnPlatform[map[string]bool](notHere)
}
func gatherDriver(context.Context) Fact[DriverInfo] { return NotOnPlatform[DriverInfo](notHere) }
func gatherServices(context.Context, Options) Fact[map[string]ServiceState] {
	return NotOnPlatform[map[string]ServiceState](notHere)
}
func gatherHNS(context.Context, Options) Fact[HNSInfo] { return NotOnPlatform[HNSInfo](notHere) }

func defaultContainerdConfig(Options) (string, string) { return DefaultContainerdConfig, "" }

func dialVswitchd(context.Context, Options) (net.Conn, error) { return nil, errors.ErrUnsupported }
