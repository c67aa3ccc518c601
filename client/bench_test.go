package client

import (
	"context"
	"testing"

	"github.com/berth-sh/berth/api"
)

// The HTTP share of an exec round trip (server + client, fake backend).
func BenchmarkExec(b *testing.B) {
	f := newFake()
	c, _ := start(b, f)
	ctx := context.Background()
	req := api.ExecRequest{Command: "true"}
	b.Run("buffered", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Exec(ctx, "y", req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.ExecStream(ctx, "y", req, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
