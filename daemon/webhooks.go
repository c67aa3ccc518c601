package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-sh/berth/events"
)

// WebhookConfig is the operator's lifecycle webhooks (package events).
type WebhookConfig struct {
	// URLs receive every lifecycle event (serve --webhook, repeatable).
	URLs []string
	// SecretFile holds the HMAC secret that signs deliveries (serve
	// --webhook-secret-file); required with URLs.
	SecretFile string
}

// minWebhookSecret is the shortest secret accepted.
const minWebhookSecret = 16

// load validates the URLs and reads the secret; nil, nil when none are
// configured.
func (c WebhookConfig) load() ([]byte, error) {
	if len(c.URLs) == 0 {
		if c.SecretFile != "" {
			return nil, fmt.Errorf("--webhook-secret-file without --webhook")
		}
		return nil, nil
	}
	seen := map[string]bool{}
	for _, u := range c.URLs {
		if err := events.ValidateURL(u); err != nil {
			return nil, fmt.Errorf("--webhook: %w", err)
		}
		if seen[u] {
			return nil, fmt.Errorf("--webhook %s given twice", u)
		}
		seen[u] = true
	}
	if c.SecretFile == "" {
		return nil, fmt.Errorf("--webhook needs --webhook-secret-file (deliveries are signed)")
	}
	b, err := os.ReadFile(c.SecretFile)
	if err != nil {
		return nil, fmt.Errorf("--webhook-secret-file: %w", err)
	}
	secret := []byte(strings.TrimSpace(string(b)))
	if len(secret) < minWebhookSecret {
		return nil, fmt.Errorf("--webhook-secret-file %s: the secret must have at least %d characters", c.SecretFile, minWebhookSecret)
	}
	return secret, nil
}

// webhookCursor is where the delivery cursor of url is kept: one file per
// URL under the data dir, named by the URL's hash (a URL's query may hold
// a token; the file name shows nothing of it).
func webhookCursor(dataDir, url string) string {
	sum := sha256.Sum256([]byte(url))
	return filepath.Join(dataDir, "webhooks", hex.EncodeToString(sum[:12])+".cursor")
}

// startWebhooks runs one deliverer per URL until ctx ends.
func startWebhooks(ctx context.Context, c WebhookConfig, secret []byte, dataDir string, feed *events.Feed, logf func(string, ...any)) {
	for _, u := range c.URLs {
		w := &events.Webhook{URL: u, Secret: secret, Feed: feed, CursorFile: webhookCursor(dataDir, u), Logf: logf}
		go func() {
			if err := w.Run(ctx); err != nil && ctx.Err() == nil {
				logf("webhook %s stopped: %v", u, err)
			}
		}()
		logf("webhook: lifecycle events to %s (signed; cursor %s)", redactURL(u), w.CursorFile)
	}
}

// redactURL drops a URL's query from logs (it may hold a token).
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}
