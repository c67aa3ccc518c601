//go:build integration

package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/berth-sh/berth/api"
)

const itMetricsToken = "it-metrics-token-0123456789"

// withMetricsDaemon restarts the suite's daemon with a metrics token, a
// separate metrics listener and 1 s usage samples for the test, and back
// to the default afterwards.
func withMetricsDaemon(t *testing.T) (metricsAddr string) {
	t.Helper()
	tokFile := filepath.Join(t.TempDir(), "metrics-token")
	if err := os.WriteFile(tokFile, []byte(itMetricsToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsAddr = freePort()
	d.stop()
	var err error
	d, err = startDaemon(nil, "--metrics-token-file", tokFile, "--metrics-listen", metricsAddr, "--metrics-interval", "1s")
	if err != nil {
		t.Fatalf("restart with metrics: %v", err)
	}
	t.Cleanup(func() {
		d.stop()
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Errorf("restart: %v", err)
		}
	})
	return metricsAddr
}

func getMetrics(t *testing.T, url, bearer string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return resp.StatusCode, fams
}

func famValue(fams map[string]*dto.MetricFamily, fam string, want map[string]string) float64 {
	f := fams[fam]
	if f == nil {
		return 0
	}
	var total float64
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// selfCPU parses the first line of bash's times (user and system time
// of the shell: "0m9.812s 0m0.004s").
func selfCPU(t *testing.T, out string) float64 {
	t.Helper()
	f := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	var total float64
	for _, v := range f {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("times output %q: %v", out, err)
		}
		total += d.Seconds()
	}
	return total
}

// waitSample waits for a sample of name taken after t0.
func waitSample(t *testing.T, name string, t0 time.Time) api.UsageSample {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		m, err := d.c.SandboxMetrics(context.Background(), name)
		if err != nil {
			t.Fatalf("metrics of %s: %v", name, err)
		}
		if m.Current != nil && m.Current.Time.After(t0) {
			return *m.Current
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no sample of %s after %s", name, t0)
	return api.UsageSample{}
}

func TestMetricsEndpointAndMetering(t *testing.T) {
	maddr := withMetricsDaemon(t)
	main := "http://" + d.listen + "/metrics"
	// Authentication: the token works (negative control of the refusals).
	code, before := getMetrics(t, main, itMetricsToken)
	if code != http.StatusOK {
		t.Fatalf("/metrics with the token: %d", code)
	}
	for _, bearer := range []string{"", "wrong-token-0123456789", readKey(t)} { // the API key is not the metrics token
		if code, _ := getMetrics(t, main, bearer); code != http.StatusUnauthorized {
			t.Errorf("/metrics on the main listener with bearer %.6q…: %d, want 401", bearer, code)
		}
	}
	if code, _ := getMetrics(t, "http://"+maddr+"/metrics", ""); code != http.StatusOK {
		t.Errorf("/metrics on --metrics-listen: %d", code)
	}

	ctx := context.Background()
	// One full core: the default instance's CPU quota would cap the loop.
	busy := sandbox(t, api.CreateSandboxRequest{Name: "it-meter-busy", Resources: &api.Resources{VCPU: 1, MemoryMiB: 1024, DiskMB: 2000}})
	idle := sandbox(t, api.CreateSandboxRequest{Name: "it-meter-idle"})
	_ = idle
	run(t, busy.Name, "true")
	_, after := getMetrics(t, main, itMetricsToken)
	starts := famValue(after, "berth_sandbox_start_duration_seconds", nil) - famValue(before, "berth_sandbox_start_duration_seconds", nil)
	if starts < 2 {
		t.Errorf("start histogram moved by %v for two creates", starts)
	}
	execRoute := map[string]string{"route": "POST /v1/sandboxes/{name}/exec", "code": "200"}
	if n := famValue(after, "berth_api_request_duration_seconds", execRoute) - famValue(before, "berth_api_request_duration_seconds", execRoute); n < 1 {
		t.Errorf("exec route count moved by %v", n)
	}
	if famValue(after, "berth_sandboxes", map[string]string{"state": "running"}) < 2 {
		t.Errorf("berth_sandboxes{state=running} < 2")
	}
	for _, f := range after["berth_api_request_duration_seconds"].GetMetric() {
		for _, l := range f.Label {
			if strings.Contains(l.GetValue(), "it-meter") {
				t.Errorf("a sandbox name is a label value: %s", l.GetValue())
			}
		}
	}

	// CPU: one core for 10 s shows ~10 CPU-seconds (within 10 %); the
	// idle sandbox ~0 over the same time.
	t0 := time.Now()
	b0, i0 := waitSample(t, busy.Name, t0), waitSample(t, idle.Name, t0)
	// The loop reports its own CPU time (bash's times builtin: the
	// kernel's account of the process) as the independent measure: on
	// a shared 2-core host the loop may not get a whole core.
	res := run(t, busy.Name, "bash -c 'end=$((SECONDS+10)); while [ $SECONDS -lt $end ]; do :; done; times'")
	t1 := time.Now()
	b1, i1 := waitSample(t, busy.Name, t1.Add(time.Second)), waitSample(t, idle.Name, t1.Add(time.Second))
	cpu := b1.CPUSeconds - b0.CPUSeconds
	self := selfCPU(t, res.Stdout)
	t.Logf("busy: metered %.2f CPU-s (active %.1f s), the loop's own account %.2f CPU-s, in %.1f s; idle: %.3f CPU-s", cpu, b1.ActiveCPUSeconds-b0.ActiveCPUSeconds, self, t1.Sub(t0).Seconds(), i1.CPUSeconds-i0.CPUSeconds)
	if cpu < self*0.9 || cpu > self*1.1+0.3 {
		t.Errorf("metered %.2f CPU-seconds for a loop that used %.2f (want within 10 %%)", cpu, self)
	}
	if self < 5 {
		t.Errorf("the loop got only %.2f CPU-seconds in 10 s: the host is too busy for this check", self)
	}
	if di := i1.CPUSeconds - i0.CPUSeconds; di > 0.2 {
		t.Errorf("the idle sandbox metered %.3f CPU-seconds", di)
	}

	// Memory peak: 256 MiB allocated and filled by python3 for 2 s, then
	// freed: the peak keeps it.
	m0 := waitSample(t, busy.Name, time.Now())
	run(t, busy.Name, `python3 -c "import time; b = b'x' * (256 << 20); time.sleep(2)"`)
	m1 := waitSample(t, busy.Name, time.Now())
	const alloc = 256 << 20
	t.Logf("memory before %d MiB, peak %d MiB, after %d MiB", m0.MemoryBytes>>20, m1.MemoryPeakBytes>>20, m1.MemoryBytes>>20)
	if m1.MemoryPeakBytes < m0.MemoryBytes+alloc*95/100 || m1.MemoryPeakBytes > m0.MemoryBytes+alloc+64<<20 {
		t.Errorf("peak %d MiB after a 256 MiB allocation from %d MiB", m1.MemoryPeakBytes>>20, m0.MemoryBytes>>20)
	}
	if m1.MemoryBytes > m0.MemoryBytes+32<<20 {
		t.Errorf("memory now %d MiB after the allocation was freed (from %d MiB)", m1.MemoryBytes>>20, m0.MemoryBytes>>20)
	}

	// Network: 5000 datagrams of 1000 bytes to the bridge address (a
	// known upload: each is 1042 bytes on the wire with its UDP, IP and
	// Ethernet headers), counted on the host side of the veth.
	n0 := waitSample(t, busy.Name, time.Now())
	gw := strings.TrimSuffix(itSubnet, "0.0/16") + "0.1"
	run(t, busy.Name, fmt.Sprintf("bash -c 'dd if=/dev/zero bs=1000 count=5000 status=none > /dev/udp/%s/9' || true", gw))
	n1 := waitSample(t, busy.Name, time.Now())
	tx := n1.NetTxBytes - n0.NetTxBytes
	t.Logf("sent %d bytes for 5000×1042", tx)
	if want := int64(5000 * 1042); tx < want || tx > want+want/20 {
		t.Errorf("metered %d bytes sent, want %d (+5 %%)", tx, want)
	}

	// The tenant record holds what the samples counted.
	rep, err := d.c.Usage(ctx, "", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Totals) != 1 || rep.Totals[0].CPUSeconds < 9 || rep.Totals[0].EgressBytes < 5000*1042 || rep.Totals[0].MemoryGiBSeconds <= 0 {
		t.Errorf("usage report %+v", rep)
	}
}

// TestTrafficKeepsAwake: a sandbox whose own traffic counts as activity
// (api.LabelTrafficActivity) and that sends a packet every second does
// not sleep under a 3 s idle timeout. Negative controls: the same label
// without traffic sleeps, and the same traffic without the label sleeps.
func TestTrafficKeepsAwake(t *testing.T) {
	withMetricsDaemon(t)
	ctx := context.Background()
	gw := strings.TrimSuffix(itSubnet, "0.0/16") + "0.1"
	chatter := fmt.Sprintf("exec bash -c 'while :; do echo ping > /dev/udp/%s/9; sleep 1; done'", gw)
	cases := []struct {
		name, cmd string
		label     bool
		awake     bool
	}{
		{"it-traffic-on", chatter, true, true},
		{"it-traffic-quiet", "sleep 600", true, false},
		{"it-traffic-nolabel", chatter, false, false},
	}
	for _, c := range cases {
		req := api.CreateSandboxRequest{Name: c.name, SleepAfter: "3s"}
		if c.label {
			req.Labels = map[string]string{api.LabelTrafficActivity: "true"}
		}
		sandbox(t, req)
		if _, err := d.c.StartProcess(ctx, c.name, api.StartProcessRequest{Command: c.cmd}); err != nil {
			t.Fatalf("%s: start process: %v", c.name, err)
		}
	}
	time.Sleep(12 * time.Second)
	for _, c := range cases {
		sb, err := d.c.Get(ctx, c.name)
		if err != nil {
			t.Fatal(err)
		}
		if awake := sb.State == api.StateRunning; awake != c.awake {
			t.Errorf("%s: state %s after 12 s with sleepAfter 3s; want awake=%v", c.name, sb.State, c.awake)
		}
	}
}
