package image

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"testing"
	"time"
)

// FuzzUnpack feeds arbitrary layer tars (paths, links, whiteouts, devices,
// PAX records) to the unpacker, which unpacks into <T>/root beside the
// canary tree <T>/canary. It may refuse anything, but it must not panic,
// must not change, create or delete anything outside root, and must leave
// no device node but the overlay whiteout. Seeds are the breakout shapes
// (go test runs them; testdata/fuzz/FuzzUnpack holds found inputs).
func FuzzUnpack(f *testing.F) {
	needRoot(f)
	seeds := [][]ent{
		{dir("a/"), file("a/b", "x"), symlink("a/l", "b"), hardlink("a/h", "a/b")},
		{file("../canary/secret", "pwned")},
		{dir("a/"), file("a/../../canary/secret", "pwned")},
		{symlink("e", "../canary"), file("e/secret", "pwned")},
		{symlink("up", ".."), symlink("up2", "up/canary"), file("up2/new", "pwned")},
		{dir("a/"), symlink("a/b", "../.."), symlink("c", "a/b/canary"), file("c/new", "pwned")},
		{hardlink("x", "../canary/secret")},
		{symlink("d", "../canary"), hardlink("x", "d/secret")},
		{symlink("s", "../canary"), file("s/.wh.secret", "")},
		{symlink("s", "../canary"), file("s/.wh..wh..opq", "")},
		{dir("a/"), file("a/.wh..", "")},
		{file(".wh...", "")},
		{dir("a/"), file("a/x", "1"), symlink("a", "../canary"), file("a/secret", "pwned")},
		{{name: "dev", typ: '3', major: 1, minor: 1, mode: 0o600}},
		{{name: "f", typ: '0', body: "x", mode: 0o4755, pax: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\xff\xff\xff\xff"}}},
		{{name: "f", typ: '0', body: "x", pax: map[string]string{"SCHILY.xattr.trusted.overlay.opaque": "y"}}},
	}
	for _, s := range seeds {
		f.Add(mkTar(f, s...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		base, dst := setupCanary(t)
		before := census(t, base)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = Unpack(context.Background(), bytes.NewReader(data), dst, UnpackOptions{MaxEntries: 1000, MaxFileSize: 1 << 20, MaxTotalBytes: 4 << 20})
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("Unpack hangs on a %d-byte input:\n%s", len(data), buf[:runtime.Stack(buf, true)])
		}
		if after := census(t, base); after != before {
			t.Fatalf("outside the root changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		assertNoDevices(t, dst)
		// The root itself is still a directory (not swapped for a link).
		if fi, err := os.Lstat(dst); err != nil || !fi.IsDir() {
			t.Fatalf("root replaced: %v %v", fi, err)
		}
	})
}
