package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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

// CPUUsage is the CPU time id's cgroup used (with its children): cgroup
// v2's cpu.stat usage_usec or v1's cpuacct.usage.
func (s *Selector) CPUUsage(id string) (time.Duration, error) {
	if dir := s.cgroupDir(id); dir != "" {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			return 0, fmt.Errorf("cpu usage of %s: %w", id, err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return time.Duration(n) * time.Microsecond, err
			}
		}
		return 0, fmt.Errorf("cpu usage of %s: no usage_usec in cpu.stat", id)
	}
	for _, ctl := range []string{"cpuacct", "cpu,cpuacct"} {
		if dir := s.v1Dir(id, ctl); dir != "" {
			n, err := readInt(filepath.Join(dir, "cpuacct.usage"))
			if err != nil {
				return 0, fmt.Errorf("cpu usage of %s: %w", id, err)
			}
			return time.Duration(n), nil
		}
	}
	return 0, fmt.Errorf("cpu usage of %s: no cgroup found", id)
}

// MemoryPeak is the most memory id's cgroup held since it was made: v2's
// memory.peak or v1's memory.max_usage_in_bytes.
func (s *Selector) MemoryPeak(id string) (int64, error) {
	file := ""
	if dir := s.cgroupDir(id); dir != "" {
		file = filepath.Join(dir, "memory.peak")
	} else if dir := s.v1Dir(id, "memory"); dir != "" {
		file = filepath.Join(dir, "memory.max_usage_in_bytes")
	}
	if file == "" {
		return 0, fmt.Errorf("memory peak of %s: no cgroup found", id)
	}
	n, err := readInt(file)
	if err != nil {
		return 0, fmt.Errorf("memory peak of %s: %w", id, err)
	}
	return n, nil
}

func readInt(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
