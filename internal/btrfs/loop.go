package btrfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// AttachAndMount binds file to a free loop device with autoclear set, mounts the
// device at dir as btrfs and only then closes the device fd, so the loop
// device is released automatically when the filesystem is unmounted (no
// stale /dev/loopN after a crash-free Shutdown).
func AttachAndMount(file, dir, opts string) error {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open loop-control: %w", err)
	}
	defer ctl.Close()
	back, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer back.Close()
	for attempt := 0; attempt < 16; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(back.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], file)
		if err := unix.IoctlLoopConfigure(int(lf.Fd()), &cfg); err != nil {
			lf.Close()
			if errors.Is(err, unix.EBUSY) { // raced with another user of loop-control
				continue
			}
			return fmt.Errorf("configure %s for %s: %w", dev, file, err)
		}
		err = unix.Mount(dev, dir, "btrfs", unix.MS_NOATIME, opts)
		lf.Close() // autoclear: detaches now if the mount failed, at umount otherwise
		if err != nil {
			return fmt.Errorf("mount %s (%s) at %s: %w", file, dev, dir, err)
		}
		return nil
	}
	return errors.New("no free loop device after 16 attempts")
}

// Mkfs formats file as btrfs. Single profiles: the image lives on the host's
// own disk, so DUP metadata would only double the writes.
func Mkfs(ctx context.Context, file string) error {
	cmd := exec.CommandContext(ctx, "mkfs.btrfs", "-q", "-f", "-m", "single", "-d", "single", file)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("mkfs.btrfs not found (install btrfs-progs): %w", err)
		}
		return fmt.Errorf("mkfs.btrfs %s: %v: %s", file, err, tail(out, 512))
	}
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
