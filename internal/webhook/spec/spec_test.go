package spec

import (
	"net/netip"
	"strings"
	"testing"
)

func TestGuard(t *testing.T) {
	t.Parallel()
	var g Guard
	for _, a := range []string{"127.0.0.1", "127.9.9.9", "::1", "0.0.0.0", "::", "169.254.169.254", "169.254.1.1", "fe80::1",
		"fd00:ec2::254", "100.100.100.200", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "224.0.0.1", "255.255.255.255", "0.1.2.3"} {
		if g.Refuses(netip.MustParseAddr(a)) == "" {
			t.Errorf("%s allowed by default", a)
		}
		if (Guard{AllowLocal: true}).Refuses(netip.MustParseAddr(a)) != "" {
			t.Errorf("%s refused with allow_local", a)
		}
	}
	for _, a := range []string{"10.1.2.3", "192.168.1.1", "172.16.0.1", "fd12::1", "8.8.8.8", "2001:db8::1"} {
		if why := g.Refuses(netip.MustParseAddr(a)); why != "" {
			t.Errorf("%s refused: %s", a, why)
		}
	}
	only := Guard{Allow: []AllowRule{{Network: netip.MustParsePrefix("127.0.0.1/32")}}}
	if only.Refuses(netip.MustParseAddr("127.0.0.1")) != "" || only.Refuses(netip.MustParseAddr("127.0.0.2")) == "" ||
		only.Refuses(netip.MustParseAddr("169.254.169.254")) == "" {
		t.Fatal("allow_networks lets in more or less than its networks")
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"":                               "a URL is required",
		"ftp://x.example/":               `the scheme must be http or https, not "ftp"`,
		"example.com/hook":               `the scheme must be http or https, not ""`,
		"https://":                       "the URL names no host",
		"https://a:b@x.example/":         "must not hold credentials",
		"https://x.example/#f":           "must not have a #fragment",
		"http://127.0.0.1:8080/":         "127.0.0.1 is a loopback address",
		"http://[::1]/":                  "::1 is a loopback address",
		"http://169.254.169.254/latest/": "link-local",
		"http://[fd00:ec2::254]/":        "a cloud metadata address",
		"https://x.example/" + strings.Repeat("a", 2048): "at most 2048 characters",
		"http://%zz/":                  "not a URL",
		"https://x.example:99999/hook": "the port must be from 1 to 65535, got 99999",
		"https://x.example:0/hook":     "the port must be from 1 to 65535, got 0",
	} {
		err := CheckURL(raw, Guard{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.60q: got %v, want %q", raw, err, want)
		}
	}
	for _, raw := range []string{"https://hooks.slack.com/services/T/B/X", "http://10.0.0.5:9000/hook", "https://localhost/x"} {
		if err := CheckURL(raw, Guard{}); err != nil {
			t.Errorf("%q: %v (names are checked at connect time)", raw, err)
		}
	}
	if err := CheckURL("http://127.0.0.1:1/", Guard{AllowLocal: true}); err != nil {
		t.Errorf("loopback with allow_local: %v", err)
	}
}

// An allow_networks entry may name the one port its network is open on;
// the port form of a URL or a connection must then match it.
func TestAllowRulePorts(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"10.0.0.0/8:443":    "10.0.0.0/8:443",
		"127.0.0.1:8080":    "127.0.0.1/32:8080",
		"127.0.0.1/32:8080": "127.0.0.1/32:8080",
		"[::1]:8443":        "[::1/128]:8443",
		"[fd00::/8]:443":    "[fd00::/8]:443",
		"10.1.2.3/16":       "10.1.0.0/16",
		"::1/128":           "::1/128",
	} {
		r, err := ParseAllowRule(in)
		if err != nil || r.String() != want {
			t.Errorf("%q: got %v, %v; want %s", in, r, err, want)
		}
	}
	for in, want := range map[string]string{
		"10.0.0.0":         `"10.0.0.0" is not a network in CIDR notation`,
		"10.0.0.0/8:99999": `the port must be a number from 1 to 65535, got "99999"`,
		"10.0.0.0/8:0":     `got "0"`,
		"10.0.0.0/8:https": `got "https"`,
		"[::1]":            "needs a port after it",
		"[::1]:":           `got ""`,
		"example.com:443":  "is not a network in CIDR notation",
		"[::1/129]:443":    "is not a network",
	} {
		if _, err := ParseAllowRule(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", in, err, want)
		}
	}
	g := Guard{Allow: []AllowRule{mustRule(t, "127.0.0.1/32:8080"), mustRule(t, "[::1]:8443")}}
	lo, lo6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	if g.RefusesAt(lo, 8080) != "" || g.RefusesAt(lo6, 8443) != "" {
		t.Error("the named ports are refused")
	}
	if g.RefusesAt(lo, 22) == "" || g.RefusesAt(lo6, 8080) == "" || g.Refuses(lo) == "" {
		t.Error("a rule naming a port lets in other ports")
	}
	if err := CheckURL("http://127.0.0.1:8080/hook", g); err != nil {
		t.Errorf("the allowed port: %v", err)
	}
	if err := CheckURL("http://127.0.0.1/hook", g); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("port 80 with only 8080 allowed: %v", err)
	}
	if err := CheckURL("https://[::1]:8443/", g); err != nil {
		t.Errorf("the allowed IPv6 port: %v", err)
	}
}

