// Package interp is the agent's code contexts: persistent interpreters, as
// in a notebook. Each context is one long-lived python3, node or bash
// process, started through the reaper, running an embedded kernel script
// (kernels/). Runs of one context are serialized; contexts run in
// parallel. Default contexts (one per language whose interpreter is on
// PATH) are listed before their first run and start their interpreter at
// it.
//
// Interrupts: a timeout or a cancelled request sends SIGINT. Python raises
// KeyboardInterrupt in the running code and the context survives with its
// state. Node breaks synchronous code (vm breakOnSigint) and abandons a
// pending top-level await or trailing promise (timers it started keep
// running). Bash gets SIGINT on its whole process group (the foreground
// command dies; the kernel's DEBUG trap skips the rest of the cell). Code
// that ignores the interrupt (a C extension that never checks signals, a
// synchronous loop after an await in JS, a command that ignores SIGINT) is
// killed after interruptGrace; the context then starts a fresh interpreter
// on its next run, with its state lost, and the run's error says so.
//
// TypeScript is transpiled inside the agent with esbuild's Transform API
// (types erased, nothing type-checked), then runs like JavaScript. esbuild
// is the agent's one dependency beyond the standard library and x/sys
// (pure Go, about 4 MB of binary); only Transform is used.
//
// JavaScript limits: cells run in node's own global realm; declarations
// persist through a lexical rewrite (kernel script), not a parser:
// const/let become var, so they can be redeclared and a const can be
// reassigned in a later run, and static imports become await import().
//
// It is the only part of berth that links esbuild.
package interp
