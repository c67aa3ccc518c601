package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/blob/internal/check"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Tamperer replaces the stored bytes of key with different bytes of the
// same length, leaving the recorded digest alone: what bit rot or an
// attacker with write access to the storage would do.
type Tamperer func(t *testing.T, key string)

// Opener returns a fresh, empty store for one subtest, and the hook that
// tampers with it. It registers its own cleanup with t.
type Opener func(t *testing.T) (blob.Store, Tamperer)

// Sizes used by the suite. Large is well above any sane multipart part
// size (S3 stores default to 16 MiB), so it exercises multipart uploads.
const (
	Large  = 64 << 20
	Medium = 24 << 20
)

// Run runs the whole suite against the stores open returns.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, blob.Store, Tamperer)
	}{
		{"RoundTripSmall", testRoundTripSmall},
		{"RoundTripEmpty", testRoundTripEmpty},
		{"RoundTripLargeStreamed", testRoundTripLarge},
		{"WantSHA256", testWantSHA256},
		{"WantSHA256MismatchLarge", testWantMismatchLarge},
		{"Missing", testMissing},
		{"List", testList},
		{"InFlightPutInvisible", testInFlightInvisible},
		{"Delete", testDelete},
		{"OverwriteAtomic", testOverwriteAtomic},
		{"TamperDetected", testTamper},
		{"ConcurrentPuts", testConcurrentPuts},
		{"FailingReader", testFailingReader},
		{"FailingReaderLarge", testFailingReaderLarge},
		{"CancelledPut", testCancelledPut},
		{"InvalidKeys", testInvalidKeys},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, tamper := open(t)
			tc.fn(t, s, tamper)
		})
	}
}

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// stream is a deterministic, non-seekable source of n pseudo-random
// bytes: a store cannot learn its size up front or rewind it.
func stream(seed uint64, n int64) io.Reader {
	var s [32]byte
	s[0] = byte(seed)
	s[1] = byte(seed >> 8)
	return struct{ io.Reader }{io.LimitReader(rand.NewChaCha8(s), n)}
}

func streamSum(t *testing.T, seed uint64, n int64) string {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, stream(seed, n)); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func put(t *testing.T, s blob.Store, key string, data []byte) blob.Info {
	t.Helper()
	info, err := s.Put(context.Background(), key, bytes.NewReader(data), "")
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	want := blob.Info{Key: key, Size: int64(len(data)), SHA256: sum(data)}
	if info != want {
		t.Fatalf("Put(%q) = %+v, want %+v", key, info, want)
	}
	return info
}

func get(t *testing.T, s blob.Store, key string) ([]byte, blob.Info) {
	t.Helper()
	rc, info, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return b, info
}

func wantKind(t *testing.T, what string, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%s: got error %v, want kind %q", what, err, kind)
	}
}

func wantAbsent(t *testing.T, s blob.Store, key string) {
	t.Helper()
	_, err := s.Stat(context.Background(), key)
	wantKind(t, "Stat("+key+")", err, errdefs.ErrNotFound)
	list, err := s.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if in.Key == key {
			t.Fatalf("List shows %q, which must not exist", key)
		}
	}
}

func testRoundTripSmall(t *testing.T, s blob.Store, _ Tamperer) {
	data := []byte("hello, berth\n")
	want := put(t, s, "snapshots/a/b.tar.zst", data)
	got, info := get(t, s, "snapshots/a/b.tar.zst")
	if !bytes.Equal(got, data) || info != want {
		t.Fatalf("Get = %q %+v, want %q %+v", got, info, data, want)
	}
	st, err := s.Stat(context.Background(), "snapshots/a/b.tar.zst")
	if err != nil || st != want {
		t.Fatalf("Stat = %+v, %v; want %+v", st, err, want)
	}
}

func testRoundTripEmpty(t *testing.T, s blob.Store, _ Tamperer) {
	want := put(t, s, "empty", nil)
	if want.SHA256 != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("empty sha256 = %s", want.SHA256)
	}
	got, info := get(t, s, "empty")
	if len(got) != 0 || info != want {
		t.Fatalf("Get(empty) = %d bytes %+v", len(got), info)
	}
}

