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
}

// RunCluster measures a cluster through its nodes' APIs: nodes holds one
// client per member (same API key), in any order. It creates sandboxes
// named bench-* and destroys them. o.N is the samples per figure; o.Burst
// (default 3 per node) the concurrent creates.
func RunCluster(ctx context.Context, nodes []*client.Client, o Options, out io.Writer) error {
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
	var made []string
	defer func() {
		for _, name := range made {
			_ = nodes[0].Destroy(context.WithoutCancel(ctx), name)
		}
	}()
	create := func(via int, name string) (api.Sandbox, error) {
		sb, _, err := nodes[via].GetOrCreate(ctx, api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation})
		if err == nil {
			made = append(made, name)
			rep.Placed[sb.Node]++
		}
		return sb, err
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
	owner, ok := entry[sb.Node]
	if !ok {
		return fmt.Errorf("sandbox %s runs on node %q, which none of the given URLs serves", probe, sb.Node)
	}
	other := (owner + 1) % len(nodes)

	logf("exec round trip: %d × true through the owner and through another member, interleaved", o.N)
	var same, cross []time.Duration
	for i := 0; i < o.N+3; i++ {
		for _, via := range []int{owner, other} {
			t0 := time.Now()
			res, err := nodes[via].Exec(ctx, probe, api.ExecRequest{Argv: []string{"true"}})
			d := time.Since(t0)
			if err != nil || res.ExitCode != 0 {
				return fmt.Errorf("exec true through member %d: %+v %v", via, res, err)
			}
			if i < 3 {
				continue // warm-up: connections, the forwarder's pool
			}
			if via == owner {
				same = append(same, d)
			} else {
				cross = append(cross, d)
			}
		}
	}
	rep.ExecSame, rep.ExecCross = summarize(same), summarize(cross)
	rep.ExecAddedP50 = round(rep.ExecCross.P50 - rep.ExecSame.P50)

	logf("time to interactive: %d creates, round robin over the members", o.N)
	var ttiSame, ttiCross []time.Duration
	for i := 0; i < o.N; i++ {
		via := i % len(nodes)
		name := fmt.Sprintf("bench-%s-tti-%d", run, i)
		t0 := time.Now()
		sb, err := create(via, name)
		if err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		res, err := nodes[via].Exec(ctx, name, api.ExecRequest{Argv: []string{"node", "-v"}})
		d := time.Since(t0)
		if err != nil || res.ExitCode != 0 {
			return fmt.Errorf("node -v in %s: %+v %v", name, res, err)
		}
		if entry[sb.Node] == via {
			ttiSame = append(ttiSame, d)
		} else {
			ttiCross = append(ttiCross, d)
		}
		if err := nodes[via].Destroy(ctx, name); err == nil {
			made = made[:len(made)-1]
		}
	}
	rep.TTISame, rep.TTICross = summarize(ttiSame), summarize(ttiCross)
	if rep.TTISame != nil && rep.TTICross != nil {
		rep.TTIRatio = ratio(rep.TTICross.P50, rep.TTISame.P50)
	}

	logf("creates per second: %d at once, spread over the members", o.Burst)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	t0 := time.Now()
	for i := 0; i < o.Burst; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("bench-%s-burst-%d", run, i)
			sb, _, err := nodes[i%len(nodes)].GetOrCreate(ctx, api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("create %s: %w", name, err)
				}
				return
			}
			made = append(made, name)
			rep.Placed[sb.Node]++
		}(i)
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	rep.CreatesPerSec = round(float64(o.Burst) / time.Since(t0).Seconds())

	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "cluster of %d members %v, instance %s\n", len(rep.Nodes), rep.Nodes, rep.Instance)
	fmt.Fprintf(w, "figure\tsame node p50\tcross node p50\tcross-node cost\ttarget\n")
	fmt.Fprintf(w, "exec true\t%s\t%s\t%+.2f ms\t≤ +1 ms\n", p50(rep.ExecSame), p50(rep.ExecCross), rep.ExecAddedP50)
	ttiRatio := "n/a"
	if rep.TTIRatio != nil {
		ttiRatio = fmt.Sprintf("%.2f×", *rep.TTIRatio)
	}
	fmt.Fprintf(w, "time to interactive\t%s\t%s\t%s\t≤ 1.2×\n", p50(rep.TTISame), p50(rep.TTICross), ttiRatio)
	fmt.Fprintf(w, "creates/s (%d at once)\t\t%.2f\t\t\n", rep.Burst, rep.CreatesPerSec)
	fmt.Fprintf(w, "placed per node\t%v\t\t\t\n", rep.Placed)
	return w.Flush()
}

func p50(s *Stat) string {
	if s == nil {
		return "n/a (none)"
	}
	return fmt.Sprintf("%.2f ms (n=%d)", s.P50, s.N)
}
