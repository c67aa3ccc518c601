package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// ClusterReport is the JSON form of a cluster run (RunCluster). Each
// cross-node figure sits beside its same-node counterpart measured in the
// same run, interleaved, so that the machine's drift hits both alike.
type ClusterReport struct {
	Nodes []string `json:"nodes"`
	// ExecSame is `true` sent to the node that runs the sandbox; ExecCross
	// the same exec sent to another node, which forwards it.
	ExecSame  *Stat `json:"exec_same_node_ms"`
	ExecCross *Stat `json:"exec_cross_node_ms"`
	// ExecAddedP50 is ExecCross.P50 - ExecSame.P50 (target ≤ 1 ms).
	ExecAddedP50 float64 `json:"exec_added_p50_ms"`
	// TTISame is create → first `node -v` when placement chose the node
	// the create was sent to; TTICross when it chose another (the create
	// and the exec are forwarded).
	TTISame  *Stat    `json:"tti_same_node_ms"`
	TTICross *Stat    `json:"tti_cross_node_ms"`
	TTIRatio *float64 `json:"tti_cross_vs_same"` // target ≤ 1.2
	// CreatesPerSec is Burst creates sent at once, spread over the entry
	// nodes, divided by the time until all were running.
	CreatesPerSec float64        `json:"creates_per_sec"`
	Burst         int            `json:"burst"`
	Placed        map[string]int `json:"placed"` // sandboxes per node, over every create of the run
	Instance      string         `json:"instance"`

	// Single is the single-host baseline (Options.Single: a berth serve
	// that is not in a cluster), measured in the same run and interleaved
	// with the cluster's samples; nil without one.
	Single *SingleHost `json:"single_host,omitempty"`
}

// SingleHost is the same figures on a single host (no cluster, SQLite),
// beside the cluster's in ClusterReport.
type SingleHost struct {
	Exec *Stat `json:"exec_ms"`
	TTI  *Stat `json:"tti_ms"`
	// CreatesPerSec is the same Burst of creates sent at once to the one
	// host.
	CreatesPerSec float64 `json:"creates_per_sec"`
	// ExecCrossAddedP50 is ExecCross.P50 - Exec.P50: what a cross-node
	// exec costs over the same exec on a single host.
	ExecCrossAddedP50 float64 `json:"exec_cross_added_p50_ms"`
	// TTICrossRatio is TTICross.P50 / TTI.P50 (target ≤ 1.2).
	TTICrossRatio *float64 `json:"tti_cross_vs_single"`
}

