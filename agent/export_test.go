package agent

// SetExtractConfinementForTest turns layers of the restore extractor's
// confinement off for negative controls and returns a func that restores
// them. noChecks drops the name and parent checks; noRoot drops os.Root.
func SetExtractConfinementForTest(noChecks, noRoot bool) func() {
	extractNoChecks, extractNoRoot = noChecks, noRoot
	return func() { extractNoChecks, extractNoRoot = false, false }
}
