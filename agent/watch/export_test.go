package watch

// SetWatchLimits changes the per-agent watch budget for agents created
// afterwards, and returns a function that restores the defaults.
func SetLimits(dirs, streams int) (restore func()) {
	oldDirs, oldStreams := maxWatchedDirs, maxWatchStreams
	maxWatchedDirs, maxWatchStreams = dirs, streams
	return func() { maxWatchedDirs, maxWatchStreams = oldDirs, oldStreams }
}
