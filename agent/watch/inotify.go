package watch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// A small recursive inotify watcher. inotify watches single directories, so
// a recursive watch keeps one watch per directory, adds watches as
// directories appear, and drops them as directories leave the tree.

// watchMask is what every watch asks for. The *_SELF events tell us the
// watched root itself went away.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

type watchOptions struct {
	root      string
	rootIsDir bool
	recursive bool
	filter    watchFilter
	budget    *watchBudget
}

type watcher struct {
	watchOptions
	fd      int      // raw inotify fd for add/rm (owned by f)
	f       *os.File // non-blocking, under the runtime poller: Close interrupts Read
	rootWd  int32
	dirs    map[int32]string // wd → watched path
	wds     map[string]int32 // watched path → wd
	charged int              // directories taken from the budget (== len(dirs) between calls)
}

func newWatcher(o watchOptions) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, errdefs.ResourceExhausted("inotify: %w (too many watches open in the sandbox?)", err)
	}
	w := &watcher{
		watchOptions: o,
		fd:           fd,
		f:            os.NewFile(uintptr(fd), "inotify"),
		dirs:         make(map[int32]string),
		wds:          make(map[string]int32),
	}
	if !o.rootIsDir || !o.recursive {
		err = w.add(o.root, false)
	} else {
		err = w.addTree(o.root, nil)
	}
	if err != nil {
		w.close()
		return nil, err
	}
	w.rootWd = w.wds[o.root]
	return w, nil
}

func (w *watcher) close() {
	w.f.Close()
	w.budget.release(w.charged)
	w.charged = 0
}

// settle brings the budget in line with what is watched now.
func (w *watcher) settle() {
	w.budget.release(w.charged - len(w.dirs))
	w.charged = len(w.dirs)
}

// add watches one path. Below the root it refuses symlinks and non-dirs:
// following a link would watch (and report) something outside the tree.
func (w *watcher) add(p string, below bool) error {
	mask := uint32(watchMask)
	if below {
		mask |= unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW
	}
	if _, ok := w.wds[p]; !ok {
		if !w.budget.reserve() {
			return errdefs.ResourceExhausted("cannot watch %s: the agent's budget of %d watched directories is used up", p, w.budget.maxDirs)
		}
		w.charged++
		defer w.settle()
	}
	wd, err := unix.InotifyAddWatch(w.fd, p, mask)
	if err != nil {
		if err == unix.ENOSPC {
			return errdefs.ResourceExhausted("cannot watch %s: the inotify watch limit (fs.inotify.max_user_watches) is reached", p)
		}
		return fspath.Error("watch", p, err)
	}
	if old, ok := w.wds[p]; ok && old != int32(wd) {
		delete(w.dirs, old)
	}
	w.dirs[int32(wd)] = p
	w.wds[p] = int32(wd)
	return nil
}

// addTree watches dir and every directory below it that is not excluded.
// Each directory's watch is added before its entries are listed, so an entry
// created concurrently is either listed or reported by the watch (maybe
// both: delivery is at least once). When emit is set, every entry found is
// reported as created: it appeared inside a new directory before we could
// watch that directory.
func (w *watcher) addTree(dir string, emit func(api.WatchEvent)) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // vanished or unreadable: skip it
		}
		rel := w.rel(p)
		if p != dir && w.filter.excluded(rel) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if err := w.add(p, p != w.root); err != nil {
				if p == dir || errdefs.IsKind(err, errdefs.ErrResourceExhausted) {
					return err
				}
				return fs.SkipDir
			}
		}
		if emit != nil && p != dir && w.filter.wanted(rel) {
			emit(api.WatchEvent{Type: api.WatchEventType, EventType: api.FileCreate, Path: p, IsDirectory: d.IsDir()})
		}
		return nil
	})
}

// unwatchTree drops the watches on dir and below (it left the tree).
func (w *watcher) unwatchTree(dir string) {
	prefix := dir + "/"
	for p, wd := range w.wds {
		if p == dir || strings.HasPrefix(p, prefix) {
			unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.wds, p)
			delete(w.dirs, wd)
		}
	}
	w.settle()
}

func (w *watcher) rel(p string) string {
	if p == w.root {
		return ""
	}
	if w.root == "/" {
		return p[1:]
	}
	return strings.TrimPrefix(p, w.root+"/")
}

