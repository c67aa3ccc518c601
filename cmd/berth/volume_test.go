package main

import (
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "1024": 1024, "512K": 512 << 10, "64M": 64 << 20, "10G": 10 << 30, "1t": 1 << 40} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"G", "-1G", "1.5G", "10X", "0"} {
		if _, err := parseSize(in); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parseSize(%q): want invalid argument, got %v", in, err)
		}
	}
}

func TestParseVolumeFlags(t *testing.T) {
	got, err := parseVolumeFlags([]string{"data:/data", "m:/models:ro", "x:/x:rw"})
	want := []api.VolumeMount{{Name: "data", Path: "/data"}, {Name: "m", Path: "/models", ReadOnly: true}, {Name: "x", Path: "/x"}}
	if err != nil || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, in := range []string{"data", "a:/b:c", "a:/b:ro:x"} {
		if _, err := parseVolumeFlags([]string{in}); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: want invalid argument, got %v", in, err)
		}
	}
}
