// Package hostnet manages the host's network plumbing — links, addresses, MAC, MTU, forwarding, routes carrying winnet's ownership mark and neighbours — through netlink on Linux and the IP Helper API (iphlpapi) on Windows.
package hostnet
