package spec

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Guard decides which addresses webhook requests may connect to. Refused by
// default are the addresses of this machine and of its cloud's internals:
// loopback, unspecified, link-local (where cloud metadata services live),
// the metadata services' own addresses, multicast and broadcast. A receiver
// there is reached only with AllowLocal, or when one of Allow holds the
// address (and, where the rule names one, the port). Other private networks
// (10.0.0.0/8, fc00::/7 …) are allowed: receivers often live there.
type Guard struct {
	AllowLocal bool
	Allow      []AllowRule
}

// AllowRule is one entry of webhook_delivery.allow_networks: a network and,
// optionally, the one port it is open on (0: every port). Naming the port
// keeps a relay on this machine reachable without opening every other
// local service to the webhooks.
type AllowRule struct {
	Network netip.Prefix
	Port    uint16
}

func (r AllowRule) allows(ip netip.Addr, port uint16) bool {
	return r.Network.Contains(ip) && (r.Port == 0 || r.Port == port)
}

// ParseAllowRule reads an allow_networks entry: a network in CIDR notation
// ("127.0.0.1/32", "fd00::/8"), optionally with a port: "10.0.0.0/8:443",
// "127.0.0.1:8080" or "127.0.0.1/32:8080", and for IPv6 in brackets,
// "[::1]:8443" or "[fd00::/8]:443".
func ParseAllowRule(s string) (AllowRule, error) {
	host, port, hasPort := s, "", false
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 || !strings.HasPrefix(s[end+1:], ":") {
			return AllowRule{}, fmt.Errorf("%q: a bracketed IPv6 network needs a port after it (\"[::1]:8443\"); without one write it bare (\"::1/128\")", s)
		}
		host, port, hasPort = s[1:end], s[end+2:], true
	case strings.Count(s, ":") == 1: // IPv4 with a port; IPv6 has two colons or more
		host, port, _ = strings.Cut(s, ":")
		hasPort = true
	}
	r := AllowRule{}
	if hasPort {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return AllowRule{}, fmt.Errorf("%q: the port must be a number from 1 to 65535, got %q", s, port)
		}
		r.Port = uint16(n)
	}
	p, err := netip.ParsePrefix(host)
	if err != nil && hasPort { // a single address with its port
		var a netip.Addr
		if a, err = netip.ParseAddr(host); err == nil {
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil {
		return AllowRule{}, fmt.Errorf("%q is not a network in CIDR notation, optionally with a port "+
			"(e.g. \"10.1.2.0/24\", \"127.0.0.1/32\", \"10.0.0.0/8:443\", \"[::1]:8443\")", s)
	}
	r.Network = p.Masked()
	return r, nil
}

func (r AllowRule) String() string {
	if r.Port == 0 {
		return r.Network.String()
	}
	if r.Network.Addr().Is6() {
		return "[" + r.Network.String() + "]:" + strconv.Itoa(int(r.Port))
	}
	return r.Network.String() + ":" + strconv.Itoa(int(r.Port))
}

// metadata are cloud metadata services outside the link-local ranges.
var metadata = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS, over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

var broadcast = netip.MustParseAddr("255.255.255.255")

// Refuses says why the guard refuses ip on any port, or "" when it allows
// it: a rule of Allow that names a port does not count here.
func (g Guard) Refuses(ip netip.Addr) string { return g.RefusesAt(ip, 0) }

// RefusesAt says why the guard refuses a connection to ip and port, or ""
// when it allows it.
func (g Guard) RefusesAt(ip netip.Addr, port uint16) string {
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
	for _, r := range g.Allow {
		if r.allows(ip, port) {
			return ""
		}
	}
	return why + ", refused unless webhook_delivery.allow_local or allow_networks allows it"
}
