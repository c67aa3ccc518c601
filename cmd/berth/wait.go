package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// stderrIsTerminal is a variable so tests can pretend stderr is a terminal.
var stderrIsTerminal = isTerminal

// waitTick is how often the elapsed time is redrawn.
const waitTick = time.Second

// waiting shows "msg... 3s" on stderr, redrawn every second, while a long
// call (snapshot, fork, backup, restore) runs, so that a user can tell a
// large upload from a hung command. It draws nothing unless stderr is a
// terminal: scripts and logs get no carriage returns. The returned func
// stops it and erases the line; call it before printing the result.
func (a *app) waiting(msg string) (stop func()) {
	if !stderrIsTerminal(a.stderr) {
		return func() {}
	}
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	draw := func(w io.Writer) {
		fmt.Fprintf(w, "\r\x1b[K%s... %ds", msg, int(time.Since(start).Seconds()))
	}
	draw(a.stderr)
	go func() {
		defer wg.Done()
		t := time.NewTicker(waitTick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				draw(a.stderr)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			fmt.Fprint(a.stderr, "\r\x1b[K")
		})
	}
}

// humanIn is how long until t, for EXPIRES columns.
func humanIn(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	switch {
	case d <= 0:
		return "expired"
	case d < time.Minute:
		return fmt.Sprintf("in %ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("in %dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("in %dh", int(d.Hours()))
	}
	return fmt.Sprintf("in %dd", int(d.Hours()/24))
}
