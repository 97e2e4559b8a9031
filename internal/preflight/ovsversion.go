package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/winnet-io/winnet/internal/peertrust"
)

// vswitchdVersion asks ovs-vswitchd its version over its control connection (unixctl's JSON-RPC
// "version" command, what `ovs-appctl version` sends), after checking that the node's
// administrators run its server (peertrust). The database's ovs_version is written by OVS's start
// scripts, not by ovs-vswitchd: a daemon started without them leaves it empty.
func vswitchdVersion(ctx context.Context, opts Options) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := dialVswitchd(ctx, opts)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := peertrust.NewVerifier().Verify(conn); err != nil {
		return "", err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	return unixctlVersion(conn)
}

// unixctlVersion sends unixctl's "version" request on conn and reads the version from the answer
// ("ovs-vswitchd (Open vSwitch) 3.1.0").
func unixctlVersion(conn net.Conn) (string, error) {
	if _, err := conn.Write([]byte(`{"method":"version","params":[],"id":0}`)); err != nil {
		return "", fmt.Errorf("asking ovs-vswitchd its version: %w", err)
	}
	var reply struct {
		Result *string `json:"result"`
		Error  any     `json:"error"`
	}
	if err := json.NewDecoder(conn).Decode(&reply); err != nil {
		return "", fmt.Errorf("reading ovs-vswitchd's version: %w", err)
	}
	if reply.Result == nil {
		return "", fmt.Errorf("ovs-vswitchd answered the version command with an error: %v", reply.Error)
	}
	line := strings.TrimSpace(*reply.Result)
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return "", fmt.Errorf("ovs-vswitchd answered an empty version")
	}
	return fields[len(fields)-1], nil
}
