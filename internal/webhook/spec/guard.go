package spec

import (
	"net/netip"
	"slices"
)

// Guard decides which addresses webhook requests may connect to. Refused by
// default are the addresses of this machine and of its cloud's internals:
// loopback, unspecified, link-local (where cloud metadata services live),
// the metadata services' own addresses, multicast and broadcast. A receiver
// there is reached only with AllowLocal, or when one of Allow holds the
// address. Other private networks (10.0.0.0/8, fc00::/7 …) are allowed:
// receivers often live there.
type Guard struct {
	AllowLocal bool
	Allow      []netip.Prefix
}

// metadata are cloud metadata services outside the link-local ranges.
var metadata = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS, over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

var broadcast = netip.MustParseAddr("255.255.255.255")

// Refuses says why the guard refuses ip, or "" when it allows it.
func (g Guard) Refuses(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	why := ""
	switch {
	case ip.IsLoopback():
		why = "a loopback address"
	case ip.IsUnspecified():
		why = "the unspecified address"
	case ip.IsLinkLocalUnicast():
		why = "a link-local address (cloud metadata services live there)"
	case slices.Contains(metadata, ip):
		why = "a cloud metadata address"
	case ip.IsMulticast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip == broadcast:
		why = "a multicast or broadcast address"
	case ip.Is4() && ip.As4()[0] == 0: // 0.0.0.0/8: "this network"
		why = "an address of \"this network\" (0.0.0.0/8)"
	}
	if why == "" || g.AllowLocal {
		return ""
	}
	for _, p := range g.Allow {
		if p.Contains(ip) {
			return ""
		}
	}
	return why + ", refused unless webhook_delivery.allow_local or allow_networks allows it"
}