// RunCluster measures a cluster through its nodes' APIs: nodes holds one
// client per member (same API key), in any order. It creates sandboxes
// named bench-* and destroys them. o.N is the samples per figure; o.Burst
// (default 3 per node) the concurrent creates. single, when not nil, is a
// berth serve outside the cluster: every figure is then also measured on
// it, interleaved with the cluster's samples (Report.Single).
func RunCluster(ctx context.Context, nodes []*client.Client, single *client.Client, o Options, out io.Writer) error {
	if len(nodes) < 2 {
		return errors.New("a cluster run needs the API URLs of at least two members")
	}
	if o.N <= 0 {
		o.N = 20
	}
	if o.Instance == "" {
		o.Instance = "lite" // many per node: the run measures routing, not size
	}
	if o.Burst <= 0 {
		o.Burst = 3 * len(nodes)
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	rep := ClusterReport{Placed: map[string]int{}, Instance: o.Instance, Burst: o.Burst}
	entry := map[string]int{} // node name -> index in nodes (its API)
	list, err := nodes[0].ListNodes(ctx)
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range list.Nodes {
		rep.Nodes = append(rep.Nodes, n.Name)
	}
	// made is every sandbox left to destroy, with the API that has it.
	type madeBox struct {
		c    *client.Client
		name string
	}
	var made []madeBox
	defer func() {
		for _, m := range made {
			_ = m.c.Destroy(context.WithoutCancel(ctx), m.name)
		}
	}()
	createReq := func(name string) api.CreateSandboxRequest {
		return api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation}
	}
	create := func(via int, name string) (api.Sandbox, error) {
		sb, _, err := nodes[via].GetOrCreate(ctx, createReq(name))
		if err == nil {
			made = append(made, madeBox{nodes[via], name})
			rep.Placed[sb.Node]++
		}
		return sb, err
	}
	if single != nil {
		rep.Single = &SingleHost{}
	}
	// The exec figures use one probe sandbox, sent to the member that
	// runs it and to another; GET /v1/health names each URL's member.
	probe := fmt.Sprintf("bench-%s-exec", run)
	sb, err := create(0, probe)
	if err != nil {
		return fmt.Errorf("create %s: %w", probe, err)
	}
	for i, c := range nodes {
		info, err := c.Health(ctx)
		if err != nil {
			return fmt.Errorf("health of member %d: %w", i, err)
		}
		entry[info.Node] = i
	}
	if single != nil {
		info, err := single.Health(ctx)
		if err != nil {
			return fmt.Errorf("health of the single host: %w", err)
		}
		for _, n := range rep.Nodes {
			if info.Node == n {
				return fmt.Errorf("the single-host baseline answers as member %q of the cluster: give a berth serve without --cluster", n)
			}
		}
	}
	owner, ok := entry[sb.Node]
	if !ok {
		return fmt.Errorf("sandbox %s runs on node %q, which none of the given URLs serves", probe, sb.Node)
	}
	other := (owner + 1) % len(nodes)
	// The single host's probe: the same exec there, in the same rounds.
	vias := []int{owner, other}
	if single != nil {
		if _, _, err := single.GetOrCreate(ctx, createReq(probe)); err != nil {
			return fmt.Errorf("create %s on the single host: %w", probe, err)
		}
		made = append(made, madeBox{single, probe})
		vias = append(vias, -1)
	}
	via := func(i int) *client.Client {
		if i < 0 {
			return single
		}
		return nodes[i]
	}

	logf("exec round trip: %d × true through the owner and through another member, interleaved", o.N)
	var same, cross, alone []time.Duration
	for i := 0; i < o.N+3; i++ {
		for _, v := range vias {
			t0 := time.Now()
			res, err := via(v).Exec(ctx, probe, api.ExecRequest{Argv: []string{"true"}})
			d := time.Since(t0)
			if err != nil || res.ExitCode != 0 {
				return fmt.Errorf("exec true through member %d: %+v %v", v, res, err)
			}
			switch {
			case i < 3:
				// warm-up: connections, the forwarder's pool
			case v == owner:
				same = append(same, d)
			case v == other:
				cross = append(cross, d)
			default:
				alone = append(alone, d)
			}
		}
	}
	rep.ExecSame, rep.ExecCross = summarize(same), summarize(cross)
	rep.ExecAddedP50 = round(rep.ExecCross.P50 - rep.ExecSame.P50)
	if single != nil {
		rep.Single.Exec = summarize(alone)
		rep.Single.ExecCrossAddedP50 = round(rep.ExecCross.P50 - rep.Single.Exec.P50)
	}

	logf("time to interactive: %d creates, round robin over the members", o.N)
	var ttiSame, ttiCross, ttiAlone []time.Duration
	tti := func(c *client.Client, name string, create func() (api.Sandbox, error)) (api.Sandbox, time.Duration, error) {
		t0 := time.Now()
		sb, err := create()
		if err != nil {
			return sb, 0, fmt.Errorf("create %s: %w", name, err)
		}
		res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"node", "-v"}})
		d := time.Since(t0)
		if err != nil || res.ExitCode != 0 {
			return sb, 0, fmt.Errorf("node -v in %s: %+v %v", name, res, err)
		}
		if err := c.Destroy(ctx, name); err == nil {
			made = made[:len(made)-1]
		}
		return sb, d, nil
	}
	// Placement spreads the creates, so N of them may all land away from
	// the member they were sent to (or all on it): past N, creates go on
	// (up to 4N) until both figures have a sample.
	for i := 0; i < o.N || (i < 4*o.N && (len(ttiSame) == 0 || len(ttiCross) == 0)); i++ {
		v := i % len(nodes)
		name := fmt.Sprintf("bench-%s-tti-%d", run, i)
		sb, d, err := tti(nodes[v], name, func() (api.Sandbox, error) { return create(v, name) })
		if err != nil {
			return err
		}
		if entry[sb.Node] == v {
			ttiSame = append(ttiSame, d)
		} else {
			ttiCross = append(ttiCross, d)
		}
		if single != nil {
			_, d, err := tti(single, name, func() (api.Sandbox, error) {
				sb, _, err := single.GetOrCreate(ctx, createReq(name))
				if err == nil {
					made = append(made, madeBox{single, name})
				}
				return sb, err
			})
			if err != nil {
				return fmt.Errorf("single host: %w", err)
			}
			ttiAlone = append(ttiAlone, d)
		}
	}
	rep.TTISame, rep.TTICross = summarize(ttiSame), summarize(ttiCross)
	if rep.TTISame != nil && rep.TTICross != nil {
		rep.TTIRatio = ratio(rep.TTICross.P50, rep.TTISame.P50)
	}
	if single != nil {
		rep.Single.TTI = summarize(ttiAlone)
		if rep.TTICross != nil && rep.Single.TTI != nil {
			rep.Single.TTICrossRatio = ratio(rep.TTICross.P50, rep.Single.TTI.P50)
		}
	}

	// burst creates o.Burst sandboxes at once through at(i) and returns
	// the creates per second.
	burst := func(tag string, at func(i int) *client.Client, placed bool) (float64, error) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		t0 := time.Now()
		for i := 0; i < o.Burst; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				name := fmt.Sprintf("bench-%s-%s-%d", run, tag, i)
				c := at(i)
				sb, _, err := c.GetOrCreate(ctx, createReq(name))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("create %s: %w", name, err)
					}
					return
				}
				made = append(made, madeBox{c, name})
				if placed {
					rep.Placed[sb.Node]++
				}
			}(i)
		}
		wg.Wait()
		return round(float64(o.Burst) / time.Since(t0).Seconds()), firstErr
	}
	logf("creates per second: %d at once, spread over the members", o.Burst)
	if rep.CreatesPerSec, err = burst("burst", func(i int) *client.Client { return nodes[i%len(nodes)] }, true); err != nil {
		return err
	}
	if single != nil {
		logf("creates per second on the single host: %d at once", o.Burst)
		if rep.Single.CreatesPerSec, err = burst("single", func(int) *client.Client { return single }, false); err != nil {
			return fmt.Errorf("single host: %w", err)
		}
	}

	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "cluster of %d members %v, instance %s\n", len(rep.Nodes), rep.Nodes, rep.Instance)
	ttiRatio := "n/a"
	if rep.TTIRatio != nil {
		ttiRatio = fmt.Sprintf("%.2f×", *rep.TTIRatio)
	}
	if s := rep.Single; s != nil {
		ttiSingle := "n/a"
		if s.TTICrossRatio != nil {
			ttiSingle = fmt.Sprintf("%.2f×", *s.TTICrossRatio)
		}
		fmt.Fprintf(w, "figure\tsingle host p50\tsame node p50\tcross node p50\tcross vs single\tcross vs same\ttarget\n")
		fmt.Fprintf(w, "exec true\t%s\t%s\t%s\t%+.2f ms\t%+.2f ms\t≤ +1 ms\n", p50(s.Exec), p50(rep.ExecSame), p50(rep.ExecCross), s.ExecCrossAddedP50, rep.ExecAddedP50)
		fmt.Fprintf(w, "time to interactive\t%s\t%s\t%s\t%s\t%s\t≤ 1.2×\n", p50(s.TTI), p50(rep.TTISame), p50(rep.TTICross), ttiSingle, ttiRatio)
		fmt.Fprintf(w, "creates/s (%d at once)\t%.2f\t\t%.2f (cluster)\t\t\t\n", rep.Burst, s.CreatesPerSec, rep.CreatesPerSec)
	} else {
		fmt.Fprintf(w, "figure\tsame node p50\tcross node p50\tcross-node cost\ttarget\n")
		fmt.Fprintf(w, "exec true\t%s\t%s\t%+.2f ms\t≤ +1 ms\n", p50(rep.ExecSame), p50(rep.ExecCross), rep.ExecAddedP50)
		fmt.Fprintf(w, "time to interactive\t%s\t%s\t%s\t≤ 1.2×\n", p50(rep.TTISame), p50(rep.TTICross), ttiRatio)
		fmt.Fprintf(w, "creates/s (%d at once)\t\t%.2f\t\t\n", rep.Burst, rep.CreatesPerSec)
		fmt.Fprintf(w, "(no single-host baseline: give --single URL)\t\t\t\t\n")
	}
	fmt.Fprintf(w, "placed per node\t%v\t\t\t\n", rep.Placed)
	return w.Flush()
}

func p50(s *Stat) string {
	if s == nil {
		return "n/a (none)"
	}
	return fmt.Sprintf("%.2f ms (n=%d)", s.P50, s.N)
}