func testRoundTripLarge(t *testing.T, s blob.Store, _ Tamperer) {
	ctx := context.Background()
	wantSum := streamSum(t, 1, Large)
	info, err := s.Put(ctx, "big/blob", stream(1, Large), "")
	if err != nil {
		t.Fatal(err)
	}
	if info != (blob.Info{Key: "big/blob", Size: Large, SHA256: wantSum}) {
		t.Fatalf("Put = %+v, want size %d sha %s", info, Large, wantSum)
	}
	rc, ginfo, err := s.Get(ctx, "big/blob")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil || n != Large || hex.EncodeToString(h.Sum(nil)) != wantSum || ginfo != info {
		t.Fatalf("Get: %d bytes, err %v, info %+v", n, err, ginfo)
	}
}

func testWantSHA256(t *testing.T, s blob.Store, _ Tamperer) {
	ctx := context.Background()
	data := []byte("content-addressed")
	info, err := s.Put(ctx, "k", bytes.NewReader(data), sum(data))
	if err != nil || info.SHA256 != sum(data) {
		t.Fatalf("Put with the right digest: %+v, %v", info, err)
	}
	// A wrong digest stores nothing, and leaves an existing blob alone.
	_, err = s.Put(ctx, "k", strings.NewReader("other"), sum(data))
	wantKind(t, "Put with wrong digest over existing key", err, errdefs.ErrInvalidArgument)
	if got, _ := get(t, s, "k"); !bytes.Equal(got, data) {
		t.Fatalf("failed Put changed the existing blob to %q", got)
	}
	_, err = s.Put(ctx, "fresh", strings.NewReader("other"), sum(data))
	wantKind(t, "Put with wrong digest", err, errdefs.ErrInvalidArgument)
	wantAbsent(t, s, "fresh")
	_, err = s.Put(ctx, "fresh", strings.NewReader("x"), "not-a-digest")
	wantKind(t, "Put with malformed digest", err, errdefs.ErrInvalidArgument)
	wantAbsent(t, s, "fresh")
}

func testWantMismatchLarge(t *testing.T, s blob.Store, _ Tamperer) {
	_, err := s.Put(context.Background(), "large", stream(2, Medium), sum(nil))
	wantKind(t, "large Put with wrong digest", err, errdefs.ErrInvalidArgument)
	wantAbsent(t, s, "large")
	// The right digest on the same path is accepted.
	want := streamSum(t, 2, Medium)
	info, err := s.Put(context.Background(), "large", stream(2, Medium), want)
	if err != nil || info.SHA256 != want || info.Size != Medium {
		t.Fatalf("large Put with right digest: %+v, %v", info, err)
	}
}

func testMissing(t *testing.T, s blob.Store, _ Tamperer) {
	ctx := context.Background()
	_, _, err := s.Get(ctx, "no/such/key")
	wantKind(t, "Get(missing)", err, errdefs.ErrNotFound)
	_, err = s.Stat(ctx, "no/such/key")
	wantKind(t, "Stat(missing)", err, errdefs.ErrNotFound)
	// A key below an existing blob's name is still just missing.
	put(t, s, "file", []byte("x"))
	_, err = s.Stat(ctx, "file/below")
	wantKind(t, "Stat(file/below)", err, errdefs.ErrNotFound)
}

func keysOf(list []blob.Info) []string {
	var out []string
	for _, in := range list {
		out = append(out, in.Key)
	}
	return out
}

func testList(t *testing.T, s blob.Store, _ Tamperer) {
	ctx := context.Background()
	infos := map[string]blob.Info{}
	// "snap" and "snap/..." coexist: a blob's name may also be a prefix.
	for i, k := range []string{"snap/b", "snap/a", "snap/c/d", "snapshot", "other/x", "snap-x", "snap"} {
		infos[k] = put(t, s, k, bytes.Repeat([]byte{byte('a' + i)}, i+1))
	}
	cases := map[string][]string{
		"snap/":  {"snap/a", "snap/b", "snap/c/d"},
		"snap":   {"snap", "snap-x", "snap/a", "snap/b", "snap/c/d", "snapshot"},
		"snap/c": {"snap/c/d"},
		"":       {"other/x", "snap", "snap-x", "snap/a", "snap/b", "snap/c/d", "snapshot"},
		"nope/":  nil,
		"zzz":    nil,
	}
	for prefix, want := range cases {
		list, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		if got := keysOf(list); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("List(%q) = %v, want %v", prefix, got, want)
		}
		for _, in := range list {
			if in != infos[in.Key] {
				t.Errorf("List(%q) entry %+v, want %+v", prefix, in, infos[in.Key])
			}
		}
	}
	_, err := s.List(ctx, "../")
	wantKind(t, "List(../)", err, errdefs.ErrInvalidArgument)
}

