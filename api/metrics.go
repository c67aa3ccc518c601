package api

import "time"

// LabelTrafficActivity is the label that makes a sandbox's own network
// traffic count as activity for idle sleep (value "true"): a sandbox
// holding an outbound connection that carries traffic (an agent
// platform's executor WebSocket) then does not sleep under it. The host
// reads the traffic from the sandbox's veth counters every usage sample
// (package metering), so it is noticed within one sample interval.
const LabelTrafficActivity = "berth.activity/traffic"

// UsageSample is one sample of a sandbox's resource use, read on the host
// from its cgroups and its veth (never from inside the sandbox).
// Counters (CPU, active CPU, network) are cumulative over the current run
// of the sandbox's compute; the rest are levels at Time.
type UsageSample struct {
	Time time.Time `json:"time"`
	// CPUSeconds is the CPU time all the sandbox's processes used.
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUPercent is the CPU use over the last interval, 100 per core.
	CPUPercent float64 `json:"cpuPercent"`
	// ActiveCPUSeconds is the wall-clock time of the sample intervals
	// in which the sandbox used any CPU (at least 1 ms): the time it was
	// busy rather than idle, whatever the number of cores it used.
	ActiveCPUSeconds float64 `json:"activeCpuSeconds"`
	CPUCount         float64 `json:"cpuCount"`
	// MemoryBytes is the cgroup's memory now (page cache included);
	// MemoryPeakBytes the most it held since its start; MemoryLimitBytes
	// its limit (0: none).
	MemoryBytes      int64 `json:"memoryBytes"`
	MemoryPeakBytes  int64 `json:"memoryPeakBytes"`
	MemoryLimitBytes int64 `json:"memoryLimitBytes"`
	// DiskUsedBytes is what the writable layer holds against its quota
	// DiskQuotaBytes (0: unknown).
	DiskUsedBytes  int64 `json:"diskUsedBytes"`
	DiskQuotaBytes int64 `json:"diskQuotaBytes"`
	// NetTxBytes is what the sandbox sent, NetRxBytes what it received.
	NetTxBytes int64 `json:"netTxBytes"`
	NetRxBytes int64 `json:"netRxBytes"`
}

// SandboxMetrics is GET /v1/sandboxes/{name}/metrics: the latest sample
// and the history kept (oldest first, one per IntervalMs).
type SandboxMetrics struct {
	Name       string        `json:"name"`
	IntervalMs int64         `json:"intervalMs"`
	Current    *UsageSample  `json:"current,omitempty"` // nil: not running, or not sampled yet
	History    []UsageSample `json:"history"`
}

// UsageRecord is one tenant's metered use in one hour on one node.
type UsageRecord struct {
	Tenant string    `json:"tenant"`
	Node   string    `json:"node,omitempty"`
	Start  time.Time `json:"start"` // the hour's start (UTC)
	// CPUSeconds is CPU time; ActiveCPUSeconds busy wall-clock time
	// (UsageSample.ActiveCPUSeconds) summed over the tenant's sandboxes.
	CPUSeconds       float64 `json:"cpuSeconds"`
	ActiveCPUSeconds float64 `json:"activeCpuSeconds"`
	// MemoryGiBSeconds and StorageGiBSeconds integrate the memory and
	// the writable-layer bytes held over time (GiB × seconds).
	MemoryGiBSeconds  float64 `json:"memoryGibSeconds"`
	StorageGiBSeconds float64 `json:"storageGibSeconds"`
	// EgressBytes is what the sandboxes sent, IngressBytes what they
	// received.
	EgressBytes  int64 `json:"egressBytes"`
	IngressBytes int64 `json:"ingressBytes"`
}

// UsageReport is GET /v1/usage: the hourly records in [From, To) and
// their sum per tenant.
type UsageReport struct {
	From    time.Time     `json:"from"`
	To      time.Time     `json:"to"`
	Records []UsageRecord `json:"records"`
	Totals  []UsageRecord `json:"totals"`
}