// handle turns one read of inotify events into watch events. It returns a
// non-empty reason when the watch must stop (the root went away).
func (w *watcher) handle(buf []byte, emit func(api.WatchEvent)) string {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		wd := int32(binary.NativeEndian.Uint32(buf[off:]))
		mask := binary.NativeEndian.Uint32(buf[off+4:])
		cookie := binary.NativeEndian.Uint32(buf[off+8:])
		nlen := int(binary.NativeEndian.Uint32(buf[off+12:]))
		start := off + unix.SizeofInotifyEvent
		if start+nlen > len(buf) {
			break // cannot happen: the kernel returns whole events
		}
		name := string(bytes.TrimRight(buf[start:start+nlen], "\x00"))
		off = start + nlen
		if stop := w.one(wd, mask, cookie, name, emit); stop != "" {
			return stop
		}
	}
	return ""
}

func (w *watcher) one(wd int32, mask, cookie uint32, name string, emit func(api.WatchEvent)) string {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		emit(api.WatchEvent{Type: api.WatchErrorType, Error: &api.Error{Code: "resource_exhausted",
			Message: "the inotify event queue overflowed; some events were lost"}})
		return ""
	}
	dir, known := w.dirs[wd]
	if mask&unix.IN_IGNORED != 0 {
		if known {
			delete(w.dirs, wd)
			if w.wds[dir] == wd {
				delete(w.wds, dir)
			}
			w.settle()
		}
		if wd == w.rootWd {
			return "the watched path was removed"
		}
		return ""
	}
	if !known {
		return ""
	}
	isDir := mask&unix.IN_ISDIR != 0
	if name == "" {
		// An event on a watched object itself. For directories below the
		// root the parent's watch reports the same change by name.
		if wd != w.rootWd {
			return ""
		}
		switch {
		case mask&unix.IN_DELETE_SELF != 0:
			emit(api.WatchEvent{Type: api.WatchEventType, EventType: api.FileDelete, Path: dir, IsDirectory: w.rootIsDir})
			return "the watched path was deleted"
		case mask&unix.IN_MOVE_SELF != 0:
			return "the watched path was moved"
		case mask&unix.IN_MODIFY != 0:
			emit(api.WatchEvent{Type: api.WatchEventType, EventType: api.FileModify, Path: dir, IsDirectory: w.rootIsDir})
		case mask&unix.IN_ATTRIB != 0:
			emit(api.WatchEvent{Type: api.WatchEventType, EventType: api.FileAttrib, Path: dir, IsDirectory: w.rootIsDir})
		}
		return ""
	}
	p := dir + "/" + name
	if dir == "/" {
		p = "/" + name
	}
	rel := w.rel(p)
	if w.filter.excluded(rel) {
		return "" // and never watched
	}
	var kind string
	switch {
	case mask&unix.IN_CREATE != 0:
		kind = api.FileCreate
	case mask&unix.IN_MODIFY != 0:
		kind = api.FileModify
	case mask&unix.IN_DELETE != 0:
		kind = api.FileDelete
	case mask&unix.IN_MOVED_FROM != 0:
		kind = api.FileMoveFrom
		if isDir {
			w.unwatchTree(p)
		}
	case mask&unix.IN_MOVED_TO != 0:
		kind = api.FileMoveTo
	case mask&unix.IN_ATTRIB != 0:
		kind = api.FileAttrib
	default:
		return ""
	}
	ev := api.WatchEvent{Type: api.WatchEventType, EventType: kind, Path: p, IsDirectory: isDir}
	if kind == api.FileMoveFrom || kind == api.FileMoveTo {
		ev.Cookie = cookie
	}
	if w.filter.wanted(rel) {
		emit(ev)
	}
	if isDir && w.recursive && w.rootIsDir && (kind == api.FileCreate || kind == api.FileMoveTo) {
		var scan func(api.WatchEvent)
		if kind == api.FileCreate {
			scan = emit
		}
		if err := w.addTree(p, scan); err != nil && !isGone(err) {
			emit(api.WatchEvent{Type: api.WatchErrorType, Path: p, Error: &api.Error{Code: errdefs.Code(err), Message: err.Error()}})
		}
	}
	return ""
}

// isGone reports a directory that vanished (or became a non-directory)
// before we could watch it: nothing to report.
func isGone(err error) bool {
	return errdefs.IsKind(err, errdefs.ErrNotFound) || errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, syscall.ENOTDIR) || errdefs.IsKind(err, errdefs.ErrInvalidArgument)
}