func mustRule(t *testing.T, s string) AllowRule {
	t.Helper()
	r, err := ParseAllowRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every event listed is sent today: none is described as future work.
func TestEventsDescribedAsSent(t *testing.T) {
	t.Parallel()
	for _, e := range Events {
		if strings.Contains(e.What, "once ") || strings.Contains(e.What, "exists") {
			t.Errorf("%s is described as future work: %q", e.Name, e.What)
		}
	}
}

func TestFiltersAndNames(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"*", "job.*", "worker.*", "gpu.*", "checkpoint.*", "job.failed", "gpu.unhealthy", "job.preempted"} {
		if err := CheckFilter(f); err != nil {
			t.Errorf("%q: %v", f, err)
		}
	}
	for _, f := range []string{"", "job", "jobs.*", "job.exploded", "*.*", "JOB.FAILED"} {
		if err := CheckFilter(f); err == nil {
			t.Errorf("%q accepted", f)
		}
	}
	if !Wants([]string{"worker.*"}, WorkerOffline) || Wants([]string{"job.failed"}, JobCompleted) || !Wants([]string{"*"}, GPUUnhealthy) {
		t.Fatal("Wants")
	}
	for _, n := range []string{"", ".x", "a b", "a/b", strings.Repeat("a", 65)} {
		if CheckName(n) == nil {
			t.Errorf("name %q accepted", n)
		}
	}
	if CheckName("ops-slack_2.b") != nil || CheckTeam("", nil) != nil || CheckTeam("default", nil) != nil || CheckTeam("vision", nil) == nil ||
		CheckTeam("vision", []string{"nlp", "vision"}) != nil {
		t.Fatal("names and teams")
	}
	if Origin("https://hooks.slack.com/services/T/B/secret") != "https://hooks.slack.com" || Origin("::") != "(invalid URL)" {
		t.Fatal("Origin")
	}
}

func FuzzCheckURL(f *testing.F) {
	f.Add("https://hooks.example.com/x")
	f.Add("http://[::ffff:127.0.0.1]:80/")
	f.Add("http://0x7f.1/")
	f.Fuzz(func(t *testing.T, raw string) {
		if CheckURL(raw, Guard{}) != nil {
			return
		}
		// Whatever passes is http(s) with a host, and its origin shows no
		// path.
		if l := strings.ToLower(raw); !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://") {
			t.Fatalf("%q passed", raw)
		}
		if o := Origin(raw); strings.Count(o, "/") != 2 {
			t.Fatalf("%q: origin %q", raw, o)
		}
	})
}
