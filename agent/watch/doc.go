// Package watch is the agent's file watching:
// GET /v1/watch?path=P&recursive=1&include=G…|exclude=G…
//
// The answer is a stream of newline-delimited JSON api.WatchEvent (content
// type wire.WatchContentType). Headers and the first "watching" line are
// sent only after every inotify watch is in place, so a client that creates a file
// right after reading that line is guaranteed to see the event. While idle
// the stream carries a "heartbeat" line every HeartbeatInterval, so the host
// can tell a dead agent from a quiet directory. Closing the stream stops the
// watch: the inotify descriptor is closed and the goroutines end.
//
// We use inotify directly (inotify.go) rather than fsnotify: fsnotify folds
// IN_ATTRIB into Chmod and cannot pair IN_MOVED_FROM with IN_MOVED_TO,
// and the API promises both.
package watch
