package daemon

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// New keys have the form E2B's SDKs check, so one key serves both APIs;
// a key made earlier is kept as it is.
func TestAPIKeyForm(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "api-key")
	key, err := loadOrCreateKey(p)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) {
		t.Fatalf("new key %q is not e2b_ + 40 hex", key)
	}
	again, err := loadOrCreateKey(p)
	if err != nil || again != key {
		t.Fatalf("reload: %q %v", again, err)
	}
	old := "bk_" + "0123456789abcdef0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(p, []byte(old+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := loadOrCreateKey(p); err != nil || k != old {
		t.Fatalf("existing key replaced: %q %v", k, err)
	}
}

// A key file the operator names is read, never replaced: a short key in it
// is refused (the control: the default path replaces a short key).
func TestGivenAPIKeyFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	want := "e2b_0123456789abcdef0123456789abcdef01234567"
	if err := os.WriteFile(good, []byte(want+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	if k, err := loadGivenKey(good); err != nil || k != want {
		t.Fatalf("given key file: %q %v", k, err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("tooshort\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := loadGivenKey(short); err == nil {
		t.Fatalf("a given file with a short key was accepted: %q", k)
	}
	if b, _ := os.ReadFile(short); string(b) != "tooshort\n" {
		t.Fatalf("the given file was rewritten: %q", b)
	}
	// Control: the default path replaces a short key with a new one.
	if k, err := loadOrCreateKey(short); err != nil || len(k) < minAPIKey {
		t.Fatalf("default path with a short key: %q %v", k, err)
	}
	// A given file that does not exist yet is made.
	fresh := filepath.Join(dir, "fresh")
	if k, err := loadGivenKey(fresh); err != nil || len(k) < minAPIKey {
		t.Fatalf("given file absent: %q %v", k, err)
	}
}

// The DSN comes from --cluster, else --cluster-file, else the environment;
// both flags at once is an error, and an error never quotes the DSN.
func TestClusterDSNSources(t *testing.T) {
	dir := t.TempDir()
	const dsn = "postgres://berth:s3cret@db:5432/berth?sslmode=verify-full"
	f := filepath.Join(dir, "dsn")
	if err := os.WriteFile(f, []byte(dsn+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ClusterDSNEnv, "postgres://from-env/x")
	c := Config{ClusterFile: f}
	if err := c.clusterDSN(); err != nil || c.Cluster != dsn {
		t.Fatalf("--cluster-file: %q %v", c.Cluster, err)
	}
	c = Config{}
	if err := c.clusterDSN(); err != nil || c.Cluster != "postgres://from-env/x" {
		t.Fatalf("env: %q %v", c.Cluster, err)
	}
	c = Config{Cluster: dsn, ClusterFile: f}
	if err := c.clusterDSN(); err == nil {
		t.Fatal("--cluster with --cluster-file accepted")
	}
	two := filepath.Join(dir, "two")
	if err := os.WriteFile(two, []byte(dsn+"\n"+dsn+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	c = Config{ClusterFile: two}
	err := c.clusterDSN()
	if err == nil {
		t.Fatal("a two-line DSN file accepted")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("the error quotes the DSN: %v", err)
	}
	c = Config{ClusterFile: filepath.Join(dir, "missing")}
	if err := c.clusterDSN(); err == nil {
		t.Fatal("a missing --cluster-file accepted")
	}
}
