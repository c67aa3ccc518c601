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

type Probe struct{ st *durable.State }

func (p *Probe) Start(ctx context.Context, o durable.StartOptions) error {
	return p.st.Container.Start(ctx, o)
}

func (p *Probe) Running(ctx context.Context) (bool, error) { return p.st.Container.Running(ctx), nil }

func (p *Probe) Monitor(ctx context.Context) (durable.ExitInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return p.st.Container.Monitor(ctx)
}

func (p *Probe) SetTimeout(ctx context.Context, a struct{ Seconds int }) error {
	return p.st.Container.SetInactivityTimeout(ctx, time.Duration(a.Seconds)*time.Second)
}

func (p *Probe) Signal(ctx context.Context, a struct{ Signal int }) error {
	return p.st.Container.Signal(ctx, a.Signal)
}

func (p *Probe) Destroy(ctx context.Context) error { return p.st.Container.Destroy(ctx, "probe") }

func (p *Probe) Images(ctx context.Context) (map[string]string, error) {
	return p.st.Container.Images(ctx)
}

func (p *Probe) Name(ctx context.Context) (string, error) { return p.st.Container.Name(), nil }

// Fill writes keys k000… in one storage transaction.
func (p *Probe) Fill(ctx context.Context, a struct{ N int }) error {
	return p.st.Storage.Transaction(ctx, func(tx *durable.Tx) error {
		for i := 0; i < a.N; i++ {
			if err := tx.Put(fmt.Sprintf("k%03d", i), i); err != nil {
				return err
			}
		}
		return nil
	})
}

// Count counts the keys Fill writes.
func (p *Probe) Count(ctx context.Context) (int, error) {
	es, err := p.st.Storage.List(ctx, durable.ListOptions{Prefix: "k"})
	return len(es), err
}

// Arm sets the alarm Ms milliseconds from now.
func (p *Probe) Arm(ctx context.Context, a struct{ Ms int }) error {
	return p.st.SetAlarm(ctx, time.Now().Add(time.Duration(a.Ms)*time.Millisecond))
}

// Alarm counts deliveries, then performs its effect (a counter in
// storage) at most once per alarm through the journal.
func (p *Probe) Alarm(ctx context.Context, info durable.AlarmInfo) error {
	var d int
	if _, err := p.st.Storage.Get(ctx, "deliveries", &d); err != nil {
		return err
	}
	if err := p.st.Storage.Put(ctx, "deliveries", d+1); err != nil {
		return err
	}
	return p.st.Do(ctx, "effect", fmt.Sprint("alarm-", info.ID), nil, nil, func(ctx context.Context) (any, error) {
		var n int
		if _, err := p.st.Storage.Get(ctx, "effects", &n); err != nil {
			return nil, err
		}
		return n + 1, p.st.Storage.Put(ctx, "effects", n+1)
	})
}

// Effects reports the alarm's deliveries and effects.
func (p *Probe) Effects(ctx context.Context) (map[string]int, error) {
	var d, e int
	if _, err := p.st.Storage.Get(ctx, "deliveries", &d); err != nil {
		return nil, err
	}
	_, err := p.st.Storage.Get(ctx, "effects", &e)
	return map[string]int{"deliveries": d, "effects": e}, err
}

func main() {
	var cfg daemon.Config
	flag.StringVar(&cfg.Listen, "listen", "127.0.0.1:7070", "")
	flag.StringVar(&cfg.PreviewListen, "preview-listen", "127.0.0.1:7080", "")
	flag.StringVar(&cfg.DataDir, "data", "/var/lib/berth", "")
	flag.StringVar(&cfg.RunDir, "run-dir", "/run/berth", "")
	flag.StringVar(&cfg.Bridge, "bridge", "berth0", "")
	flag.StringVar(&cfg.Subnet, "subnet", "10.88.0.0/16", "")
	flag.StringVar(&cfg.Runtime, "runtime", "", "")
	flag.StringVar(&cfg.AgentBinary, "agent", "", "")
	flag.DurationVar(&cfg.AlarmTick, "alarm-tick", time.Second, "")
	flag.Parse()
	cfg.Classes = func(h *durable.Host) error {
		return h.Register("Probe", (*Probe)(nil), func(st *durable.State) (any, error) { return &Probe{st: st}, nil })
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}
