package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/berth-sh/berth/api"
)

// Start paths: the "path" label of berth_sandbox_start_duration_seconds.
const (
	PathCold     = "cold"     // a fresh container from the image
	PathPool     = "pool"     // a warm pool member claimed (bound)
	PathSnapshot = "snapshot" // a container from a snapshot's layers (fork, restore, persisted wake)
	PathWake     = "wake"     // a sleeping sandbox started again (stop tier or thaw)
)

// Sources are the levels collected at scrape time; any may be nil.
type Sources struct {
	// Sandboxes counts the sandboxes by state.
	Sandboxes func(ctx context.Context) map[string]int
	// Pools reports the warm pools.
	Pools func() []api.Pool
	// QueueDepth is how many starts wait at the admission gate.
	QueueDepth func() int
	// SnapshotBytes is the stored size of all snapshots.
	SnapshotBytes func(ctx context.Context) int64
}

// Registry holds berth's metrics. Its methods are safe for concurrent use.
type Registry struct {
	reg *prometheus.Registry

	api         *prometheus.HistogramVec
	start       *prometheus.HistogramVec
	agentDeaths prometheus.Counter
	repairs     *prometheus.CounterVec
	egressConns *prometheus.CounterVec
	egressBytes *prometheus.CounterVec
	samples     prometheus.Histogram
}

// New returns a registry with berth's metrics, the Go runtime's and the
// process's, and the levels of src.
func New(src Sources) *Registry {
	r := &Registry{reg: prometheus.NewRegistry()}
	r.api = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "berth_api_request_duration_seconds",
		Help:    "API request latency by route pattern and status code (streams count until they end).",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"route", "code"})
	r.start = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "berth_sandbox_start_duration_seconds",
		Help:    "Time to a running sandbox by path: cold, pool (warm claim), snapshot (restore), wake.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2, 4, 8, 16, 32},
	}, []string{"path"})
	r.agentDeaths = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "berth_agent_deaths_total",
		Help: "Sandbox agents (PID 1 inside) that exited without being asked to.",
	})
	r.repairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_reconcile_repairs_total",
		Help: "Host state repaired by reconcile, by kind.",
	}, []string{"kind"})
	r.egressConns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_egress_connections_total",
		Help: "Outbound connections through the egress proxy by verdict (allowed, denied).",
	}, []string{"verdict"})
	r.egressBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_egress_bytes_total",
		Help: "Bytes carried by proxied outbound connections by verdict and direction (out: sandbox to remote).",
	}, []string{"verdict", "direction"})
	r.samples = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "berth_usage_sample_duration_seconds",
		Help:    "Time to sample the usage of every running sandbox once (package metering).",
		Buckets: prometheus.ExponentialBuckets(.0005, 2, 14),
	})
	r.reg.MustRegister(r.api, r.start, r.agentDeaths, r.repairs, r.egressConns, r.egressBytes, r.samples,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&levels{src: src})
	return r
}

// Gatherer is the registry for tests and embedders.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// ObserveRequest records one API request (server.GuardOptions.Observe).
func (r *Registry) ObserveRequest(route string, status int, d time.Duration) {
	r.api.WithLabelValues(route, strconv.Itoa(status)).Observe(d.Seconds())
}

// StartDone records a start that ended with a running sandbox.
func (r *Registry) StartDone(path string, d time.Duration) {
	r.start.WithLabelValues(path).Observe(d.Seconds())
}

// AgentDied counts an agent that exited on its own.
func (r *Registry) AgentDied() { r.agentDeaths.Inc() }

// Repaired counts one repair of reconcile.
func (r *Registry) Repaired(kind string) { r.repairs.WithLabelValues(kind).Inc() }

// Egress records one proxied connection's verdict and the bytes it
// carried (a denied connection carries none).
func (r *Registry) Egress(allowed bool, out, in int64) {
	v := "denied"
	if allowed {
		v = "allowed"
	}
	r.egressConns.WithLabelValues(v).Inc()
	if out > 0 {
		r.egressBytes.WithLabelValues(v, "out").Add(float64(out))
	}
	if in > 0 {
		r.egressBytes.WithLabelValues(v, "in").Add(float64(in))
	}
}

// SampleDone records one usage sampling round (metering.Sampler).
func (r *Registry) SampleDone(d time.Duration) { r.samples.Observe(d.Seconds()) }

// states are the sandbox states berth_sandboxes always reports (0 included,
// so a dashboard's series do not come and go).
var states = []string{api.StateStarting, api.StateRunning, api.StateSleeping, api.StateFailed}

// poolLabel names a pool for its series: its snapshot or image, its
// instance type if it names one, and its isolation.
func poolLabel(p api.Pool) string {
	s := p.Image
	if p.Snapshot != "" {
		s = "snapshot:" + p.Snapshot
	}
	if p.Instance != "" {
		s += "@" + p.Instance
	}
	return s + "/" + p.Isolation
}

// levels collects Sources at scrape time.
type levels struct{ src Sources }

var (
	descSandboxes = prometheus.NewDesc("berth_sandboxes", "Sandboxes by state.", []string{"state"}, nil)
	descPoolSize  = prometheus.NewDesc("berth_pool_target", "Warm pool target size.", []string{"pool"}, nil)
	descPoolReady = prometheus.NewDesc("berth_pool_ready", "Warm pool members ready to claim.", []string{"pool"}, nil)
	descPoolStart = prometheus.NewDesc("berth_pool_starting", "Warm pool members starting.", []string{"pool"}, nil)
	descPoolClaim = prometheus.NewDesc("berth_pool_claims_total", "Creates served from a warm pool.", []string{"pool"}, nil)
	descPoolMiss  = prometheus.NewDesc("berth_pool_misses_total", "Creates that matched a warm pool but found it empty.", []string{"pool"}, nil)
	descQueue     = prometheus.NewDesc("berth_admission_queue_depth", "Starts waiting at the admission gate.", nil, nil)
	descSnapBytes = prometheus.NewDesc("berth_snapshot_bytes", "Stored (compressed) bytes of all snapshots.", nil, nil)
)

func (l *levels) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSandboxes, descPoolSize, descPoolReady, descPoolStart, descPoolClaim, descPoolMiss, descQueue, descSnapBytes} {
		ch <- d
	}
}

// scrapeTimeout bounds the store reads of one scrape.
const scrapeTimeout = 5 * time.Second

func (l *levels) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if l.src.Sandboxes != nil {
		by := l.src.Sandboxes(ctx)
		for _, st := range states {
			ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(by[st]), st)
		}
	}
	if l.src.Pools != nil {
		for _, p := range l.src.Pools() {
			n := poolLabel(p)
			ch <- prometheus.MustNewConstMetric(descPoolSize, prometheus.GaugeValue, float64(p.Size), n)
			ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(p.Ready), n)
			ch <- prometheus.MustNewConstMetric(descPoolStart, prometheus.GaugeValue, float64(p.Starting), n)
			ch <- prometheus.MustNewConstMetric(descPoolClaim, prometheus.CounterValue, float64(p.Claims), n)
			ch <- prometheus.MustNewConstMetric(descPoolMiss, prometheus.CounterValue, float64(p.Misses), n)
		}
	}
	if l.src.QueueDepth != nil {
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(l.src.QueueDepth()))
	}
	if l.src.SnapshotBytes != nil {
		ch <- prometheus.MustNewConstMetric(descSnapBytes, prometheus.GaugeValue, float64(l.src.SnapshotBytes(ctx)))
	}
}
