package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MemoryUsage is the memory id's cgroup holds now (with its children):
// cgroup v2's memory.current or v1's memory.usage_in_bytes. The sleep
// tiers bound what frozen sandboxes hold with it (node/local).
func (s *Selector) MemoryUsage(id string) (int64, error) {
	file := ""
	if dir := s.cgroupDir(id); dir != "" {
		file = filepath.Join(dir, "memory.current")
	} else if dir := s.v1Dir(id, "memory"); dir != "" {
		file = filepath.Join(dir, "memory.usage_in_bytes")
	}
	if file == "" {
		return 0, fmt.Errorf("memory usage of %s: no cgroup found", id)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("memory usage of %s: %w", id, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memory usage of %s: %w", id, err)
	}
	return v, nil
}
