package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestArtifactsConfig(t *testing.T) {
	t.Parallel()
	c, _, err := loadO(t, "[paths]\nstate_dir = \"/srv/st\"\n", env())
	if err != nil {
		t.Fatal(err)
	}
	if c.ArtifactsDir() != "/srv/st/artifacts" || c.Artifacts.Backend != "local" || c.Artifacts.ReservePercent != 5 {
		t.Fatalf("defaults: %s %+v", c.ArtifactsDir(), c.Artifacts)
	}
	for _, tc := range []struct{ toml, want string }{
		{"backend = \"ftp\"", `o.toml:2: key artifacts.backend: "ftp" is not one of local, s3`},
		{"dir = \"rel/dir\"", `o.toml:2: key artifacts.dir: "rel/dir" must be an absolute path`},
		{"max_object_bytes = 0", "o.toml:2: key artifacts.max_object_bytes: must be greater than 0"},
		{"max_job_bytes = -5", "o.toml:2: key artifacts.max_job_bytes: must be greater than 0"},
		{"upload_grace = \"0s\"", "o.toml:2: key artifacts.upload_grace: must be greater than 0"},
		{"reserve_percent = 60", "o.toml:2: key artifacts.reserve_percent: 60 must be between 0 (no reserve) and 50"},
		{"reserve_percent = -1", "o.toml:2: key artifacts.reserve_percent: -1 must be between 0 (no reserve) and 50"},
		{"backend = \"s3\"", "key artifacts.s3_endpoint: must be set"},
		{"backend = \"s3\"\ns3_endpoint = \"http://m:9000\"", "key artifacts.s3_bucket: must be set"},
		{"s3_endpoint = \"minio:9000\"", `o.toml:2: key artifacts.s3_endpoint: "minio:9000" must be http(s)://host[:port]`},
		{"s3_endpoint = \"https://h/path\"", "must be http(s)://host[:port] without a path"},
		{"s3_bucket = \"Bad_Bucket\"", `o.toml:2: key artifacts.s3_bucket: "Bad_Bucket" is not an S3 bucket name`},
		{"s3_prefix = \"/abs/\"", `o.toml:2: key artifacts.s3_prefix: "/abs/" must be`},
		{"s3_prefix = \"noslash\"", `key artifacts.s3_prefix: "noslash" must be`},
		{"backend = \"s3\"\ns3_endpoint = \"http://m:9000\"\ns3_bucket = \"b-1\"\ns3_access_key = \"k\"", "s3_access_key and s3_secret_key must be set together"},
	} {
		_, _, err := loadO(t, "[artifacts]\n"+tc.toml+"\n", env())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.toml, err, tc.want)
		}
	}
	// The secret comes from a file or a systemd credential, never printed.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "artifacts-s3-secret-key"), []byte("s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _, err = loadO(t, "[artifacts]\nbackend = \"s3\"\ns3_endpoint = \"https://s3.example.com\"\ns3_bucket = \"weights\"\ns3_access_key = \"AK\"\n",
		env("CREDENTIALS_DIRECTORY", dir))
	if err != nil {
		t.Fatal(err)
	}
	if c.Artifacts.S3SecretKey.Value() != "s3cr3t" || strings.Contains(c.Redacted(), "s3cr3t") {
		t.Fatalf("secret: %q, shown: %v", c.Artifacts.S3SecretKey.Value(), strings.Contains(c.Redacted(), "s3cr3t"))
	}
}
