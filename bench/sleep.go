package bench

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// SleepTiersReport is the sleep-tier scenario: the same sleep and wake
// rounds on a freeze-tier and a stop-tier sandbox in one run. Freeze and
// Thaw are the freezer operations as the daemon timed them (its journal:
// "freeze in X ms", "thaw in X ms"); the API figures are what a client
// sees: the sleep call's answer, and a wake → first exec.
type SleepTiersReport struct {
	Freeze          *Stat `json:"freeze_ms"`
	Thaw            *Stat `json:"thaw_ms"`
	ThawAgent       *Stat `json:"thaw_agent_checked_ms"` // thaw plus the agent's health check
	FreezeSleepCall *Stat `json:"freeze_sleep_call_ms"`
	FreezeWakeExec  *Stat `json:"freeze_wake_first_exec_ms"`
	StopSleepCall   *Stat `json:"stop_sleep_call_ms"`
	StopWakeExec    *Stat `json:"stop_wake_first_exec_ms"`
	// WakeVsStop is the freeze tier's wake → first exec p50 over the stop
	// tier's.
	WakeVsStop *float64 `json:"freeze_wake_vs_stop_wake,omitempty"`
}

var (
	freezeInRE = regexp.MustCompile(`freeze in ([0-9.]+) ms`)
	thawInRE   = regexp.MustCompile(`thaw in ([0-9.]+) ms \(agent checked in ([0-9.]+) ms\)`)
	// httpCallRE is the journal entry of the API call itself, beside the
	// lifecycle entry that holds the times.
	httpCallRE = regexp.MustCompile(`^[A-Z]+ /`)
)

// sleepTiersScenario runs rounds of sleep → wake → first exec on a
// sandbox of each tier, alternating, so both see the same machine.
func sleepTiersScenario(ctx context.Context, c *client.Client, o Options, run string, rounds int, logf func(string, ...any)) (*SleepTiersReport, error) {
	frz, stp := fmt.Sprintf("bench-%s-freeze", run), fmt.Sprintf("bench-%s-stop", run)
	for _, s := range []struct{ name, mode string }{{frz, api.SleepFreeze}, {stp, api.SleepStop}} {
		sb, _, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: s.name, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation, Sleep: s.mode})
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", s.name, err)
		}
		defer c.Destroy(context.WithoutCancel(ctx), s.name)
		if sb.Sleep != s.mode {
			return nil, fmt.Errorf("%s: sleep mode %q, want %q", s.name, sb.Sleep, s.mode)
		}
	}
	logf("sleep tiers: %d rounds of sleep → wake → first exec, freeze and stop", rounds)
	var freeze, thaw, thawAgent, fSleep, fWake, sSleep, sWake []time.Duration
	for i := 0; i < rounds; i++ {
		for _, name := range []string{frz, stp} {
			t0 := time.Now()
			if err := c.Sleep(ctx, name); err != nil {
				return nil, fmt.Errorf("sleep %s: %w", name, err)
			}
			slept := time.Since(t0)
			t0 = time.Now()
			res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"true"}})
			woke := time.Since(t0)
			if err != nil || res.ExitCode != 0 {
				return nil, fmt.Errorf("first exec after the wake of %s: %+v %v", name, res, err)
			}
			if name == stp {
				sSleep, sWake = append(sSleep, slept), append(sWake, woke)
				continue
			}
			fSleep, fWake = append(fSleep, slept), append(fWake, woke)
			f, t, ta, err := freezerTimes(ctx, c, name)
			if err != nil {
				return nil, err
			}
			freeze, thaw, thawAgent = append(freeze, f), append(thaw, t), append(thawAgent, ta)
		}
	}
	rep := &SleepTiersReport{
		Freeze: summarize(freeze), Thaw: summarize(thaw), ThawAgent: summarize(thawAgent),
		FreezeSleepCall: summarize(fSleep), FreezeWakeExec: summarize(fWake),
		StopSleepCall: summarize(sSleep), StopWakeExec: summarize(sWake),
	}
	if rep.FreezeWakeExec != nil && rep.StopWakeExec != nil {
		rep.WakeVsStop = ratio(rep.FreezeWakeExec.P50, rep.StopWakeExec.P50)
	}
	return rep, nil
}

// freezerTimes reads the newest freeze and thaw durations from name's
// journal; a wake that was not a thaw (it rebooted) is an error.
func freezerTimes(ctx context.Context, c *client.Client, name string) (freeze, thaw, thawAgent time.Duration, err error) {
	j, err := c.Journal(ctx, name)
	if err != nil {
		return 0, 0, 0, err
	}
	var fz, th []string
	for i := len(j) - 1; i >= 0 && (fz == nil || th == nil); i-- {
		switch e := j[i]; {
		case httpCallRE.MatchString(e.Detail):
		case e.Op == "sleep" && fz == nil:
			if fz = freezeInRE.FindStringSubmatch(e.Detail); fz == nil {
				return 0, 0, 0, fmt.Errorf("%s: the newest sleep was not a freeze: %q", name, e.Detail)
			}
		case e.Op == "wake" && th == nil:
			if th = thawInRE.FindStringSubmatch(e.Detail); th == nil {
				return 0, 0, 0, fmt.Errorf("%s: the newest wake was not a thaw: %q", name, e.Detail)
			}
		case e.Op == "reboot" && th == nil:
			return 0, 0, 0, fmt.Errorf("%s: the wake rebooted instead of thawing: %s", name, e.Detail)
		}
	}
	if fz == nil || th == nil {
		return 0, 0, 0, fmt.Errorf("%s: the journal has no freeze and thaw times", name)
	}
	return msDuration(fz[1]), msDuration(th[1]), msDuration(th[2]), nil
}

func msDuration(s string) time.Duration {
	v, _ := strconv.ParseFloat(s, 64)
	return time.Duration(v * float64(time.Millisecond))
}

func printSleepTiers(out io.Writer, s *SleepTiersReport) {
	fmt.Fprintf(out, "\nsleep tiers scenario: the same rounds on a freeze-tier and a stop-tier sandbox\n")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tp50 ms\tp95 ms\tn\ttarget")
	row := func(label string, st *Stat, target string) {
		if st != nil {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%d\t%s\n", label, st.P50, st.P95, st.N, target)
		}
	}
	row("freeze (the cgroup freezer, as the daemon timed it)", s.Freeze, "p50 ≤ 5")
	row("thaw (the cgroup freezer, as the daemon timed it)", s.Thaw, "p50 ≤ 5")
	row("  thaw + the agent's health check", s.ThawAgent, "")
	row("freeze tier: sleep call (API)", s.FreezeSleepCall, "")
	row("freeze tier: wake → first exec (API)", s.FreezeWakeExec, "")
	row("stop tier: sleep call (API)", s.StopSleepCall, "")
	row("stop tier: wake → first exec (API)", s.StopWakeExec, "p50 ≤ 200")
	tw.Flush()
	if s.WakeVsStop != nil {
		fmt.Fprintf(out, "  freeze-tier wake → first exec is %.3f× the stop tier's\n", *s.WakeVsStop)
	}
}
