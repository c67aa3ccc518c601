package image

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// tarDir writes dir as a tar stream: entries in sorted order, numeric
// owners only (no user/group names: a lookup would consult the host's
// passwd, not the image's), hardlinks kept, mtimes at second precision.
// Sockets and device nodes are skipped; extended attributes (file
// capabilities included) are not carried, matching what Unpack keeps.
// dir must be trusted: it is walked with plain paths.
func tarDir(ctx context.Context, dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	type ino struct{ dev, ino uint64 }
	links := map[ino]string{}
	var walk func(rel string) error
	walk = func(rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		full := filepath.Join(dir, rel)
		fi, err := os.Lstat(full)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		hdr := &tar.Header{
			Name:    rel,
			Mode:    int64(fi.Mode().Perm()),
			Uid:     int(st.Uid),
			Gid:     int(st.Gid),
			ModTime: fi.ModTime().Truncate(time.Second),
			Format:  tar.FormatPAX,
		}
		if fi.Mode()&os.ModeSetuid != 0 {
			hdr.Mode |= 0o4000
		}
		if fi.Mode()&os.ModeSetgid != 0 {
			hdr.Mode |= 0o2000
		}
		if fi.Mode()&os.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		switch m := fi.Mode(); {
		case m.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case m.IsRegular():
			key := ino{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok && st.Nlink > 1 {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			} else {
				links[key] = rel
				hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
			}
		case m&os.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case m&os.ModeNamedPipe != 0:
			hdr.Typeflag = tar.TypeFifo
		default:
			return nil // sockets, devices
		}
		if rel != "." {
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			f, err := os.Open(full)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
			if n != hdr.Size {
				return fmt.Errorf("%s changed size while packing", rel)
			}
		}
		if hdr.Typeflag != tar.TypeDir {
			return nil
		}
		names, err := readDirNames(full)
		if err != nil {
			return err
		}
		for _, n := range names {
			child := n
			if rel != "." {
				child = rel + "/" + n
			}
			if err := walk(child); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk("."); err != nil {
		return err
	}
	return tw.Close()
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}
