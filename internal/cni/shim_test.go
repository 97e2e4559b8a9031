package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/wine"
)

const agentResult100 = `{
  "cniVersion": "1.0.0",
  "interfaces": [{"name": "eth0", "mac": "aa:bb:cc:00:00:05", "sandbox": "/var/run/netns/pod"}],
  "ips": [{"interface": 0, "address": "10.244.1.5/24", "gateway": "10.244.1.1"}],
  "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.1.1"}]
}`

func TestShimRun(t *testing.T) {
	conf := func(version, socket string) []byte {
		b, _ := json.Marshal(map[string]any{"cniVersion": version, "name": "winnet", "type": "winnet-cni", "agentSocket": socket})
		return b
	}
	tests := []struct {
		name    string
		cmd     Command
		version string
		// stdin overrides the generated configuration.
		stdin      []byte
		noAgent    bool
		respond    func(context.Context, Request) Response
		wantErr    *types.Error
		wantErrMsg string
		wantCalls  int
		wantStdout string
	}{
		{
			name: "ADD prints the result in the configuration's version", cmd: CommandAdd, version: "0.3.1",
			respond:   func(context.Context, Request) Response { return Response{Result: json.RawMessage(agentResult100)} },
			wantCalls: 1,
			wantStdout: `{"cniVersion":"0.3.1","interfaces":[{"name":"eth0","mac":"aa:bb:cc:00:00:05","sandbox":"/var/run/netns/pod"}],
				"ips":[{"version":"4","interface":0,"address":"10.244.1.5/24","gateway":"10.244.1.1"}],
				"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"}],"dns":{}}`,
		},
		{
			name: "ADD without a result", cmd: CommandAdd, version: "1.1.0",
			wantCalls: 1,
			wantErr:   &types.Error{Code: types.ErrInternal, Msg: "winnet agent returned no result for ADD"},
		},
		{
			name: "ADD with a result that is no CNI result", cmd: CommandAdd, version: "1.1.0",
			respond: func(context.Context, Request) Response {
				return Response{Result: json.RawMessage(`{"cniVersion":"7.0.0"}`)}
			},
			wantCalls:  1,
			wantErrMsg: "winnet agent returned an invalid CNI result",
		},
		{
			name: "DEL succeeds silently", cmd: CommandDel, version: "1.1.0",
			wantCalls: 1,
		},
		{
			name: "agent error is returned unchanged", cmd: CommandCheck, version: "1.1.0",
			respond: func(context.Context, Request) Response {
				return ErrorResponse(types.ErrUnknownContainer, "no endpoint for container", "c0ffee")
			},
			wantCalls: 1,
			wantErr:   &types.Error{Code: types.ErrUnknownContainer, Msg: "no endpoint for container", Details: "c0ffee"},
		},
		{
			name: "undecodable configuration is refused before contacting the agent", cmd: CommandAdd,
			stdin:      []byte(`{"cniVersion":"1.1.0","name":"winnet","type":"winnet-cni","agentSocket":["a"]}`),
			wantErrMsg: "decoding network configuration",
		},
		{
			name: "ADD with a malformed hostPort is refused before contacting the agent", cmd: CommandAdd,
			stdin: []byte(`{"cniVersion":"1.1.0","name":"winnet","type":"winnet-cni",
				"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"tcp"},{"hostPort":80,"containerPort":80,"protocol":"sctp"}]}}`),
			wantErr: &types.Error{Code: types.ErrInvalidNetworkConfig,
				Msg: `runtimeConfig.portMappings[1] (hostPort 80, containerPort 80, protocol "sctp", hostIP ""): SCTP is not supported on winnet nodes: the Windows datapath's conntrack tracks only TCP, UDP and ICMP`},
		},
		{
			name: "agent not listening", cmd: CommandStatus, version: "1.1.0", noAgent: true,
			wantErrMsg: "winnet agent is not reachable at",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rec := &recorder{respond: tt.respond}
			address := testAddress(t)
			if !tt.noAgent {
				address = startServer(t, rec, ServeOptions{})
			}
			stdin := tt.stdin
			if stdin == nil {
				stdin = conf(tt.version, address)
			}
			var stdout bytes.Buffer
			shim := NewShim(ShimOptions{Stdout: &stdout, DialTimeout: time.Second, RequestTimeout: 10 * time.Second, Server: wine.ServerVerifier()})

			err := shim.Run(context.Background(), tt.cmd, &skel.CmdArgs{
				ContainerID: "c0ffee", Netns: "/var/run/netns/pod", IfName: "eth0", StdinData: stdin,
			})

			g.Expect(rec.Requests()).To(HaveLen(tt.wantCalls))
			switch {
			case tt.wantErr != nil:
				g.Expect(err).To(Equal(tt.wantErr))
			case tt.wantErrMsg != "":
				var cniErr *types.Error
				g.Expect(errors.As(err, &cniErr)).To(BeTrue(), "want a *types.Error, got %T %v", err, err)
				g.Expect(cniErr.Msg).To(ContainSubstring(tt.wantErrMsg))
				switch {
				case tt.noAgent:
					g.Expect(cniErr.Code).To(Equal(types.ErrTryAgainLater))
					// The shim quotes the address (%q): a Windows pipe name's backslashes come doubled.
					g.Expect(cniErr.Msg).To(ContainSubstring(strconv.Quote(address)))
				case tt.stdin != nil:
					g.Expect(cniErr.Code).To(Equal(types.ErrDecodingFailure))
				default:
					g.Expect(cniErr.Code).To(Equal(types.ErrInternal))
				}
			default:
				g.Expect(err).NotTo(HaveOccurred())
			}
			if tt.wantStdout != "" {
				g.Expect(stdout.String()).To(MatchJSON(tt.wantStdout))
			} else {
				g.Expect(stdout.String()).To(BeEmpty())
			}
		})
	}
}

func TestShimDefaultAddress(t *testing.T) {
	g := NewWithT(t)
	g.Expect(NewShim(ShimOptions{}).address(ShimNetConf{})).To(Equal(DefaultAddress))
	g.Expect(NewShim(ShimOptions{DefaultAddress: "/run/x.sock"}).address(ShimNetConf{})).To(Equal("/run/x.sock"))
	g.Expect(NewShim(ShimOptions{}).address(ShimNetConf{AgentSocket: "/run/y.sock"})).To(Equal("/run/y.sock"))
	g.Expect(PluginVersionInfo().SupportedVersions()).To(Equal([]string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}))
}
