package agent_test

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/agentclient"
)

// largeSize is over 1 GB: backups of that size must work (no size cap).
const largeSize = 1200 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writePattern writes size bytes of a cheap, position-dependent pattern
// (every 4 KiB block stamped with its index, so a dropped or repeated
// block changes the checksum) and returns its CRC-32C.
func writePattern(t *testing.T, p string, size int64) uint32 {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	var crc uint32
	var block uint64
	for written := int64(0); written < size; {
		chunk := buf
		if rest := size - written; rest < int64(len(chunk)) {
			chunk = chunk[:rest]
		}
		for off := 0; off+8 <= len(chunk); off += 4096 {
			binary.LittleEndian.PutUint64(chunk[off:], block)
			block++
		}
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
		crc = crc32.Update(crc, castagnoli, chunk)
		written += int64(len(chunk))
	}
	return crc
}

func fileCRC(t *testing.T, p string) (uint32, int64) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return h.Sum32(), n
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }

// TestArchiveLargeRoundTrip archives and restores a 1.2 GB file through the
// agent and logs throughput beside GNU tar doing the same on this machine.
// It asserts correctness only, never speed.
func TestArchiveLargeRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1.2 GB three times; skipped with -short")
	}
	a, c := newClient(t)
	ctx := context.Background()
	src := filepath.Join(a.Dir, "big")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	want := writePattern(t, filepath.Join(src, "big.bin"), largeSize)
	mustWrite(t, filepath.Join(src, "small.txt"), "small", 0o644)
	t.Logf("generated %d MiB in %v", largeSize>>20, time.Since(start).Round(time.Millisecond))

	// 1. Archive only: agent walk + tar + HTTP over the unix socket.
	start = time.Now()
	rc, err := c.ReadArchive(ctx, src, agentclient.ArchiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil || n < largeSize {
		t.Fatalf("archive read %d bytes: %v", n, err)
	}
	readDur := time.Since(start)

	// 2. Round trip: the archive streamed straight into a restore.
	dst := filepath.Join(a.Dir, "restored")
	start = time.Now()
	rc, err = c.ReadArchive(ctx, src, agentclient.ArchiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.WriteArchive(ctx, dst, rc, "")
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	rtDur := time.Since(start)
	if res.Files != 2 || res.Bytes != largeSize+5 {
		t.Fatalf("restore result %+v", res)
	}
	got, size := fileCRC(t, filepath.Join(dst, "big.bin"))
	if got != want || size != largeSize {
		t.Fatalf("restored big.bin: crc %08x size %d, want %08x %d", got, size, want, int64(largeSize))
	}
	t.Logf("berth archive (read only): %d MiB in %v = %.0f MiB/s", n>>20, readDur.Round(time.Millisecond), mbps(n, readDur))
	t.Logf("berth archive → restore (incl. syncfs + swap): %v = %.0f MiB/s", rtDur.Round(time.Millisecond), mbps(n, rtDur))

	// The nearest plain tool, same data, same run, for the ratio.
	if _, err := exec.LookPath("tar"); err != nil {
		t.Log("no tar on PATH: no plain-tool comparison")
		return
	}
	start = time.Now()
	cmd := exec.Command("tar", "-cf", "-", "-C", src, ".")
	cmd.Stdout = io.Discard // a pipe, so GNU tar cannot skip reading as with /dev/null
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	tarRead := time.Since(start)
	plain := filepath.Join(a.Dir, "plain")
	os.MkdirAll(plain, 0o755)
	start = time.Now()
	if out, err := exec.Command("sh", "-c", `tar -cf - -C "$1" . | tar -xf - -C "$2" && sync -f "$2"`, "sh", src, plain).CombinedOutput(); err != nil {
		t.Fatalf("tar | tar: %v %s", err, out)
	}
	tarRT := time.Since(start)
	t.Logf("tar -c | (pipe):            %v = %.0f MiB/s (berth/tar time ratio %.2f)", tarRead.Round(time.Millisecond), mbps(n, tarRead), readDur.Seconds()/tarRead.Seconds())
	t.Logf("tar -c | tar -x && sync -f: %v = %.0f MiB/s (berth/tar time ratio %.2f)", tarRT.Round(time.Millisecond), mbps(n, tarRT), rtDur.Seconds()/tarRT.Seconds())
}
