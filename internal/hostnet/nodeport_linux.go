package hostnet

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nftNodePorts is the simulated twin of Windows' NetNat static mappings: an nftables table
// NodePortNATName (family ip) in the node's network namespace with one output DNAT rule per
// NodePort and protocol. The Windows mapping's external address is 0.0.0.0, any address of the
// host: the rule matches every local destination (fib daddr type local) but loopback, which the
// kernel would not route out of the gateway.
type nftNodePorts struct {
	netNSPath string
}

var _ NodePortNAT = (*nftNodePorts)(nil)

// NewNodePortNAT returns the NodePortNAT of this platform, acting in the network namespace of
// opts.NetNSPath (the calling thread's when empty).
func NewNodePortNAT(opts Options) NodePortNAT {
	return &nftNodePorts{netNSPath: opts.NetNSPath}
}

// ReconcileNodePorts replaces the table with one holding exactly the rules of ports, in one
// transaction: the host's connections are never without their rule in between.
func (n *nftNodePorts) ReconcileNodePorts(_ context.Context, target netip.Addr, ports []NodePort) error {
	var opts []nftables.ConnOption
	if n.netNSPath != "" {
		ns, err := netns.GetFromPath(n.netNSPath)
		if err != nil {
			return fmt.Errorf("opening network namespace %s: %w", n.netNSPath, err)
		}
		defer ns.Close()
		opts = append(opts, nftables.WithNetNSFd(int(ns)))
	}
	conn, err := nftables.New(opts...)
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	defer conn.CloseLasting()
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: NodePortNATName}
	// Adding the table first makes deleting it valid whether it existed or not.
	conn.AddTable(table)
	conn.DelTable(table)
	if len(ports) > 0 {
		if !target.Is4() {
			return fmt.Errorf("NAT target %s is not an IPv4 address", target)
		}
		conn.AddTable(table)
		policy := nftables.ChainPolicyAccept
		chain := conn.AddChain(&nftables.Chain{
			Name: "output", Table: table, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput,
			Priority: nftables.ChainPriorityNATDest, Policy: &policy,
		})
		to := target.As4()
		for _, p := range ports {
			proto, err := ipProto(p.Protocol)
			if err != nil {
				return err
			}
			conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
				// meta l4proto <proto>
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
				// th dport <port>
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p.Port)},
				// fib daddr type local
				&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
				// ip daddr != 127.0.0.0/8
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{127, 0, 0, 0}},
				// dnat ip to <target>
				&expr.Immediate{Register: 1, Data: to[:]},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
			}})
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("writing nftables table %s: %w", NodePortNATName, err)
	}
	return nil
}

// ipProto is the IP protocol number of a NodePort protocol.
func ipProto(protocol string) (uint8, error) {
	switch protocol {
	case "TCP":
		return unix.IPPROTO_TCP, nil
	case "UDP":
		return unix.IPPROTO_UDP, nil
	}
	return 0, fmt.Errorf("NodePort protocol %q is neither TCP nor UDP", protocol)
}