// blockingReader yields n bytes, then blocks until release is closed, then
// ends: a Put frozen mid-stream.
type blockingReader struct {
	r       io.Reader
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.once.Do(func() { close(b.reached) })
		<-b.release
	}
	return n, err
}

func testInFlightInvisible(t *testing.T, s blob.Store, _ Tamperer) {
	ctx := context.Background()
	br := &blockingReader{r: stream(3, Medium), reached: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, "inflight", br, "")
		done <- err
	}()
	select {
	case <-br.reached:
	case err := <-done:
		t.Fatalf("Put returned before its reader finished: %v", err)
	}
	wantAbsent(t, s, "inflight")
	close(br.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, "")
	if err != nil || fmt.Sprint(keysOf(list)) != "[inflight]" {
		t.Fatalf("List after Put = %v, %v; want only inflight (no temp objects)", keysOf(list), err)
	}
}

func testDelete(t *testing.T, s blob.Store, _ Tamperer) {
	ctx := context.Background()
	put(t, s, "d/x", []byte("1"))
	put(t, s, "d/xy", []byte("2"))
	put(t, s, "d", []byte("3"))
	if err := s.Delete(ctx, "d/x"); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, s, "d/x")
	if err := s.Delete(ctx, "d/x"); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if err := s.Delete(ctx, "never/existed"); err != nil {
		t.Fatalf("Delete(missing): %v", err)
	}
	list, err := s.List(ctx, "")
	if err != nil || fmt.Sprint(keysOf(list)) != "[d d/xy]" {
		t.Fatalf("List after Delete = %v, %v", keysOf(list), err)
	}
	// A deleted key can be written again.
	put(t, s, "d/x", []byte("again"))
}

func testOverwriteAtomic(t *testing.T, s blob.Store, _ Tamperer) {
	ctx := context.Background()
	const size = 1 << 20
	versions := [][]byte{bytes.Repeat([]byte("A"), size), bytes.Repeat([]byte("B"), size+1)}
	put(t, s, "ow", versions[0])

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for reads := 0; ; reads++ {
				select {
				case <-stop:
					if reads == 0 {
						errs <- errors.New("reader never ran")
					}
					return
				default:
				}
				rc, info, err := s.Get(ctx, "ow")
				if err != nil {
					errs <- fmt.Errorf("s.Get during overwrite: %w", err)
					return
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					errs <- fmt.Errorf("read during overwrite: %w", err)
					return
				}
				if !bytes.Equal(b, versions[0]) && !bytes.Equal(b, versions[1]) || sum(b) != info.SHA256 {
					errs <- fmt.Errorf("read a torn blob: %d bytes, info %+v", len(b), info)
					return
				}
			}
		}()
	}
	for i := range 10 {
		put(t, s, "ow", versions[(i+1)%2])
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, _ := get(t, s, "ow"); !bytes.Equal(got, versions[0]) {
		t.Fatalf("final content has %d bytes, want version A", len(got))
	}
}

func testTamper(t *testing.T, s blob.Store, tamper Tamperer) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("precious "), 1000)
	put(t, s, "t/victim", data)
	put(t, s, "t/bystander", data)
	tamper(t, "t/victim")

	rc, _, err := s.Get(ctx, "t/victim")
	if err != nil {
		// Failing at open is fine too, as long as it is not NotFound.
		if errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("tampered blob reported missing: %v", err)
		}
		return
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err == nil {
		t.Fatalf("reading a tampered blob succeeded (%d bytes, equal=%v)", len(got), bytes.Equal(got, data))
	}
	if !errors.Is(err, errdefs.ErrInternal) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("tampered read error = %v; want an internal error saying corrupt", err)
	}
	// Negative control: the untouched copy still reads clean.
	if got, _ := get(t, s, "t/bystander"); !bytes.Equal(got, data) {
		t.Fatal("bystander blob changed")
	}
}

