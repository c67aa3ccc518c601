package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/berth-sh/berth/api"
)

type idemKey struct{}

// WithIdempotencyKey makes every mutating call made with the returned
// context carry key as its Idempotency-Key: a retry with the same key
// returns the first answer instead of repeating the effect, also after a
// daemon restart.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idemKey{}, key)
}

// CallObject calls method on the durable object (class, id) with args
// encoded as JSON (nil: none) and decodes its JSON result into out (nil:
// discard).
func (c *Client) CallObject(ctx context.Context, class, id, method string, args, out any) error {
	path := "/v1/objects/" + url.PathEscape(class) + "/" + url.PathEscape(id) + "/" + url.PathEscape(method)
	var raw json.RawMessage
	_, err := c.doJSON(ctx, http.MethodPost, path, nil, args, &raw)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// ObjectJournal returns the journal of the durable object (class, id).
func (c *Client) ObjectJournal(ctx context.Context, class, id string) ([]api.JournalEntry, error) {
	var out []api.JournalEntry
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/objects/"+url.PathEscape(class)+"/"+url.PathEscape(id)+"/journal", nil, nil, &out)
	return out, err
}

// Journal returns the controller journal of a sandbox (or of a durable
// object, by its container's sandbox name), oldest first.
func (c *Client) Journal(ctx context.Context, name string) ([]api.JournalEntry, error) {
	var out []api.JournalEntry
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(name, "journal"), nil, nil, &out)
	return out, err
}
