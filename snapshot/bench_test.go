package snapshot

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The design target: snapshot of a 200 MB / 10k-file workspace in <= 2 s,
// reported beside `tar | zstd -1` on the same tree.
//
//	go test ./snapshot -run '^$' -bench . -benchtime 3x

var bench struct {
	once  sync.Once
	dir   string
	bytes int64
	files int
	err   error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bench.dir != "" {
		os.RemoveAll(bench.dir)
	}
	os.Exit(code)
}

// benchTree generates a node_modules-like tree once per test binary:
// 9,900 small source files (0.5-8 KiB of JS-ish text) in 200 packages,
// plus 100 larger files of ~1.5 MiB (half bundles, half binary-ish).
func benchTree(b *testing.B) (string, int64, int) {
	bench.once.Do(func() {
		dir, err := os.MkdirTemp("", "snapshot-bench-")
		if err != nil {
			bench.err = err
			return
		}
		bench.dir = dir
		rng := rand.New(rand.NewPCG(1, 2))
		words := strings.Fields(`const let var function return if else for while import export default
			require module exports this new class extends async await try catch throw null undefined true false
			=> { } ( ) [ ] ; , . = === !== + - * / && || props state value index length map filter reduce
			Object Array String Promise JSON parse stringify console log error options config callback`)
		text := func(n int) []byte {
			var sb strings.Builder
			for sb.Len() < n {
				sb.WriteString(words[rng.IntN(len(words))])
				if rng.IntN(12) == 0 {
					fmt.Fprintf(&sb, "_%d\n", rng.IntN(1000))
				} else {
					sb.WriteByte(' ')
				}
			}
			return []byte(sb.String()[:n])
		}
		write := func(rel string, data []byte) {
			p := filepath.Join(dir, rel)
			if bench.err == nil {
				bench.err = os.MkdirAll(filepath.Dir(p), 0o755)
			}
			if bench.err == nil {
				bench.err = os.WriteFile(p, data, 0o644)
			}
			bench.bytes += int64(len(data))
			bench.files++
		}
		for i := 0; i < 9900; i++ {
			pkg := fmt.Sprintf("node_modules/pkg-%03d", i%200)
			write(fmt.Sprintf("%s/lib/sub%d/file-%d.js", pkg, i%5, i), text(512+rng.IntN(8<<10-512)))
		}
		for i := 0; i < 100; i++ {
			if i%2 == 0 {
				write(fmt.Sprintf("node_modules/pkg-%03d/dist/bundle.js", i), text(1536<<10))
			} else {
				bin := make([]byte, 1536<<10)
				for j := range bin {
					bin[j] = byte(rng.Uint32() >> uint(rng.IntN(24))) // skewed: partly compressible
				}
				write(fmt.Sprintf("node_modules/pkg-%03d/build/Release/addon.node", i), bin)
			}
		}
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return bench.dir, bench.bytes, bench.files
}

func BenchmarkCapture(b *testing.B) {
	dir, size, files := benchTree(b)
	b.SetBytes(size)
	var st CaptureStats
	var err error
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, err = Capture(context.Background(), dir, io.Discard, CaptureOptions{})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(size)/float64(st.CompressedBytes), "ratio")
	b.ReportMetric(float64(files), "files")
}

func BenchmarkTarZstd(b *testing.B) {
	dir, size, _ := benchTree(b)
	for _, tool := range []string{"tar", "zstd"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s not installed", tool)
		}
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("sh", "-c", `tar -C "$1" -cf - . | zstd -1 -q > /dev/null`, "sh", dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}

// BenchmarkCacheLayer is the restore side: verify, decompress, write the
// EROFS image and mount it, beside the unpack it replaced
// (BenchmarkCacheLayerUnpack) and `zstd -d | tar -x` of the same blob.
func BenchmarkCacheLayer(b *testing.B) { benchCacheLayer(b, false) }

// BenchmarkCacheLayerUnpack is BenchmarkCacheLayer where images cannot be
// mounted: the layer is unpacked into a directory (the path before images).
func BenchmarkCacheLayerUnpack(b *testing.B) { benchCacheLayer(b, true) }

func benchCacheLayer(b *testing.B, unpack bool) {
	needRoot(b)
	dir, size, _ := benchTree(b)
	blobPath := filepath.Join(b.TempDir(), "blob.tar.zst")
	f, err := os.Create(blobPath)
	if err != nil {
		b.Fatal(err)
	}
	st, err := Capture(context.Background(), dir, f, CaptureOptions{})
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	open := func(context.Context) (io.ReadCloser, error) { return os.Open(blobPath) }
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c, err := NewCache(filepath.Join(benchScratch(b), "layers"))
		if err != nil {
			b.Fatal(err)
		}
		c.unpack.Store(unpack)
		b.StartTimer()
		if _, err := c.Layer(context.Background(), "snap_bench", st.SHA256, open); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c.Close()
		b.StartTimer()
	}
}

func BenchmarkZstdTarExtract(b *testing.B) {
	dir, size, _ := benchTree(b)
	tmp := benchScratch(b)
	blob := filepath.Join(tmp, "blob.tar.zst")
	if out, err := exec.Command("sh", "-c", `tar -C "$1" -cf - . | zstd -1 -q > "$2"`, "sh", dir, blob).CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(tmp, fmt.Sprint("x", i, "-", b.N))
		if err := os.Mkdir(dst, 0o755); err != nil {
			b.Fatal(err)
		}
		// sync to match the cache's syncfs: both are then on disk.
		cmd := exec.Command("sh", "-c", `zstd -d -q -c "$1" | tar -C "$2" -xf - && sync -f "$2"`, "sh", blob, dst)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}

// benchScratch is where restore benchmarks write: $SNAPSHOT_BENCH_DIR
// (e.g. a tmpfs, to take the disk out of the figure) or a test temp dir.
func benchScratch(b *testing.B) string {
	if d := os.Getenv("SNAPSHOT_BENCH_DIR"); d != "" {
		p, err := os.MkdirTemp(d, "bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(p) })
		return p
	}
	return b.TempDir()
}