func testConcurrentPuts(t *testing.T, s blob.Store, _ Tamperer) {
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := bytes.Repeat([]byte{byte(i)}, 1000*(i+1))
			info, err := s.Put(ctx, fmt.Sprintf("c/%02d", i), bytes.NewReader(data), sum(data))
			if err == nil && info.Size != int64(len(data)) {
				err = fmt.Errorf("key %d: size %d", i, info.Size)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	list, err := s.List(ctx, "c/")
	if err != nil || len(list) != n {
		t.Fatalf("List = %d entries, %v; want %d", len(list), err, n)
	}
	for i := range n {
		got, _ := get(t, s, fmt.Sprintf("c/%02d", i))
		if !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, 1000*(i+1))) {
			t.Fatalf("key %d holds the wrong content", i)
		}
	}
}

var errBoom = errors.New("source failed mid-stream")

// failingReader returns errBoom after passing n bytes of r through.
type failingReader struct {
	r io.Reader
	n int64
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errBoom
	}
	if int64(len(p)) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= int64(n)
	return n, err
}

func checkFailingPut(t *testing.T, s blob.Store, after int64) {
	ctx := context.Background()
	old := put(t, s, "kept", []byte("old content"))
	for _, key := range []string{"fresh", "kept"} {
		_, err := s.Put(ctx, key, &failingReader{r: stream(4, Large), n: after}, "")
		if !errors.Is(err, errBoom) {
			t.Fatalf("Put(%s) with failing reader: %v; want an error wrapping the reader's", key, err)
		}
	}
	wantAbsent(t, s, "fresh")
	if got, info := get(t, s, "kept"); string(got) != "old content" || info != old {
		t.Fatalf("failed overwrite changed the blob: %q %+v", got, info)
	}
	list, err := s.List(ctx, "")
	if err != nil || fmt.Sprint(keysOf(list)) != "[kept]" {
		t.Fatalf("List after failed Puts = %v, %v", keysOf(list), err)
	}
}

func testFailingReader(t *testing.T, s blob.Store, _ Tamperer)      { checkFailingPut(t, s, 1000) }
func testFailingReaderLarge(t *testing.T, s blob.Store, _ Tamperer) { checkFailingPut(t, s, Medium) }

func testCancelledPut(t *testing.T, s blob.Store, _ Tamperer) {
	ctx, cancel := context.WithCancel(context.Background())
	br := &blockingReader{r: stream(5, 1<<20), reached: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, "cancelled", br, "")
		done <- err
	}()
	<-br.reached
	cancel()
	close(br.release)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Put succeeded after its context was cancelled")
		}
	case <-time.After(time.Minute):
		t.Fatal("Put ignored cancellation")
	}
	wantAbsent(t, s, "cancelled")
}

func testInvalidKeys(t *testing.T, s blob.Store, _ Tamperer) {
	ctx := context.Background()
	bad := []string{
		"", "/abs", "a/../b", "..", ".", "./a", "a/.", "a//b", "a/", "a\x00b", "a b",
		"a\\b", "ü", "a:b", "a~", strings.Repeat("x", check.MaxKeyLen+1), "a/" + strings.Repeat("y", check.MaxSegmentLen+1),
	}
	for _, k := range bad {
		_, err := s.Put(ctx, k, strings.NewReader("x"), "")
		wantKind(t, fmt.Sprintf("Put(%q)", k), err, errdefs.ErrInvalidArgument)
		_, _, err = s.Get(ctx, k)
		wantKind(t, fmt.Sprintf("Get(%q)", k), err, errdefs.ErrInvalidArgument)
		_, err = s.Stat(ctx, k)
		wantKind(t, fmt.Sprintf("Stat(%q)", k), err, errdefs.ErrInvalidArgument)
		err = s.Delete(ctx, k)
		wantKind(t, fmt.Sprintf("Delete(%q)", k), err, errdefs.ErrInvalidArgument)
	}
	// Negative control: the longest valid key and segment are accepted.
	seg := strings.Repeat("z", check.MaxSegmentLen)
	long := strings.Repeat(seg+"/", check.MaxKeyLen/(check.MaxSegmentLen+1))
	long += strings.Repeat("z", check.MaxKeyLen-len(long))
	for _, k := range []string{long, seg, "A-Z_a.z/0-9"} {
		if len(k) > check.MaxKeyLen {
			t.Fatalf("control key is %d bytes", len(k))
		}
		put(t, s, k, []byte("ok"))
	}
	list, err := s.List(ctx, "")
	if err != nil || len(list) != 3 {
		t.Fatalf("List = %v, %v", keysOf(list), err)
	}
}
