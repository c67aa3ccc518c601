package imagebuild

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/berth-sh/berth/image"
)

// cache maps a step's key to the layer it produced. A key hashes the
// previous step's key, the instruction as executed (after variable
// expansion) and its inputs (for COPY/ADD the diff id of the layer the
// sources make, so changed context files change every key after them),
// so a rebuild with one changed step reruns from that step only. Entries
// whose blob the image store has since collected are misses.
type cache struct {
	path string
	mu   sync.Mutex
	m    map[string]image.Layer
}

func openCache(path string) (*cache, error) {
	c := &cache{path: path, m: map[string]image.Layer{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(b, &c.m); err != nil {
			// A corrupt cache only costs rebuilds.
			c.m = map[string]image.Layer{}
		}
	}
	return c, nil
}

func (c *cache) get(key string) (image.Layer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[key]
	return l, ok
}

func (c *cache) put(key string, l image.Layer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = l
	b, err := json.Marshal(c.m)
	if err != nil {
		return err
	}
	tmp := c.path + ".tmp"
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.path)
}

// chain extends a key.
func chain(prev string, parts ...string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", prev)
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}
