package image

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestZZMeasure(t *testing.T) {
	s, err := Open("/var/lib/berth-dev/images")
	must(t, err)
	img, err := s.Resolve(context.Background(), "debian-trixie")
	must(t, err)
	dst, _ := os.MkdirTemp("/var/lib/berth-dev", "measure-")
	defer os.RemoveAll(dst)
	f, _ := os.Open(s.blobPath(img.Layers[0]))
	start := time.Now()
	must(t, unpackCompressed(context.Background(), f, dst, img.DiffIDs[0]))
	t.Logf("unpack %s", time.Since(start))
}
