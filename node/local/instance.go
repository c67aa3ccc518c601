package local

import (
	"math"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// instanceTypes are the named sizes from DESIGN.md. Disk is in decimal MB
// as the reference platform states it (2 GB = 2000 MB).
var instanceTypes = map[string]api.Resources{
	"lite":       {VCPU: 1.0 / 16, MemoryMiB: 256, DiskMB: 2000},
	"basic":      {VCPU: 0.25, MemoryMiB: 1024, DiskMB: 4000},
	"standard-1": {VCPU: 0.5, MemoryMiB: 4096, DiskMB: 8000},
	"standard-2": {VCPU: 1, MemoryMiB: 6144, DiskMB: 12000},
	"standard-3": {VCPU: 2, MemoryMiB: 8192, DiskMB: 16000},
	"standard-4": {VCPU: 4, MemoryMiB: 12288, DiskMB: 20000},
}

// DefaultImageName is the image of a create that names none (unless
// Config.DefaultImage says otherwise).
const DefaultImageName = "debian-trixie"

// DefaultInstance is used when a create request names none.
const DefaultInstance = "standard-1"

// Policy bounds for custom sizes: the same envelope as the largest type.
const (
	minVCPU      = 1.0 / 16
	maxVCPU      = 4
	minMemoryMiB = 128
	maxMemoryMiB = 12288
	minDiskMB    = 500
	maxDiskMB    = 20000
)

// ResolveInstance turns a create's instance name or custom size into the
// resources a start commits (what placement asks of a node). A custom size
// is named "custom"; a bad one is invalid argument.
func ResolveInstance(name string, custom *api.Resources) (string, api.Resources, error) {
	return resolveInstance(name, custom)
}

// resolveInstance turns an instance name or a custom size into resources.
// A custom size is named "custom".
func resolveInstance(name string, custom *api.Resources) (string, api.Resources, error) {
	if custom != nil {
		if name != "" && name != "custom" {
			return "", api.Resources{}, errdefs.InvalidArgument("give either instance %q or custom resources, not both", name)
		}
		r := *custom
		switch {
		case math.IsNaN(r.VCPU) || r.VCPU < minVCPU || r.VCPU > maxVCPU:
			return "", r, errdefs.InvalidArgument("vcpu must be between 1/16 and %d, got %v", maxVCPU, r.VCPU)
		case r.MemoryMiB < minMemoryMiB || r.MemoryMiB > maxMemoryMiB:
			return "", r, errdefs.InvalidArgument("memoryMib must be between %d and %d, got %d", minMemoryMiB, maxMemoryMiB, r.MemoryMiB)
		case r.DiskMB < minDiskMB || r.DiskMB > maxDiskMB:
			return "", r, errdefs.InvalidArgument("diskMb must be between %d and %d, got %d", minDiskMB, maxDiskMB, r.DiskMB)
		}
		return "custom", r, nil
	}
	if name == "" {
		name = DefaultInstance
	}
	if name == "standard" {
		name = "standard-1"
	}
	r, ok := instanceTypes[name]
	if !ok {
		return "", r, errdefs.InvalidArgument("unknown instance type %q (want lite, basic, standard-1 … standard-4, or custom resources)", name)
	}
	return name, r, nil
}

// pidsLimit bounds processes per sandbox; it grows with memory so that a
// big sandbox can run a big build, and stops a fork bomb in every size.
func pidsLimit(r api.Resources) int64 {
	p := r.MemoryMiB / 4
	if p < 256 {
		p = 256
	}
	if p > 4096 {
		p = 4096
	}
	return p
}
