package config

import (
	"strings"
	"testing"
	"time"
)

func TestRetentionConfig(t *testing.T) {
	t.Parallel()
	c, _, err := loadO(t, "[retention]\njobs = \"30d\"\nlogs = \"0\"\naudit = \"1d12h\"\n", env())
	if err != nil {
		t.Fatal(err)
	}
	r := c.Retention
	if r.Jobs.Duration != 30*24*time.Hour || r.Logs.Duration != 0 || r.Audit.Duration != 36*time.Hour ||
		r.Artifacts.Duration != 90*24*time.Hour || r.Interval.Duration != time.Hour || r.BatchSize != 500 {
		t.Fatalf("retention %+v", r)
	}
	for _, tc := range []struct{ toml, want string }{
		{"jobs = \"-1d\"", `o.toml:2: key retention.jobs: invalid duration "-1d"`},
		{"logs = \"90 days\"", `o.toml:2: key retention.logs: invalid duration "90 days"`},
		{"interval = \"0s\"", "o.toml:2: key retention.interval: must be greater than 0"},
		{"batch_size = 0", "o.toml:2: key retention.batch_size: must be from 1 to 10000, got 0"},
		{"batch_size = 20000", "key retention.batch_size: must be from 1 to 10000"},
		{"audit = \"9999999999999d\"", "key retention.audit: invalid duration"},
	} {
		_, _, err := loadO(t, "[retention]\n"+tc.toml+"\n", env())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.toml, err, tc.want)
		}
	}
}

func TestDurationDays(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"90d": "90d", "1d": "1d", "24h": "1d", "1d12h": "36h", "0d": "0s", "730d": "730d", "48h30m": "48h30m"} {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := d.String(); got != want {
			t.Errorf("%s → %s, want %s", in, got, want)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(d.String())); err != nil || back != d {
			t.Errorf("%s does not read back: %v %v", d, back, err)
		}
	}
	for _, bad := range []string{"d", "1.5d", "-3d", "3d-1h", "3dx", "1e3d", "99999999999999999999d"} {
		var d Duration
		if err := d.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("%q accepted as %v", bad, d)
		}
	}
}

// Any text either parses into a duration that prints and reads back the
// same, or is refused; it never panics.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"90d", "1d12h", "30s", "0", "-1d", "d", "9223372036854775807ns", "106751d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			return
		}
		if d.Duration < 0 {
			t.Fatalf("%q parsed to a negative %v", s, d.Duration)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(d.String())); err != nil || back != d {
			t.Fatalf("%q → %v does not read back: %v %v", s, d, back, err)
		}
	})
}
