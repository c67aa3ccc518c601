package e2b

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	fspb "github.com/berth-sh/berth/e2b/envdpb/filesystem"
	"github.com/berth-sh/berth/internal/errdefs"
)

// filesystemService is envd's filesystem.Filesystem over berth's agent.
type filesystemService struct{ h *Handler }

func (s *filesystemService) agent(ctx context.Context) (*agentclient.Client, func(), error) {
	return s.h.agent(ctx, sandboxFrom(ctx))
}

// homeOf is the home directory of an E2B user ("user" or root), where
// envd resolves relative paths and "~".
func homeOf(user string) string {
	if user == "root" {
		return "/root"
	}
	return homeDir
}

// resolvePathAs makes an E2B path absolute for user, as envd does:
// relative paths and "~" are in that user's home.
func resolvePathAs(user, p string) string {
	home := homeOf(user)
	if p == "" || p == "~" {
		return home
	}
	if strings.HasPrefix(p, "~/") {
		p = home + p[1:]
	}
	if !strings.HasPrefix(p, "/") {
		p = home + "/" + p
	}
	return path.Clean(p)
}

// scope reads the acting user of an RPC (its Basic Authorization) and
// returns ctx carrying it for the agent's file calls (the owner of what
// they create) and a path resolver for that user.
func scope[T any](ctx context.Context, req *connect.Request[T]) (context.Context, func(string) string, error) {
	auth := req.Header().Get("Authorization")
	user, err := userFrom(auth)
	if err != nil {
		return nil, nil, err
	}
	if auth != "" {
		// Named: the agent acts as that user. Otherwise its default
		// user acts (the image may have no "user").
		ctx = agentclient.WithFileOptions(ctx, agentclient.FileOptions{User: user})
	}
	return ctx, func(p string) string { return resolvePathAs(user, p) }, nil
}

// entry converts berth's FileInfo to envd's EntryInfo. Mode is the
// permission bits alone (0755 → 493), as envd's; only the permissions
// string carries the type ("drwxr-xr-x"): Go's fs.FileMode type flags
// (ModeDir is bit 31) never reach the wire.
func (s *filesystemService) entry(ctx context.Context, ag *agentclient.Client, fi api.FileInfo) *fspb.EntryInfo {
	mode := fs.FileMode(fi.Mode & 0o777)
	if fi.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if fi.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if fi.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	t := fspb.FileType_FILE_TYPE_FILE
	switch fi.Type {
	case "dir":
		mode |= fs.ModeDir
		t = fspb.FileType_FILE_TYPE_DIRECTORY
	case "symlink":
		mode |= fs.ModeSymlink
		t = fspb.FileType_FILE_TYPE_SYMLINK
	case "other":
		mode |= fs.ModeIrregular
		t = fspb.FileType_FILE_TYPE_UNSPECIFIED
	}
	owner, group := s.h.owners.names(ctx, sandboxFrom(ctx), ag, fi.UID, fi.GID)
	e := &fspb.EntryInfo{
		Name: fi.Name, Type: t, Path: fi.Path, Size: fi.Size, Mode: uint32(mode.Perm()),
		Permissions: mode.String(), Owner: owner, Group: group,
		ModifiedTime: timestamppb.New(fi.ModTime), Metadata: map[string]string{},
	}
	if fi.Type == "symlink" {
		target := fi.Target
		if target != "" && !strings.HasPrefix(target, "/") {
			target = path.Join(path.Dir(fi.Path), target)
		}
		e.SymlinkTarget = &target
	}
	return e
}

func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	ag, release, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, resolve, err := scope(ctx, req)
	if err != nil {
		return nil, err
	}
	fi, err := ag.Stat(ctx, resolve(req.Msg.Path))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: s.entry(ctx, ag, fi)}), nil
}

func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	ag, release, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, resolve, err := scope(ctx, req)
	if err != nil {
		return nil, err
	}
	p := resolve(req.Msg.Path)
	if fi, err := ag.Stat(ctx, p); err == nil {
		if fi.Type == "dir" {
			return nil, errdefs.AlreadyExists("directory %s already exists", p)
		}
		return nil, errdefs.AlreadyExists("path %s already exists and is not a directory", p)
	}
	if err := ag.Mkdir(ctx, api.MkdirRequest{Path: p}); err != nil {
		return nil, err
	}
	fi, err := ag.Stat(ctx, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: s.entry(ctx, ag, fi)}), nil
}

func (s *filesystemService) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	ag, release, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, resolve, err := scope(ctx, req)
	if err != nil {
		return nil, err
	}
	src, dst := resolve(req.Msg.Source), resolve(req.Msg.Destination)
	if err := ag.Rename(ctx, api.RenameRequest{From: src, To: dst}); err != nil {
		return nil, err
	}
	fi, err := ag.Stat(ctx, dst)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: s.entry(ctx, ag, fi)}), nil
}

