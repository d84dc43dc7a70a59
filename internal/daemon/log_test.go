package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

func TestNewLogger(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	journal := fmt.Sprintf("%d:%d", st.Dev, st.Ino)

	read := func() string {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(0)
		f.Seek(0, 0)
		return string(b)
	}

	for _, tc := range []struct {
		name, journalStream, level, format string
		check                              func(t *testing.T, out string)
	}{
		{"auto under journald is text with priority, no time", journal, "info", "auto", func(t *testing.T, out string) {
			want := "<4>level=WARN msg=hello token=redacted\n"
			if !strings.Contains(out, want) || strings.Contains(out, "time=") {
				t.Fatalf("out = %q, want %q", out, want)
			}
			if strings.Contains(out, "debug line") {
				t.Fatal("debug logged at info level")
			}
		}},
		{"auto elsewhere is JSON", "1:2", "debug", "auto", func(t *testing.T, out string) {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 {
				t.Fatalf("want debug and warn lines, got %q", out)
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(lines[1]), &m); err != nil || m["msg"] != "hello" || m["time"] == nil {
				t.Fatalf("line %q: %v %v", lines[1], m, err)
			}
		}},
		{"explicit text outside journald keeps time", "", "warn", "text", func(t *testing.T, out string) {
			if !strings.HasPrefix(out, "time=") || !strings.Contains(out, "level=WARN") {
				t.Fatalf("out = %q", out)
			}
		}},
		{"explicit json under journald", journal, "error", "json", func(t *testing.T, out string) {
			if out != "" {
				t.Fatalf("warn logged at error level: %q", out)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("JOURNAL_STREAM", tc.journalStream)
			log, _ := NewLogger(config.LogConfig{Level: tc.level, Format: tc.format}, f)
			log.Debug("debug line")
			log.With("token", "redacted").Warn("hello")
			tc.check(t, read())
		})
	}
}
