package podendpoint

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/cni"
)

func TestParseCall(t *testing.T) {
	const conf = `{"cniVersion":"1.1.0","name":"winnet","type":"winnet-cni"}`
	const podArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=u1"
	add := func(mutate func(r *cni.Request)) cni.Request {
		r := cni.Request{Command: cni.CommandAdd, ContainerID: "c1", Netns: "/run/netns/p", IfName: "eth0", Args: podArgs, StdinData: []byte(conf)}
		if mutate != nil {
			mutate(&r)
		}
		return r
	}
	tests := []struct {
		name    string
		req     cni.Request
		code    uint
		msg     string
		sandbox string
	}{
		{name: "sandbox ADD", req: add(nil), sandbox: "c1"},
		{name: "workload ADD names its sandbox", req: add(func(r *cni.Request) { r.Args += ";K8S_POD_INFRA_CONTAINER_ID=s1" }), sandbox: "s1"},
		{name: "DEL needs no netns", req: add(func(r *cni.Request) { r.Command, r.Netns = cni.CommandDel, "" }), sandbox: "c1"},
		{name: "DEL needs no Pod", req: add(func(r *cni.Request) { r.Command, r.Args = cni.CommandDel, "" }), sandbox: "c1"},
		{name: "not JSON", req: add(func(r *cni.Request) { r.StdinData = []byte("{") }), code: types.ErrDecodingFailure, msg: "decoding the network configuration"},
		{name: "no cniVersion", req: add(func(r *cni.Request) { r.StdinData = []byte(`{"name":"winnet"}`) }), code: types.ErrInvalidNetworkConfig, msg: "no cniVersion"},
		{name: "unsupported cniVersion", req: add(func(r *cni.Request) { r.StdinData = []byte(`{"cniVersion":"0.2.0","name":"winnet"}`) }), code: types.ErrIncompatibleCNIVersion, msg: `"0.2.0" is not supported`},
		{name: "bad network name", req: add(func(r *cni.Request) { r.StdinData = []byte(`{"cniVersion":"1.1.0","name":"a b"}`) }), code: types.ErrInvalidNetworkConfig, msg: "network name"},
		{name: "malformed hostPort (a shim of 0.1.0 forwards it unchecked)", req: add(func(r *cni.Request) {
			r.StdinData = []byte(`{"cniVersion":"1.1.0","name":"winnet","runtimeConfig":{"portMappings":[{"hostPort":0,"containerPort":80,"protocol":"tcp"}]}}`)
		}), code: types.ErrInvalidNetworkConfig, msg: "portMappings[0] (hostPort 0, containerPort 80"},
		{name: "malformed hostPort on DEL is no matter", req: add(func(r *cni.Request) {
			r.Command = cni.CommandDel
			r.StdinData = []byte(`{"cniVersion":"1.1.0","name":"winnet","runtimeConfig":{"portMappings":[{"hostPort":0,"containerPort":80,"protocol":"tcp"}]}}`)
		}), sandbox: "c1"},
		{name: "no container ID", req: add(func(r *cni.Request) { r.ContainerID = "" }), code: types.ErrInvalidEnvironmentVariables, msg: "CNI_CONTAINERID"},
		{name: "bad container ID", req: add(func(r *cni.Request) { r.ContainerID = "a/b" }), code: types.ErrInvalidEnvironmentVariables, msg: "CNI_CONTAINERID"},
		{name: "no ifname", req: add(func(r *cni.Request) { r.IfName = "" }), code: types.ErrInvalidEnvironmentVariables, msg: "CNI_IFNAME"},
		{name: "bad ifname", req: add(func(r *cni.Request) { r.IfName = "a/b" }), code: types.ErrInvalidEnvironmentVariables, msg: "CNI_IFNAME"},
		{name: "no netns", req: add(func(r *cni.Request) { r.Netns = "" }), code: types.ErrInvalidEnvironmentVariables, msg: "CNI_NETNS"},
		{name: "args not KEY=VALUE", req: add(func(r *cni.Request) { r.Args = "K8S_POD_NAME" }), code: types.ErrInvalidEnvironmentVariables, msg: "KEY=VALUE"},
		{name: "no Pod in args", req: add(func(r *cni.Request) { r.Args = "IgnoreUnknown=1" }), code: types.ErrInvalidEnvironmentVariables, msg: "K8S_POD_NAMESPACE"},
		{name: "bad sandbox ID", req: add(func(r *cni.Request) { r.Args += ";K8S_POD_INFRA_CONTAINER_ID=a b" }), code: types.ErrInvalidEnvironmentVariables, msg: "K8S_POD_INFRA_CONTAINER_ID"},
		{name: "bad DNS server", req: add(func(r *cni.Request) {
			r.StdinData = []byte(`{"cniVersion":"1.1.0","name":"winnet","runtimeConfig":{"dns":{"servers":["x"]}}}`)
		}), code: types.ErrInvalidNetworkConfig, msg: "runtimeConfig.dns.servers"},
		{name: "CHECK with a bad prevResult", req: add(func(r *cni.Request) {
			r.Command, r.StdinData = cni.CommandCheck, []byte(`{"cniVersion":"1.1.0","name":"winnet","prevResult":{"ips":"x"}}`)
		}), code: types.ErrDecodingFailure, msg: "prevResult"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c, err := parseCall(tt.req)
			if tt.msg == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(c.sandbox).To(Equal(tt.sandbox))
				return
			}
			e, ok := err.(*types.Error)
			g.Expect(ok).To(BeTrue(), "a CNI error, got %v", err)
			g.Expect(e.Code).To(Equal(tt.code))
			g.Expect(e.Msg).To(ContainSubstring(tt.msg))
		})
	}
}

func TestDNSFromRuntimeConfig(t *testing.T) {
	g := NewWithT(t)
	c, err := parseCall(cni.Request{Command: cni.CommandAdd, ContainerID: "c1", Netns: "/n", IfName: "eth0",
		Args:      "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p",
		StdinData: []byte(`{"cniVersion":"1.1.0","name":"winnet","runtimeConfig":{"dns":{"servers":["10.96.0.10"],"searches":["ns.svc"],"options":["ndots:5"]}}}`)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.conf.dns()).To(Equal(types.DNS{Nameservers: []string{"10.96.0.10"}, Search: []string{"ns.svc"}, Options: []string{"ndots:5"}}))
	g.Expect(c.args).To(Equal(podArgs{Namespace: "ns", Name: "p"}))
}