func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	ag, release, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, resolve, err := scope(ctx, req)
	if err != nil {
		return nil, err
	}
	root := resolve(req.Msg.Path)
	depth := int(req.Msg.Depth)
	if depth < 1 {
		depth = 1
	}
	files, err := ag.ListFiles(ctx, root, depth > 1)
	if err != nil {
		return nil, err
	}
	out := &fspb.ListDirResponse{}
	for _, fi := range files {
		rel := strings.TrimPrefix(strings.TrimPrefix(fi.Path, root), "/")
		if strings.Count(rel, "/")+1 > depth {
			continue
		}
		out.Entries = append(out.Entries, s.entry(ctx, ag, fi))
	}
	sort.Slice(out.Entries, func(i, j int) bool { return out.Entries[i].Path < out.Entries[j].Path })
	return connect.NewResponse(out), nil
}

func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	ag, release, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, resolve, err := scope(ctx, req)
	if err != nil {
		return nil, err
	}
	// As envd (os.RemoveAll): a path that does not exist is removed.
	if err := ag.Remove(ctx, resolve(req.Msg.Path), true); err != nil && !errdefs.IsKind(err, errdefs.ErrNotFound) {
		return nil, err
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

// eventOf maps a berth watch event onto envd's; ok is false for kinds envd
// does not report.
func eventOf(root string, ev api.WatchEvent) (*fspb.FilesystemEvent, bool) {
	var t fspb.EventType
	switch ev.EventType {
	case api.FileCreate, api.FileMoveTo:
		// As envd (fsnotify): a name moved in is a create, the name
		// moved away a rename.
		t = fspb.EventType_EVENT_TYPE_CREATE
	case api.FileModify:
		t = fspb.EventType_EVENT_TYPE_WRITE
	case api.FileDelete:
		t = fspb.EventType_EVENT_TYPE_REMOVE
	case api.FileMoveFrom:
		t = fspb.EventType_EVENT_TYPE_RENAME
	case api.FileAttrib:
		t = fspb.EventType_EVENT_TYPE_CHMOD
	default:
		return nil, false
	}
	name := strings.TrimPrefix(strings.TrimPrefix(ev.Path, root), "/")
	if strings.HasPrefix(path.Base(name), ".berth-upload-") {
		return nil, false // the agent's staging file (the agent hides them too)
	}
	return &fspb.FilesystemEvent{Name: name, Type: t}, true
}

func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	id := sandboxFrom(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer s.h.register(id, cancel)()
	err := s.watch(ctx, req, stream)
	if c := context.Cause(ctx); c != nil && errors.Is(c, errSandboxGone) {
		return c // however the watch noticed, the sandbox went away
	}
	return err
}

func (s *filesystemService) watch(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	ag, release, err := s.agent(ctx)
	if err != nil {
		return err
	}
	defer release()
	ctx, resolve, err := scope(ctx, req)
	if err != nil {
		return err
	}
	root := resolve(req.Msg.Path)
	if err := checkWatchDir(ctx, ag, root); err != nil {
		return err
	}
	wt, err := ag.Watch(ctx, root, agentclient.WatchOptions{Recursive: req.Msg.Recursive, Exclude: []string{}})
	if err != nil {
		return err
	}
	defer wt.Close()
	if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	tick := time.NewTicker(keepaliveInterval(req.Header()))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case ev, ok := <-wt.Events():
			if !ok {
				if err := wt.Err(); err != nil {
					return err
				}
				return errdefs.Unavailable("the watch ended")
			}
			switch ev.Type {
			case api.WatchErrorType:
				if ev.Error != nil {
					return errdefs.FromCode(ev.Error.Code, ev.Error.Message)
				}
				return errdefs.Unavailable("the watch failed")
			case api.WatchStopped:
				return errdefs.Unavailable("the watch stopped: %s", ev.Reason)
			case api.WatchEventType:
				fe, ok := eventOf(root, ev)
				if !ok {
					continue
				}
				if req.Msg.IncludeEntry && fe.Type != fspb.EventType_EVENT_TYPE_REMOVE {
					if fi, err := ag.Stat(ctx, ev.Path); err == nil {
						fe.Entry = s.entry(ctx, ag, fi)
					}
				}
				if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: fe}}); err != nil {
					return err
				}
			}
		}
	}
}

// checkWatchDir refuses to watch what is not a directory, as envd does
// (invalid_argument); a missing path is not_found. A symlink to a directory
// is a directory.
func checkWatchDir(ctx context.Context, ag *agentclient.Client, p string) error {
	fi, err := ag.Stat(ctx, p)
	if err != nil {
		return err
	}
	if fi.Type == "symlink" {
		// Stat does not follow the link; a listing does (and refuses a
		// non-directory as invalid_argument).
		_, err := ag.ListFiles(ctx, p, false)
		return err
	}
	if fi.Type != "dir" {
		return errdefs.InvalidArgument("path %s is not a directory", p)
	}
	return nil
}
