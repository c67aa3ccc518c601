package runtime

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// CheckpointMeta is recorded inside every checkpoint pack (so the digest
// covers it): what a restore must check before CRIU reads the image.
type CheckpointMeta struct {
	ID          string   `json:"id"`
	CPUModel    string   `json:"cpu_model"`
	CPUFlags    []string `json:"cpu_flags"`
	CRIUVersion string   `json:"criu_version"`
	Kernel      string   `json:"kernel"`
	ImageBytes  int64    `json:"image_bytes"` // CRIU's files, unpacked
}

// Checkpoint is what Checkpoint returns: the pack's digest and size, and
// its metadata. The digest is the pack's name in the checkpoint dir.
type Checkpoint struct {
	Digest    string // "sha256:<hex>" of the pack
	PackBytes int64
	Meta      CheckpointMeta
}

const metaFile = "berth-checkpoint.json"

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// packPath is the pack file for digest in dir.
func packPath(dir, digest string) (string, error) {
	if !digestRE.MatchString(digest) {
		return "", errdefs.InvalidArgument("checkpoint digest %q is not sha256:<64 hex>", digest)
	}
	return filepath.Join(dir, strings.TrimPrefix(digest, "sha256:")+".tar"), nil
}

// pack tars the regular files of image (flat: CRIU writes no subdirs) into
// dir, named by the sha256 of the tar, and returns the digest and size.
func pack(image, dir string) (string, int64, error) {
	ents, err := os.ReadDir(image)
	if err != nil {
		return "", 0, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	tmp, err := os.CreateTemp(dir, ".pack-*")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, h), 1<<20)
	tw := tar.NewWriter(bw)
	for _, n := range names {
		if err := addFile(tw, filepath.Join(image, n), n); err != nil {
			return "", 0, err
		}
	}
	if err := tw.Close(); err != nil {
		return "", 0, err
	}
	if err := bw.Flush(); err != nil {
		return "", 0, err
	}
	if err := tmp.Sync(); err != nil {
		return "", 0, err
	}
	size, _ := tmp.Seek(0, io.SeekCurrent)
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	dst, _ := packPath(dir, digest)
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", 0, err
	}
	return digest, size, nil
}

func addFile(tw *tar.Writer, path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: fi.Size(), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// verifyPack checks that the pack for digest in dir hashes to digest.
// Nothing of it is parsed before this returns nil.
func verifyPack(dir, digest string) (string, error) {
	p, err := packPath(dir, digest)
	if err != nil {
		return "", err
	}
	f, err := os.Open(p)
	if err != nil {
		if os.IsNotExist(err) {
			return "", errdefs.NotFound("checkpoint %s: no pack in %s", digest, dir)
		}
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, bufio.NewReaderSize(f, 1<<20)); err != nil {
		return "", err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return "", errdefs.InvalidArgument("checkpoint %s refused: its pack hashes to %s (tampered or corrupt); CRIU did not read it", digest, got)
	}
	return p, nil
}

// unpack extracts a verified pack into dst: regular files with plain names
// only (the pack is berth's own, but a restore never trusts a path).
func unpack(p, dst string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(bufio.NewReaderSize(f, 1<<20))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errdefs.InvalidArgument("checkpoint pack: %v", err)
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Name != filepath.Base(hdr.Name) || hdr.Name == "." || hdr.Name == ".." {
			return errdefs.InvalidArgument("checkpoint pack: entry %q is not a plain file", hdr.Name)
		}
		out, err := os.OpenFile(filepath.Join(dst, hdr.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

func writeMeta(image string, m CheckpointMeta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(image, metaFile), b, 0o600)
}

func readMeta(image string) (CheckpointMeta, error) {
	var m CheckpointMeta
	b, err := os.ReadFile(filepath.Join(image, metaFile))
	if err != nil {
		return m, errdefs.InvalidArgument("checkpoint has no %s: %v", metaFile, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, errdefs.InvalidArgument("checkpoint %s: %v", metaFile, err)
	}
	return m, nil
}

// hostCPU reads the first processor's model name and flags.
func hostCPU() (model string, flags []string, err error) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "", nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		case "flags":
			if flags == nil {
				flags = strings.Fields(v)
				sort.Strings(flags)
			}
		}
	}
	return model, flags, nil
}

// cpuCompatible refuses a restore on a host missing CPU flags the
// checkpointed host had: restored code may use any of them (glibc picks
// memcpy and friends by them once, at process start).
func cpuCompatible(m CheckpointMeta, hostFlags []string) error {
	have := make(map[string]bool, len(hostFlags))
	for _, f := range hostFlags {
		have[f] = true
	}
	var missing []string
	for _, f := range m.CPUFlags {
		if !have[f] {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return errdefs.FailedPrecondition("checkpoint of %s needs CPU flags this host lacks: %s (taken on %q)",
			m.ID, strings.Join(missing, " "), m.CPUModel)
	}
	return nil
}

func dirBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}
