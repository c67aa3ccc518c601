package testdaemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/internal/weaken"
)

// CheckTestBuild judges this test binary, which carries the berthtest tag
// exactly when weaken.Enabled is true: go test ./... sees one answer and
// go test -tags berthtest ./... (scripts/test.sh) the other.
func TestCheckTestBuild(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "berth")); err != nil {
		t.Fatal(err)
	}
	err = CheckTestBuild(dir)
	if weaken.Enabled && err != nil {
		t.Fatalf("berthtest build rejected: %v", err)
	}
	if !weaken.Enabled && err == nil {
		t.Fatal("build without the berthtest tag accepted")
	}
	if err := CheckTestBuild(t.TempDir()); err == nil {
		t.Fatal("a directory without a berth binary accepted")
	}
}
