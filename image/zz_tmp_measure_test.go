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
	start = time.Now()
	must(t, syncFS(dst))
	t.Logf("syncfs %s", time.Since(start))
	f.Seek(0, 0)
	start = time.Now()
	r, c, _ := decompress(f)
	n, _ := copyDiscard(r)
	c()
	t.Logf("decompress only %d bytes %s", n, time.Since(start))
}

func copyDiscard(r interface{ Read([]byte) (int, error) }) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(k)
		if err != nil {
			return n, nil
		}
	}
}
