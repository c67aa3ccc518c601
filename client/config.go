package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Environment variables read by FromEnv and Load.
const (
	EnvURL    = "BERTH_URL"
	EnvAPIKey = "BERTH_API_KEY"
	EnvData   = "BERTH_DATA"
)

// DefaultDataDir is where `berth serve` keeps its state unless told
// otherwise.
const DefaultDataDir = "/var/lib/berth"

// ConfigFile is the name, inside the data directory, of the file in which
// `berth serve` tells local clients where it listens and which key to use.
const ConfigFile = "client.json"

// Config is the content of <data>/client.json.
type Config struct {
	URL    string `json:"url"`
	APIKey string `json:"apiKey"`
}

// DataDir returns dir, else $BERTH_DATA, else DefaultDataDir.
func DataDir(dir string) string {
	if dir != "" {
		return dir
	}
	if d := os.Getenv(EnvData); d != "" {
		return d
	}
	return DefaultDataDir
}

// ConfigPath is <dataDir>/client.json (dataDir resolved with DataDir).
func ConfigPath(dataDir string) string { return filepath.Join(DataDir(dataDir), ConfigFile) }

// SaveConfig writes cfg to <dataDir>/client.json, readable by its owner
// only (it holds the API key), replacing any previous file atomically.
func SaveConfig(dataDir string, cfg Config) error {
	path := ConfigPath(dataDir)
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".client-*.json")
	if err != nil {
		return fmt.Errorf("writing client config: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing client config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing client config: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}

// LoadConfig reads <dataDir>/client.json.
func LoadConfig(dataDir string) (Config, error) {
	path := ConfigPath(dataDir)
	var cfg Config
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return cfg, errdefs.FailedPrecondition("no berth server found: %s does not exist. Start one with `berth serve`, or set %s and %s", path, EnvURL, EnvAPIKey)
	case errors.Is(err, fs.ErrPermission):
		return cfg, errdefs.PermissionDenied("cannot read %s (it holds the API key and is readable by root only): run as root, or set %s and %s", path, EnvURL, EnvAPIKey)
	case err != nil:
		return cfg, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, errdefs.FailedPrecondition("%s is not valid JSON (%w): restart `berth serve` to rewrite it", path, err)
	}
	return cfg, nil
}

// FromEnv builds a client from BERTH_URL and BERTH_API_KEY, filling what is
// missing from <dataDir>/client.json as written by `berth serve`. dataDir ""
// means $BERTH_DATA or /var/lib/berth.
func FromEnv(dataDir string, opts ...Option) (*Client, error) {
	return Load(dataDir, "", "", opts...)
}

// Load is FromEnv with explicit values that win over the environment (the
// CLI's --url and --api-key).
func Load(dataDir, baseURL, apiKey string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		baseURL = os.Getenv(EnvURL)
	}
	if apiKey == "" {
		apiKey = os.Getenv(EnvAPIKey)
	}
	if baseURL == "" || apiKey == "" {
		cfg, err := LoadConfig(dataDir)
		if err != nil {
			return nil, err
		}
		if baseURL == "" {
			baseURL = cfg.URL
		}
		if apiKey == "" {
			apiKey = cfg.APIKey
		}
		if baseURL == "" || apiKey == "" {
			return nil, errdefs.FailedPrecondition("%s lacks url or apiKey: restart `berth serve` to rewrite it, or set %s and %s", ConfigPath(dataDir), EnvURL, EnvAPIKey)
		}
	}
	return New(baseURL, apiKey, opts...), nil
}
