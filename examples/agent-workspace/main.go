package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/berth-sh/berth/daemon"
	"github.com/berth-sh/berth/durable"
)

func main() {
	var cfg daemon.Config
	var im Images
	var canary uint
	flag.StringVar(&cfg.Listen, "listen", "127.0.0.1:7070", "API address")
	flag.StringVar(&cfg.PreviewListen, "preview-listen", "127.0.0.1:7080", "preview URL address")
	flag.StringVar(&cfg.DataDir, "data", "/var/lib/berth", "data directory")
	flag.StringVar(&cfg.RunDir, "run-dir", "/run/berth", "host-only run directory")
	flag.StringVar(&cfg.Bridge, "bridge", "berth0", "bridge name")
	flag.StringVar(&cfg.Subnet, "subnet", "10.88.0.0/16", "sandbox subnet")
	flag.StringVar(&cfg.Runtime, "runtime", "", "OCI runtime (default: runc beside this binary or on $PATH)")
	flag.StringVar(&cfg.AgentBinary, "agent", "", "berth-agent (default: beside this binary or on $PATH)")
	flag.StringVar(&cfg.PolicyFile, "policy", "", "operator policy file")
	flag.DurationVar(&cfg.AlarmTick, "alarm-tick", time.Second, "alarm polling interval")
	// The debian-trixie base has both Python and Node.js; an operator
	// points these at slimmer images.
	flag.StringVar(&im.Python, "python-image", "debian-trixie", "image for toolchain python")
	flag.StringVar(&im.Node, "node-image", "debian-trixie", "image for toolchain node")
	flag.StringVar(&im.Canary, "canary-image", "", "canary image (empty: no canary)")
	flag.UintVar(&canary, "canary-percent", 10, "share of workspace ids that get the canary image")
	flag.Parse()
	im.CanaryPercent = uint32(min(canary, 100))

	cfg.Classes = func(h *durable.Host) error {
		return h.Register("AgentSandbox", (*AgentSandbox)(nil), func(st *durable.State) (any, error) {
			return &AgentSandbox{st: st, images: im}, nil
		})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "agent-workspace:", err)
		os.Exit(1)
	}
}
